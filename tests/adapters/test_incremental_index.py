"""An incremental re-index (the lexical index started from the current generation's) gives the
same generation content as a full build of the same sources: real scanner, catalog, generation
store, Lucene and usearch. Also: a damaged current generation is never the base (its seal is
checked first), and the previous generation keeps verifying after the new one is built from it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.adapters.search.lucene_index import LuceneIndexFactory
from memory_core.domain.canonical import plain
from memory_core.domain.model import Generation, Source
from memory_core.services.engine import Engine
from memory_core.services.indexing import LEXICAL_DIR
from tests.reliability.harness import engine_for

pytestmark = pytest.mark.slow

QUERIES = ["wombat burrow", "quokka", "boundary layer", "zeppelin", "notes about", "tomatoes garden", "the"]


def _write(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(12):
        sections = "".join(f"\n\n## Part {j}\n\nN{i} part {j} on boundary layer {'tomatoes ' * j}." for j in range(3))
        (folder / f"note-{i:02d}.md").write_text(f"# Note {i}{sections}\n", encoding="utf-8")
    (folder / "twins-a.md").write_text("# Twin\n\nidentical notes about zeppelin\n", encoding="utf-8")
    (folder / "twins-b.md").write_text("# Twin\n\nidentical notes about zeppelin\n", encoding="utf-8")


def _change(folder: Path) -> None:
    edited = folder / "note-03.md"
    edited.write_text(edited.read_text(encoding="utf-8") + "\nA wombat burrow and a quokka.\n", encoding="utf-8")
    (folder / "note-07.md").unlink()
    (folder / "sub").mkdir()
    (folder / "sub" / "new.md").write_text("# New\n\nquokka garden with tomatoes\n", encoding="utf-8")


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[Engine, Engine, Path, Path]]:
    a, b = engine_for(tmp_path / "home-a", lucene=True), engine_for(tmp_path / "home-b", lucene=True)
    try:
        yield a, b, tmp_path / "a", tmp_path / "b"
    finally:
        a.close()
        b.close()


def _content(engine: Engine) -> tuple[list[dict[str, object]], dict[str, list[tuple[str, float]]]]:
    generation = engine.catalog.current_generation("p")
    assert generation is not None
    directory = Path(generation.directory)
    units = plain(engine.generations.load_units(directory))
    searcher = LuceneIndexFactory().open(directory / LEXICAL_DIR)
    try:
        hits = {q: searcher.search(q, 10) for q in QUERIES}
    finally:
        searcher.close()
    return units, hits


def _indexed(engine: Engine, folder: Path) -> Generation:
    """The notes written to ``folder`` and indexed as project ``p``: its current generation."""
    _write(folder)
    engine.add_project("p", [Source(str(folder))])
    engine.index("p")
    current = engine.catalog.current_generation("p")
    assert current is not None
    return current


def _full_build_of_the_changed_notes(engine: Engine, folder: Path, force: bool = False) -> None:
    """The changed notes written to ``folder`` and indexed as project ``p`` in one build: the reference."""
    _write(folder)
    _change(folder)
    engine.add_project("p", [Source(str(folder))])
    engine.index("p", force=force)


def test_incremental_reindex_equals_a_full_build(engines: tuple[Engine, Engine, Path, Path]) -> None:
    incremental, full, a, b = engines
    first = _indexed(incremental, a)
    _change(a)
    report = incremental.index("p")
    assert report.status == "built"
    _full_build_of_the_changed_notes(full, b, force=True)
    assert _content(incremental) == _content(full)
    assert any(h[0].startswith("note-03.md#") for h in _content(incremental)[1]["wombat burrow"])
    incremental.generations.verify(Path(first.directory))  # the base is untouched
    for query in QUERIES:  # and the whole pipeline agrees (the fused ranking, fragments, scores)
        got = [(f.unit_id, f.final_score) for f in incremental.activate("p", query).response.fragments]
        assert got == [(f.unit_id, f.final_score) for f in full.activate("p", query).response.fragments]


def test_a_damaged_current_generation_is_not_the_base(engines: tuple[Engine, Engine, Path, Path]) -> None:
    incremental, full, a, b = engines
    current = _indexed(incremental, a)
    segment = next(p for p in sorted((Path(current.directory) / LEXICAL_DIR).iterdir()) if p.suffix == ".tim")
    segment.write_bytes(b"\0" * segment.stat().st_size)  # same size, other bytes: only the seal sees it
    _change(a)
    incremental.index("p")
    _full_build_of_the_changed_notes(full, b)
    assert _content(incremental) == _content(full)
    now = incremental.catalog.current_generation("p")
    assert now is not None
    incremental.generations.verify(Path(now.directory))
