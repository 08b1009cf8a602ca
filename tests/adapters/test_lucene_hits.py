"""The BM25 adapter reads Anserini's hits in one call into Java (``lucene_index._TopHits``, issue 32
item 3): each hit's id from the sort's doc value, never its stored document, and the scores
through Anserini's own tie adjuster. Held here to ``SimpleSearcher.search`` (one ``ScoredDoc`` per
hit, its id read from the stored field by ``ScoredDocs.fromTopDocs``): the same hits, order and
scores, on real indexes: Cranfield's 1,400 documents for every query and odd ones at several
depths; long runs of tied scores under ids with the characters real paths bring (non-ASCII, outside
the BMP, a lone surrogate); and an incremental build, whose new documents sit in their own segment
with Lucene docids out of id order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.cranfield_quality import Cranfield
from tests.units import whole_text_unit

pytestmark = pytest.mark.slow

ODD = ["the of and", "!!!", "x", "mach 5", "über café naïve 東京", "boundary " * 300, "a\ud800b flow"]


def _stored_field_hits(searcher: Any, query: str, depth: int) -> list[tuple[str, float]]:
    """Anserini's own search: ids from each hit's stored document."""
    from memory_core.adapters.search.lucene_index import _LONE_SURROGATE, _unit_id

    text = _LONE_SURROGATE.sub(" ", query)  # as the adapter hands it to Java
    return [(_unit_id(h.docid), float(h.score)) for h in searcher._java.search(text, depth)]


@pytest.fixture(scope="module")
def searcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from memory_core.adapters.search.lucene_index import LuceneIndexFactory

    factory = LuceneIndexFactory()
    directory = tmp_path_factory.mktemp("cranfield") / "lexical"
    factory.build(directory, Cranfield.load().whole_document_units())
    opened = factory.open(directory)
    yield opened
    opened.close()


def test_the_hits_are_the_stored_field_hits(searcher: Any) -> None:
    queries = [*Cranfield.load().queries.values(), *ODD]
    hits = 0
    for query in queries:
        for depth in (1, 10, 100):
            ours = searcher.search(query, depth)
            assert ours == _stored_field_hits(searcher, query, depth), (query, depth)
            hits += len(ours)
    assert hits > 20_000  # most queries find a full list: the comparison is not of empty lists
    assert searcher.search("the of and", 100) == []  # stopwords only: no hit, as before


# Paths as resources bring them; each holds the same texts, so every query meets runs of equal
# scores that the tie adjuster lowers by 1e-6 a member, in id order.
ODD_PATHS = ["notes/ünïcödé/café.md", "notes/🎉 party.md", "legacy/r\udce9sum\udce9.txt", "a.md", "Z.md", "z/0.md"]
TEXTS = ["gardening tomatoes in the greenhouse", "tomatoes", "a greenhouse for tomatoes and basil"]


def _tied_units(paths: list[str], copies: int) -> list[Any]:
    return [
        whole_text_unit(f"{path}-{copy}", ordinal, text)
        for path in paths
        for copy in range(copies)
        for ordinal, text in enumerate(TEXTS)
    ]


def test_ties_and_odd_ids_are_the_stored_field_hits(tmp_path: Path) -> None:
    from memory_core.adapters.search.lucene_index import LuceneIndexFactory

    factory = LuceneIndexFactory()
    units = _tied_units(ODD_PATHS, 5)
    factory.build(tmp_path / "lexical", units)
    opened = factory.open(tmp_path / "lexical")
    try:
        for query in ("tomatoes", "greenhouse basil", "gardening"):
            for depth in (1, 7, 30, 200):
                ours = opened.search(query, depth)
                assert ours == _stored_field_hits(opened, query, depth), (query, depth)
        full = opened.search("tomatoes", 200)
        assert len(full) == len(units)
        assert len({score for _, score in full}) == len(full)  # ties adjusted: strictly descending
        assert {uid for uid, _ in full} == {u.unit_id for u in units}
    finally:
        opened.close()


def test_an_incremental_build_gives_the_stored_field_hits(tmp_path: Path) -> None:
    from memory_core.adapters.search.lucene_index import LuceneIndexFactory

    factory = LuceneIndexFactory()
    before = _tied_units(ODD_PATHS[:4], 3)
    factory.build(tmp_path / "one", before)
    # Ids that sort before the existing ones are added last: their Lucene docids come after.
    after = [u for u in before if not u.unit_id.startswith("a.md-1")]
    after += _tied_units(["0 first.md", "00.md"], 2)
    factory.build(tmp_path / "two", after, previous=tmp_path / "one")
    opened = factory.open(tmp_path / "two")
    try:
        for query in ("tomatoes", "greenhouse basil"):
            for depth in (1, 5, 100):
                assert opened.search(query, depth) == _stored_field_hits(opened, query, depth), (query, depth)
        assert {uid for uid, _ in opened.search("tomatoes", 100)} == {u.unit_id for u in after}
    finally:
        opened.close()
