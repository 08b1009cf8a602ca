"""Contract of the VectorIndexFactory port: usearch/numpy adapter and the in-memory twin."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.adapters.in_memory.vectors import InMemoryVectorIndexFactory
from memory_core.adapters.search.usearch_index import HNSW_FILE, VECTORS_FILE, UsearchIndexFactory
from memory_core.domain.errors import GenerationCorrupted, InvalidRequest
from memory_core.ports import VectorIndexFactory

FACTORIES: dict[str, Callable[[], VectorIndexFactory]] = {
    "usearch": UsearchIndexFactory,
    "in_memory": InMemoryVectorIndexFactory,
}
DIMS = 16


@pytest.fixture(params=sorted(FACTORIES))
def factory(request: pytest.FixtureRequest) -> VectorIndexFactory:
    return FACTORIES[request.param]()


def random_vectors(n: int, dims: int = DIMS, seed: int = 7) -> list[list[float]]:
    rng = random.Random(seed)
    return [[rng.gauss(0.0, 1.0) for _ in range(dims)] for _ in range(n)]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.fixture
def built(factory: VectorIndexFactory, tmp_path: Path):
    ids = [f"doc.md#{i}" for i in range(60)]
    vectors = random_vectors(60)
    factory.build(tmp_path / "vectors", ids, vectors)
    return factory, tmp_path / "vectors", ids, vectors


def test_revision_is_a_non_empty_string(factory: VectorIndexFactory) -> None:
    assert isinstance(factory.revision, str) and factory.revision


def test_nearest_neighbour_of_a_stored_vector_is_itself(built) -> None:
    factory, directory, ids, vectors = built
    searcher = factory.open(directory)
    for unit_id, vector in zip(ids, vectors, strict=True):
        top_id, top_score = searcher.search(vector, 1)[0]
        assert top_id == unit_id
        assert top_score == pytest.approx(1.0, abs=1e-5)
    searcher.close()


def test_scores_are_cosine_similarities_best_first(built) -> None:
    factory, directory, ids, vectors = built
    query = random_vectors(1, seed=99)[0]
    hits = factory.open(directory).search(query, 10)
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)
    by_id = dict(zip(ids, vectors, strict=True))
    for unit_id, score in hits:
        assert score == pytest.approx(cosine(query, by_id[unit_id]), abs=1e-5)
    # The best ten really are the best ten.
    expected = sorted(ids, key=lambda u: -cosine(query, by_id[u]))[:10]
    assert [u for u, _ in hits] == expected


@pytest.mark.parametrize("depth", [0, 1, 7, 60, 500])
def test_depth_bounds_the_hits_and_ids_are_exact(built, depth: int) -> None:
    factory, directory, ids, _ = built
    hits = factory.open(directory).search(random_vectors(1, seed=3)[0], depth)
    assert len(hits) == min(depth, len(ids))
    assert len({u for u, _ in hits}) == len(hits)
    assert {u for u, _ in hits} <= set(ids)
    if depth >= len(ids):
        assert {u for u, _ in hits} == set(ids)


def test_similarities_match_search_scores(built) -> None:
    factory, directory, ids, _ = built
    searcher = factory.open(directory)
    query = random_vectors(1, seed=5)[0]
    hits = searcher.search(query, 25)
    sims = searcher.similarities(query, [u for u, _ in hits])
    assert sims == pytest.approx([s for _, s in hits], abs=1e-6)
    # Any order, repeats allowed; empty is empty.
    picked = [ids[3], ids[0], ids[3]]
    sims = searcher.similarities(query, picked)
    assert sims[0] == sims[2]
    assert searcher.similarities(query, []) == []


def test_similarities_of_an_unknown_unit_is_a_corrupt_generation(built) -> None:
    factory, directory, _, _ = built
    with pytest.raises(GenerationCorrupted):
        factory.open(directory).similarities(random_vectors(1)[0], ["nope#0"])


def test_search_is_deterministic_and_survives_reopen(built) -> None:
    factory, directory, _, _ = built
    query = random_vectors(1, seed=11)[0]
    first = factory.open(directory)
    hits = first.search(query, 20)
    assert first.search(query, 20) == hits
    first.close()
    assert factory.open(directory).search(query, 20) == hits


def test_ties_break_by_stored_unit_order(factory: VectorIndexFactory, tmp_path: Path) -> None:
    same = [1.0, 2.0, 3.0, 4.0]
    ids = ["z#0", "a#0", "m#0", "other#0", "b#0"]
    vectors = [same, [2.0, 4.0, 6.0, 8.0], same, [-1.0, 0.0, 0.0, 0.0], same]
    factory.build(tmp_path / "v", ids, vectors)
    hits = factory.open(tmp_path / "v").search(same, 3)
    assert [u for u, _ in hits] == ["z#0", "a#0", "m#0"]
    # A tie straddling the depth cut still keeps the earliest units.
    assert [u for u, _ in factory.open(tmp_path / "v").search(same, 2)] == ["z#0", "a#0"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.lists(st.integers(-3, 3), min_size=3, max_size=3).filter(any), min_size=1, max_size=25),
    query=st.lists(st.integers(-3, 3), min_size=3, max_size=3).filter(any),
    depth=st.integers(1, 30),
)
def test_search_is_a_stable_sort_by_cosine(
    factory: VectorIndexFactory, tmp_path: Path, rows: list[list[int]], query: list[int], depth: int
) -> None:
    """Small integer vectors make many exact ties: order is cosine desc, then unit order."""
    ids = [f"u#{i}" for i in range(len(rows))]
    factory.build(tmp_path / "h", ids, [[float(x) for x in r] for r in rows])
    hits = factory.open(tmp_path / "h").search([float(x) for x in query], depth)
    scores = {u: cosine([float(x) for x in query], [float(x) for x in r]) for u, r in zip(ids, rows, strict=True)}
    # float32 rounding may reorder near-ties; the order must be non-increasing within it.
    got = [u for u, _ in hits]
    assert len(got) == min(depth, len(ids))
    for (a, sa), (b, sb) in zip(hits, hits[1:], strict=False):
        assert sa >= sb
        if sa == sb:
            assert ids.index(a) < ids.index(b)
    for u, s in hits:
        assert s == pytest.approx(scores[u], abs=1e-5)


def test_empty_index_returns_nothing(factory: VectorIndexFactory, tmp_path: Path) -> None:
    factory.build(tmp_path / "empty", [], [])
    searcher = factory.open(tmp_path / "empty")
    assert searcher.search([1.0, 0.0], 10) == []
    assert searcher.similarities([1.0, 0.0], []) == []


def test_zero_vectors_score_zero(factory: VectorIndexFactory, tmp_path: Path) -> None:
    factory.build(tmp_path / "z", ["zero#0", "one#0"], [[0.0, 0.0], [1.0, 0.0]])
    hits = factory.open(tmp_path / "z").search([1.0, 1.0], 2)
    assert hits[0][0] == "one#0"
    assert hits[1] == ("zero#0", 0.0)


def test_bad_build_input_is_rejected(factory: VectorIndexFactory, tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest):
        factory.build(tmp_path / "a", ["a#0", "b#0"], [[1.0, 0.0]])
    with pytest.raises(InvalidRequest):
        factory.build(tmp_path / "b", ["a#0", "a#0"], [[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(InvalidRequest):
        factory.build(tmp_path / "c", ["a#0", "b#0"], [[1.0, 0.0], [0.0, 1.0, 2.0]])
    with pytest.raises(InvalidRequest):
        factory.build(tmp_path / "d", ["a#0"], [[float("nan"), 0.0]])


def test_query_of_the_wrong_dimension_is_rejected(built) -> None:
    factory, directory, _, _ = built
    with pytest.raises(InvalidRequest):
        factory.open(directory).search([1.0, 0.0], 5)


def test_opening_a_directory_never_built_is_a_corrupt_generation(factory: VectorIndexFactory, tmp_path: Path) -> None:
    with pytest.raises(GenerationCorrupted):
        factory.open(tmp_path / "never-built")


# --- usearch adapter specifics ------------------------------------------------------------


def test_files_are_owner_only(tmp_path: Path) -> None:
    factory = UsearchIndexFactory(exact_limit=10)
    factory.build(tmp_path / "v", [f"u#{i}" for i in range(40)], random_vectors(40))
    files = list((tmp_path / "v").iterdir())
    assert (tmp_path / "v" / HNSW_FILE) in files
    for path in files:
        assert path.stat().st_mode & 0o777 == 0o600, path


@pytest.mark.parametrize("damage", ["delete_vectors", "truncate_vectors", "garble_ids", "delete_meta"])
def test_missing_or_corrupt_files_are_a_corrupt_generation(tmp_path: Path, damage: str) -> None:
    factory = UsearchIndexFactory()
    directory = tmp_path / "v"
    factory.build(directory, [f"u#{i}" for i in range(20)], random_vectors(20))
    if damage == "delete_vectors":
        (directory / VECTORS_FILE).unlink()
    elif damage == "truncate_vectors":
        data = (directory / VECTORS_FILE).read_bytes()
        (directory / VECTORS_FILE).write_bytes(data[: len(data) // 2])
    elif damage == "garble_ids":
        (directory / "unit_ids.json").write_text('["u#0", "x#1"]')
    else:
        (directory / "vector_index.json").unlink()
    with pytest.raises(GenerationCorrupted):
        factory.open(directory)


def test_missing_hnsw_file_is_a_corrupt_generation(tmp_path: Path) -> None:
    factory = UsearchIndexFactory(exact_limit=5)
    factory.build(tmp_path / "v", [f"u#{i}" for i in range(20)], random_vectors(20))
    (tmp_path / "v" / HNSW_FILE).unlink()
    with pytest.raises(GenerationCorrupted):
        factory.open(tmp_path / "v")


def test_hnsw_path_agrees_with_exact_search(tmp_path: Path) -> None:
    n, dims = 400, 32
    ids = [f"r{i}.md#0" for i in range(n)]
    rng = np.random.default_rng(1)
    centres = rng.standard_normal((8, dims))
    # Clustered, like real embeddings (uniform random 384-d data is HNSW's worst case).
    vectors = centres[rng.integers(0, 8, n)] + 0.5 * rng.standard_normal((n, dims))
    exact, hnsw = UsearchIndexFactory(), UsearchIndexFactory(exact_limit=10)
    exact.build(tmp_path / "exact", ids, vectors)
    hnsw.build(tmp_path / "hnsw", ids, vectors)
    assert not (tmp_path / "exact" / HNSW_FILE).exists()
    exact_searcher, hnsw_searcher = exact.open(tmp_path / "exact"), hnsw.open(tmp_path / "hnsw")
    assert (exact_searcher.mode, hnsw_searcher.mode) == ("exact", "hnsw")
    overlap = []
    for row in range(0, n, 20):
        assert hnsw_searcher.search(vectors[row], 1)[0][0] == ids[row]
        query = vectors[row] + 0.3 * rng.standard_normal(dims)
        top_exact, top_hnsw = exact_searcher.search(query, 10), hnsw_searcher.search(query, 10)
        assert top_hnsw[0] == pytest.approx(top_exact[0])
        # HNSW candidates are rescored exactly: ``similarities`` agree (up to float32 rounding).
        sims = hnsw_searcher.similarities(query, [u for u, _ in top_hnsw])
        assert sims == pytest.approx([s for _, s in top_hnsw], abs=1e-6)
        overlap.append(len({u for u, _ in top_exact} & {u for u, _ in top_hnsw}) / 10)
    assert sum(overlap) / len(overlap) >= 0.95
    # Reopening the HNSW file gives the same answers.
    query = vectors[3]
    assert UsearchIndexFactory(exact_limit=10).open(tmp_path / "hnsw").search(query, 10) == (
        hnsw_searcher.search(query, 10)
    )


def test_accepts_numpy_rows_and_returns_plain_floats(tmp_path: Path) -> None:
    factory = UsearchIndexFactory()
    vectors = [np.asarray(v, dtype=np.float32) for v in random_vectors(10)]
    factory.build(tmp_path / "v", [f"u#{i}" for i in range(10)], vectors)
    hits = factory.open(tmp_path / "v").search(vectors[0], 3)
    assert all(type(u) is str and type(s) is float for u, s in hits)


def test_closed_searcher_refuses_to_search(tmp_path: Path) -> None:
    factory = UsearchIndexFactory()
    factory.build(tmp_path / "v", ["a#0"], [[1.0, 0.0]])
    searcher = factory.open(tmp_path / "v")
    searcher.close()
    with pytest.raises(RuntimeError):
        searcher.search([1.0, 0.0], 1)


def test_the_same_vectors_build_the_same_hnsw_graph(tmp_path: Path) -> None:
    """Identical inputs rank identically (replay, evaluation): the HNSW graph is built on one
    thread, since usearch's parallel insertion links other neighbours each build."""
    n, dims = 3_000, 32
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((n, dims))
    ids = [f"r{i}.md#0" for i in range(n)]
    built = []
    for attempt in range(3):
        factory = UsearchIndexFactory(exact_limit=10)
        factory.build(tmp_path / str(attempt), ids, vectors)
        built.append((tmp_path / str(attempt) / HNSW_FILE).read_bytes())
    assert built[0] == built[1] == built[2]
