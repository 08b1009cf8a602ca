"""EvaluationStore contract: SqliteEvaluationStore and InMemoryEvaluationStore behave the same
(corpora deduplicated and immutable, atomic case batches, judgment compare-and-set with every
version kept, review marks, deletion)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.adapters.in_memory.evaluation import InMemoryEvaluationStore
from memory_core.adapters.sqlite import open_database
from memory_core.adapters.sqlite.evaluation import SqliteEvaluationStore
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.evaluation_errors import (
    EvaluationCaseExists,
    EvaluationCaseNotFound,
    EvaluationCorpusNotFound,
    EvaluationJudgmentConflict,
)
from memory_core.domain.model import Layer, ManifestEntry
from memory_core.evaluation.cases import BEIR_IMPORT, RUN, Case, CaseRecord, Corpus, Judgment, JudgmentSet, SourceTrace
from memory_core.runs.records import CandidateRecord
from tests.contracts.test_run_store import ranked


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def corpus_of(tag: str, n: int = 6) -> Corpus:
    return Corpus.of(
        ManifestEntry(i, f"docs/r{i}.md", Layer.PROJECT, f"file:///{tag}/r{i}.md", digest(f"{tag}{i}"), 10 + i,
                      "text/markdown")
        for i in range(n)
    )  # fmt: skip


def trace_of(corpus: Corpus, run_id: str, seed: int = 1, query: str = "how do we deploy") -> SourceTrace:
    candidates = tuple(CandidateRecord.from_candidate(c) for c in ranked(seed, 12))
    return SourceTrace(
        run_id=run_id, project_id="alpha", query=query, started_at="2025-01-01T00:00:00.000Z",
        finished_at="2025-01-01T00:00:01.000Z", state_fingerprint="f" * 64, token_budget=1200,
        effective_memory_hash=corpus.corpus_id, index_revision="rev0123456789abc",
        revisions={"parser": "p1", "ranking_profile": "default@x"},
        latency_ms={"bm25": 1.25, "dense": 0.5, "total": 3.75}, warm=True, fragment_count=2, token_count=40,
        candidates=candidates,
    )  # fmt: skip


def record(
    case_id: str,
    corpus: Corpus,
    *,
    run_id: str | None = None,
    created_at: str = "2025-01-02T00:00:00.000Z",
    project_id: str = "alpha",
    provenance: str = RUN,
    sets: tuple[JudgmentSet, ...] = (),
) -> CaseRecord:
    trace = trace_of(corpus, run_id or f"run-{case_id}")
    case = Case(
        case_id=case_id, project_id=project_id, query=trace.query, corpus_id=corpus.corpus_id,
        source_run_id=trace.run_id, provenance=provenance, original_provenance=provenance,
        judgment_version=sets[-1].version if sets else 0, reviewed_version=None, created_at=created_at,
        trace_hash=trace.trace_hash,
    )  # fmt: skip
    return CaseRecord(case, trace, sets)


@pytest.fixture(params=["sqlite", "memory"])
def store(request, tmp_path) -> Iterator[object]:  # type: ignore[no-untyped-def]
    if request.param == "memory":
        yield InMemoryEvaluationStore()
        return
    conn = open_database(tmp_path / "local.db")
    yield SqliteEvaluationStore(conn)
    conn.close()


def test_cases_round_trip_with_their_frozen_trace_and_corpus(store) -> None:  # type: ignore[no-untyped-def]
    corpus = corpus_of("a")
    r = record("c1", corpus)
    store.add_cases([corpus], [r])
    assert store.get_case("c1") == r.case
    assert store.get_trace("c1") == r.trace
    assert store.get_trace("c1").trace_hash == r.case.trace_hash
    assert store.get_corpus(corpus.corpus_id) == corpus
    assert store.has_corpus(corpus.corpus_id)
    assert store.judgments("c1") == JudgmentSet("c1", 0, (), None)
    assert store.judgment_history("c1") == []
    assert store.referenced_blobs() == set(corpus.digests())
    assert store.runs_of_cases() == {"run-c1"}


def test_a_corpus_is_stored_once_and_never_changed(store) -> None:  # type: ignore[no-untyped-def]
    corpus = corpus_of("a")
    store.add_cases([corpus], [record("c1", corpus)])
    store.add_cases([corpus], [record("c2", corpus)])
    assert store.get_corpus(corpus.corpus_id) == corpus
    with pytest.raises(EvaluationCorpusNotFound):
        store.get_corpus("0" * 64)
    assert not store.has_corpus("0" * 64)


def test_a_batch_with_an_existing_id_writes_nothing(store) -> None:  # type: ignore[no-untyped-def]
    a, b = corpus_of("a"), corpus_of("b")
    store.add_cases([a], [record("c1", a)])
    with pytest.raises(EvaluationCaseExists):
        store.add_cases([b], [record("c2", b), record("c1", b)])
    assert [c.case_id for c in store.list_cases()] == ["c1"]
    assert not store.has_corpus(b.corpus_id)
    with pytest.raises(EvaluationCaseExists):
        store.add_cases([b], [record("c3", b), record("c3", b)])
    with pytest.raises(EvaluationCorpusNotFound):
        store.add_cases([], [record("c4", b)])
    assert [c.case_id for c in store.list_cases()] == ["c1"]


def test_listing_orders_by_creation_and_filters(store) -> None:  # type: ignore[no-untyped-def]
    corpus = corpus_of("a")
    store.add_cases(
        [corpus],
        [
            record("z", corpus, created_at="2025-01-01T00:00:00.000Z"),
            record("b", corpus, created_at="2025-01-03T00:00:00.000Z", project_id="beta"),
            record("a", corpus, created_at="2025-01-03T00:00:00.000Z"),
        ],
    )
    assert [c.case_id for c in store.list_cases()] == ["z", "a", "b"]
    assert [c.case_id for c in store.list_cases("alpha")] == ["z", "a"]
    assert [c.case_id for c in store.list_cases(case_ids=["b", "z", "b"])] == ["z", "b"]
    assert [c.case_id for c in store.list_cases("alpha", case_ids=["b", "z"])] == ["z"]
    with pytest.raises(EvaluationCaseNotFound):
        store.list_cases(case_ids=["nope"])
    with pytest.raises(EvaluationCaseNotFound):
        store.get_case("nope")
    with pytest.raises(EvaluationCaseNotFound):
        store.get_trace("nope")


def test_case_for_run_distinguishes_provenance(store) -> None:  # type: ignore[no-untyped-def]
    corpus = corpus_of("a")
    store.add_cases(
        [corpus], [record("c1", corpus, run_id="r1"), record("c2", corpus, run_id="r1", provenance=BEIR_IMPORT)]
    )
    assert store.case_for_run("r1", RUN).case_id == "c1"
    assert store.case_for_run("r1", BEIR_IMPORT).case_id == "c2"
    assert store.case_for_run("r2", RUN) is None


def test_judgments_compare_and_set_and_keep_every_version(store) -> None:  # type: ignore[no-untyped-def]
    corpus = corpus_of("a")
    store.add_cases([corpus], [record("c1", corpus)])
    first = (Judgment.resource("docs/r1.md", 3, "the answer"), Judgment.unit("docs/r2.md#0", 1))
    v1 = store.replace_judgments("c1", 0, first, "t1")
    assert v1 == JudgmentSet("c1", 1, first, "t1")
    with pytest.raises(EvaluationJudgmentConflict) as stale:
        store.replace_judgments("c1", 0, (), "t2")
    assert stale.value.code == "evaluation_judgment_conflict"
    assert stale.value.current_version == 1 and stale.value.details["current_version"] == 1
    v2 = store.replace_judgments("c1", 1, (), "t3")  # an empty set is a version too
    assert v2.version == 2 and v2.judgments == ()
    assert store.get_case("c1").judgment_version == 2
    assert store.judgments("c1") == v2
    assert store.judgments("c1", 1) == v1
    assert store.judgments("c1", 0).judgments == ()
    assert store.judgment_history("c1") == [v1, v2]
    with pytest.raises(InvalidRequest):
        store.judgments("c1", 3)
    with pytest.raises(EvaluationCaseNotFound):
        store.replace_judgments("nope", 0, (), "t")


def test_cases_may_arrive_with_judgment_versions(store) -> None:  # type: ignore[no-untyped-def]
    corpus = corpus_of("a")
    sets = (JudgmentSet("c1", 3, (Judgment.resource("docs/r0.md", 2),), "t"),)  # history not exported
    store.add_cases([corpus], [record("c1", corpus, sets=sets)])
    assert store.judgments("c1") == sets[0]
    assert store.judgment_history("c1") == list(sets)
    with pytest.raises(InvalidRequest):
        store.judgments("c1", 1)  # not carried by the fixture it came from
    bad = record("c2", corpus, sets=(JudgmentSet("c2", 2, (), "t"), JudgmentSet("c2", 1, (), "t")))
    with pytest.raises(InvalidRequest):
        store.add_cases([], [bad])


def test_review_marks_a_version_and_a_new_version_clears_it(store) -> None:  # type: ignore[no-untyped-def]
    corpus = corpus_of("a")
    store.add_cases([corpus], [record("c1", corpus)])
    store.replace_judgments("c1", 0, (Judgment.resource("docs/r0.md", 1),), "t")
    with pytest.raises(EvaluationJudgmentConflict):
        store.set_reviewed("c1", 0, True)
    reviewed = store.set_reviewed("c1", 1, True)
    assert reviewed.reviewed and reviewed.reviewed_version == 1
    assert store.get_case("c1").reviewed
    store.replace_judgments("c1", 1, (Judgment.resource("docs/r0.md", 2),), "t")
    assert not store.get_case("c1").reviewed
    assert not store.set_reviewed("c1", 2, False).reviewed


def test_deleting_the_last_case_of_a_corpus_deletes_the_corpus(store) -> None:  # type: ignore[no-untyped-def]
    a, b = corpus_of("a"), corpus_of("b")
    store.add_cases([a, b], [record("c1", a), record("c2", a), record("c3", b)])
    store.replace_judgments("c1", 0, (Judgment.resource("docs/r0.md", 1),), "t")
    store.delete_case("c1")
    assert store.has_corpus(a.corpus_id)
    store.delete_case("c2")
    assert not store.has_corpus(a.corpus_id)
    assert store.referenced_blobs() == set(b.digests())
    assert store.runs_of_cases() == {"run-c3"}
    with pytest.raises(EvaluationCaseNotFound):
        store.delete_case("c1")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), max_size=12))
def test_compare_and_set_is_linear(tmp_path_factory, attempts) -> None:  # type: ignore[no-untyped-def]
    """Whatever editors send, both stores agree, the version counts successes and history keeps
    each successful set."""
    conn = open_database(tmp_path_factory.mktemp("cas") / "local.db")
    stores = [SqliteEvaluationStore(conn), InMemoryEvaluationStore()]
    corpus = corpus_of("a")
    for s in stores:
        s.add_cases([corpus], [record("c1", corpus)])
    expected_history = []
    for expected, relevance in attempts:
        outcomes = []
        for s in stores:
            try:
                outcomes.append(s.replace_judgments("c1", expected, (Judgment.resource("docs/r0.md", relevance),), "t"))
            except EvaluationJudgmentConflict as exc:
                outcomes.append(("conflict", exc.current_version))
        assert outcomes[0] == outcomes[1]
        if isinstance(outcomes[0], JudgmentSet):
            expected_history.append(outcomes[0])
    for s in stores:
        assert s.get_case("c1").judgment_version == len(expected_history)
        assert s.judgment_history("c1") == expected_history
    conn.close()
