"""The BM25 adapter reads Anserini's hits as two arrays (``lucene_index._TopHits``, issue 32
item 3): the same hits, order and scores as ``SimpleSearcher.search``'s one ``ScoredDoc`` per hit,
on a real index of Cranfield's 1,400 documents, for every query and odd ones, at several depths."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.cranfield_quality import Cranfield

pytestmark = pytest.mark.slow

ODD = ["the of and", "!!!", "x", "mach 5", "über café naïve 東京", "boundary " * 300, "a\ud800b flow"]


@pytest.fixture(scope="module")
def searcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from memory_core.adapters.search.lucene_index import LuceneIndexFactory

    factory = LuceneIndexFactory()
    directory = tmp_path_factory.mktemp("cranfield") / "lexical"
    factory.build(directory, Cranfield.load().whole_document_units())
    opened = factory.open(directory)
    yield opened
    opened.close()


def test_the_arrays_are_the_scored_docs(searcher: Any) -> None:
    from memory_core.adapters.search.lucene_index import _LONE_SURROGATE, _unit_id

    queries = [*Cranfield.load().queries.values(), *ODD]
    hits = 0
    for query in queries:
        for depth in (1, 10, 100):
            ours = searcher.search(query, depth)
            text = _LONE_SURROGATE.sub(" ", query)  # as the adapter hands it to Java
            theirs = [(_unit_id(h.docid), float(h.score)) for h in searcher._java.search(text, depth)]
            assert ours == theirs, (query, depth)
            hits += len(ours)
    assert hits > 20_000  # most queries find a full list: the comparison is not of empty lists
    assert searcher.search("the of and", 100) == []  # stopwords only: no hit, as before
