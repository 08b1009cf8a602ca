"""Issue 30 item 1: a symlink swapped into a source while it is indexed and activated never makes
a file from outside the source memory.

A process of its own (``symlink_swapper.py``) swaps, in a tight loop, a resource file (a rename
over it), a folder of the source, or the source folder itself for a symbolic link to a folder
outside the source, and back, while the real engine (``harness.engine_for``: real scanner, blob
store, catalog, generations, live memory) indexes and activates the project again and again. The
outside files hold a marker; it must never reach an answer, a Run, a generation, a blob, an
Evaluation Case or its exported fixture: no file of the home may hold the marker or the outside
file's hash. A scan that meets a swapped path skips it with a warning (or refuses the source,
``source_unavailable``); the test also asserts the swaps were met, so it cannot pass without racing.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.domain.canonical import plain, sha256_hex
from memory_core.domain.errors import EmptyProject, SourceUnavailable
from memory_core.domain.model import Source

from .harness import PROJECT, engine_for, settle_history

pytestmark = pytest.mark.slow

RACE_S = 1.5  # per kind of swap: bounded; every iteration runs a whole index and activation
SWAPPER = Path(__file__).with_name("symlink_swapper.py")
MARKER = "zqxoutsidemarker"
SECRET = f"# Launch codes\n\nThe launch code is {MARKER} for the ledger deploy runbook.\n".encode()
SECRET_HASH = sha256_hex(SECRET)
QUERY = "ledger deploy runbook launch code"
INSIDE = {
    "a.md": "# Deploy runbook\n\nDeploy the ledger with helm upgrade --atomic.\n",
    "swap.md": "# Rollback\n\nRoll back the ledger deploy with helm rollback, then replay the outbox.\n",
    "sub/inner.md": "# On-call\n\nThe on-call engineer pages the ledger's owner before a deploy.\n",
}


def write_tree(folder: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)


@contextlib.contextmanager
def swapping(kind: str, source: Path, outside: Path) -> Iterator[list[int]]:
    """``symlink_swapper.py`` swapping ``kind`` until the block ends; then how many swaps it made."""
    child = subprocess.Popen(
        [sys.executable, str(SWAPPER), kind, str(source), str(outside)], stdout=subprocess.PIPE, text=True
    )
    made: list[int] = []
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        yield made
    finally:
        child.send_signal(signal.SIGTERM)  # it ends its swap under way: the real tree is back
        out, _ = child.communicate(timeout=30)
    assert child.returncode == 0, out
    made.append(int(out))


def outside_markers(data: bytes) -> list[str]:
    return [m for m in (MARKER, SECRET_HASH) if m.encode() in data]


@pytest.mark.parametrize("kind", ["file", "folder", "source"])
def test_a_symlink_swapped_in_while_indexing_and_activating_never_leaks_the_outside_file(
    tmp_path: Path, kind: str
) -> None:
    source, outside, home = tmp_path / "memory", tmp_path / "outside", tmp_path / "home"
    write_tree(source, {rel: text.encode() for rel, text in INSIDE.items()})
    # Every name the source holds, also inside the folder a link may take the place of.
    write_tree(outside, {name: SECRET for name in ("secret.md", "a.md", "swap.md", "inner.md", "sub/inner.md")})
    engine = engine_for(home)
    engine.add_project(PROJECT, [Source(str(source))])
    engine.index(PROJECT)
    met = 0  # scans that met a swapped path (a warning, or the source refused)
    runs: list[str] = []  # Runs whose live read succeeded: a case freezes what they saw
    with swapping(kind, source, outside) as swaps:
        deadline = time.monotonic() + RACE_S
        while time.monotonic() < deadline:
            try:
                report = engine.index(PROJECT)
                met += sum("symbolic link" in w or "outside the source" in w for w in report.warnings)
            except (SourceUnavailable, EmptyProject):
                met += 1
            response = engine.activate(PROJECT, QUERY).response
            assert outside_markers(json.dumps(plain(response)).encode()) == []
            met += response.freshness.error is not None
            if response.freshness.live:  # its Run recorded the memory the sources showed then
                runs.append(response.run_id)
    assert swaps[0] > 0 and met > 0, (swaps, met)  # the race ran and was met

    # After the race: the real tree indexes whole, and what the Runs saw can be frozen and exported.
    engine.index(PROJECT)
    answer = engine.activate(PROJECT, QUERY).response
    assert answer.freshness.live and {f.resource_id for f in answer.fragments} <= set(INSIDE)
    settle_history()
    assert runs or kind == "source"  # a swapped source folder may leave no live read succeeding
    for run_id in dict.fromkeys(runs[-3:]):
        engine.create_evaluation_case(run_id)
    fixture = engine.export_evaluation_set(project_id=PROJECT)
    assert outside_markers(fixture) == []
    engine.close()
    stored = {str(p.relative_to(home)): outside_markers(p.read_bytes()) for p in home.rglob("*") if p.is_file()}
    assert {path: found for path, found in stored.items() if found} == {}
