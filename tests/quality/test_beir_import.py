"""``import-beir`` on Cranfield through the real engine (Lucene, MiniLM, usearch, SQLite): 225 cases,
a B1-B4 report whose resource-level figures match the data's README and trec_eval on the same
runs, and a fixture that round-trips between homes. Figures measured here go to the report of
this module's single test run (printed with ``-s``)."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from memory_core.adapters.files.blob_store import FileBlobStore
from memory_core.adapters.sqlite import open_database
from memory_core.adapters.sqlite.evaluation import SqliteEvaluationStore
from memory_core.adapters.sqlite.runs import SqliteRunStore
from memory_core.domain.canonical import plain
from memory_core.entrypoints.bootstrap import utc_now
from memory_core.evaluation.metrics import resource_ranking
from memory_core.evaluation.report import VARIANTS, variant_ranking
from memory_core.services import fixtures
from memory_core.services.beir_import import import_beir
from memory_core.services.evaluation import EvaluationService
from tests.conftest import CRANFIELD
from tests.quality.beir_workspace import evaluation_over

pytestmark = pytest.mark.slow

PROJECT = "cranfield-beir"
# The data README's figures; its BM25 (0.502) is Anserini's k1 0.9, b 0.4, so B1 is held to what
# the default k1 1.2, b 0.75 measured instead (docs/ranking.md, "BM25's k1 and b").
README = {"b1_bm25": 0.523, "b2_dense_vector": 0.505, "b3_hybrid_rrf": 0.555}


@attrs.frozen
class Imported:
    service: EvaluationService
    result: object
    seconds: dict[str, float]


@pytest.fixture(scope="module")
def imported(cranfield_home, cranfield_engine) -> Iterator[Imported]:  # type: ignore[no-untyped-def]
    service, workspace, conn = evaluation_over(cranfield_home[0], cranfield_engine, "beir-sources")
    started = time.perf_counter()
    result = import_beir(service, workspace, CRANFIELD, PROJECT)
    seconds = {"import_beir": time.perf_counter() - started}
    yield Imported(service, result, seconds)
    conn.close()


def qrels() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    with (CRANFIELD / "qrels" / "test.tsv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            out.setdefault(f"beir-{PROJECT}-{row['query-id']}", {})[f"{row['corpus-id']}.md"] = int(row["score"])
    return out


def test_cranfield_imports_as_225_cases_with_the_reference_quality(imported: Imported) -> None:
    import pytrec_eval

    service, result = imported.service, imported.result
    assert (result.created + result.resumed, result.dropped_judgments) == (225, 0)  # type: ignore[attr-defined]
    cases = service.list_cases(PROJECT)
    assert len(cases) == 225 and len({c.corpus_id for c in cases}) == 1
    assert len(service.get_corpus(cases[0].corpus_id).resources) == 1400

    started = time.perf_counter()
    report = service.report(PROJECT)
    imported.seconds["report"] = time.perf_counter() - started
    level = report.level("resource")
    means = {v: level.variants[v]["ndcg@10"].mean for v in (x.name for x in VARIANTS)}
    assert level.judged_cases == 225 and level.unjudged_cases == 0
    for variant, reference in README.items():
        assert abs(means[variant] - reference) <= 0.02, (variant, means[variant])
    assert means["b4_reranked"] >= means["b3_hybrid_rrf"]

    # trec_eval on the same runs: each case's B3 (and every variant's) document ranking.
    evaluator = pytrec_eval.RelevanceEvaluator(qrels(), {"ndcg_cut.10", "recall.20", "recip_rank"})
    for variant in VARIANTS:
        run = {}
        for case in cases:
            ranking = resource_ranking(variant_ranking(service.get_trace(case.case_id).candidates, variant))
            run[case.case_id] = {item.resource_id: float(len(ranking) - i) for i, item in enumerate(ranking)}
        trec = evaluator.evaluate(run)
        for case in cases:
            ours = report.per_case[case.case_id]["resource"][variant.name]
            assert ours["ndcg@10"] == pytest.approx(trec[case.case_id]["ndcg_cut_10"], abs=1e-9)
            assert ours["recall@20"] == pytest.approx(trec[case.case_id]["recall_20"], abs=1e-9)
            assert ours["mrr"] == pytest.approx(trec[case.case_id]["recip_rank"], abs=1e-9)
    b3 = [report.per_case[c.case_id]["resource"]["b3_hybrid_rrf"]["ndcg@10"] for c in cases]
    assert sum(b3) / len(b3) == pytest.approx(means["b3_hybrid_rrf"], abs=1e-12)
    counts = report.missed_evidence.counts
    assert sum(counts.values()) == len(report.missed_evidence.items) > 0
    print("\nresource nDCG@10", json.dumps(means), "missed", json.dumps(counts))
    print("unit nDCG@10", json.dumps({v: report.level("unit").variants[v]["ndcg@10"].mean for v in means}))
    print("latency", json.dumps(plain(report.latency_ms)["variants"]))


def test_the_cranfield_set_round_trips_through_a_fixture(imported: Imported, tmp_path: Path) -> None:
    service = imported.service
    started = time.perf_counter()
    first = fixtures.export_fixture(service, project_id=PROJECT, exported_at="2025-01-01T00:00:00Z")
    imported.seconds["export"] = time.perf_counter() - started

    conn = open_database(tmp_path / "local.db")
    blobs = FileBlobStore(tmp_path / "blobs")
    other = EvaluationService(SqliteEvaluationStore(conn), SqliteRunStore(conn, blobs), blobs, now=utc_now)
    started = time.perf_counter()
    result = fixtures.import_fixture(other, first)
    imported.seconds["import"] = time.perf_counter() - started
    distinct = len(service.get_corpus(service.list_cases(PROJECT)[0].corpus_id).digests())
    assert len(result.cases_added) == 225 and result.blobs_written == distinct >= 1399  # two bodies are twins
    assert fixtures.export_fixture(other, project_id=PROJECT, exported_at="2025-01-01T00:00:00Z") == first
    conn.close()
    print("\nfixture bytes", len(first), "seconds", json.dumps({k: round(v, 2) for k, v in imported.seconds.items()}))
