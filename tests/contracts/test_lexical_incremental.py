"""A lexical index built from a previous generation's (``build(..., previous=...)``) equals a full
build of the same units: the same hits, scores and order, at every depth (ties cut included),
while the previous index stays as it was. Both factories; the Lucene one really hard-links the
previous segments, deletes and adds the changed documents and expunges the deletes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from memory_core.adapters.in_memory.lexical import InMemoryLexicalIndexFactory
from memory_core.domain.model import Unit
from memory_core.ports import LexicalIndexFactory
from tests.contracts.test_lexical_index import CORPUS, FACTORIES, QUERIES, unit

DEPTHS = (1, 2, 3, 5, 50)
EXTRA_QUERIES = ["zeppelin quokka", "jigawatts", "tomatoes", "legacy résumé", "rebuilt wombat"]


def _edited(units: list[Unit]) -> list[Unit]:
    """One text changed, one unit gone, two new (one an emoji id), one tie member changed."""
    out = [u for u in units if u.unit_id != "notes/runbook.md#1"]
    out = [unit(u.unit_id, u.text + " quokka rebuilt") if u.unit_id == "src/module.py#4" else u for u in out]
    out = [unit(u.unit_id, "identical twin text about wombat") if u.unit_id == "same/b.md#0" else u for u in out]
    return [*out, unit("new/wombat.md#0", "A wombat rebuilt the zeppelin."), unit("new/🦘.md#0", "quokka tomatoes")]


def _results(factory: LexicalIndexFactory, directory: Path) -> dict[tuple[str, int], list[tuple[str, float]]]:
    searcher = factory.open(directory)
    try:
        return {(q, d): searcher.search(q, d) for q in [*QUERIES, *EXTRA_QUERIES] for d in DEPTHS}
    finally:
        searcher.close()


def _digest(directory: Path) -> dict[str, str]:
    return {n: hashlib.sha256((directory / n).read_bytes()).hexdigest() for n in sorted(os.listdir(directory))}


@pytest.fixture(params=[pytest.param("lucene", marks=pytest.mark.slow), "in_memory"])
def factory(request: pytest.FixtureRequest) -> LexicalIndexFactory:
    return FACTORIES[request.param]()


def test_incremental_equals_full_and_leaves_previous_alone(factory: LexicalIndexFactory, tmp_path: Path) -> None:
    first, second, full = tmp_path / "g1" / "lexical", tmp_path / "g2" / "lexical", tmp_path / "full" / "lexical"
    factory.build(first, list(CORPUS))
    in_memory = isinstance(factory, InMemoryLexicalIndexFactory)  # no files to compare
    before, files_before = _results(factory, first), ({} if in_memory else _digest(first))
    edited = _edited(list(CORPUS))
    factory.build(second, edited, previous=first)
    factory.build(full, edited)
    got, want = _results(factory, second), _results(factory, full)
    assert got == want
    assert [h[0] for h in got[("rebuilt wombat", 50)]][:1] == ["new/wombat.md#0"]
    assert "notes/runbook.md#1" not in {h[0] for hits in got.values() for h in hits}
    assert _results(factory, first) == before  # the previous generation still answers as it did
    if not in_memory:
        assert _digest(first) == files_before  # ... and its files are untouched


@pytest.mark.slow
def test_lucene_chain_of_incremental_builds_stays_equal_to_full(tmp_path: Path) -> None:
    factory = FACTORIES["lucene"]()
    units = list(CORPUS)
    previous = tmp_path / "0" / "lexical"
    factory.build(previous, units)
    for step in range(1, 4):
        units = [unit(u.unit_id, u.text + f" step{step}") if i % 3 == step % 3 else u for i, u in enumerate(units)]
        units.append(unit(f"chain/{step}.md#0", f"chain step{step} gardening"))
        current = tmp_path / str(step) / "lexical"
        factory.build(current, units, previous=previous)
        factory.build(tmp_path / f"full{step}" / "lexical", units)
        assert _results(factory, current) == _results(factory, tmp_path / f"full{step}" / "lexical")
        previous = current
    # Nothing of the previous one's write.lock or metadata was carried: this build wrote its own.
    assert (previous / "lexical.json").stat().st_nlink == 1


@pytest.mark.slow
def test_lucene_unusable_previous_means_a_full_build(tmp_path: Path) -> None:
    factory = FACTORIES["lucene"]()
    broken = tmp_path / "broken" / "lexical"
    factory.build(broken, list(CORPUS))
    (broken / "lexical.json").write_text('{"format": 1, "analysis": "old", "unit_ids": []}')
    target = tmp_path / "new" / "lexical"
    factory.build(target, list(CORPUS), previous=broken)
    factory.build(tmp_path / "full" / "lexical", list(CORPUS))
    assert _results(factory, target) == _results(factory, tmp_path / "full" / "lexical")
    missing = tmp_path / "missing" / "lexical"
    factory.build(tmp_path / "other" / "lexical", list(CORPUS), previous=missing)
    assert _results(factory, tmp_path / "other" / "lexical") == _results(factory, tmp_path / "full" / "lexical")


@pytest.mark.slow
def test_lucene_previous_that_lucene_finds_damaged_means_a_full_build(tmp_path: Path) -> None:
    """A previous segment truncated on disk (the indexer verifies a generation's seal before it
    offers it; this is what Lucene itself catches): the build starts over and is still right."""
    factory = FACTORIES["lucene"]()
    first = tmp_path / "g1" / "lexical"
    factory.build(first, list(CORPUS))
    segment = next(p for p in sorted(first.iterdir()) if p.suffix == ".fdt")
    segment.write_bytes(segment.read_bytes()[:10])
    edited = _edited(list(CORPUS))
    factory.build(tmp_path / "g2" / "lexical", edited, previous=first)
    factory.build(tmp_path / "full" / "lexical", edited)
    assert _results(factory, tmp_path / "g2" / "lexical") == _results(factory, tmp_path / "full" / "lexical")
