"""The daemon's warm-up: the embedding model loaded and the JVM's Lucene search path compiled
by searches of its own (``open_generations.warm_lexical``) before the first query, with the
real Lucene index; it keeps nothing open in the engine and records no Run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import memory_core
from memory_core.domain.model import Source
from memory_core.services.open_generations import warm_lexical
from tests.daemon.test_server import Daemon, memory_folder
from tests.daemon.test_watcher import wait_for


class Counting:
    """The real Lucene factory, counting the searches its searchers run and their closes."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory
        self.searched: list[tuple[str, int]] = []
        self.closed = 0

    def open(self, directory: Path) -> Any:
        searcher = self.factory.open(directory)
        outer = self

        class Spy:
            def search(self, query: str, depth: int) -> Any:
                hits = searcher.search(query, depth)
                outer.searched.append((query, len(hits)))
                return hits

            def close(self) -> None:
                outer.closed += 1
                searcher.close()

        return Spy()


def test_warm_lexical_searches_the_generation_and_keeps_nothing_open(tmp_path: Path) -> None:
    with memory_core.open(tmp_path / "home") as engine:
        engine.add_project("notes", [Source(str(memory_folder(tmp_path / "memory")))])
        engine.index("notes")
        generation = engine.show_project("notes").generation
        assert generation is not None
        lexical = Counting(engine.lexical)
        ran = warm_lexical(generation, engine.generations, lexical, searches=7, depth=10,
                           deadline=time.monotonic() + 60)  # fmt: skip
        searched = lexical.searched
        assert ran == 7 == len(searched)
        # The units' own first words: every search finds its unit (real BM25 hits, not empty).
        assert all(hits > 0 for _, hits in searched), searched
        assert any(query.startswith("Deploy runbook") or "helm" in query for query, _ in searched), searched
        # A deadline already past runs none; nothing stays open in the engine, no Run is recorded.
        assert warm_lexical(generation, engine.generations, lexical, searches=7, depth=10,
                            deadline=time.monotonic() - 1) == 0  # fmt: skip
        assert (len(lexical.searched), lexical.closed) == (7, 1)  # the first searcher closed, no second opened
        assert engine.warm_revision("notes") is None
        assert engine.list_runs().runs == ()


def test_a_daemon_started_over_an_indexed_home_warms_lucene_before_the_first_query(tmp_path: Path) -> None:
    with memory_core.open(tmp_path / "home") as engine:
        engine.add_project("notes", [Source(str(memory_folder(tmp_path / "memory")))])
        engine.index("notes")
    daemon = Daemon(tmp_path / "home", tmp_path / "daemon.log", "--no-ui")
    try:
        warm = wait_for("the warm-up", lambda: next(
            (r for r in daemon.log_records() if r.get("message") == "warm"), None))  # fmt: skip
        assert warm["searches"] > 0 and warm["ms"] >= 0, warm
        assert not [r for r in daemon.log_records() if "warm-up" in str(r.get("message"))], daemon.log_records()
        first = daemon.client.activate_memory("notes", "how do we roll back?")
        assert first.fragments[0].resource_id == "runbooks/deploy.md"
        # The warm-up opened nothing the engine keeps: the first activation opened the generation.
        detail = daemon.client.get_retrieval_run(first.run_id)
        assert detail.summary.warm is False
        assert [r.run_id for r in daemon.client.list_retrieval_runs().runs] == [first.run_id]
    finally:
        assert daemon.stop() == 0
