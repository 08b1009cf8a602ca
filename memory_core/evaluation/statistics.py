"""Statistics over per-case values (brief §7): means that count what they exclude, the
nearest-rank percentile, and the paired tests every comparison uses: a percentile bootstrap
interval (Efron and Tibshirani, 1993) and a sign-flip randomization test (Fisher's paired
permutation test; Smucker, Allan and Carterette, 2007, for its use in IR evaluation).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from itertools import compress, islice
from operator import itemgetter
from typing import NamedTuple

import attrs

from memory_core.domain.errors import InvalidRequest

DEFAULT_BOOTSTRAP_RESAMPLES = 2_000
"""With 2,000 resamples the Monte Carlo error of the 2.5 %/97.5 % bounds is ~1.5 % of the interval's
width (normal approximation). The draws are shared by every comparison of one length and each draw
sums all their values at once (``_Packed``): a report's 14 comparisons over 809 cases take ~1 s
where one test per call took ~0.12 s each (2 cores)."""


def percentile_nearest_rank(values: Iterable[float], p: float) -> float | None:
    """Nearest-rank percentile: the smallest value with at least p % of values at or below it.

    p is in [0, 100]; p = 0 gives the minimum. None for no values.
    """
    if not 0 <= p <= 100 or math.isnan(p):
        raise InvalidRequest(f"percentile must be within [0, 100], got {p!r}", p=p)
    ordered = sorted(values)
    if not ordered:
        return None
    # Exact arithmetic: p / 100 * n in floats puts e.g. p = 7, n = 100 at rank 8.
    rank = max(1, math.ceil(Fraction(p) * len(ordered) / 100))
    return ordered[rank - 1]


@attrs.frozen
class Summary:
    """A mean over cases; ``excluded`` counts cases without relevant items (``None``)."""

    mean: float | None
    counted: int
    excluded: int


def summarize(values: Iterable[float | None]) -> Summary:
    kept: list[float] = []
    excluded = 0
    for value in values:
        if value is None:
            excluded += 1
        else:
            kept.append(value)
    mean = math.fsum(kept) / len(kept) if kept else None
    return Summary(mean=mean, counted=len(kept), excluded=excluded)


def _check_pairs(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], resamples: int) -> list[list[float]]:
    """Each pair's differences ``a - b``; every pair has the same positive length, every value is finite."""
    if type(resamples) is not int or resamples < 1:
        raise InvalidRequest(f"resamples must be a positive integer, got {resamples!r}", resamples=resamples)
    out: list[list[float]] = []
    for a, b in pairs:
        if len(a) != len(b):
            raise InvalidRequest("paired samples must have the same length", a=len(a), b=len(b))
        if not a:
            raise InvalidRequest("paired samples must not be empty")
        if out and len(a) != len(out[0]):
            raise InvalidRequest("pairs sharing draws must have the same length", first=len(out[0]), other=len(a))
        diffs = [float(x) - float(y) for x, y in zip(a, b, strict=True)]
        if not all(map(math.isfinite, diffs)):
            raise InvalidRequest("paired samples must be finite numbers")
        out.append(diffs)
    return out


def _picker(positions: Sequence[int]) -> Callable[[Sequence[int]], tuple[int, ...]]:
    """``itemgetter(*positions)`` that always returns a tuple (itemgetter of one returns the item)."""
    if len(positions) == 1:
        only = positions[0]
        return lambda values: (values[only],)
    if not positions:
        return lambda values: ()
    return itemgetter(*positions)


@attrs.frozen
class _Packed:
    """Every pair's differences, exactly, side by side in one integer per case, so that one ``sum``
    over the cases of a draw sums every pair at once (the interpreter adds big integers in C).

    A float is an integer times a power of two: ``scale`` is the finest power any difference needs,
    so each is the exact integer ``d * 2**scale``. Pair ``c`` occupies bits ``[c * width, (c + 1) *
    width)``, offset by ``2**magnitude`` to be non-negative, with room for the sum of every case. A
    field's sum, less the offsets, divided by ``2**scale`` (integer true division rounds correctly)
    is the float ``math.fsum`` gives for those values: the same sums as summing pair by pair."""

    scale: int
    offset: int
    width: int
    totals: tuple[int, ...]  # each pair's exact sum over all cases (times 2**scale)
    cases: tuple[int, ...]  # per case, every pair's field

    @classmethod
    def of(cls, all_diffs: Sequence[Sequence[float]]) -> _Packed:
        ratios = [[d.as_integer_ratio() for d in diffs] for diffs in all_diffs]
        scale = max(den.bit_length() - 1 for pair in ratios for _, den in pair)  # den is a power of 2
        exact = [[num << (scale - den.bit_length() + 1) for num, den in pair] for pair in ratios]
        magnitude = max(abs(q).bit_length() for pair in exact for q in pair)
        offset = 1 << magnitude  # q + offset lies in (0, 2**(magnitude + 1))
        width = magnitude + 1 + len(exact[0]).bit_length()  # holds n values below 2**(magnitude + 1)
        cases = tuple(
            sum((q + offset) << (width * c) for c, q in enumerate(column)) for column in zip(*exact, strict=True)
        )
        return cls(scale, offset, width, tuple(sum(pair) for pair in exact), cases)

    def sums(self, packed: int, count: int) -> list[int]:
        """Each pair's exact sum (times 2**scale) in ``packed``, the sum of ``count`` cases' fields."""
        mask, width, less = (1 << self.width) - 1, self.width, count * self.offset
        return [((packed >> (width * c)) & mask) - less for c in range(len(self.totals))]

    def to_float(self, exact: int) -> float:
        """``math.fsum`` of the values whose exact sum this is: the correctly rounded float."""
        return exact / (1 << self.scale)


class BootstrapInterval(NamedTuple):
    """Mean of ``a - b`` and its 95 % paired percentile-bootstrap interval (unpacks as a tuple)."""

    mean_diff: float
    low: float
    high: float


def paired_bootstraps(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
    resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> list[BootstrapInterval]:
    """``paired_bootstrap(a, b, resamples, seed)`` of each pair (all of one length), drawing each
    resample's cases once for all pairs: each result equals that of its own call."""
    all_diffs = _check_pairs(pairs, resamples)
    if not all_diffs:
        return []
    n = len(all_diffs[0])
    packed = _Packed.of(all_diffs)
    means: list[list[float]] = [[] for _ in all_diffs]
    draw, scale = random.Random(seed).random, float(n)
    for _ in range(resamples):
        # The cases of one resample: floor(random() * n) for each of n, as rng.choices(diffs, k=n)
        # draws them, the loop run by the interpreter's iterators.
        pick = _picker(list(map(math.floor, map(scale.__mul__, islice(iter(draw, None), n)))))
        for out, total in zip(means, packed.sums(sum(pick(packed.cases)), n), strict=True):
            out.append(packed.to_float(total) / n)
    results = []
    for resampled, total in zip(means, packed.totals, strict=True):
        low = percentile_nearest_rank(resampled, 2.5)
        high = percentile_nearest_rank(resampled, 97.5)
        assert low is not None and high is not None  # resampled is never empty
        results.append(BootstrapInterval(mean_diff=packed.to_float(total) / n, low=low, high=high))
    return results


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> BootstrapInterval:
    """95 % percentile interval of mean(a - b) over cases resampled with replacement.

    Deterministic for a seed (``random.Random(seed)``); quantiles are nearest-rank. Sums are exact
    and rounded once (``math.fsum``'s), so a resample holding the same values as the sample has
    exactly its mean.
    """
    return paired_bootstraps([(a, b)], resamples, seed)[0]


def paired_randomization_ps(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
    resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> list[float]:
    """``paired_randomization_p(a, b, resamples, seed)`` of each pair (all of one length), drawing
    each resample's signs once for all pairs: each result equals that of its own call."""
    all_diffs = _check_pairs(pairs, resamples)
    if not all_diffs:
        return []
    n = len(all_diffs[0])
    packed = _Packed.of(all_diffs)
    thresholds = []
    for total in packed.totals:
        observed = abs(packed.to_float(total)) / n
        # A relative tolerance so that a flip giving the same |mean| up to rounding counts as reaching it.
        thresholds.append(observed - 1e-12 * max(1.0, observed))
    reached = [0] * len(all_diffs)
    draw, cases = random.Random(seed).random, range(n)
    for _ in range(resamples):
        # Each case keeps its sign with probability 1/2, one draw per case in case order; the kept
        # cases sum to K, so the flipped sum is K - (total - K) = 2K - total.
        keep = [draw() < 0.5 for _ in cases]
        kept = packed.sums(sum(compress(packed.cases, keep)), sum(keep))
        for i, (k, total, threshold) in enumerate(zip(kept, packed.totals, thresholds, strict=True)):
            if abs(packed.to_float(2 * k - total)) / n >= threshold:
                reached[i] += 1
    return [(r + 1) / (resamples + 1) for r in reached]


def paired_randomization_p(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> float:
    """Two-sided p-value of a paired sign-flip randomization test on mean(a - b).

    p = (1 + resamples whose |mean| reaches the observed |mean|) / (1 + resamples); identical
    inputs give 1.0. Deterministic for a seed (``random.Random(seed)``).
    """
    return paired_randomization_ps([(a, b)], resamples, seed)[0]
