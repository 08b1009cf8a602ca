"""Names and paths that are not text, and edits that keep size and mtime, as a user meets them:
``memcore`` in subprocesses with the real adapters, and ``add_project`` on the real daemon's
socket. A source path the user typed that cannot be one is a typed error with nothing stored; a
file in a source that cannot be a resource is skipped with a warning and never stops the index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.adapters.files.filesystem_sources import FileStamp
from memory_core.adapters.sqlite import SqliteCatalog, open_database
from memory_core.domain.canonical import sha256_hex
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.model import Source
from tests.daemon.test_server import Daemon

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
OLD_NS = 1_600_000_000 * 10**9


def memcore(home: Path, *args: str | bytes, check: bool = True) -> subprocess.CompletedProcess[str]:
    # bytes arguments reach the CLI as they would from a shell: undecodable ones included.
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_CORE_HOME"}
    result = subprocess.run(
        [sys.executable, "-m", "memory_core", "--home", str(home), *args],
        capture_output=True, text=True, errors="strict", cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip
    if check:
        assert result.returncode == 0, result.stderr
    return result


def listed(home: Path) -> list[str]:
    return [p["project"]["project_id"] for p in json.loads(memcore(home, "project", "list", "--json").stdout)]


def test_project_add_refuses_a_source_path_that_cannot_be_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    undecodable = tmp_path.as_posix().encode() + b"/caf\xe9"
    os.mkdir(undecodable)  # it exists: the name alone is the problem
    bad = memcore(home, "project", "add", "latin", "--source", undecodable, check=False)
    assert bad.returncode == 2 and "error[invalid_request]" in bad.stderr and "not valid UTF-8" in bad.stderr
    assert "caf\\xe9" in bad.stderr and "Traceback" not in bad.stderr
    layered = memcore(home, "project", "add", "latin", "--source", b"local=" + undecodable, check=False)
    assert layered.returncode == 2 and "error[invalid_request]" in layered.stderr
    nouser = memcore(home, "project", "add", "tilde", "--source", "~no-such-user-memcore/notes", check=False)
    assert nouser.returncode == 2 and "error[invalid_request]" in nouser.stderr and "Traceback" not in nouser.stderr
    assert listed(home) == []


def test_index_skips_what_it_cannot_represent_and_serves_the_rest(tmp_path: Path) -> None:
    home, notes = tmp_path / "home", tmp_path / "notes"
    notes.mkdir()
    (notes / "keep.md").write_text("# Keep\n\nThe ledger deploys with helm.\n")
    (notes / os.fsdecode(b"caf\xe9.md")).write_bytes(b"# Latin-1 name\n\nInvisible.\n")
    (notes / os.fsdecode(b"\xff\xfe")).mkdir()
    (notes / os.fsdecode(b"\xff\xfe") / "inside.md").write_bytes(b"# Inside\n")
    os.mkfifo(notes / "pipe.md")
    memcore(home, "project", "add", "notes", "--source", str(notes))
    report = json.loads(memcore(home, "index", "notes", "--json").stdout)
    assert report["status"] == "built" and report["resources"] == 1
    warnings = report["warnings"]
    assert len(warnings) == 3
    assert any("caf\\xe9.md" in w and "not valid UTF-8" in w for w in warnings)
    assert any("\\xff\\xfe" in w for w in warnings) and any("pipe.md" in w and "regular file" in w for w in warnings)
    again = json.loads(memcore(home, "index", "notes", "--json").stdout)
    assert again["status"] == "unchanged" and again["warnings"] == warnings


def test_an_edit_that_keeps_size_and_mtime_is_indexed_and_force_bypasses_the_cache(tmp_path: Path) -> None:
    home, notes = tmp_path / "home", tmp_path / "notes"
    notes.mkdir()
    doc = notes / "deploy.md"
    one, two, three = (f"# Deploy\n\nRoll back with helm rollback {w}.\n".encode() for w in ("alpha", "gamma", "delta"))
    doc.write_bytes(one)
    os.utime(doc, ns=(OLD_NS, OLD_NS))
    memcore(home, "project", "add", "notes", "--source", str(notes))
    first = json.loads(memcore(home, "index", "notes", "--json").stdout)
    # What cp -p, rsync -t or touch -r leave behind: other bytes, the same size and mtime.
    doc.write_bytes(two)
    os.utime(doc, ns=(OLD_NS, OLD_NS))
    second = json.loads(memcore(home, "index", "notes", "--json").stdout)
    assert second["status"] == "built" and second["effective_memory_hash"] != first["effective_memory_hash"]

    # Where the stamp cannot tell (a coarse-timestamp file system, a write in the same tick), the
    # cache keeps a stale hash; a plain index trusts it, --force reads every file again.
    doc.write_bytes(three)
    catalog = SqliteCatalog(open_database(home / "local.db"))
    try:
        catalog.put_file_hashes([(str(doc), FileStamp.of(doc.stat()), sha256_hex(two))])
    finally:
        catalog.close()
    stale = json.loads(memcore(home, "index", "notes", "--json").stdout)
    assert stale["status"] == "unchanged"
    forced = memcore(home, "index", "notes", "--force", "--json", check=False)
    assert forced.returncode == 0, forced.stderr  # was: error[source_unavailable], every time
    assert json.loads(forced.stdout)["status"] == "built"
    out = json.loads(memcore(home, "activate", "notes", "how do I roll back", "--json").stdout)
    assert "delta" in json.dumps(out["response"]["fragments"])


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "home", tmp_path / "daemon.log")
    yield running
    assert running.stop() == 0


def test_the_daemon_refuses_source_paths_that_cannot_be_one_and_stores_nothing(daemon: Daemon, tmp_path: Path) -> None:
    good = tmp_path / "notes"
    good.mkdir()
    (good / "a.md").write_text("# A\n")
    bad_paths = [
        f"{good}\x00/etc",  # a NUL: the OS would cut the path there
        f"{tmp_path}/caf\udce9",  # an undecodable name, as os.fsdecode gives it
        f"{tmp_path}/\ud800",  # any other lone surrogate
        "/" + "x" * 5000,  # beyond PATH_MAX
    ]
    for path in bad_paths:
        with pytest.raises(InvalidRequest) as info:
            daemon.client.add_project("bad", [Source(str(good)), Source(path)])
        assert info.value.code == "invalid_request"
        json.dumps(info.value.details, ensure_ascii=False).encode("utf-8")  # the envelope stays encodable
    assert daemon.client.list_projects() == []
    # The daemon is fine and a good source still works.
    assert daemon.client.add_project("good", [Source(str(good))]).project.project_id == "good"
    records = [json.loads(line) for line in (tmp_path / "daemon.log").read_text().splitlines() if line.startswith("{")]
    assert not any("Traceback" in json.dumps(r) for r in records)
