"""Contract of the EmbeddingCache port: the apsw adapter and the in-memory twin."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.adapters.in_memory.vectors import InMemoryEmbeddingCache
from memory_core.adapters.sqlite.embedding_cache import SqliteEmbeddingCache
from memory_core.domain.errors import StorageUnavailable
from memory_core.ports import EmbeddingCache

REV = "all-MiniLM-L6-v2@53aa51172d14"
H1, H2, H3 = ("a" * 64, "b" * 64, "c" * 64)


@pytest.fixture(params=["sqlite", "in_memory"])
def cache(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EmbeddingCache]:
    made: EmbeddingCache = (
        SqliteEmbeddingCache(tmp_path / "cache" / "embeddings.db")
        if request.param == "sqlite"
        else InMemoryEmbeddingCache()
    )
    yield made
    made.close()


def as_lists(found: dict) -> dict[str, list[float]]:
    return {k: [float(x) for x in v] for k, v in found.items()}


def test_put_then_get(cache: EmbeddingCache) -> None:
    cache.put_many(REV, {H1: [0.5, -0.25, 1.0], H2: [0.0, 1.0, 0.0]})
    assert as_lists(cache.get_many(REV, [H1, H2])) == {H1: [0.5, -0.25, 1.0], H2: [0.0, 1.0, 0.0]}


def test_misses_are_absent(cache: EmbeddingCache) -> None:
    cache.put_many(REV, {H1: [1.0, 2.0]})
    assert as_lists(cache.get_many(REV, [H1, H3])) == {H1: [1.0, 2.0]}
    assert cache.get_many(REV, []) == {}
    assert cache.get_many(REV, iter([H3])) == {}


def test_model_revisions_are_separate(cache: EmbeddingCache) -> None:
    cache.put_many(REV, {H1: [1.0, 0.0]})
    cache.put_many("other-model@000000000000", {H1: [0.0, 1.0, 0.0]})
    assert as_lists(cache.get_many(REV, [H1])) == {H1: [1.0, 0.0]}
    assert as_lists(cache.get_many("other-model@000000000000", [H1])) == {H1: [0.0, 1.0, 0.0]}
    assert cache.get_many("never-used", [H1]) == {}


def test_put_overwrites_and_empty_put_is_a_no_op(cache: EmbeddingCache) -> None:
    cache.put_many(REV, {H1: [1.0, 0.0]})
    cache.put_many(REV, {H1: [0.0, 1.0]})
    cache.put_many(REV, {})
    assert as_lists(cache.get_many(REV, [H1])) == {H1: [0.0, 1.0]}


def test_duplicates_in_a_lookup_are_fine(cache: EmbeddingCache) -> None:
    cache.put_many(REV, {H1: [1.0]})
    assert as_lists(cache.get_many(REV, [H1, H1, H1])) == {H1: [1.0]}


def test_many_vectors_round_trip(cache: EmbeddingCache) -> None:
    """More keys than one SQL statement binds."""
    vectors = {f"{i:064x}": [float(i), float(-i), 0.5] for i in range(1_234)}
    cache.put_many(REV, vectors)
    found = as_lists(cache.get_many(REV, list(vectors) + [H3]))
    assert found == vectors


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    vectors=st.dictionaries(
        st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
        st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=8),
        max_size=10,
    )
)
def test_float32_values_round_trip_exactly(cache: EmbeddingCache, vectors: dict[str, list[float]]) -> None:
    cache.put_many(REV, vectors)
    assert as_lists(cache.get_many(REV, vectors)) == vectors


# --- sqlite specifics -----------------------------------------------------------------------


def test_persists_across_reopen_with_owner_only_files(tmp_path: Path) -> None:
    path = tmp_path / "home" / "embeddings.db"
    first = SqliteEmbeddingCache(path)
    first.put_many(REV, {H1: [0.25, 0.75]})
    first.close()
    second = SqliteEmbeddingCache(path)
    assert as_lists(second.get_many(REV, [H1])) == {H1: [0.25, 0.75]}
    assert second.count(REV) == 1 and second.count() == 1
    second.close()
    assert path.parent.stat().st_mode & 0o777 == 0o700
    for file in path.parent.iterdir():
        assert file.stat().st_mode & 0o777 == 0o600, file


def test_two_connections_share_the_file(tmp_path: Path) -> None:
    path = tmp_path / "embeddings.db"
    writer, reader = SqliteEmbeddingCache(path), SqliteEmbeddingCache(path)
    writer.put_many(REV, {H2: [1.0, 2.0, 3.0]})
    assert as_lists(reader.get_many(REV, [H2])) == {H2: [1.0, 2.0, 3.0]}
    writer.close()
    reader.close()


def test_returns_float32_arrays(tmp_path: Path) -> None:
    cache = SqliteEmbeddingCache(tmp_path / "e.db")
    cache.put_many(REV, {H1: [0.1, 0.2]})
    vector = cache.get_many(REV, [H1])[H1]
    assert str(vector.dtype) == "float32" and vector.flags.writeable
    cache.close()


def test_a_file_that_is_not_a_database_is_unavailable_storage(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(StorageUnavailable):
        SqliteEmbeddingCache(path)
