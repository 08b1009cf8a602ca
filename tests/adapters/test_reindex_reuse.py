"""A one-file re-index costs what changed (issue 15): unchanged bodies are not read again, units
already written are not serialised again, unchanged vectors are not converted again, and the
generation just written loads without parsing. Each shortcut gives the same bytes as doing the
work, and none of them hides damage."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.adapters.files.generation_store import UNITS, FileGenerationStore
from memory_core.adapters.in_memory.storage import InMemoryScanner
from memory_core.adapters.search.usearch_index import VECTORS_FILE, UsearchIndexFactory
from memory_core.domain.errors import GenerationCorrupted
from memory_core.domain.model import Source, Unit
from memory_core.entrypoints.bootstrap import bootstrap_in_memory

DOCS = {
    "a.md": b"# A\n\nAlpha text about deploys.\n",
    "b.md": b"# B\n\nBravo text about rollbacks.\n",
    "c.txt": b"Charlie plain text.\n",
}


class CountingScanner(InMemoryScanner):
    """The in-memory scanner, counting the bodies read."""

    reads: list[str]

    def read(self, resource: Any) -> bytes:
        self.reads.append(resource.resource_id)
        return super().read(resource)


def _engine(scanner: CountingScanner) -> Any:
    scanner.reads = []
    engine = bootstrap_in_memory(scanner=scanner)
    engine.add_project("p", [Source("/src")])
    return engine


def test_a_reindex_reads_only_the_changed_bodies_and_force_reads_all() -> None:
    scanner = CountingScanner({"/src": dict(DOCS)})
    engine = _engine(scanner)
    engine.index("p")
    assert sorted(scanner.reads) == ["a.md", "b.md", "c.txt"]
    scanner.reads.clear()
    scanner.write("/src", "b.md", b"# B\n\nBravo text, edited.\n")
    assert engine.index("p").status == "built"
    assert scanner.reads == ["b.md"]
    # A body whose blob went is read (and stored) again.
    a_hash = hashlib.sha256(DOCS["a.md"]).hexdigest()
    engine.indexer.blobs.delete(a_hash)
    scanner.reads.clear()
    scanner.write("/src", "c.txt", b"Charlie, edited.\n")
    engine.index("p")
    assert sorted(scanner.reads) == ["a.md", "c.txt"]
    assert engine.indexer.blobs.exists(a_hash)
    scanner.reads.clear()
    engine.index("p", force=True)
    assert sorted(scanner.reads) == ["a.md", "b.md", "c.txt"]


def _unit(i: int, text: str) -> Unit:
    engine_units = bootstrap_in_memory().indexer.chunker.chunk(f"n{i}.md", "0" * 64, text, "text/markdown")
    assert len(engine_units) == 1
    return engine_units[0]


def test_units_written_from_the_memo_equal_a_fresh_store_and_load_back(tmp_path: Path) -> None:
    units = [_unit(i, f"# N{i}\n\nnote {i} text\n") for i in range(5)]
    store, fresh = FileGenerationStore(tmp_path / "a"), FileGenerationStore(tmp_path / "b")
    first = store.stage("p")
    store.write_units(first, units)
    changed = [*units[:2], _unit(2, "# N2\n\nedited\n"), *units[3:]]
    second = store.stage("p")
    store.write_units(second, changed)  # lines of units 0, 1, 3, 4 from the memo
    other = fresh.stage("p")
    fresh.write_units(other, changed)
    assert (second / UNITS).read_bytes() == (other / UNITS).read_bytes()
    published = store.publish("p", second, "0" * 16)
    assert store.load_units(published) == changed == fresh.load_units(fresh.publish("p", other, "0" * 16))


def test_a_damaged_units_file_is_detected_though_this_store_wrote_it(tmp_path: Path) -> None:
    store = FileGenerationStore(tmp_path)
    staging = store.stage("p")
    store.write_units(staging, [_unit(1, "# N1\n\nnote one\n")])
    published = store.publish("p", staging, "1" * 16)
    path = published / UNITS
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(GenerationCorrupted):
        store.load_units(published)
    with pytest.raises(GenerationCorrupted):
        store.verify(published)


def test_vectors_reused_by_object_give_the_bytes_of_a_full_build(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    vectors = [tuple(float(x) for x in rng.normal(size=8)) for _ in range(20)]
    ids = [f"n{i}.md#0" for i in range(20)]
    factory = UsearchIndexFactory()
    factory.build(tmp_path / "first", ids, vectors)
    # One vector changed, one unit gone, one new, order shifted: the rest come from the memo.
    new_vectors = [*vectors[:5], tuple(float(x) for x in rng.normal(size=8)), *vectors[7:], vectors[0][::-1]]
    new_ids = [*ids[:5], "n5.md#0", *ids[7:], "n99.md#0"]
    factory.build(tmp_path / "reused", new_ids, new_vectors)
    UsearchIndexFactory().build(tmp_path / "full", new_ids, new_vectors)
    assert (tmp_path / "reused" / VECTORS_FILE).read_bytes() == (tmp_path / "full" / VECTORS_FILE).read_bytes()
    searcher = factory.open(tmp_path / "reused")
    assert searcher.search(new_vectors[3], 3)[0][0] == new_ids[3]
    searcher.close()


def test_a_reused_build_still_refuses_bad_vectors(tmp_path: Path) -> None:
    from memory_core.domain.errors import InvalidRequest

    factory = UsearchIndexFactory()
    vectors = [(1.0, 0.0), (0.0, 1.0)]
    factory.build(tmp_path / "first", ["a", "b"], vectors)
    with pytest.raises(InvalidRequest):
        factory.build(tmp_path / "nan", ["a", "b", "c"], [*vectors, (float("nan"), 1.0)])
    with pytest.raises(InvalidRequest):
        factory.build(tmp_path / "dims", ["a", "b", "c"], [*vectors, (1.0, 0.0, 0.0)])
    with pytest.raises(InvalidRequest):
        factory.build(tmp_path / "dup", ["a", "a"], vectors)
