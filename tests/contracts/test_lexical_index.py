"""Contract of the LexicalIndexFactory port: the Lucene adapter and its in-memory twin."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.adapters.in_memory.lexical import InMemoryLexicalIndexFactory
from memory_core.domain.errors import GenerationCorrupted
from memory_core.domain.model import Unit
from memory_core.ports import LexicalIndexFactory, LexicalSearcher
from memory_core.retrieval.profile import BM25_B, BM25_K1
from tests.units import whole_text_unit


def _lucene() -> LexicalIndexFactory:
    from memory_core.adapters.search.lucene_index import LuceneIndexFactory

    return LuceneIndexFactory()


FACTORIES: dict[str, Callable[[], LexicalIndexFactory]] = {
    "lucene": _lucene,
    "in_memory": InMemoryLexicalIndexFactory,
}


def unit(unit_id: str, text: str, heading_path: tuple[str, ...] = ()) -> Unit:
    resource_id, _, ordinal = unit_id.rpartition("#")
    return whole_text_unit(resource_id, int(ordinal), text, heading_path)


# Ids with the characters real resource paths bring: separators, dots, spaces, non-ASCII, an
# emoji (outside the BMP) and a lone surrogate (an undecodable byte in a file name).
CORPUS = [
    unit("docs/adr/ADR-0042.md#0", "# ADR 0042\n\nWe store vectors in usearch because exact search is reproducible."),
    unit("docs/adr/ADR-0042.md#1", "Consequences: rebuild the index when the embedding model changes."),
    unit("notes/runbook.md#0", "# Runbook\n\nRestart the daemon when the socket is stale; check the logs first."),
    unit("notes/runbook.md#1", "Rotate the logs weekly. The daemon keeps one socket per user."),
    unit("notes/ünïcödé/café.md#0", "Café notes: the espresso machine needs descaling every month."),
    unit("notes/🎉 party.md#0", "Party planning: balloons, cake and a zeppelin-shaped piñata."),
    unit("legacy/r\udce9sum\udce9.txt#0", "Legacy résumé of the team, scanned from paper."),
    unit("src/module.py#3", "def flux_capacitor(): returns the quantum flux of the chronoton field."),
    unit("src/module.py#4", "The flux field is measured in jigawatts; the capacitor stores it."),
    unit("blank.md#0", "   \n\t  "),
    unit("same/b.md#0", "identical twin text about gardening tomatoes"),
    unit("same/a.md#0", "identical twin text about gardening tomatoes"),
    unit("same/c.md#0", "identical twin text about gardening tomatoes"),
    unit("docs/guide.md#2", "Install with pip, then run the index command.", ("Guide", "Install")),
]
IDS = {u.unit_id for u in CORPUS}
QUERIES = ["daemon socket logs", "flux capacitor", "gardening tomatoes", "index", "espresso", "zeppelin"]


@pytest.fixture(
    scope="module",
    params=[pytest.param("lucene", marks=pytest.mark.slow), "in_memory"],
)
def factory(request: pytest.FixtureRequest) -> LexicalIndexFactory:
    return FACTORIES[request.param]()


@pytest.fixture(scope="module")
def built(factory: LexicalIndexFactory, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("lexical") / "generation" / "lexical"
    units = list(CORPUS)
    random.Random(7).shuffle(units)  # build order must not matter
    factory.build(directory, units)
    return directory


@pytest.fixture(scope="module")
def searcher(factory: LexicalIndexFactory, built: Path) -> Iterator[LexicalSearcher]:
    s = factory.open(built)
    yield s
    s.close()


def test_revision_is_a_short_stable_string(factory: LexicalIndexFactory) -> None:
    assert isinstance(factory.revision, str) and 0 < len(factory.revision) <= 80
    assert factory.revision == type(factory)().revision
    assert f"k{BM25_K1:g}" in factory.revision and f"b{BM25_B:g}" in factory.revision
    assert type(factory)(k1=0.9).revision != factory.revision  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("zeppelin", "notes/🎉 party.md#0"),
        ("espresso descaling", "notes/ünïcödé/café.md#0"),
        ("jigawatts", "src/module.py#4"),
        ("usearch reproducible", "docs/adr/ADR-0042.md#0"),
        ("scanned paper", "legacy/r\udce9sum\udce9.txt#0"),
        ("pip install", "docs/guide.md#2"),
        ("Install", "docs/guide.md#2"),  # the heading path is searchable too (search_text)
    ],
)
def test_rare_term_finds_its_unit_first(searcher: LexicalSearcher, query: str, expected: str) -> None:
    hits = searcher.search(query, 10)
    assert hits and hits[0][0] == expected


def test_returns_unit_ids_exactly_as_given(searcher: LexicalSearcher) -> None:
    seen = {uid for q in [*QUERIES, "party cafe café scanned flux"] for uid, _ in searcher.search(q, 100)}
    assert seen <= IDS
    assert {"notes/🎉 party.md#0", "legacy/r\udce9sum\udce9.txt#0", "notes/ünïcödé/café.md#0"} <= {
        uid for uid, _ in searcher.search("zeppelin scanned espresso", 10)
    }


def test_hits_are_well_formed_and_scores_descend(searcher: LexicalSearcher) -> None:
    for query in QUERIES:
        hits = searcher.search(query, 100)
        assert hits
        assert all(isinstance(uid, str) and isinstance(score, float) and score > 0 for uid, score in hits)
        scores = [score for _, score in hits]
        assert scores == sorted(scores, reverse=True)
        assert len({uid for uid, _ in hits}) == len(hits)


def test_depth_is_respected(searcher: LexicalSearcher) -> None:
    everything = searcher.search("the daemon flux twin notes", 100)
    assert len(everything) >= 5
    for depth in (1, 2, 3, 5):
        assert searcher.search("the daemon flux twin notes", depth) == everything[:depth]
    assert searcher.search("daemon", 0) == []


def test_ties_break_by_unit_id_ascending(searcher: LexicalSearcher) -> None:
    hits = searcher.search("gardening tomatoes", 10)
    assert [uid for uid, _ in hits[:3]] == ["same/a.md#0", "same/b.md#0", "same/c.md#0"]


def test_blank_units_are_never_returned(searcher: LexicalSearcher) -> None:
    assert all(uid != "blank.md#0" for q in QUERIES for uid, _ in searcher.search(q, 100))


@pytest.mark.parametrize(
    "query",
    ["", "   ", "!!! ??? ...", "---", "\x00", "\ud800", "🎉🎉", "　"],
)
def test_queries_without_terms_give_no_hits(searcher: LexicalSearcher, query: str) -> None:
    assert searcher.search(query, 10) == []


@pytest.mark.parametrize(
    "query",
    [
        'title:"flux capacitor"~2 AND (daemon OR socket) NOT -logs',
        "flux* ?aemon [a TO z] {x TO y} ^2 \\ / // : ; ~ || && !",
        "src/module.py#3",
        "C:\\Users\\me\\notes.md",
        "SELECT * FROM units; DROP TABLE runs; --",
        "flux " * 2000,
        " ".join(f"term{i}" for i in range(3000)) + " flux",  # more distinct terms than Lucene's clause cap
        "x" * 100_000,
    ],
)
def test_query_syntax_is_never_parsed(searcher: LexicalSearcher, query: str) -> None:
    hits = searcher.search(query, 10)
    assert {uid for uid, _ in hits} <= IDS


@settings(max_examples=150, deadline=None)
@given(query=st.text(max_size=200), depth=st.integers(min_value=0, max_value=30))
def test_any_query_is_safe(searcher: LexicalSearcher, query: str, depth: int) -> None:
    hits = searcher.search(query, depth)
    assert len(hits) <= depth
    assert {uid for uid, _ in hits} <= IDS
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)


def test_searches_are_deterministic(searcher: LexicalSearcher) -> None:
    for query in QUERIES:
        assert searcher.search(query, 100) == searcher.search(query, 100)


def test_concurrent_searches_agree_with_serial_ones(searcher: LexicalSearcher) -> None:
    expected = {q: searcher.search(q, 20) for q in QUERIES}
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda q: (q, searcher.search(q, 20)), QUERIES * 10))
    assert all(hits == expected[q] for q, hits in results)


def test_reopening_gives_the_same_results(factory: LexicalIndexFactory, built: Path) -> None:
    first = factory.open(built)
    # A fresh factory with the same settings reads a Lucene index from disk; in-memory indexes
    # live in the factory that built them.
    reader = factory if isinstance(factory, InMemoryLexicalIndexFactory) else type(factory)()
    again = reader.open(built)
    try:
        for query in QUERIES:
            assert first.search(query, 100) == again.search(query, 100)
    finally:
        first.close()
        again.close()


def test_close_is_idempotent_and_final(factory: LexicalIndexFactory, built: Path) -> None:
    s = factory.open(built)
    assert s.search("flux", 5)
    s.close()
    s.close()
    with pytest.raises(RuntimeError):
        s.search("flux", 5)


def test_rebuilding_a_directory_replaces_its_index(factory: LexicalIndexFactory, tmp_path: Path) -> None:
    directory = tmp_path / "lexical"
    factory.build(directory, [unit("old.md#0", "obsolete words")])
    factory.build(directory, [unit("new.md#0", "fresh words")])
    s = factory.open(directory)
    try:
        assert s.search("words obsolete fresh", 10) == s.search("fresh words", 10)
        assert [uid for uid, _ in s.search("words", 10)] == ["new.md#0"]
    finally:
        s.close()


def test_an_empty_corpus_searches_to_nothing(factory: LexicalIndexFactory, tmp_path: Path) -> None:
    factory.build(tmp_path / "empty", [])
    s = factory.open(tmp_path / "empty")
    try:
        assert s.search("anything", 10) == []
    finally:
        s.close()


def test_duplicate_unit_ids_are_rejected(factory: LexicalIndexFactory, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="duplicate"):
        factory.build(tmp_path / "dup", [unit("a.md#0", "one"), unit("a.md#0", "two")])


def test_a_missing_index_is_a_corrupted_generation(factory: LexicalIndexFactory, tmp_path: Path) -> None:
    with pytest.raises(GenerationCorrupted):
        factory.open(tmp_path / "never-built")
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(GenerationCorrupted):
        factory.open(tmp_path / "empty-dir")


# Lucene specifics: what only an on-disk index can get wrong.


@pytest.mark.slow
def test_lucene_index_with_a_damaged_file_is_a_corrupted_generation(tmp_path: Path) -> None:
    factory = _lucene()
    directory = tmp_path / "lexical"
    factory.build(directory, CORPUS)
    terms = next(directory.glob("*.tim"))
    terms.write_bytes(b"\0" * terms.stat().st_size)
    with pytest.raises(GenerationCorrupted):
        factory.open(directory)


@pytest.mark.slow
def test_lucene_index_without_its_metadata_is_unfinished(tmp_path: Path) -> None:
    factory = _lucene()
    directory = tmp_path / "lexical"
    factory.build(directory, CORPUS)
    (directory / "lexical.json").unlink()
    with pytest.raises(GenerationCorrupted):
        factory.open(directory)


@pytest.mark.slow
def test_lucene_revision_changes_with_bm25_settings_only_at_search_time(tmp_path: Path) -> None:
    from memory_core.adapters.search.lucene_index import LuceneIndexFactory

    directory = tmp_path / "lexical"
    LuceneIndexFactory().build(directory, CORPUS)
    default, tuned = LuceneIndexFactory().open(directory), LuceneIndexFactory(k1=0.9, b=0.4).open(directory)
    try:
        assert [u for u, _ in default.search("flux", 2)] == [u for u, _ in tuned.search("flux", 2)]
        assert default.search("flux", 2) != tuned.search("flux", 2)  # same ranking, other scores
    finally:
        default.close()
        tuned.close()
