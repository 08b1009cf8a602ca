"""A re-index asks the embedding cache only for the hashes its last build did not hold; the
vectors it publishes are the ones a fresh indexer (asking the cache for everything) publishes."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from memory_core.adapters.in_memory.storage import InMemoryScanner
from memory_core.adapters.in_memory.vectors import InMemoryEmbeddingCache
from memory_core.domain.model import Source, Vector
from memory_core.entrypoints.bootstrap import bootstrap_in_memory

DOCS = {
    "a.md": b"# A\n\nAlpha text about deploys.\n\n## More\n\nA second section.\n",
    "b.md": b"# B\n\nBravo text about rollbacks.\n",
}


class CountingCache(InMemoryEmbeddingCache):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[set[str]] = []

    def get_many(self, model_revision: str, unit_hashes: Iterable[str]) -> dict[str, Vector]:
        hashes = set(unit_hashes)
        self.asked.append(hashes)
        return super().get_many(model_revision, hashes)


def _engine(files: dict[str, bytes], cache: CountingCache) -> Any:
    engine = bootstrap_in_memory(scanner=InMemoryScanner({"/src": dict(files)}), embedding_cache=cache)
    engine.add_project("p", [Source("/src")])
    return engine


def _hashes(engine: Any) -> set[str]:
    current = engine.catalog.current_generation("p")
    return {u.unit_hash for u in engine.generations.load_units(Path(current.directory))}


def test_a_reindex_asks_the_cache_only_for_new_hashes_and_serves_the_same() -> None:
    cache = CountingCache()
    engine = _engine(DOCS, cache)
    engine.index("p")
    before = _hashes(engine)
    cache.asked.clear()
    engine.indexer.scanner.write("/src", "b.md", b"# B\n\nBravo text, edited.\n")
    report = engine.index("p")
    new = _hashes(engine) - before
    assert new and cache.asked == [new]
    assert report.embedded == len(new)

    fresh_cache = CountingCache()
    fresh = _engine({**DOCS, "b.md": b"# B\n\nBravo text, edited.\n"}, fresh_cache)
    fresh.index("p")
    assert fresh_cache.asked == [_hashes(fresh)]  # a fresh indexer asks for everything
    for query in ("deploys", "bravo edited", "second section"):
        got = [(f.unit_id, f.final_score) for f in engine.activate("p", query).response.fragments]
        assert got == [(f.unit_id, f.final_score) for f in fresh.activate("p", query).response.fragments]


def test_an_unchanged_set_of_units_never_asks_the_cache() -> None:
    cache = CountingCache()
    engine = _engine(DOCS, cache)
    engine.index("p")
    cache.asked.clear()
    engine.indexer.scanner.write("/src", "c.md", b"# B\n\nBravo text about rollbacks.\n")  # b.md's unit again
    assert engine.index("p").status == "built"
    assert cache.asked == []  # the new file's one unit has a hash the last build held
