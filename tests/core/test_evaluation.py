"""Evaluation Sets through the service, over in-memory stores and real in-memory activations:
case creation and pinning, judgments (conflicts, validation), reports checked by hand, missed
evidence, Scope Violation vs Stale Result, the bootstrap, BEIR import and the replay gate."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.adapters.in_memory.evaluation import InMemoryEvaluationStore
from memory_core.adapters.in_memory.runs import InMemoryRunStore
from memory_core.adapters.in_memory.storage import InMemoryBlobStore, InMemoryCatalog
from memory_core.domain.canonical import plain, sha256_hex
from memory_core.domain.errors import InvalidRequest, ProjectNotIndexed, RunNotFound
from memory_core.domain.evaluation_errors import (
    EvaluationCaseNotFound,
    EvaluationImportConflict,
    EvaluationJudgmentConflict,
    EvaluationRunNotSucceeded,
    EvaluationSetEmpty,
    FixtureHashMismatch,
    InvalidBeirCollection,
    InvalidFixture,
    InvalidJudgments,
)
from memory_core.domain.model import Layer, ManifestEntry, Source
from memory_core.entrypoints.bootstrap import bootstrap_in_memory, utc_now
from memory_core.entrypoints.cli import wire
from memory_core.evaluation import fixture
from memory_core.evaluation import report as report_module
from memory_core.evaluation.beir import BeirCollection, beir_case_id
from memory_core.evaluation.cases import (
    BEIR_IMPORT,
    FIXTURE_IMPORT,
    RUN,
    Case,
    CaseRecord,
    Corpus,
    Judgment,
    JudgmentSet,
    SourceTrace,
)
from memory_core.evaluation.metrics import MetricLevel, RankedItem, resource_ranking
from memory_core.evaluation.report import (
    CUT_AT_SELECTION,
    DEMOTED_BY_RERANKER,
    FUSION_VARIANTS,
    LOST_IN_FUSION,
    NEVER_RETRIEVED,
    VARIANTS,
    variant_ranking,
)
from memory_core.evaluation.statistics import paired_bootstrap, paired_randomization_p
from memory_core.retrieval.fusion import DEFAULT_FUSION, FUSIONS
from memory_core.runs.records import FAILED, CandidateRecord
from memory_core.services import fixtures
from memory_core.services.beir_import import EngineWorkspace, import_beir
from memory_core.services.evaluation import EvaluationService
from memory_core.services.replay import baseline_from_report, replay
from tests.contracts.test_run_store import ranked

SOURCE = "/memory"
SCHEMA = Path(__file__).resolve().parents[2] / "contracts" / "evaluation-fixture.schema.json"
TOPICS = ["deploy", "rollback", "database", "locks", "review", "oncall", "logging", "backups", "tokens", "cache"]


def body(i: int, version: int = 0) -> bytes:
    t, u = TOPICS[i % len(TOPICS)], TOPICS[(i * 3 + 1) % len(TOPICS)]
    return (
        f"# Note {i} about {t}\n\nHow we handle {t} in service {i}. Version {version}.\n\n"
        f"## Details\n\nThe {u} procedure for {t} uses step {i * 7}.\n"
    ).encode()


@attrs.define
class World:
    engine: object
    service: EvaluationService
    store: InMemoryEvaluationStore
    history: InMemoryRunStore
    blobs: InMemoryBlobStore

    def activate(self, query: str) -> str:
        return self.engine.activate("notes", query).response.run_id  # type: ignore[attr-defined]

    def write(self, i: int, version: int) -> None:
        self.engine.indexer.scanner.write(SOURCE, f"notes/n{i}.md", body(i, version))  # type: ignore[attr-defined]


def make_world(n_docs: int = 24) -> World:
    store = InMemoryEvaluationStore()
    blobs = InMemoryBlobStore()
    catalog = InMemoryCatalog()
    history = InMemoryRunStore(blobs, catalog=catalog, corpus_references=store.referenced_blobs, blob_grace_s=0)
    engine = bootstrap_in_memory(blobs=blobs, catalog=catalog, history=history)
    for i in range(n_docs):
        engine.indexer.scanner.write(SOURCE, f"notes/n{i}.md", body(i))
    engine.add_project("notes", [Source(SOURCE)])
    engine.index("notes")
    return World(engine, EvaluationService(store, history, blobs, now=utc_now), store, history, blobs)


@pytest.fixture
def world() -> World:
    return make_world()


# -- cases ----------------------------------------------------------------------------------------


def test_a_case_freezes_a_succeeded_run_and_pins_it(world: World) -> None:
    run_id = world.activate("deploy rollback procedure")
    case = world.service.create_case(run_id)
    run = world.history.get_run(run_id)
    assert run.summary.pinned
    assert (case.query, case.project_id, case.source_run_id) == ("deploy rollback procedure", "notes", run_id)
    assert (case.provenance, case.original_provenance, case.judgment_version) == (RUN, RUN, 0)
    assert not case.reviewed
    corpus = world.service.get_corpus(case.corpus_id)
    assert case.corpus_id == run.summary.effective_memory_hash
    assert corpus.resources == world.history.run_manifest(case.corpus_id)
    assert all(world.blobs.exists(d) for d in corpus.digests())
    trace = world.service.get_trace(case.case_id)
    assert trace.candidates == run.candidates and trace.trace_hash == case.trace_hash
    assert trace.query == case.query and trace.latency_ms == run.latency_ms
    # Adding the same Run again gives the same case; another Run of the same memory shares the corpus.
    assert world.service.create_case(run_id) == case
    other = world.service.create_case(world.activate("database locks"))
    assert other.case_id != case.case_id and other.corpus_id == case.corpus_id
    assert [c.case_id for c in world.service.list_cases("notes")] == [case.case_id, other.case_id]
    assert world.service.list_cases("other") == []


def test_only_a_succeeded_run_becomes_a_case(world: World) -> None:
    world.engine.add_project("empty", [Source("/nothing-indexed")])  # type: ignore[attr-defined]
    with pytest.raises(ProjectNotIndexed) as failed:
        world.engine.activate("empty", "anything")  # type: ignore[attr-defined]
    run_id = failed.value.details["run_id"]
    assert world.history.get_run(run_id).summary.status == FAILED
    with pytest.raises(EvaluationRunNotSucceeded) as rejected:
        world.service.create_case(run_id)
    assert rejected.value.code == "evaluation_run_not_succeeded" and rejected.value.details["status"] == FAILED
    assert not world.history.get_run(run_id).summary.pinned
    with pytest.raises(RunNotFound):
        world.service.create_case("01NOSUCHRUN")
    with pytest.raises(InvalidRequest):
        world.service.create_case(world.activate("deploy"), case_id="bad id with spaces")
    assert world.service.list_cases() == []


def test_pinned_runs_survive_clear_history_and_corpus_blobs_survive_gc(world: World) -> None:
    case = world.service.create_case(world.activate("deploy"))
    unpinned = world.activate("rollback")
    original = world.service.get_corpus(case.corpus_id).hashes()["notes/n0.md"]
    report = world.history.clear()
    assert (report.deleted_runs, report.kept_pinned) == (1, 1)
    with pytest.raises(RunNotFound):
        world.history.get_run(unpinned)
    assert world.history.get_run(case.source_run_id).summary.pinned
    # n0.md changes three times: the first version's blob is then named only by the corpus once
    # its Run is gone; the second version's blob by nothing at all.
    for version in (1, 2, 3):
        world.write(0, version)
        world.engine.index("notes")  # type: ignore[attr-defined]
    world.history.unpin(case.source_run_id)  # only the corpus refers to the old body now
    world.history.clear()
    assert world.blobs.exists(original)
    assert world.blobs.get(original) == body(0, 0)
    assert not world.blobs.exists(sha256_hex(body(0, 1)))
    assert world.service.report().cases == 1


# -- judgments ------------------------------------------------------------------------------------


def test_two_editors_conflict_and_every_version_is_kept(world: World) -> None:
    case = world.service.create_case(world.activate("deploy rollback"))
    trace = world.service.get_trace(case.case_id)
    unit = trace.candidates[0].unit_id
    mine = world.service.replace_judgments(case.case_id, 0, {"judgments": [{"unit_id": unit, "relevance": 3}]})
    assert mine.version == 1
    theirs = {"judgments": [{"resource_id": "notes/n5.md", "relevance": 2, "note": "missed"}]}
    with pytest.raises(EvaluationJudgmentConflict) as stale:
        world.service.replace_judgments(case.case_id, 0, theirs)
    assert stale.value.code == "evaluation_judgment_conflict"
    assert stale.value.details == {"case_id": case.case_id, "expected_version": 0, "current_version": 1}
    again = world.service.replace_judgments(case.case_id, stale.value.current_version, theirs)
    assert again.version == 2 and again.judgments == (Judgment.resource("notes/n5.md", 2, "missed"),)
    assert world.service.get_case(case.case_id).judgment_version == 2
    assert [s.version for s in world.service.judgment_history(case.case_id)] == [1, 2]
    assert world.service.judgments(case.case_id, 1) == mine
    with pytest.raises(InvalidRequest):
        world.service.replace_judgments(case.case_id, -1, theirs)
    with pytest.raises(InvalidRequest):
        world.service.replace_judgments(case.case_id, True, theirs)
    with pytest.raises(EvaluationCaseNotFound):
        world.service.replace_judgments("nope", 0, theirs)


def test_invalid_judgments_reject_the_whole_request(world: World) -> None:
    case = world.service.create_case(world.activate("deploy rollback"))
    unit = world.service.get_trace(case.case_id).candidates[0].unit_id
    judgments = [
        {"unit_id": unit, "relevance": 2},  # valid
        {"unit_id": "notes/n0.md#99", "relevance": 1},  # not in the trace
        {"resource_id": "notes/absent.md", "relevance": 1},  # not in the corpus
        {"resource_id": "notes/n1.md", "relevance": 4},
        {"resource_id": "notes/n2.md", "relevance": 2.5},
        {"resource_id": "notes/n3.md", "relevance": True},
        {"unit_id": unit, "relevance": 1},  # duplicate
        {"unit_id": unit, "resource_id": "notes/n1.md", "relevance": 1},
        {"resource_id": "notes/n4.md", "relevance": 1, "grade": 1},
        "not an object",
    ]
    with pytest.raises(InvalidJudgments) as bad:
        world.service.replace_judgments(case.case_id, 0, {"judgments": judgments})
    flagged = {p["index"] for p in bad.value.problems}
    assert flagged >= {3, 4, 5, 7, 8, 9}
    assert bad.value.code == "invalid_judgments"
    # Structurally valid ones are then checked against the case: each bad target is named.
    with pytest.raises(InvalidJudgments) as targets:
        world.service.replace_judgments(case.case_id, 0, judgments[:3] + judgments[6:7])
    assert sorted(p["index"] for p in targets.value.problems) == [1, 2, 3]
    assert world.service.get_case(case.case_id).judgment_version == 0
    assert world.service.judgment_history(case.case_id) == []
    with pytest.raises(InvalidJudgments):
        world.service.replace_judgments(case.case_id, 0, {"judgments": [], "extra": 1})
    with pytest.raises(InvalidJudgments):
        world.service.replace_judgments(case.case_id, 0, "judgments")


def test_review_follows_the_judgment_version(world: World) -> None:
    case = world.service.create_case(world.activate("deploy"))
    world.service.replace_judgments(case.case_id, 0, [Judgment.resource("notes/n0.md", 3)])
    assert world.service.mark_reviewed(case.case_id, 1).reviewed
    assert world.service.report().reviewed_cases == 1
    world.service.replace_judgments(case.case_id, 1, [Judgment.resource("notes/n0.md", 2)])
    assert not world.service.get_case(case.case_id).reviewed
    with pytest.raises(EvaluationJudgmentConflict):
        world.service.mark_reviewed(case.case_id, 1)


def test_show_case_and_delete_case(world: World) -> None:
    case = world.service.create_case(world.activate("deploy rollback"))
    world.service.replace_judgments(case.case_id, 0, [Judgment.resource("notes/n9.md", 2)])
    detail = world.service.show_case(case.case_id)
    assert detail.case == attrs.evolve(case, judgment_version=1)
    assert detail.corpus_resources == 24
    assert set(detail.metrics) == {"unit", "resource"}
    assert {v.name for v in VARIANTS} == set(detail.metrics["resource"])
    json.dumps(wire.to_json(detail))  # JSON-ready
    world.service.delete_case(case.case_id)
    assert not world.history.get_run(case.source_run_id).summary.pinned
    assert world.store.referenced_blobs() == set()


# -- reports by hand ------------------------------------------------------------------------------

HA, HB, HC, HX = ("a" * 64, "b" * 64, "c" * 64, "e" * 64)


def cand(
    unit_id: str,
    final: int,
    rrf: int,
    *,
    lexical: int | None = None,
    dense: int | None = None,
    rerank: int | None = None,
    code: str | None = None,
    resource_hash: str | None = None,
) -> CandidateRecord:
    resource_id = unit_id.rpartition("#")[0]
    default_hash = {"a.md": HA, "b.md": HB, "c.md": HC}.get(resource_id, HX)
    return CandidateRecord(
        unit_id=unit_id, resource_id=resource_id, unit_hash="d" * 64, resource_hash=resource_hash or default_hash,
        heading_path=(), token_count=10, exact_rank=None, exact_score=None, bm25_rank=lexical,
        bm25_score=None if lexical is None else 10.0 - lexical, lexical_rank=lexical, dense_rank=dense,
        dense_score=None if dense is None else 1.0 - dense / 10, dense_similarity=None, rrf_rank=rrf,
        rrf_score=1 / (60 + rrf), rerank_rank=rerank, rerank_score=None if rerank is None else 1.0 / rerank,
        final_rank=final, final_score=None if rerank is None else 1.0 / rerank,
        disposition="excluded" if code else "selected", exclusion_code=code, delta_action=None if code else "add",
    )  # fmt: skip


def corpus_abc(*names: str) -> Corpus:
    hashes = {"a.md": HA, "b.md": HB, "c.md": HC}
    return Corpus.of(
        ManifestEntry(i, n, Layer.PROJECT, f"file:///{n}", hashes.get(n, HX), 10, "text/markdown")
        for i, n in enumerate(names)
    )


def add_case(
    service: EvaluationService,
    case_id: str,
    candidates: list[CandidateRecord],
    judgments: list[Judgment],
    corpus: Corpus,
    *,
    latency: dict[str, float] | None = None,
    warm: bool = True,
) -> None:
    trace = SourceTrace(
        run_id=f"run-{case_id}", project_id="hand", query=f"query {case_id}", started_at="t", finished_at="t",
        state_fingerprint="f" * 64, token_budget=100, effective_memory_hash=corpus.corpus_id, index_revision="r",
        revisions={}, latency_ms=latency or {"total": 1.0}, warm=warm, fragment_count=2, token_count=20,
        candidates=tuple(sorted(candidates, key=lambda c: c.final_rank)),
    )  # fmt: skip
    version = 1 if judgments else 0
    case = Case(
        case_id=case_id, project_id="hand", query=trace.query, corpus_id=corpus.corpus_id,
        source_run_id=trace.run_id, provenance=RUN, original_provenance=RUN, judgment_version=version,
        reviewed_version=None, created_at=f"2025-01-01T00:00:0{len(service.list_cases())}.000Z",
        trace_hash=trace.trace_hash,
    )  # fmt: skip
    sets = (JudgmentSet(case_id, 1, tuple(judgments), "t"),) if judgments else ()
    service.store.add_cases([corpus], [CaseRecord(case, trace, sets)])


def hand_service() -> EvaluationService:
    store = InMemoryEvaluationStore()
    blobs = InMemoryBlobStore()
    return EvaluationService(store, InMemoryRunStore(blobs), blobs, now=utc_now)


# Ranks chosen by hand (final order: a#0, b#0, a#1, c#0; rerank window 3; a#0 and b#0 selected).
HAND = [
    cand("b.md#0", final=2, rrf=1, lexical=2, dense=1, rerank=2),
    cand("a.md#1", final=3, rrf=2, lexical=1, rerank=3, code="token_budget_exhausted"),
    cand("a.md#0", final=1, rrf=3, dense=2, rerank=1),
    cand("c.md#0", final=4, rrf=4, lexical=3, dense=3, code="outside_rerank_window"),
]
HAND_JUDGMENTS = [Judgment.resource("a.md", 2), Judgment.unit("c.md#0", 3), Judgment.unit("b.md#0", 0)]


def test_report_numbers_checked_by_hand() -> None:
    service = hand_service()
    corpus = corpus_abc("a.md", "b.md", "c.md")
    add_case(service, "judged", HAND, HAND_JUDGMENTS, corpus)
    add_case(service, "unjudged", HAND, [], corpus)
    report = service.report(project_id="hand")
    ideal = 3 + 2 / math.log2(3)  # unit and resource level alike: items 3 (c#0), 2 (a.md), 0
    ndcg = {
        "b1_bm25": (2 + 3 / 2) / ideal,  # a#1 (earns a.md: 2), b#0 (0), c#0 (3)
        "b2_dense_vector": (2 / math.log2(3) + 3 / 2) / ideal,  # b#0, a#0 (2), c#0 (3)
        "b3_hybrid_rrf": (2 / math.log2(3) + 3 / math.log2(5)) / ideal,  # b#0, a#1 (2), a#0 (a.md spent), c#0
        "b4_reranked": (2 + 3 / math.log2(5)) / ideal,  # a#0 (2), b#0, a#1 (spent), c#0 (3)
    }
    mrr = {"b1_bm25": 1.0, "b2_dense_vector": 0.5, "b3_hybrid_rrf": 0.5, "b4_reranked": 1.0}
    diversity = {"b1_bm25": 1.0, "b2_dense_vector": 1.0, "b3_hybrid_rrf": 0.75, "b4_reranked": 0.75}
    resource_ndcg = {
        "b1_bm25": (2 + 3 / 2) / ideal,  # a, b, c
        "b2_dense_vector": (2 / math.log2(3) + 3 / 2) / ideal,  # b, a, c
        "b3_hybrid_rrf": (2 / math.log2(3) + 3 / 2) / ideal,  # b, a, c
        "b4_reranked": (2 + 3 / 2) / ideal,  # a, b, c
    }
    for name in ndcg:
        unit = report.level("unit").variants[name]
        assert unit["ndcg@10"].mean == pytest.approx(ndcg[name], abs=1e-12)
        assert unit["mrr"].mean == mrr[name]
        assert unit["recall@20"].mean == 1.0
        assert (unit["ndcg@10"].counted, unit["ndcg@10"].excluded) == (1, 1)
        assert unit["resource_diversity@10"].mean == diversity[name]
        assert unit["resource_diversity@10"].counted == 2  # needs no judgment
        assert unit["scope_violation@20"].mean == unit["stale_result@20"].mean == 0.0
        resource = report.level("resource").variants[name]
        assert resource["ndcg@10"].mean == pytest.approx(resource_ndcg[name], abs=1e-12)
        assert resource["mrr"].mean == mrr[name]
        assert resource["resource_diversity@10"].mean == 1.0
    assert (report.level("unit").judged_cases, report.level("unit").unjudged_cases) == (1, 1)
    assert report.cases == 2 and report.reviewed_cases == 0
    assert report.per_case["judged"]["unit"]["b4_reranked"]["ndcg@10"] == pytest.approx(ndcg["b4_reranked"])
    assert report.per_case["unjudged"]["resource"]["b4_reranked"]["ndcg@10"] is None
    document = plain(report)
    assert json.loads(json.dumps(document)) == document
    assert service.report(case_ids=["judged"]).cases == 1


def test_missed_evidence_attribution_covers_each_category() -> None:
    # Final order; rerank window 4; selected: a#0 (1) and b#0 (3), so the selection depth D is 3.
    candidates = [
        cand("a.md#0", final=1, rrf=2, lexical=1, rerank=1),
        cand("cut.md#0", final=2, rrf=3, lexical=2, rerank=2, code="token_budget_exhausted"),
        cand("b.md#0", final=3, rrf=4, dense=1, rerank=3),
        cand("demoted.md#0", final=4, rrf=1, lexical=3, dense=2, rerank=4, code="fragment_limit_reached"),
        cand("lost.md#0", final=5, rrf=5, dense=3, code="outside_rerank_window"),
    ]
    judgments = [
        Judgment.resource(r, rel)
        for r, rel in [("a.md", 1), ("cut.md", 2), ("demoted.md", 3), ("lost.md", 1), ("never.md", 1)]
    ]
    service = hand_service()
    add_case(service, "m", candidates, judgments, corpus_abc("a.md", "b.md", "cut.md", "demoted.md", "lost.md",
                                                              "never.md"))  # fmt: skip
    missed = service.report().missed_evidence.items
    assert [(m.resource_id, m.category, m.exclusion_code) for m in missed] == [
        ("demoted.md", DEMOTED_BY_RERANKER, None),
        ("cut.md", CUT_AT_SELECTION, "token_budget_exhausted"),
        ("lost.md", LOST_IN_FUSION, None),
        ("never.md", NEVER_RETRIEVED, None),
    ]
    demoted = missed[0]
    assert (demoted.best_rrf_rank, demoted.best_rerank_rank, demoted.best_final_rank) == (1, 4, 4)
    assert missed[3].best_final_rank is None
    assert service.report().missed_evidence.counts == {
        NEVER_RETRIEVED: 1, LOST_IN_FUSION: 1, DEMOTED_BY_RERANKER: 1, CUT_AT_SELECTION: 1,
    }  # fmt: skip
    assert [m.resource_id for m in service.show_case("m").missed] == ["demoted.md", "cut.md", "lost.md", "never.md"]


def test_a_unit_judgment_makes_its_resource_relevant_evidence_too() -> None:
    service = hand_service()
    add_case(service, "u", HAND, [Judgment.unit("a.md#1", 2)], corpus_abc("a.md", "b.md", "c.md"))
    assert service.report().missed_evidence.items == ()  # a.md has a selected unit (a#0)
    add_case(service, "v", HAND, [Judgment.unit("c.md#0", 1)], corpus_abc("a.md", "b.md", "c.md"))
    missed = service.report().missed_evidence.items
    assert [(m.case_id, m.resource_id, m.category) for m in missed] == [("v", "c.md", LOST_IN_FUSION)]


def test_scope_violation_and_stale_result_are_independent() -> None:
    candidates = [
        cand("a.md#0", final=1, rrf=1, lexical=1, rerank=1),  # in scope
        cand("b.md#0", final=2, rrf=2, lexical=2, rerank=2, resource_hash="9" * 64),  # stale: hash differs
        cand("gone.md#0", final=3, rrf=3, dense=1, rerank=3),  # scope violation: not in the corpus
        cand("gone.md#1", final=4, rrf=4, dense=2, code="outside_rerank_window", resource_hash="9" * 64),
    ]
    service = hand_service()
    add_case(service, "s", candidates, [], corpus_abc("a.md", "b.md"))
    unit = service.report().level("unit").variants
    # B4 sees all four: two are out of scope (whatever their hash), one is stale.
    assert (unit["b4_reranked"]["scope_violation@20"].mean, unit["b4_reranked"]["stale_result@20"].mean) == (
        0.5,
        0.25,
    )
    assert (unit["b1_bm25"]["scope_violation@20"].mean, unit["b1_bm25"]["stale_result@20"].mean) == (0.0, 0.5)
    assert (unit["b2_dense_vector"]["scope_violation@20"].mean, unit["b2_dense_vector"]["stale_result@20"].mean) == (
        1.0,
        0.0,
    )
    resource = service.report().level("resource").variants["b4_reranked"]
    assert (resource["scope_violation@20"].mean, resource["stale_result@20"].mean) == (1 / 3, 1 / 3)
    for level in ("unit", "resource"):
        for variant in service.report().level(level).variants.values():
            assert variant["scope_violation@20"].mean + variant["stale_result@20"].mean <= 1.0


def test_latency_percentiles_use_warm_runs_and_sum_a_variants_stages() -> None:
    service = hand_service()
    corpus = corpus_abc("a.md", "b.md", "c.md")
    stages = ["exact", "bm25", "embed_query", "dense", "fusion", "rerank", "select", "total"]
    for i, warm in enumerate([True, True, True, False]):
        latency = {s: float((i + 1) * (k + 1)) for k, s in enumerate(stages)}
        add_case(service, f"l{i}", HAND, [], corpus, latency=latency, warm=warm)
    latency = service.report().latency_ms
    assert (latency.warm_runs, latency.cold_runs) == (3, 1)
    # bm25 is stage 2: warm values 2, 4, 6; nearest-rank p50 = 4, p95 = 6 (the cold 8 is ignored).
    assert (latency.stages["bm25"].p50, latency.stages["bm25"].p95, latency.stages["bm25"].runs) == (4.0, 6.0, 3)
    # B1 = exact + bm25 = 3 (i + 1); B4 adds embed_query, dense, fusion and rerank: 21 (i + 1).
    assert (latency.variants["b1_bm25"].p50, latency.variants["b1_bm25"].p95) == (6.0, 9.0)
    assert (latency.variants["b2_dense_vector"].p50, latency.variants["b2_dense_vector"].p95) == (14.0, 21.0)
    assert (latency.variants["b4_reranked"].p50, latency.variants["b4_reranked"].p95) == (42.0, 63.0)


def test_b4_is_compared_with_each_variant_by_a_paired_bootstrap(world: World) -> None:
    rnd = random.Random(7)
    for q in range(12):
        case = world.service.create_case(world.activate(f"{TOPICS[q % 10]} {TOPICS[(q * 7) % 10]} step"))
        units = world.service.get_trace(case.case_id).candidates
        picks = rnd.sample(list(units), min(4, len(units)))
        world.service.replace_judgments(
            case.case_id, 0, [Judgment.unit(c.unit_id, rnd.randint(0, 3)) for c in picks]
            + [Judgment.resource(f"notes/n{rnd.randrange(24)}.md", 2)],
        )  # fmt: skip
    report = world.service.report()
    assert report == world.service.report()  # seeded: deterministic
    for level in ("unit", "resource"):
        judged = [m[level] for m in report.per_case.values() if m[level]["b4_reranked"]["ndcg@10"] is not None]
        comparisons = {c.other: c for c in report.level(level).comparisons}
        assert set(comparisons) == {"b1_bm25", "b2_dense_vector", "b3_hybrid_rrf"} | {
            f"fusion_{name}" for name in FUSIONS
        }
        for other, c in comparisons.items():
            a = [m["b4_reranked"]["ndcg@10"] for m in judged]
            b = [m[other]["ndcg@10"] or 0.0 for m in judged]
            assert c.cases == len(a) > 0
            assert (c.mean_diff, c.ci95_low, c.ci95_high) == tuple(paired_bootstrap(a, b, seed=0))
            assert c.p_value == paired_randomization_p(a, b, seed=0)
            assert c.ci95_low <= c.mean_diff <= c.ci95_high
    empty = hand_service().report()
    assert all(c.cases == 0 and c.mean_diff is None for c in empty.level("unit").comparisons)
    assert empty.cases == 0 and empty.level("unit").variants["b4_reranked"]["ndcg@10"].mean is None


@pytest.mark.parametrize(("unit_cases", "resource_cases"), [(9, 9), (9, 7), (9, 4), (0, 6)])
def test_comparisons_sharing_draws_across_levels_equal_their_own_tests(unit_cases: int, resource_cases: int) -> None:
    """The report draws once for every comparison with as many paired cases (both levels when they
    judge as many cases): each comparison still equals its own paired_bootstrap and p at seed 0,
    whether the levels share draws or not, and too few or no judged cases give their reason."""
    rnd = random.Random(unit_cases * 10 + resource_cases)
    names = [v.name for v in VARIANTS]
    per_case = {}
    for i in range(max(unit_cases, resource_cases)):
        per_case[f"c{i}"] = {
            level: {
                name: {"ndcg@10": None if i >= judged else round(rnd.random(), 2) if name != "fusion_rrf" else 0.5}
                for name in names
            }
            for level, judged in (("unit", unit_cases), ("resource", resource_cases))
        }
    compared = report_module._comparisons(per_case, 400)
    for level, judged in (("unit", unit_cases), ("resource", resource_cases)):
        comparisons = compared[level]
        assert [c.other for c in comparisons] == [n for n in names if n != "b4_reranked"]
        a = [per_case[f"c{i}"][level]["b4_reranked"]["ndcg@10"] for i in range(judged)]
        for c in comparisons:
            b = [per_case[f"c{i}"][level][c.other]["ndcg@10"] for i in range(judged)]
            assert c.cases == judged
            if judged == 0:
                assert c.mean_diff is None and c.interval_reason == "no judged case"
            elif judged < report_module.MIN_CASES_FOR_INTERVAL:
                assert c.ci95_low is None and c.p_value is None and c.interval_reason
                assert c.mean_diff == pytest.approx(sum(a) / judged - sum(b) / judged)
            else:
                assert (c.mean_diff, c.ci95_low, c.ci95_high) == tuple(paired_bootstrap(a, b, 400, seed=0))
                assert c.p_value == paired_randomization_p(a, b, 400, seed=0)


# -- fixtures -------------------------------------------------------------------------------------


def judged_world() -> World:
    world = make_world()
    for q in ["deploy rollback", "database locks", "logging cache tokens"]:
        case = world.service.create_case(world.activate(q))
        unit = world.service.get_trace(case.case_id).candidates[1].unit_id
        world.service.replace_judgments(case.case_id, 0, [Judgment.unit(unit, 2)])
        world.service.replace_judgments(
            case.case_id, 1, [Judgment.unit(unit, 3), Judgment.resource("notes/n3.md", 1, "background")]
        )
    return world


def empty_service() -> EvaluationService:
    return hand_service()


def test_export_import_export_is_byte_identical_and_keeps_ids() -> None:
    world = judged_world()
    for history in (False, True):
        first = fixtures.export_fixture(world.service, with_history=history, exported_at="2025-06-01T00:00:00Z")
        target = empty_service()
        result = fixtures.import_fixture(target, first)
        assert len(result.cases_added) == 3 and result.corpora_added == 1 and result.blobs_written == 24
        again = fixtures.export_fixture(target, with_history=history, exported_at="2025-06-01T00:00:00Z")
        assert again == first
        imported = target.list_cases()
        assert [c.case_id for c in imported] == [c.case_id for c in world.service.list_cases()]
        assert {(c.provenance, c.original_provenance) for c in imported} == {(FIXTURE_IMPORT, RUN)}
        assert [len(target.judgment_history(c.case_id)) for c in imported] == [2 if history else 1] * 3
        # Importing the same file again changes nothing (the service's own entry points).
        repeat = target.import_fixture(first)
        assert repeat.cases_added == () and len(repeat.cases_unchanged) == 3 and repeat.blobs_written == 0
    assert json.loads(world.service.export_fixture(with_history=True))["cases"] == json.loads(first)["cases"]
    document = json.loads(first)
    assert document["format"] == "memory-core-evaluation-set" and document["format_version"] == 1
    assert document["report"] == plain(world.service.report())
    assert fixtures.report_of(fixture.load_fixture(first)) == document["report"]


def test_fixture_validates_against_its_json_schema() -> None:
    import jsonschema

    schema = json.loads(
        (Path(__file__).resolve().parents[2] / "contracts" / "evaluation-fixture.schema.json").read_text()
    )
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    world = judged_world()
    for history in (False, True):
        validator.validate(json.loads(fixtures.export_fixture(world.service, with_history=history)))
    validator.validate(json.loads(fixtures.export_fixture(hand_service())))


def _tamper(document: dict, edit) -> bytes:  # type: ignore[no-untyped-def]
    copy = json.loads(json.dumps(document))
    edit(copy)
    return json.dumps(copy).encode()


BAD_FIXTURES = {
    "format version": (lambda d: d.update(format_version=2), InvalidFixture, "/format_version"),
    "format": (lambda d: d.update(format="other"), InvalidFixture, "/format"),
    "unknown top field": (lambda d: d.update(extra=1), InvalidFixture, "/extra"),
    "unknown case field": (lambda d: d["cases"][0].update(color="red"), InvalidFixture, "/cases/0/color"),
    "missing body": (lambda d: d["bodies"].pop(0), InvalidFixture, "/corpora/0/resources/"),
    "body hash": (
        lambda d: d["bodies"][0].update(content=d["bodies"][0]["content"] + "!"),
        FixtureHashMismatch,
        "/bodies/0/content",
    ),
    "manifest hash": (
        lambda d: d["corpora"][0]["resources"][0].update(uri="file:///x"),
        FixtureHashMismatch,
        "/corpora/0/corpus_id",
    ),  # fmt: skip
    "trace hash": (
        lambda d: d["cases"][0]["trace"]["candidates"][0].update(final_score=9.5),
        FixtureHashMismatch,
        "/cases/0/trace",
    ),  # fmt: skip
    "unit not in trace": (
        lambda d: d["cases"][0]["judgments"].append({"unit_id": "notes/n0.md#77", "relevance": 1}),
        InvalidFixture,
        "/cases/0/judgments/2/unit_id",
    ),
    "grade 4": (lambda d: d["cases"][0]["judgments"][0].update(relevance=4), InvalidFixture, "/cases/0/judgments/0"),
    "grade 2.5": (
        lambda d: d["cases"][0]["judgments"][0].update(relevance=2.5),
        InvalidFixture,
        "/cases/0/judgments/0",
    ),
    "bad base64": (
        lambda d: d["bodies"][0].update(encoding="base64", content="@@@"),
        InvalidFixture,
        "/bodies/0/content",
    ),
    "not json": (None, InvalidFixture, "/"),
}


@pytest.mark.parametrize("name", list(BAD_FIXTURES))
def test_a_bad_fixture_is_rejected_whole_naming_the_place(name: str) -> None:
    world = judged_world()
    document = json.loads(fixtures.export_fixture(world.service))
    edit, error, place = BAD_FIXTURES[name]
    data = b"{not json" if edit is None else _tamper(document, edit)
    target = empty_service()
    with pytest.raises(error) as raised:
        fixtures.import_fixture(target, data)
    assert raised.value.place.startswith(place), raised.value.place
    assert target.list_cases() == [] and list(target.blobs.digests()) == []


def test_a_different_record_under_an_existing_id_is_a_conflict() -> None:
    world = judged_world()
    data = fixtures.export_fixture(world.service)
    target = empty_service()
    fixtures.import_fixture(target, data)
    first = target.list_cases()[0]
    target.replace_judgments(first.case_id, 2, [Judgment.resource("notes/n1.md", 1)])
    before = fixtures.export_fixture(target, exported_at="x")
    with pytest.raises(EvaluationImportConflict) as conflict:
        fixtures.import_fixture(target, data)
    assert conflict.value.details["case_id"] == first.case_id
    assert fixtures.export_fixture(target, exported_at="x") == before


# -- BEIR -----------------------------------------------------------------------------------------


def write_beir(root: Path, *, qrels: str | None = None, queries: list[dict] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "qrels").mkdir(exist_ok=True)
    docs = [{"_id": str(i), "title": f"Note about {TOPICS[i % 10]}", "text": body(i).decode()} for i in range(15)]
    docs.append({"_id": "untitled", "title": "", "text": "A note without a title about deploy."})
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = queries or [
        {"_id": "q1", "text": "deploy rollback"},
        {"_id": "q2", "text": "database locks"},
        {"_id": "q3", "text": "logging cache"},
        {"_id": "q4", "text": "oncall review"},
        {"_id": "unjudged", "text": "never judged"},
    ]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    qrels = qrels or (
        "query-id\tcorpus-id\tscore\nq1\t0\t3\nq1\t1\t1\nq2\t2\t2\nq2\t3\t3\nq3\t6\t2\nq3\tuntitled\t1\nq4\t4\t0\n"
    )
    (root / "qrels" / "test.tsv").write_text(qrels)
    return root


def memory_workspace(engine) -> EngineWorkspace:  # type: ignore[no-untyped-def]
    def write(project_id: str, files):  # type: ignore[no-untyped-def]
        path = f"/workspaces/{project_id}"
        engine.indexer.scanner.sources[path] = dict(files)
        return Source(path)

    return EngineWorkspace(engine, write)


def test_beir_import_makes_one_case_per_query_with_resource_judgments(tmp_path: Path) -> None:
    world = make_world()
    folder = write_beir(tmp_path / "beir")
    result = import_beir(world.service, memory_workspace(world.engine), folder, "tiny")
    assert (result.created, result.resumed, result.dropped_judgments) == (4, 0, 0)
    assert result.case_ids == tuple(beir_case_id("tiny", q) for q in ["q1", "q2", "q3", "q4"])
    case = world.service.get_case("beir-tiny-q1")
    assert (case.provenance, case.query, case.project_id, case.judgment_version) == (BEIR_IMPORT, "deploy rollback",
                                                                                      "tiny", 1)  # fmt: skip
    assert not case.reviewed and world.history.get_run(case.source_run_id).summary.pinned
    assert world.service.judgments("beir-tiny-q1").judgments == (Judgment.resource("0.md", 3),
                                                                 Judgment.resource("1.md", 1))  # fmt: skip
    corpus = world.service.get_corpus(case.corpus_id)
    assert len(corpus.resources) == 16
    bodies = {e.resource_id: world.blobs.get(e.resource_hash) for e in corpus.resources}
    assert bodies["0.md"] == f"# Note about deploy\n\n{body(0).decode()}".encode()
    assert bodies["untitled.md"] == b"A note without a title about deploy."
    assert len({c.corpus_id for c in world.service.list_cases("tiny")}) == 1
    # q4 judges nothing relevant: excluded from the means and counted.
    assert (result.report.level("resource").judged_cases, result.report.level("resource").unjudged_cases) == (3, 1)
    assert wire.to_json(result)["report"]["cases"] == 4
    json.dumps(wire.to_json(result))


def test_beir_import_resumes_after_an_interruption(tmp_path: Path) -> None:
    world = make_world()
    folder = write_beir(tmp_path / "beir")
    workspace = memory_workspace(world.engine)

    def interrupt(stage: str, done: int, total: int) -> None:
        if stage == "cases" and done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_beir(world.service, workspace, folder, "tiny", progress=interrupt)
    assert [c.case_id for c in world.service.list_cases()] == ["beir-tiny-q1", "beir-tiny-q2"]
    # A person changes q2's judgments before the import is resumed, now as reviewed qrels: the
    # resumed q1 is marked reviewed with the new cases (the trial's `--reviewed` on a second
    # import left every case unreviewed, silently), q2 is left as the person made it, and counted.
    q2 = world.service.get_case("beir-tiny-q2")
    world.service.replace_judgments(q2.case_id, q2.judgment_version, [Judgment.resource("5.md", 1)])
    result = import_beir(world.service, workspace, folder, "tiny", reviewed=True)
    assert (result.created, result.resumed, result.marked_reviewed, result.left_unreviewed) == (2, 2, 1, 1)
    assert len(world.service.list_cases("tiny")) == 4
    assert world.service.get_case("beir-tiny-q4").reviewed and world.service.get_case("beir-tiny-q1").reviewed
    assert not world.service.get_case("beir-tiny-q2").reviewed
    assert world.service.judgments("beir-tiny-q2").judgments == (Judgment.resource("5.md", 1),)
    again = import_beir(world.service, workspace, folder, "tiny", reviewed=True)
    assert (again.created, again.resumed, again.marked_reviewed, again.left_unreviewed) == (0, 4, 0, 1)


def test_a_resumed_case_whose_qrels_changed_since_is_not_marked_reviewed(tmp_path: Path) -> None:
    # The case id leaves out the split and the qrels' copy: only judgments this import would make
    # are marked reviewed, never an earlier copy's.
    world = make_world()
    folder = write_beir(tmp_path / "beir")
    workspace = memory_workspace(world.engine)
    import_beir(world.service, workspace, folder, "tiny")
    qrels = folder / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text().replace("q1\t1\t1", "q1\t1\t2"))  # q1's second grade corrected
    result = import_beir(world.service, workspace, folder, "tiny", reviewed=True)
    assert (result.resumed, result.marked_reviewed, result.left_unreviewed) == (4, 3, 1)
    assert not world.service.get_case("beir-tiny-q1").reviewed and world.service.get_case("beir-tiny-q2").reviewed


def test_a_judged_query_longer_than_an_activation_takes_makes_no_case_and_is_named(tmp_path: Path) -> None:
    # CISI's query 90 is 2,023 characters: the import left the whole collection out.
    world = make_world()
    queries = [{"_id": "q1", "text": "deploy rollback"}, {"_id": "long", "text": "deploy " * 300},
               {"_id": "q2", "text": "database locks"}, {"_id": "unjudged-long", "text": "x" * 2_001}]  # fmt: skip
    qrels = "query-id\tcorpus-id\tscore\nq1\t0\t3\nlong\t1\t2\nq2\t2\t2\n"
    folder = write_beir(tmp_path / "beir", queries=queries, qrels=qrels)
    result = import_beir(world.service, memory_workspace(world.engine), folder, "tiny")
    assert result.case_ids == ("beir-tiny-q1", "beir-tiny-q2") and result.too_long_queries == ("long",)
    assert [c.case_id for c in world.service.list_cases("tiny")] == ["beir-tiny-q1", "beir-tiny-q2"]
    assert wire.to_json(result)["too_long_queries"] == ["long"]
    (folder / "qrels" / "test.tsv").write_text(qrels + "long\t999\t1\n")  # its rows are still checked
    with pytest.raises(InvalidBeirCollection, match="unknown corpus id"):
        BeirCollection.read(folder)
    (folder / "qrels" / "test.tsv").write_text(qrels + "long\t1\t1\n")
    with pytest.raises(InvalidBeirCollection, match="duplicate judgment of '1' for query 'long'"):
        BeirCollection.read(folder)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nlong\t1\t2\n")  # nothing else judged
    with pytest.raises(InvalidBeirCollection, match="no judged query an activation takes"):
        import_beir(world.service, memory_workspace(world.engine), folder, "none-left")
    assert "none-left" not in [p.project.project_id for p in world.engine.list_projects()]  # type: ignore[attr-defined]


BAD_BEIR = {
    "malformed line": ("corpus.jsonl", '{"_id": "1", "text": "ok"}\n{broken\n', "corpus.jsonl:2"),
    "missing text": ("queries.jsonl", '{"_id": "q1"}\n', "queries.jsonl:1"),
    "unknown query id": ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq9\t1\t1\n", "test.tsv:2"),
    "unknown corpus id": ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\t999\t1\n", "test.tsv:2"),
    "grade out of range": ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\t1\t7\n", "test.tsv:2"),
    "bad header": ("qrels/test.tsv", "q\td\ts\nq1\t1\t1\n", "test.tsv:1"),
    "duplicate doc": ("corpus.jsonl", '{"_id": "1", "text": "a"}\n{"_id": "1", "text": "b"}\n', "corpus.jsonl:2"),
    "path in doc id": ("corpus.jsonl", '{"_id": "../x", "text": "a"}\n', "corpus.jsonl:1"),
}


@pytest.mark.parametrize("name", list(BAD_BEIR))
def test_a_bad_beir_folder_is_rejected_naming_file_and_line(tmp_path: Path, name: str) -> None:
    world = make_world()
    folder = write_beir(tmp_path / "beir")
    relative, content, place = BAD_BEIR[name]
    (folder / relative).write_text(content)
    with pytest.raises(InvalidBeirCollection) as bad:
        import_beir(world.service, memory_workspace(world.engine), folder, "tiny")
    assert bad.value.place.endswith(place) and bad.value.code == "invalid_beir_collection"
    assert [p.project.project_id for p in world.engine.list_projects()] == ["notes"]  # type: ignore[attr-defined]
    assert world.service.list_cases() == []
    with pytest.raises(InvalidBeirCollection):
        BeirCollection.read(tmp_path / "missing")


# -- replay ---------------------------------------------------------------------------------------


class Reversed:
    """A deliberately worse pipeline: the final order reversed."""

    def __init__(self, inner: EngineWorkspace) -> None:
        self.inner = inner

    def prepare(self, project_id, files, progress=None):  # type: ignore[no-untyped-def]
        return self.inner.prepare(project_id, files)

    def activate(self, project_id: str, query: str) -> str:
        return self.inner.activate(project_id, query)

    def rank(self, project_id: str, query: str, ranked_as: str | None = None) -> list[RankedItem]:
        return list(reversed(self.inner.rank(project_id, query)))


def test_replay_passes_an_unchanged_pipeline_and_fails_a_worse_one() -> None:
    world = judged_world()
    for case in world.service.list_cases():
        world.service.mark_reviewed(case.case_id, case.judgment_version)
    loaded = fixture.load_fixture(fixtures.export_fixture(world.service))
    scratch = bootstrap_in_memory()
    same = replay(loaded, memory_workspace(scratch), max_drop=0.0, include_unreviewed=False)
    assert same.passed and same.compared == 3 and same.mean_drop == pytest.approx(0.0, abs=1e-12)
    assert [p.project.project_id for p in scratch.list_projects()] == [
        f"replay-{loaded.records[0].case.corpus_id[:12]}"
    ]
    for level in (MetricLevel.UNIT, MetricLevel.RESOURCE):
        assert replay(loaded, memory_workspace(scratch), level=level).passed
    worse = replay(loaded, Reversed(memory_workspace(scratch)), max_drop=0.05)
    assert not worse.passed and worse.mean_drop > 0.05 and worse.failed_cases
    document = wire.to_json(worse)
    assert document["variant"] == "current" and document["baseline_variant"] == "b4_reranked"
    # A baseline report instead of the frozen traces gives the same baselines.
    baseline = baseline_from_report(json.loads(fixtures.export_fixture(world.service))["report"])
    assert replay(loaded, memory_workspace(scratch), baseline=baseline).cases == same.cases
    with pytest.raises(InvalidRequest):
        replay(loaded, memory_workspace(scratch), max_drop=1.5)
    with pytest.raises(InvalidRequest):
        baseline_from_report({"per_case": {"x": {}}})


def test_replay_uses_only_reviewed_cases_unless_asked() -> None:
    world = judged_world()
    loaded = fixture.load_fixture(fixtures.export_fixture(world.service))
    with pytest.raises(EvaluationSetEmpty):
        replay(loaded, memory_workspace(bootstrap_in_memory()))
    assert replay(loaded, memory_workspace(bootstrap_in_memory()), include_unreviewed=True).compared == 3
    live = fixtures.evaluation_set(world.service, project_id="notes")
    assert live.records == loaded.records and live.corpora == loaded.corpora


# -- parity of the report with trec_eval ----------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), data=st.data())
def test_report_values_equal_trec_eval_on_each_variants_run(seed: int, data: st.DataObject) -> None:
    """Unit level with unit judgments only, and resource level, equal pytrec_eval's recall_20,
    ndcg_cut_10 and recip_rank on the run each variant ranks (ranks are distinct: no ties)."""
    import pytrec_eval

    candidates = [CandidateRecord.from_candidate(c) for c in ranked(seed, data.draw(st.integers(1, 40)))]
    units = sorted({c.unit_id for c in candidates} | {"docs/r9.md#0"})  # one judged unit never retrieved
    resources = sorted({c.resource_id for c in candidates} | {"docs/r9.md"})
    grades = st.integers(0, 3)
    unit_judgments = data.draw(st.dictionaries(st.sampled_from(units), grades, max_size=8))
    resource_judgments = data.draw(st.dictionaries(st.sampled_from(resources), grades, max_size=5))
    corpus = Corpus.of(
        ManifestEntry(i, r, Layer.PROJECT, f"file:///{r}", "0" * 64, 1, "text/markdown")
        for i, r in enumerate(resources)
    )
    service = hand_service()
    known = {c.unit_id for c in candidates}
    add_case(service, "u", candidates, [Judgment.unit(u, g) for u, g in unit_judgments.items() if u in known], corpus)
    add_case(service, "r", candidates, [Judgment.resource(r, g) for r, g in resource_judgments.items()], corpus)
    report = service.report()
    measures = {"recall_20": "recall@20", "ndcg_cut_10": "ndcg@10", "recip_rank": "mrr"}
    for case_id, level, qrels in (
        ("u", "unit", {u: g for u, g in unit_judgments.items() if u in known}),
        ("r", "resource", resource_judgments),
    ):
        if not any(g >= 1 for g in qrels.values()):
            assert report.per_case[case_id][level]["b4_reranked"]["ndcg@10"] is None
            continue
        evaluator = pytrec_eval.RelevanceEvaluator({"q": dict(qrels)}, {"recall.20", "ndcg_cut.10", "recip_rank"})
        for variant in VARIANTS:
            ranking = variant_ranking(candidates, variant)
            ids = (
                [i.unit_id for i in ranking] if level == "unit" else [i.resource_id for i in resource_ranking(ranking)]
            )
            trec = evaluator.evaluate({"q": {d: float(len(ids) - k) for k, d in enumerate(ids)}})["q"] if ids else {}
            for trec_name, ours in measures.items():
                expected = trec.get(trec_name, 0.0)
                assert report.per_case[case_id][level][variant.name][ours] == pytest.approx(expected, abs=1e-9)


def test_each_registered_fusion_is_a_variant_ranking_the_recorded_window(world: World) -> None:
    """The engine ranks with the default fusion, so its variant gives B4's numbers back on every
    case, and ``rrf`` keeps the fused order (B3's); the others rank the same window their own way."""
    for q in range(8):
        case = world.service.create_case(world.activate(f"{TOPICS[q % 10]} {TOPICS[(q * 3) % 10]} step"))
        units = world.service.get_trace(case.case_id).candidates
        world.service.replace_judgments(
            case.case_id, 0, [Judgment.unit(c.unit_id, (i * 7 + q) % 4) for i, c in enumerate(units[:6])]
        )
    report = world.service.report()
    for level in ("unit", "resource"):
        assert set(report.level(level).variants) >= {f"fusion_{name}" for name in FUSIONS}
        for metrics in report.per_case.values():
            assert metrics[level][f"fusion_{DEFAULT_FUSION}"] == metrics[level]["b4_reranked"]
            assert metrics[level]["fusion_rrf"] == metrics[level]["b3_hybrid_rrf"]
    trace = world.service.get_trace(world.service.list_cases()[0].case_id)
    window = [c.unit_id for c in sorted(trace.candidates, key=lambda c: c.rrf_rank) if c.rerank_rank is not None]
    minmax = [i.unit_id for i in variant_ranking(trace.candidates, FUSION_VARIANTS[2])]
    assert FUSION_VARIANTS[2].fusion == "convex_minmax" and sorted(minmax[: len(window)]) == sorted(window)


def test_too_few_cases_give_no_interval_and_say_why(world: World) -> None:
    """One judged case used to print a zero-width 95% interval and p 1.000 (issue 19)."""
    from memory_core.evaluation.report import MIN_CASES_FOR_INTERVAL

    def judge(q: int) -> None:
        case = world.service.create_case(world.activate(f"{TOPICS[q % 10]} step"))
        unit = world.service.get_trace(case.case_id).candidates[0].unit_id
        world.service.replace_judgments(case.case_id, 0, [Judgment.unit(unit, 2)])

    for q in range(MIN_CASES_FOR_INTERVAL):
        if q == 1:  # one paired case: the mean difference, and no interval
            for c in world.service.report().level("unit").comparisons:
                assert c.cases == 1 and c.mean_diff is not None
                assert (c.ci95_low, c.ci95_high, c.p_value) == (None, None, None)
                assert c.interval_reason == (
                    f"n=1: too few paired cases for an interval or p-value (needs {MIN_CASES_FOR_INTERVAL})"
                )
                assert wire.to_json(c)["interval_reason"] == c.interval_reason
        judge(q)
    for c in world.service.report().level("unit").comparisons:  # enough: the numbers, no reason
        assert c.cases == MIN_CASES_FOR_INTERVAL and c.interval_reason is None
        assert c.ci95_low is not None and c.p_value is not None
    assert 2 ** (1 - MIN_CASES_FOR_INTERVAL) < 0.05 <= 2 ** (2 - MIN_CASES_FOR_INTERVAL)  # why that minimum
    empty = hand_service().report().level("unit").comparisons
    assert all(c.interval_reason == "no judged case" for c in empty)
