"""The CLI in both modes: embedded (no daemon) and through a running daemon, on the same
commands and the same memory folder, gives the same JSON (up to ids, times and the home path)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.test_server import Daemon, memory_folder

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
QUESTION = "how do I roll back a deploy?"
# Differ between any two runs, whatever the mode; ``warm`` differs by mode and is checked apart.
VOLATILE = {"run_id", "created_at", "started_at", "finished_at", "latency_ms", "total_ms", "seconds", "warm"}


def memcore(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "memory_core", "--home", str(home), *args],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def normalized(value: Any, home: Path) -> Any:
    if isinstance(value, dict):
        return {k: normalized(v, home) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [normalized(v, home) for v in value]
    if isinstance(value, str):
        return value.replace(str(home), "<home>")
    return value


def differences(a: Any, b: Any, path: str = "$") -> list[str]:
    """Where two JSON values differ, as paths (readable where a plain == diff is not)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def session(home: Path, memory: Path, state: Path) -> dict[str, Any]:
    """The same commands, in order; every --json answer, and the text and errors worth comparing."""
    out: dict[str, Any] = {}

    def j(name: str, *args: str) -> Any:
        out[name] = json.loads(memcore(home, *args, "--json").stdout)
        return out[name]

    j("project add", "project", "add", "notes", "--source", f"local={memory}")
    j("project list", "project", "list")
    j("index", "index", "notes")
    j("project show", "project", "show", "notes")
    first = j("activate", "activate", "notes", QUESTION, "--save-state", str(state))
    j("activate again", "activate", "notes", QUESTION, "--state", str(state))
    runs = j("runs list", "runs", "list", "--project", "notes")
    out["warm flags"] = [r["warm"] for r in runs["runs"]]
    j("runs show", "runs", "show", first["response"]["run_id"])
    table = memcore(home, "activate", "notes", "helm upgrade").stdout
    out["activate table"] = ["selected" in table, "runbooks/deploy.md#0" in table]
    missing = memcore(home, "activate", "nope", QUESTION, check=False)
    out["unknown project"] = [missing.returncode, missing.stderr.split(":")[0]]
    unindexed = memcore(home, "runs", "show", "01NOSUCHRUN", check=False)
    out["unknown run"] = [unindexed.returncode, unindexed.stderr.split(":")[0]]
    j("runs clear", "runs", "clear", "--project", "notes", "--yes")
    j("project remove", "project", "remove", "notes")
    return out


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    base = tmp_path_factory.mktemp("modes")
    memory = memory_folder(base / "memory")
    embedded = session(base / "embedded", memory, base / "embedded-state.json")
    daemon = Daemon(base / "daemon", base / "daemon.log")
    try:
        served = session(base / "daemon", memory, base / "daemon-state.json")
        records = daemon.log_records()
    finally:
        assert daemon.stop() == 0
    return (normalized(embedded, base / "embedded"), normalized(served, base / "daemon"), records)


def test_the_cli_went_through_the_daemon(both: Any) -> None:
    _, _, records = both
    methods = {r["method"] for r in records if r.get("message") == "request"}
    assert {"add_project", "list_projects", "show_project", "index_project", "activate_memory",
            "list_retrieval_runs", "get_retrieval_run", "clear_retrieval_runs", "remove_project"} <= methods


def test_the_daemon_keeps_indexes_warm_between_commands(both: Any) -> None:
    embedded, served, _ = both
    assert embedded["warm flags"] == [False, False]  # each embedded command is a new process
    assert served["warm flags"] == [True, False]  # newest first: the second found them loaded


@pytest.mark.parametrize(
    "command",
    ["project add", "project list", "index", "project show", "runs list", "runs show", "activate table",
     "unknown project", "unknown run", "runs clear", "project remove"],
)
def test_same_json_in_both_modes(command: str, both: Any) -> None:
    embedded, served, _ = both
    a, b = embedded[command], served[command]
    if command == "project show":  # the watch health differs by mode: checked below
        a, b = ({k: v for k, v in x.items() if k not in SHOW_HEALTH} for x in (a, b))
    assert differences(a, b) == []


SHOW_HEALTH = {"daemon", "health", "index_behind"}


def test_project_show_says_who_keeps_the_index_current(both: Any) -> None:
    """In process nothing watches (the index's lag is computed from the live sources); through
    the daemon its watcher's health is shown instead."""
    embedded, served, _ = both
    shown, via_daemon = embedded["project show"], served["project show"]
    assert (shown["daemon"], shown["health"], shown["index_behind"]) == (False, None, False)
    assert via_daemon["daemon"] is True and via_daemon["index_behind"] is None
    assert via_daemon["health"]["watching"] is True


@pytest.mark.parametrize("command", ["activate", "activate again"])
def test_activation_json_is_the_same_in_both_modes(command: str, both: Any) -> None:
    embedded, served, _ = both
    assert differences(embedded[command]["response"], served[command]["response"]) == []
    live, recorded = embedded[command]["candidates"], served[command]["candidates"]
    assert [c["unit_id"] for c in recorded] == [c["unit_id"] for c in live]
    for a, b in zip(live, recorded, strict=True):
        # The daemon's candidates are the recorded ones: every field of the live candidate,
        # plus what the record keeps of its unit.
        assert set(b) - set(a) <= {"heading_path", "token_count"}
        assert {k: b[k] for k in a} == a
    if command == "activate again":
        assert {f["delta_action"] for f in served[command]["response"]["fragments"]} == {"reuse"}
