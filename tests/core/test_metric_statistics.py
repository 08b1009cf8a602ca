"""The statistics evaluation reports rest on: nearest-rank percentiles, means that leave out
undefined figures, and the paired bootstrap interval and randomization test between variants."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from statistics import NormalDist, fmean, pstdev

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.domain.errors import InvalidRequest
from memory_core.evaluation.statistics import (
    paired_bootstrap,
    paired_bootstraps,
    paired_randomization_p,
    paired_randomization_ps,
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


def test_bootstrap_and_randomization_refuse_bad_resamples_or_unequal_pairs() -> None:
    for bad in (0, -5, 2.5, True):
        with pytest.raises(InvalidRequest):
            paired_bootstrap([1.0], [0.0], resamples=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidRequest):
            paired_randomization_p([1.0], [0.0], resamples=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):  # pairs sharing draws have one length
        paired_bootstraps([([1.0, 2.0], [1.0, 2.0]), ([1.0], [0.0])])
    with pytest.raises(InvalidRequest):
        paired_randomization_ps([([1.0, 2.0], [1.0, 2.0]), ([1.0], [0.0])])
    assert paired_bootstraps([]) == [] and paired_randomization_ps([]) == []


# --- properties of the draws -----------------------------------------------------------------------

constant = st.tuples(st.integers(1, 60), st.floats(-1, 1), st.integers(0, 2**32))


@settings(max_examples=80, deadline=None)
@given(constant)
def test_a_constant_difference_has_a_zero_width_interval_at_its_mean(case: tuple[int, float, int]) -> None:
    n, d, seed = case
    result = paired_bootstrap([d] * n, [0.0] * n, resamples=300, seed=seed)
    assert result.low == result.mean_diff == result.high
    assert result.mean_diff == pytest.approx(d, abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=1, max_size=60), st.integers(0, 2**32))
def test_identical_lists_give_p_one_and_a_zero_interval(a: list[float], seed: int) -> None:
    assert tuple(paired_bootstrap(a, list(a), resamples=300, seed=seed)) == (0.0, 0.0, 0.0)
    assert paired_randomization_p(a, list(a), resamples=300, seed=seed) == 1.0


@settings(max_examples=60, deadline=None)
@given(paired, st.integers(0, 2**32))
def test_swapping_the_samples_mirrors_the_tests(ab: tuple[list[float], list[float]], seed: int) -> None:
    a, b = ab
    forward = paired_bootstrap(a, b, resamples=400, seed=seed)
    backward = paired_bootstrap(b, a, resamples=400, seed=seed)
    assert backward.mean_diff == -forward.mean_diff
    # Same draws, negated means: nearest-rank picks the neighbouring order statistic, so the
    # mirrored bounds are at or just outside the negated ones.
    assert backward.low <= -forward.high and backward.high <= -forward.low
    assert backward.low <= backward.mean_diff <= backward.high
    p = paired_randomization_p(a, b, resamples=400, seed=seed)
    assert p == paired_randomization_p(b, a, resamples=400, seed=seed)
    assert 0.0 < p <= 1.0 and p * 401 == pytest.approx(round(p * 401))  # (reached + 1) / (resamples + 1)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(6, 50).flatmap(
        lambda n: st.lists(st.lists(st.floats(0, 1), min_size=n, max_size=n), min_size=2, max_size=5)
    ),
    st.integers(0, 2**32),
)
def test_comparisons_sharing_draws_equal_their_own_calls(samples: list[list[float]], seed: int) -> None:
    a = samples[0]
    pairs = [(a, b) for b in samples[1:]] + [(samples[-1], a), (a, samples[1]), (a, a)]  # a repeat, identical
    assert paired_bootstraps(pairs, 300, seed) == [paired_bootstrap(x, y, 300, seed) for x, y in pairs]
    assert paired_randomization_ps(pairs, 300, seed) == [paired_randomization_p(x, y, 300, seed) for x, y in pairs]


def test_mostly_equal_samples_give_the_former_results() -> None:
    rng = random.Random(11)
    a = [rng.random() for _ in range(300)]
    b = [x if rng.random() < 0.7 else min(1.0, x + rng.gauss(0.03, 0.1)) for x in a]
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    assert 0 < sum(d != 0 for d in diffs) < 150
    assert paired_randomization_p(a, b, seed=5) == _python_randomization_p(diffs, 2_000, seed=5)
    assert paired_bootstrap(a, b, seed=5)[1:] == _python_bootstrap(diffs, 2_000, seed=5)


wide = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)  # subnormals and every exponent between


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 30).flatmap(lambda n: st.lists(st.lists(wide, min_size=n, max_size=n), min_size=2, max_size=4)),
    st.integers(0, 2**32),
)
def test_sums_of_all_pairs_at_once_are_the_exact_sums_of_each(samples: list[list[float]], seed: int) -> None:
    """Each draw sums every pair at once in exact integer arithmetic (statistics._Packed): bounds
    and p are bit for bit those of summing each pair with math.fsum, at any magnitudes."""
    pairs = [(samples[0], b) for b in samples[1:]]
    intervals = paired_bootstraps(pairs, 60, seed)
    ps = paired_randomization_ps(pairs, 60, seed)
    for (a, b), interval, p in zip(pairs, intervals, ps, strict=True):
        diffs = [x - y for x, y in zip(a, b, strict=True)]
        assert interval.mean_diff == math.fsum(diffs) / len(diffs)
        assert (interval.low, interval.high) == _python_bootstrap(diffs, 60, seed)
        assert p == _python_randomization_p(diffs, 60, seed)


def test_non_finite_values_are_refused() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(InvalidRequest):
            paired_bootstrap([0.5, bad], [0.5, 0.5])
        with pytest.raises(InvalidRequest):
            paired_randomization_p([0.5, 0.5], [bad, 0.5])


# --- the former one-test-per-call implementation, as a reference --------------------------------


def _python_bootstrap(diffs: Sequence[float], resamples: int, seed: int) -> tuple[float, float]:
    """The former implementation, one test per call: random.Random choices, math.fsum means,
    nearest-rank bounds."""
    rng, n = random.Random(seed), len(diffs)
    means = [math.fsum(rng.choices(diffs, k=n)) / n for _ in range(resamples)]
    low, high = percentile_nearest_rank(means, 2.5), percentile_nearest_rank(means, 97.5)
    assert low is not None and high is not None
    return low, high


def _python_randomization_p(diffs: Sequence[float], resamples: int, seed: int) -> float:
    rng, n = random.Random(seed), len(diffs)
    observed = abs(math.fsum(diffs)) / n
    threshold = observed - 1e-12 * max(1.0, observed)
    reached = sum(
        abs(math.fsum(d if rng.random() < 0.5 else -d for d in diffs)) / n >= threshold for _ in range(resamples)
    )
    return (reached + 1) / (resamples + 1)


@pytest.mark.parametrize("dataset", range(8))
def test_draws_shared_by_comparisons_are_the_former_draws_and_within_monte_carlo_error(dataset: int) -> None:
    """The shared draws are the former implementation's, in its order: the same seed gives the same
    bounds and p. Independently of that, different seeds give bounds within Monte Carlo error of
    each other: the standard error of a 2.5 % quantile of R resampled means is
    sqrt(p (1 - p) / R) / phi(z_p) x sd(mean), x sqrt(2) for a difference of two estimates,
    allowed 5 standard errors; for p a binomial standard error."""
    rng = random.Random(100 + dataset)
    n, resamples = rng.choice([40, 150, 400]), 2_000
    shift = rng.choice([0.0, 0.01, 0.03, 0.08])
    a = [rng.random() for _ in range(n)]
    b = [min(1.0, max(0.0, x - shift + rng.gauss(0, 0.25))) if rng.random() < 0.6 else x for x in a]
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    new = paired_bootstrap(a, b, resamples=resamples, seed=dataset)
    assert (new.low, new.high) == _python_bootstrap(diffs, resamples, seed=dataset)
    p_new = paired_randomization_p(a, b, resamples=resamples, seed=dataset)
    assert p_new == _python_randomization_p(diffs, resamples, seed=dataset)

    old_low, old_high = _python_bootstrap(diffs, resamples, seed=dataset + 1_000)
    sd_mean = pstdev(diffs) / math.sqrt(n)
    z = NormalDist().inv_cdf(0.975)
    se = math.sqrt(0.025 * 0.975 / resamples) / NormalDist().pdf(z) * sd_mean
    assert abs(new.low - old_low) <= 5 * math.sqrt(2) * se
    assert abs(new.high - old_high) <= 5 * math.sqrt(2) * se
    # and near the normal approximation of the bootstrap distribution (a sanity bound)
    assert abs(new.low - (fmean(diffs) - z * sd_mean)) <= 0.5 * sd_mean
    p_old = _python_randomization_p(diffs, resamples, seed=dataset + 1_000)
    p = (p_new + p_old) / 2
    assert abs(p_new - p_old) <= 5 * math.sqrt(2 * p * (1 - p) / resamples) + 2 / resamples
