"""A re-index chunks only the resources that changed; the generation is the one a fresh build makes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory_core.adapters.in_memory.storage import InMemoryScanner
from memory_core.domain.model import Source
from memory_core.entrypoints.bootstrap import bootstrap_in_memory
from memory_core.retrieval.chunking import MarkdownChunker

DOCS = {
    "a.md": b"# A\n\nAlpha text about deploys.\n\n## More\n\nA second section.\n",
    "b.md": b"# B\n\nBravo text about rollbacks.\n",
    "c.txt": b"Charlie plain text.\n\nIts second paragraph.\n",
}


class CountingChunker:
    """The real chunker, counting the resources it is asked to chunk."""

    def __init__(self, inner: MarkdownChunker) -> None:
        self.inner = inner
        self.revision = inner.revision
        self.parser_revision = inner.parser_revision
        self.calls: list[str] = []

    def chunk(self, resource_id: str, resource_hash: str, text: str, media_type: str) -> Any:
        self.calls.append(resource_id)
        return self.inner.chunk(resource_id, resource_hash, text, media_type)


def engine_with(scanner: InMemoryScanner, chunker: CountingChunker) -> Any:
    engine = bootstrap_in_memory(scanner=scanner, chunker=chunker)
    engine.add_project("p", [Source("/src")])
    return engine


def test_a_reindex_chunks_only_what_changed_and_builds_the_same_units() -> None:
    from memory_core.adapters.in_memory.vectors import WhitespaceTokenCounter

    scanner = InMemoryScanner({"/src": dict(DOCS)})
    chunker = CountingChunker(MarkdownChunker(WhitespaceTokenCounter(), max_tokens=64))
    engine = engine_with(scanner, chunker)
    engine.index("p")
    assert sorted(chunker.calls) == ["a.md", "b.md", "c.txt"]

    chunker.calls.clear()
    scanner.write("/src", "b.md", b"# B\n\nBravo text, edited.\n")
    scanner.write("/src", "d.md", b"# D\n\nA new note.\n")
    report = engine.index("p")
    assert report.status == "built"
    assert sorted(chunker.calls) == ["b.md", "d.md"]  # a.md and c.txt are reused

    # The same generation as a fresh indexer builds from the same files.
    fresh_chunker = CountingChunker(MarkdownChunker(WhitespaceTokenCounter(), max_tokens=64))
    fresh = engine_with(InMemoryScanner({"/src": {**DOCS, "b.md": b"# B\n\nBravo text, edited.\n",
                                                 "d.md": b"# D\n\nA new note.\n"}}), fresh_chunker)
    assert fresh.index("p").index_revision == report.index_revision
    assert units(engine) == units(fresh)


def units(engine: Any) -> list[Any]:
    current = engine.catalog.current_generation("p")
    assert current is not None
    return list(engine.generations.load_units(Path(current.directory)))


def test_a_new_chunker_revision_chunks_everything_again() -> None:
    from memory_core.adapters.in_memory.vectors import WhitespaceTokenCounter

    scanner = InMemoryScanner({"/src": dict(DOCS)})
    chunker = CountingChunker(MarkdownChunker(WhitespaceTokenCounter(), max_tokens=64))
    engine = engine_with(scanner, chunker)
    engine.index("p")
    chunker.calls.clear()
    chunker.revision = chunker.revision + "+changed"
    engine.index("p")
    assert sorted(chunker.calls) == ["a.md", "b.md", "c.txt"]


def test_a_new_indexer_starts_from_the_current_generations_units() -> None:
    """A fresh process (or the daemon's own indexer) chunks only what changed since the current
    generation, not everything; with --force it chunks everything."""
    import attrs

    from memory_core.adapters.in_memory.vectors import WhitespaceTokenCounter

    scanner = InMemoryScanner({"/src": dict(DOCS)})
    chunker = CountingChunker(MarkdownChunker(WhitespaceTokenCounter(), max_tokens=64))
    engine = engine_with(scanner, chunker)
    engine.index("p")
    chunker.calls.clear()
    scanner.write("/src", "a.md", b"# A\n\nAlpha, edited.\n")
    fresh = attrs.evolve(engine.indexer)  # same stores, an empty memo
    assert fresh.index("p").status == "built"
    assert chunker.calls == ["a.md"]
    chunker.calls.clear()
    attrs.evolve(engine.indexer).index("p", force=True)
    assert sorted(chunker.calls) == ["a.md", "b.md", "c.txt"]
