"""The engine over in-memory adapters: projects, indexing, activation, bad input, recording faults."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from memory_core.domain.errors import (
    EmptyProject,
    InvalidActivationState,
    InvalidBudget,
    InvalidProjectName,
    InvalidQuery,
    ProjectExists,
    ProjectNotFound,
    ProjectNotIndexed,
    RetrievalFailed,
    SourceUnavailable,
)
from memory_core.domain.model import Layer, Source
from memory_core.entrypoints.bootstrap import bootstrap_in_memory
from memory_core.retrieval.activation_state import ActivationState
from memory_core.retrieval.pipeline import EXCLUSION_CODES, SELECTED
from memory_core.runs.records import NullRecorder, RunFailure, RunStart, RunTrace
from memory_core.services.activation import STAGE_ERROR

ORG, PROJ = "/org", "/proj"
DOCS = {
    ORG: {
        "conventions/code-review.md": b"# Code review\n\nEvery change needs two approvals.\n",
        "runbooks/deploy.md": b"# Deploy runbook\n\nDeploy with helm upgrade.\n\n## Rollback\n\nRun helm rollback.\n",
    },
    PROJ: {
        "conventions/code-review.md": b"# Code review\n\nLedger changes need two approvals and a ledger owner.\n",
        "decisions/ADR-0004-advisory-locks.md": b"# ADR-0004: Advisory locks\n\nUse Postgres advisory locks.\n",
        "notes.txt": b"Coffee is on the second floor.\n\nThe printer is broken.\n",
    },
}


class SpyRecorder(NullRecorder):
    def __init__(self, fail_on: str | None = None) -> None:
        self.started: list[RunStart] = []
        self.completed: list[tuple[str, RunTrace]] = []
        self.failed: list[tuple[str, RunFailure]] = []
        self.fail_on = fail_on

    def start(self, run: RunStart) -> str:
        if self.fail_on == "start":
            raise OSError("disk full")
        self.started.append(run)
        return f"run-{len(self.started)}"

    def complete(self, run_id: str, trace: RunTrace) -> None:
        if self.fail_on == "complete":
            raise OSError("disk full")
        self.completed.append((run_id, trace))

    def fail(self, run_id: str, failure: RunFailure) -> None:
        self.failed.append((run_id, failure))


def make_engine(recorder=None, **overrides):  # type: ignore[no-untyped-def]
    engine = bootstrap_in_memory(recorder=recorder, **overrides)
    for source, files in DOCS.items():
        for rel, data in files.items():
            engine.indexer.scanner.write(source, rel, data)
    engine.add_project("demo", [Source(ORG, Layer.ORGANIZATION), Source(PROJ, Layer.PROJECT)])
    return engine


def test_index_resolves_overrides_and_is_a_no_op_when_unchanged() -> None:
    engine = make_engine()
    first = engine.index("demo")
    assert first.status == "built" and first.resources == 4
    assert engine.index("demo").status == "unchanged"
    manifest = engine.manifests.get_manifest(first.effective_memory_hash)
    review = next(e for e in manifest if e.resource_id == "conventions/code-review.md")
    assert review.layer is Layer.PROJECT  # the project layer overrides the organization's


def test_changed_resource_re_embeds_only_its_units() -> None:
    engine = make_engine()
    engine.index("demo")
    engine.indexer.scanner.write(PROJ, "notes.txt", b"Coffee is on the fourth floor.\n\nThe printer is broken.\n")
    report = engine.index("demo")
    assert report.status == "built"
    assert report.embedded == 1  # one changed paragraph (same length, so the next keeps its span)


def test_activation_returns_selected_candidates_with_delta_actions() -> None:
    recorder = SpyRecorder()
    engine = make_engine(recorder)
    engine.index("demo")
    first = engine.activate("demo", "how do I roll back a deploy?")
    response = first.response
    assert response.run_id == "run-1"
    assert response.fragments and all(f.delta_action == "add" and f.text for f in response.fragments)
    selected = [c for c in first.candidates if c.disposition == SELECTED]
    assert [f.unit_id for f in response.fragments] == [c.unit.unit_id for c in selected]
    for c in first.candidates:
        assert (c.disposition == SELECTED) != (c.exclusion_code in EXCLUSION_CODES)
    assert response.totals["tokens"] <= response.totals["budget"]
    # The trace handed to the recorder is made of the same candidate objects.
    ((_, trace),) = recorder.completed
    assert list(trace.candidates) == list(first.candidates)

    again = engine.activate("demo", "how do I roll back a deploy?", state=response.activation_state)
    assert {f.delta_action for f in again.response.fragments} == {"reuse"}
    assert all(f.text is None for f in again.response.fragments)


def test_replace_when_the_agent_holds_an_older_version() -> None:
    engine = make_engine()
    engine.index("demo")
    held = engine.activate("demo", "advisory locks ADR-0004").response.fragments[0]
    stale = ActivationState.from_json({"units": [{"unit_id": held.unit_id, "unit_hash": "0" * 64}]})
    fragments = engine.activate("demo", "advisory locks ADR-0004", state=stale).response.fragments
    assert next(f for f in fragments if f.unit_id == held.unit_id).delta_action == "replace"


def test_exact_identity_ranks_the_named_resource_first() -> None:
    engine = make_engine()
    engine.index("demo")
    activation = engine.activate("demo", "what did we decide in ADR-0004?")
    assert activation.candidates[0].unit.resource_id == "decisions/ADR-0004-advisory-locks.md"
    assert activation.candidates[0].exact_rank == 1


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"query": "   "}, InvalidQuery),
        ({"query": "x" * 2001}, InvalidQuery),
        ({"budget": 0}, InvalidBudget),
        ({"budget": -5}, InvalidBudget),
        ({"budget": 10**9}, InvalidBudget),
        ({"state": {"units": [], "extra": 1}}, InvalidActivationState),
        ({"state": {"units": [{"unit_id": "a#0", "unit_hash": "nothex"}]}}, InvalidActivationState),
        ({"state": {"units": [{"unit_id": "a#0"}]}}, InvalidActivationState),
        ({"state": ["not", "an", "object"]}, InvalidActivationState),
        ({"project": "nope"}, ProjectNotFound),
    ],
)
def test_invalid_requests_get_typed_errors_and_create_no_run(kwargs, error) -> None:  # type: ignore[no-untyped-def]
    recorder = SpyRecorder()
    engine = make_engine(recorder)
    engine.index("demo")
    args = {"project": "demo", "query": "rollback", **kwargs}
    with pytest.raises(error):
        engine.activate(args.pop("project"), args.pop("query"), **args)
    assert recorder.started == []


def test_unindexed_project_is_a_failed_run() -> None:
    recorder = SpyRecorder()
    engine = make_engine(recorder)
    with pytest.raises(ProjectNotIndexed) as info:
        engine.activate("demo", "rollback")
    assert info.value.details["run_id"] == "run-1"
    ((run_id, failure),) = recorder.failed
    assert failure.error_code == "project_not_indexed" and failure.error_stage == "load"


def test_a_stage_failure_is_a_failed_run_with_a_bounded_summary() -> None:
    class Broken:
        revision = "broken"

        def rerank(self, query, candidates):  # type: ignore[no-untyped-def]
            raise RuntimeError("model exploded " * 100)

    recorder = SpyRecorder()
    engine = make_engine(recorder, reranker=Broken())
    engine.index("demo")
    with pytest.raises(RetrievalFailed) as info:
        engine.activate("demo", "rollback")
    assert info.value.stage == "rerank" and info.value.run_id == "run-1"
    ((_, failure),) = recorder.failed
    assert failure.error_stage == "rerank" and len(failure.error_summary) <= 500
    # One code for one failure: the Run records what the caller is told; the class is in the text.
    assert info.value.error_code == failure.error_code == STAGE_ERROR
    assert "RuntimeError" in info.value.message and failure.error_summary.startswith("RuntimeError: ")


@pytest.mark.parametrize("fail_on", ["start", "complete"])
def test_history_failure_never_changes_the_answer(fail_on: str) -> None:
    healthy = make_engine(SpyRecorder())
    healthy.index("demo")
    broken = make_engine(SpyRecorder(fail_on=fail_on))
    broken.index("demo")
    good = healthy.activate("demo", "code review approvals").response
    bad = broken.activate("demo", "code review approvals").response
    assert bad.run_id is None
    assert bad.fragments == good.fragments and bad.activation_state == good.activation_state


def test_project_bad_input() -> None:
    engine = make_engine()
    with pytest.raises(ProjectExists):
        engine.add_project("demo", [Source(ORG)])
    with pytest.raises(InvalidProjectName):
        engine.add_project("../etc", [Source(ORG)])
    engine.add_project("missing", [Source("/does/not/exist")])
    with pytest.raises(SourceUnavailable):
        engine.index("missing")
    engine.indexer.scanner.write("/empty", "image.png", b"\x89PNG")
    engine.add_project("empty", [Source("/empty")])
    with pytest.raises(EmptyProject):
        engine.index("empty")
    with pytest.raises(ProjectNotFound):
        engine.remove_project("nope")
    engine.remove_project("demo")
    assert [i.project.project_id for i in engine.list_projects()] == ["empty", "missing"]


def test_state_fingerprint_is_order_independent() -> None:
    h1, h2 = hashlib.sha256(b"1").hexdigest(), hashlib.sha256(b"2").hexdigest()
    a = ActivationState.from_json({"units": [{"unit_id": "a#0", "unit_hash": h1}, {"unit_id": "b#0", "unit_hash": h2}]})
    b = ActivationState.from_json({"units": [{"unit_id": "b#0", "unit_hash": h2}, {"unit_id": "a#0", "unit_hash": h1}]})
    assert a.fingerprint == b.fingerprint


def test_corrupted_generation_is_never_served_and_index_rebuilds_it() -> None:
    recorder = SpyRecorder()
    engine = make_engine(recorder)
    report = engine.index("demo")
    directory = engine.catalog.current_generation("demo").directory
    engine.generations.corrupt(Path(directory))
    with pytest.raises(RetrievalFailed) as info:
        engine.activate("demo", "rollback")
    assert info.value.error_code == "generation_corrupted"
    assert recorder.failed[-1][1].error_code == "generation_corrupted"
    rebuilt = engine.index("demo")
    assert rebuilt.status == "built" and rebuilt.index_revision == report.index_revision
    assert engine.activate("demo", "rollback").response.fragments


def test_a_generation_built_with_other_bm25_parameters_is_refused_until_re_indexed() -> None:
    """A new BM25 default (issue 17) must not search an old generation under its old lexical
    revision: the Run would record one ranking and run another."""
    from memory_core.adapters.in_memory.lexical import InMemoryLexicalIndexFactory

    recorder = SpyRecorder()
    old = InMemoryLexicalIndexFactory(k1=0.9, b=0.4)
    engine = make_engine(recorder, lexical=old)
    engine.index("demo")
    assert engine.activate("demo", "rollback").response.fragments
    current = InMemoryLexicalIndexFactory()  # what an upgraded process builds and searches with
    assert current.revision != old.revision
    # Lucene's files stay on disk for any factory to open; the fake keeps its indexes in itself.
    object.__setattr__(current, "_indexes", old._indexes)
    engine.lexical = engine.indexer.lexical = current
    with pytest.raises(ProjectNotIndexed, match="indexed with lexical index 'memory-bm25-k0.9-b0.4"):
        engine.activate("demo", "rollback")
    assert recorder.failed[-1][1].error_code == "project_not_indexed"
    assert recorder.failed[-1][1].error_stage == "bm25"
    assert engine.index("demo").status == "built"  # `memcore index` rebuilds under the new revision
    run = engine.activate("demo", "rollback")
    assert run.response.fragments and run.response.revisions["lexical"] == current.revision
