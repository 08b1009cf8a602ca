"""The statistics evaluation reports rest on: nearest-rank percentiles, means that leave out
undefined figures, and the paired bootstrap interval and randomization test between variants."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.domain.errors import InvalidRequest
from memory_core.evaluation.statistics import (
    paired_bootstrap,
    paired_randomization_p,
    percentile_nearest_rank,
    summarize,
)

# --- percentiles and means ---------------------------------------------------------------------


def test_percentile_nearest_rank_examples() -> None:
    values = [15.0, 20.0, 35.0, 40.0, 50.0]
    assert percentile_nearest_rank(values, 5) == 15.0
    assert percentile_nearest_rank(values, 30) == 20.0
    assert percentile_nearest_rank(values, 40) == 20.0
    assert percentile_nearest_rank(values, 50) == 35.0
    assert percentile_nearest_rank(values, 100) == 50.0
    assert percentile_nearest_rank(values, 0) == 15.0
    assert percentile_nearest_rank([], 50) is None
    assert percentile_nearest_rank(range(1, 101), 7) == 7  # 7 / 100 * 100 rounds up in floats
    with pytest.raises(InvalidRequest):
        percentile_nearest_rank(values, 101)
    with pytest.raises(InvalidRequest):
        percentile_nearest_rank(values, float("nan"))


@given(st.lists(st.integers(-1000, 1000), min_size=1, max_size=60), st.integers(1, 100))
def test_percentile_nearest_rank_property(values: list[int], p: int) -> None:
    got = percentile_nearest_rank([float(v) for v in values], p)
    assert got is not None and got in values
    n = len(values)
    assert sum(v <= got for v in values) * 100 >= p * n
    assert sum(v < got for v in values) * 100 < p * n


def test_summarize_excludes_and_counts_none() -> None:
    assert summarize([1.0, None, 0.0, None]) == summarize([0.0, 1.0, None, None])
    s = summarize([1.0, None, 0.5])
    assert (s.mean, s.counted, s.excluded) == (0.75, 2, 1)
    assert summarize([None]).mean is None


# --- paired bootstrap and randomization --------------------------------------------------------

paired = st.integers(1, 40).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(0, 1), min_size=n, max_size=n), st.lists(st.floats(0, 1), min_size=n, max_size=n)
    )
)


@settings(max_examples=60, deadline=None)
@given(paired, st.integers(0, 2**32))
def test_bootstrap_interval_contains_the_mean_and_is_deterministic(
    ab: tuple[list[float], list[float]], seed: int
) -> None:
    a, b = ab
    result = paired_bootstrap(a, b, resamples=400, seed=seed)
    assert result.low <= result.mean_diff <= result.high
    assert result.mean_diff == pytest.approx(sum(a) / len(a) - sum(b) / len(b), abs=1e-12)
    assert paired_bootstrap(a, b, resamples=400, seed=seed) == result
    mean_diff, low, high = result
    assert (mean_diff, low, high) == (result.mean_diff, result.low, result.high)


def test_bootstrap_is_zero_width_for_identical_or_constant_shift() -> None:
    a = [0.1, 0.7, 0.3, 1.0, 0.0]
    assert tuple(paired_bootstrap(a, a)) == (0.0, 0.0, 0.0)
    b = [0.5, 0.25, 0.75, 0.125]  # dyadic, so every difference is exactly 0.25
    shifted = paired_bootstrap([x + 0.25 for x in b], b, resamples=300)
    assert shifted.low == shifted.mean_diff == shifted.high


def test_bootstrap_seed_changes_resamples_and_separates_real_differences() -> None:
    rng = random.Random(7)
    a = [rng.random() for _ in range(200)]
    b = [x - 0.1 + rng.gauss(0, 0.05) for x in a]
    first, second = paired_bootstrap(a, b, seed=1), paired_bootstrap(a, b, seed=2)
    assert first != second
    assert first.low > 0 and second.low > 0
    assert paired_randomization_p(a, b) < 0.01
    assert paired_randomization_p(a, b, seed=3) == paired_randomization_p(a, b, seed=3)


def test_randomization_p_value_for_identical_inputs_is_one() -> None:
    a = [0.2, 0.4, 0.9]
    assert paired_randomization_p(a, a) == 1.0
    p = paired_randomization_p([1.0, 0.0, 0.5, 0.5], [0.0, 1.0, 0.5, 0.4])
    assert 0.0 < p <= 1.0


def test_bootstrap_refuses_unpaired_or_empty_inputs() -> None:
    with pytest.raises(InvalidRequest):
        paired_bootstrap([1.0], [1.0, 2.0])
    with pytest.raises(InvalidRequest):
        paired_bootstrap([], [])
