"""The indexer embeds missing units longest first across the whole set, and a query embedder
of another revision than the generation's is refused (issue 17). Fakes only: fast."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from memory_core.adapters.in_memory.vectors import HashingEmbedder
from memory_core.domain.errors import ProjectNotIndexed
from memory_core.domain.model import Layer, Source
from memory_core.entrypoints.bootstrap import bootstrap_in_memory
from memory_core.services.indexing import EMBED_BATCH


class SpyEmbedder(HashingEmbedder):
    def __init__(self, revision: str | None = None) -> None:
        super().__init__()
        if revision is not None:
            self.revision = revision
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return super().embed_documents(texts)


def _engine(embedder: SpyEmbedder, files: int):  # type: ignore[no-untyped-def]
    engine = bootstrap_in_memory(embedder=embedder)
    for i in range(files):
        # Lengths that do not follow file order: 1..40 words, shuffled by a stride.
        words = 1 + (i * 17) % 40
        engine.indexer.scanner.write("/notes", f"note-{i:03}.md", (" ".join(["wing"] * words) + f" n{i}\n").encode())
    engine.add_project("notes", [Source("/notes", Layer.PROJECT)])
    return engine


def test_missing_units_are_embedded_longest_first_across_batches() -> None:
    spy = SpyEmbedder()
    engine = _engine(spy, 3 * EMBED_BATCH)
    report = engine.index("notes")
    assert report.embedded == 3 * EMBED_BATCH and len(spy.calls) == 3
    assert all(len(call) == EMBED_BATCH for call in spy.calls)
    counted = [len(t.split()) for call in spy.calls for t in call]
    assert counted == sorted(counted, reverse=True)  # one order over every call, not per call
    # Each unit still gets its own vector: the query for a unique word finds its note first.
    hit = engine.activate("notes", "n77").response.fragments[0]
    assert hit.resource_id == "note-077.md"


def test_a_query_embedder_of_another_revision_is_refused_not_mixed() -> None:
    engine = _engine(SpyEmbedder(), 4)
    engine.index("notes")
    other = bootstrap_in_memory(embedder=SpyEmbedder(revision="hashing-bow-64/2"))
    # Same stores, another embedder: what a restart with another inference path looks like.
    engine.embedder = other.embedder
    with pytest.raises(ProjectNotIndexed, match="indexed with embedding model"):
        engine.activate("notes", "wing")
