"""Quality and speed of the Lucene BM25 adapter on Cranfield, against the data set's reference figures.

Reference (``data/cranfield/README.md``): Pyserini BM25, k1 0.9, b 0.4, title + text,
all 225 queries, trec_eval conventions: nDCG@10 0.502, Recall@100 0.741.
Run with ``-s`` to see the measured figures.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Iterator

import pytest
import pytrec_eval

from benchmarks.cranfield_quality import SUFFIX, Cranfield
from memory_core.ports import LexicalSearcher

pytestmark = pytest.mark.slow

DEPTH = 100


@functools.cache
def _cranfield() -> Cranfield:
    return Cranfield.load()


def _doc_id(unit_id: str) -> str:
    return unit_id.removesuffix(f"{SUFFIX}#0")


@pytest.fixture(scope="module")
def cranfield(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LexicalSearcher, float]]:
    from memory_core.adapters.search.jvm import ensure_jvm
    from memory_core.adapters.search.lucene_index import LuceneIndexFactory

    ensure_jvm()  # JVM start-up is not part of the build figure
    units = _cranfield().whole_document_units()
    assert len(units) == 1400
    from benchmarks.cranfield_quality import REFERENCE_B, REFERENCE_K1

    factory = LuceneIndexFactory(k1=REFERENCE_K1, b=REFERENCE_B)  # the reference run's, not the default
    directory = tmp_path_factory.mktemp("cranfield") / "lexical"
    started = time.perf_counter()
    factory.build(directory, units)
    build_seconds = time.perf_counter() - started
    searcher = factory.open(directory)
    yield searcher, build_seconds
    searcher.close()


def test_bm25_matches_the_reference_figures(cranfield: tuple[LexicalSearcher, float]) -> None:
    searcher, build_seconds = cranfield
    queries = _cranfield().queries
    assert len(queries) == 225
    for text in list(queries.values())[:20]:  # warm the JIT before timing
        searcher.search(text, DEPTH)

    run: dict[str, dict[str, float]] = {}
    latencies = []
    for qid, text in queries.items():
        started = time.perf_counter()
        hits = searcher.search(text, DEPTH)
        latencies.append(time.perf_counter() - started)
        assert len(hits) == DEPTH
        run[qid] = {_doc_id(uid): score for uid, score in hits}

    evaluator = pytrec_eval.RelevanceEvaluator(_cranfield().qrels, {"ndcg_cut.10", "recall.100", "recip_rank"})
    per_query = evaluator.evaluate(run)
    ndcg10 = statistics.fmean(m["ndcg_cut_10"] for m in per_query.values())
    recall100 = statistics.fmean(m["recall_100"] for m in per_query.values())
    mrr = statistics.fmean(m["recip_rank"] for m in per_query.values())
    latencies.sort()
    p50, p95 = (latencies[math.ceil(p / 100 * len(latencies)) - 1] for p in (50, 95))  # nearest rank
    print(
        f"\nCranfield BM25 (Lucene): {len(per_query)} queries, nDCG@10 {ndcg10:.4f}, "
        f"Recall@100 {recall100:.4f}, MRR {mrr:.4f}; build {build_seconds * 1000:.0f} ms for 1400 units; "
        f"search depth {DEPTH}: p50 {p50 * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms"
    )
    assert len(per_query) == 225
    assert ndcg10 == pytest.approx(0.502, abs=0.01)
    assert recall100 == pytest.approx(0.741, abs=0.01)


def test_every_unit_is_searchable_by_its_own_title(cranfield: tuple[LexicalSearcher, float]) -> None:
    searcher, _ = cranfield
    units = _cranfield().whole_document_units()[:50]
    found = sum(any(uid == u.unit_id for uid, _ in searcher.search(u.heading_path[0], 10)) for u in units)
    assert found >= 45  # a few titles are near-duplicates of others
