"""Retrieval Runs with the real adapters and the real SQLite store (seed "Verification")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.domain.errors import ProjectNotIndexed, RunNotFound
from memory_core.domain.model import Source
from memory_core.entrypoints.bootstrap import bootstrap
from memory_core.retrieval.activation_state import ActivationState, HeldUnit
from memory_core.runs.records import CandidateRecord, RunFilter
from tests.runs import outcome

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
WORDS = [
    "boundary",
    "layer",
    "flow",
    "supersonic",
    "heat",
    "transfer",
    "wing",
    "pressure",
    "shock",
    "mach",
    "laminar",
    "turbulent",
    "cylinder",
    "buckling",
    "panel",
    "nozzle",
    "jet",
    "ADR-0004",
    "5.md",
]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
    budget=st.integers(50, 3000),
    held_picks=st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=6),
)
def test_returned_fragments_equal_the_stored_selected_candidates(cranfield_engine, words, budget, held_picks):  # type: ignore[no-untyped-def]
    engine = cranfield_engine
    query = " ".join(words)
    probe = engine.activate("cranfield", query).candidates
    held: dict[str, HeldUnit] = {}
    for index, same in held_picks:
        if index < len(probe):
            unit = probe[index].unit
            held[unit.unit_id] = HeldUnit(unit.unit_id, unit.unit_hash if same else "f" * 64)
    state = ActivationState.from_json(
        {"units": [{"unit_id": h.unit_id, "unit_hash": h.unit_hash} for h in held.values()]}
    )
    response = engine.activate("cranfield", query, budget=budget, state=state).response
    stored = engine.get_run(response.run_id)
    assert stored.summary.status == "succeeded"
    assert stored.summary.state_fingerprint == state.fingerprint
    assert stored.summary.effective_memory_hash == response.revisions["effective_memory_hash"]
    assert dict(stored.revisions) == dict(response.revisions)
    selected = [c for c in stored.candidates if c.disposition == "selected"]
    assert len(selected) == len(response.fragments) == stored.summary.fragment_count
    for fragment, record in zip(response.fragments, selected, strict=True):
        assert isinstance(record, CandidateRecord)
        assert (fragment.unit_id, fragment.unit_hash, fragment.resource_id) == (
            record.unit_id,
            record.unit_hash,
            record.resource_id,
        )
        assert (fragment.heading_path, fragment.token_count, fragment.delta_action) == (
            record.heading_path,
            record.token_count,
            record.delta_action,
        )
        assert (fragment.final_rank, fragment.final_score) == (record.final_rank, record.final_score)
    assert [c.final_rank for c in stored.candidates] == list(range(1, len(stored.candidates) + 1))
    assert sum(0 if f.delta_action == "reuse" else f.token_count for f in response.fragments) == (
        stored.summary.token_count
    )


def test_failed_and_listed_runs_and_clear_keeps_pinned(tmp_path: Path) -> None:
    engine = bootstrap(tmp_path / "home")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "deploy.md").write_text("# Deploy\n\nUse helm upgrade.\n\n## Rollback\n\nUse helm rollback.\n")
    engine.add_project("notes", [Source(str(notes))])
    with pytest.raises(ProjectNotIndexed) as info:
        engine.activate("notes", "rollback")
    failed = engine.get_run(info.value.details["run_id"])
    assert outcome(failed) == ("failed", "load", "project_not_indexed")
    engine.index("notes")
    ok = [engine.activate("notes", f"rollback {i}").response.run_id for i in range(3)]
    page = engine.list_runs(RunFilter(project_id="notes"), limit=2)
    assert [r.run_id for r in page.runs] == ok[::-1][:2]
    rest = engine.list_runs(RunFilter(project_id="notes"), limit=2, cursor=page.next_cursor)
    assert [r.run_id for r in rest.runs] == [ok[0], failed.summary.run_id]
    assert [r.run_id for r in engine.list_runs(RunFilter(status="failed")).runs] == [failed.summary.run_id]
    engine.history.pin(ok[1])
    report = engine.clear_runs("notes")
    assert report.deleted_runs == 3 and report.kept_pinned == 1
    assert [r.run_id for r in engine.list_runs().runs] == [ok[1]]
    with pytest.raises(RunNotFound):
        engine.get_run(ok[0])
    # Clearing history never touches Project Local Storage: the project still answers.
    assert engine.activate("notes", "rollback").response.fragments
    engine.close()


def test_interrupted_run_is_recovered_on_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    engine = bootstrap(home)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nAlpha beta.\n")
    engine.add_project("notes", [Source(str(notes))])
    engine.index("notes")
    engine.close()
    # A process dies hard between inserting the candidates and marking the Run terminal.
    code = (
        f"from memory_core.entrypoints.bootstrap import bootstrap;bootstrap({str(home)!r}).activate('notes', 'alpha')"
    )
    died = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"MEMORY_CORE_CRASH_POINT": "runs.complete.after_candidates", "PATH": "/usr/bin:/bin"},
    )
    assert died.returncode == 70, died.stderr
    out = subprocess.run(
        [sys.executable, "-m", "memory_core", "--home", str(home), "runs", "list", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    (run,) = json.loads(out.stdout)["runs"]
    assert (run["status"], run["error_code"]) == ("failed", "retrieval_interrupted")
    detail = json.loads(
        subprocess.run(
            [sys.executable, "-m", "memory_core", "--home", str(home), "runs", "show", run["run_id"], "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert detail["candidates"] == []  # no partial trace survives


def test_two_processes_activating_at_once_each_get_exactly_one_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Deploy\n\nUse helm upgrade.\n\n## Rollback\n\nUse helm rollback.\n")
    engine = bootstrap(home)
    engine.add_project("notes", [Source(str(notes))])
    engine.index("notes")
    engine.close()
    code = (
        "import json, sys\n"
        "from memory_core.entrypoints.bootstrap import bootstrap\n"
        f"engine = bootstrap({str(home)!r})\n"
        "ids = [engine.activate('notes', f'rollback {i} ' + sys.argv[1]).response.run_id for i in range(15)]\n"
        "print(json.dumps(ids))\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, tag], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for tag in ("first", "second")
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    ids = [run_id for out in outputs for run_id in json.loads(out)]
    assert len(ids) == 30 and None not in ids and len(set(ids)) == 30
    engine = bootstrap(home)
    stored = engine.list_runs(RunFilter(project_id="notes"), limit=100).runs
    assert sorted(r.run_id for r in stored) == sorted(ids)
    assert all(r.status == "succeeded" for r in stored)
    engine.close()
