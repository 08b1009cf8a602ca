"""``memcore project storage show|move|clear`` and ``project remove --purge`` as a user runs them:
subprocesses on a real home, embedded and through the real daemon on its socket; both modes
must give the same answers (up to ids, times and paths) and keep every Run, Case and blob."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from memory_core.adapters.system.home import HomeLayout
from tests.daemon.test_server import Daemon, memory_folder
from tests.integration.test_cli_modes import differences, memcore
from tests.reliability.full_disk import TMPFS, FullDisk

pytestmark = pytest.mark.slow
QUESTION = "how do I roll back a deploy?"


def blobs(home: Path) -> set[str]:
    return {p.name for p in HomeLayout.at(home).blobs_dir.rglob("*") if p.is_file()}


def session(home: Path, memory: Path, other: Path, dest: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def j(*args: str) -> Any:
        return json.loads(memcore(home, *args, "--json").stdout)

    for name, folder in (("notes", memory), ("other", other)):
        j("project", "add", name, "--source", str(folder))
        j("index", name)
        run = j("activate", name, QUESTION)["response"]["run_id"]
        j("eval", "case", "create", run)
        j("activate", name, "helm upgrade")
    kept = {
        "runs": j("runs", "list", "--limit", "100"),
        "cases": j("eval", "case", "list"),
        "blobs": sorted(blobs(home)),
    }
    out["show"] = j("project", "storage", "show", "notes")

    # A non-empty destination is refused with a typed error and nothing changes.
    full = dest.parent / "full"
    full.mkdir(parents=True, exist_ok=True)
    (full / "mine.txt").write_text("keep me")
    refused = memcore(home, "project", "storage", "move", "notes", str(full), check=False)
    out["refused"] = [refused.returncode, refused.stderr.split(":")[0], "not_empty" in refused.stderr]
    assert (full / "mine.txt").read_text() == "keep me"

    # Nowhere in the home's own folders: `eval import-beir` replaces evaluation-sources/<id> whole.
    in_home = HomeLayout.at(home).evaluation_sources_dir / "notes"
    refused = memcore(home, "project", "storage", "move", "notes", str(in_home), check=False)
    out["in home"] = [refused.returncode, refused.stderr.split(":")[0], "in_home" in refused.stderr, in_home.exists()]

    out["move"] = j("project", "storage", "move", "notes", str(dest))
    # Nor, the other way round, a new source in or around a storage location.
    inside = memcore(home, "project", "add", "inside", "--source", str(dest / "generations"), check=False)
    out["source in storage"] = [inside.returncode, inside.stderr.split(":")[0], "overlaps_storage" in inside.stderr]
    out["dest mode"] = oct(stat.S_IMODE(dest.stat().st_mode))
    out["old gone"] = not (HomeLayout.at(home).projects_dir / "notes").exists()
    now = {"runs": j("runs", "list", "--limit", "100"), "cases": j("eval", "case", "list")}
    now["blobs"] = sorted(blobs(home))
    out["kept after move"] = differences(kept, now) or True
    out["after move"] = j("activate", "notes", QUESTION)["response"]["fragments"]

    cleared = j("project", "storage", "clear", "notes")
    out["clear"] = cleared
    unindexed = memcore(home, "activate", "notes", QUESTION, check=False)
    out["while cleared"] = [unindexed.returncode, unindexed.stderr.split(":")[0]]
    out["failed run"] = [
        [r["status"], r["error_code"]] for r in j("runs", "list", "--project", "notes", "--limit", "1")["runs"]
    ]
    out["cases after clear"] = j("eval", "case", "list") == kept["cases"]
    out["blobs after clear"] = set(kept["blobs"]) <= blobs(home)
    out["reindex"] = j("index", "notes")["embedded"]
    out["after clear"] = j("activate", "notes", QUESTION)["response"]["fragments"]

    # Purge: every blob is older than the GC grace, so what only "notes" held is collected.
    past = time.time() - 7200
    for p in HomeLayout.at(home).blobs_dir.rglob("*"):
        if p.is_file():
            os.utime(p, (past, past))
    other_runs = j("runs", "list", "--project", "other", "--limit", "100")
    other_cases = j("eval", "case", "list", "--project", "other")
    refused = memcore(home, "project", "remove", "notes", "--purge", check=False)  # stdin is not a tty
    out["purge unconfirmed"] = [refused.returncode, refused.stderr.split(":")[0]]
    out["purge"] = j("project", "remove", "notes", "--purge", "--yes")
    out["notes runs left"] = j("runs", "list", "--project", "notes")["runs"]
    out["notes cases left"] = j("eval", "case", "list", "--project", "notes")
    out["other intact"] = [
        j("runs", "list", "--project", "other", "--limit", "100") == other_runs,
        j("eval", "case", "list", "--project", "other") == other_cases,
    ]
    out["dest removed"] = not dest.exists()
    return out


def check(result: dict[str, Any], home: Path, dest: Path) -> None:
    assert result["show"]["default_location"] is True
    assert result["show"]["location"] == str(HomeLayout.at(home).projects_dir / "notes")
    assert [g["role"] for g in result["show"]["generations"]] == ["current"]
    assert result["show"]["size_bytes"] >= result["show"]["generations"][0]["size_bytes"] > 0
    assert result["refused"] == [2, "error[invalid_storage_location]", True]
    assert result["in home"] == [2, "error[invalid_storage_location]", True, False]
    assert result["source in storage"] == [2, "error[invalid_request]", True]
    assert result["move"]["location"] == str(dest.resolve()) and result["move"]["default_location"] is False
    assert result["dest mode"] == "0o700" and result["old gone"] is True
    assert result["kept after move"] is True
    assert result["after move"] == result["after clear"] and result["after move"]
    assert result["clear"]["generations"] == [] and result["clear"]["size_bytes"] == 0
    assert result["while cleared"] == [1, "error[project_not_indexed]"]
    assert result["failed run"] == [["failed", "project_not_indexed"]]
    assert result["cases after clear"] is True and result["blobs after clear"] is True
    assert result["reindex"] == 0  # every vector from the embedding cache
    assert result["purge unconfirmed"] == [2, "error[invalid_request]"]
    purge = result["purge"]
    assert (purge["removed"], purge["purged"], purge["deleted_cases"], purge["kept_pinned"]) == ("notes", True, 1, 0)
    # Runs: the case's, "helm upgrade", after the move, the failed one while cleared, after the clear.
    assert purge["deleted_runs"] == 5 and purge["deleted_blobs"] >= 1
    assert result["notes runs left"] == [] and result["notes cases left"] == []
    assert result["other intact"] == [True, True]
    assert result["dest removed"] is True


def test_storage_commands_through_the_daemon(tmp_path: Path) -> None:
    memory = memory_folder(tmp_path / "memory")
    other = tmp_path / "other"
    other.mkdir()
    (other / "runbook.md").write_text("# Other runbook\n\nRoll back the other service with kubectl rollout undo.\n")
    daemon = Daemon(tmp_path / "home", tmp_path / "daemon.log")
    try:
        result = session(tmp_path / "home", memory, other, tmp_path / "store" / "notes")
        records = daemon.log_records()
    finally:
        assert daemon.stop() == 0
    methods = {r["method"] for r in records if r.get("message") == "request"}
    assert {"show_project_storage", "move_project_storage", "clear_project_storage", "remove_project"} <= methods
    check(result, tmp_path / "home", tmp_path / "store" / "notes")


def test_storage_commands_embedded(tmp_path: Path) -> None:
    """The same commands without a daemon (the engine's behaviour itself is tested on real
    adapters in test_project_storage.py): same JSON shapes, and the moved location is found by
    every later process."""
    home, dest = tmp_path / "home", tmp_path / "store" / "notes"
    memory = memory_folder(tmp_path / "memory")

    def j(*args: str) -> Any:
        return json.loads(memcore(home, *args, "--json").stdout)

    j("project", "add", "notes", "--source", str(memory))
    j("index", "notes")
    shown = j("project", "storage", "show", "notes")
    moved = j("project", "storage", "move", "notes", str(dest))
    assert moved["location"] == str(dest.resolve()) and stat.S_IMODE(dest.stat().st_mode) == 0o700
    assert [g["index_revision"] for g in moved["generations"]] == [g["index_revision"] for g in shown["generations"]]
    assert j("project", "storage", "show", "notes") == moved  # a new process reads the recorded place
    assert j("index", "notes")["status"] == "unchanged"  # the moved generation verifies and serves
    into_source = memcore(home, "project", "storage", "move", "notes", str(memory / "index"), check=False)
    assert into_source.returncode == 2 and "error[invalid_storage_location]" in into_source.stderr
    assert not (memory / "index").exists()
    cleared = j("project", "storage", "clear", "notes")
    assert cleared["generations"] == [] and cleared["location"] == moved["location"]
    assert memcore(home, "activate", "notes", QUESTION, check=False).stderr.startswith("error[project_not_indexed]")
    removed = j("project", "remove", "notes", "--purge", "--yes")
    assert (removed["removed"], removed["purged"], removed["deleted_runs"]) == ("notes", True, 1)
    assert not dest.exists()


def test_a_full_disk_during_a_move_through_the_daemon(tmp_path: Path) -> None:
    """A real ENOSPC (a full tmpfs) while the daemon copies the generations: storage_unavailable
    naming the destination, the folder the move made removed, the old place still serving."""
    disk = FullDisk(tmp_path / "disk")
    if disk.mode != TMPFS:  # the daemon's job process cannot be patched from here
        disk.close()
        pytest.skip("mounting a tmpfs is refused here; test_project_storage_safety.py injects ENOSPC instead")
    home, store = tmp_path / "home", disk.directory / "store"
    daemon = Daemon(home, tmp_path / "daemon.log")
    try:
        memcore(home, "project", "add", "notes", "--source", str(memory_folder(tmp_path / "memory")))
        memcore(home, "index", "notes")
        before = json.loads(memcore(home, "project", "storage", "show", "notes", "--json").stdout)
        disk.fill()
        failed = memcore(home, "project", "storage", "move", "notes", str(store), "--json", check=False)
        error = json.loads(failed.stdout)["error"]
        store_left = store.exists()  # before the tmpfs goes
        after = json.loads(memcore(home, "project", "storage", "show", "notes", "--json").stdout)
        answered = json.loads(memcore(home, "activate", "notes", QUESTION, "--json").stdout)
    finally:
        assert daemon.stop() == 0
        disk.close()
    assert failed.returncode == 1 and error["code"] == "storage_unavailable", error
    assert error["details"]["path"] == str(store.resolve()) and error["details"]["errno"] == "ENOSPC"
    assert not store_left
    assert after == before and answered["response"]["fragments"]
