"""The query is embedded on the activation's helper thread while BM25 runs (issue 32 item 3): the
answer and the Run are those of embedding it inline, on the real Lucene index."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from memory_core.adapters.in_memory.vectors import HashingEmbedder
from memory_core.domain.model import Source
from memory_core.services import activation

from ..reliability.harness import PROJECT, QUERIES, engine_for, write_memory


class ThreadNoting(HashingEmbedder):
    """The cheap embedder, noting which thread embedded each query."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def embed_query(self, text: str) -> Any:
        self.threads.append(threading.get_ident())
        return super().embed_query(text)


def _inline(work: Any, arg: str) -> Any:
    timed = activation._Timed(work, arg)
    timed()
    return timed


def test_the_query_is_embedded_beside_bm25_and_the_answer_is_the_inline_one(tmp_path: Path) -> None:
    embedder = ThreadNoting()
    engine = engine_for(tmp_path / "home", lucene=True, embedder=embedder)
    try:
        engine.add_project(PROJECT, [Source(str(write_memory(tmp_path / "memory", 0)))])
        engine.index(PROJECT)
        for query in QUERIES:
            beside = engine.activate(PROJECT, query)
            assert embedder.threads[-1] != threading.get_ident()  # embedded on the helper thread
            helper: Any = activation._BESIDE
            helper.run = _inline
            try:
                inline = engine.activate(PROJECT, query)
            finally:
                helper.__dict__.pop("run")
            assert embedder.threads[-1] == threading.get_ident()
            ranked = [(c.unit.unit_id, c.final_rank, c.final_score, c.dense_similarity) for c in beside.candidates]
            assert ranked == [
                (c.unit.unit_id, c.final_rank, c.final_score, c.dense_similarity) for c in inline.candidates
            ]
            assert beside.response.fragments == inline.response.fragments
            assert {"exact", "bm25", "embed_query", "dense", "total"} <= set(beside.response.latency_ms)
            assert beside.response.run_id is not None
            detail = engine.get_run(beside.response.run_id)  # reads its own writes
            assert detail.summary.status == "succeeded"
            assert detail.latency_ms["embed_query"] == beside.response.latency_ms["embed_query"]
    finally:
        engine.close()
