"""Tune a project's fusion and rerank settings on its judged cases (issue 18), with a guard.

Every case's frozen trace stores each candidate's stage ranks and scores, so any setting that
only re-orders the stored fused set is evaluated without running retrieval again:

- ``rrf_k`` re-fuses the stored lexical and dense ranks (``pipeline.rrf_score``/``rrf_order``);
- ``rerank_depth`` and the parameters of the project's fusion function (``alpha``,
  ``normalisation``, ``cosine_floor`` as far as it takes them) re-score the window with that
  registered fusion's own formula (``retrieval.fusion``: ``rerank``, or ``components`` and
  ``combine`` to score every ``alpha`` at once).

A candidate that enters a window without a stored cosine (it was neither in the dense list nor
in the recorded window) gets the dense list's lowest similarity, an upper bound on its own; the
result counts such estimates. Depths of the first stages and BM25's parameters change what is
retrieved and are not searched here. ``rerank_depth`` values above the smallest recorded window
are left out (the result says so).

The guard: k-fold cross-validation by case. For each fold, the setting with the best mean
nDCG@10 on the other folds is graded on the held-out cases; those held-out values are paired
with the current setting's by a bootstrap interval and a sign-flip p (``metrics``). A proposal
(the best setting on all cases) is made only when the interval's lower bound is above 0.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.progress import Progress, no_progress
from memory_core.evaluation.metrics import Judgments, MetricLevel, RankedItem, grade, mrr, ndcg_at, recall_at
from memory_core.evaluation.report import MIN_CASES_FOR_INTERVAL, CaseInput
from memory_core.evaluation.statistics import DEFAULT_BOOTSTRAP_RESAMPLES, paired_bootstrap, paired_randomization_p
from memory_core.retrieval.fusion import (
    FUSION_SETTING,
    MAX,
    MINMAX,
    ConvexFusionReranker,
    Fusion,
    fusion_from_settings,
    parameters_of,
)
from memory_core.retrieval.pipeline import rrf_order, rrf_score
from memory_core.retrieval.profile import RankingProfile, check_setting_type

CONVEX_FLOOR = ConvexFusionReranker.name

GRID_KEYS = ("rrf_k", "rerank_depth", "normalisation", "cosine_floor", "alpha")
DEFAULT_GRID: Mapping[str, tuple[Any, ...]] = {
    "rrf_k": (10, 30, 60, 100),
    "rerank_depth": (10, 20, 30, 50),
    "normalisation": (MAX, MINMAX),
    "cosine_floor": (0.0, 0.1, 0.2, 0.3),
    "alpha": tuple(round(0.1 * i, 1) for i in range(11)),
}
MAX_GRID_SETTINGS = 20_000  # a bound on the grid alone
# A bound on the work one tuning does: every setting is graded on every case (1,409 settings x
# 1,000 cases took 21 s on one core, docs/performance.md), so this is about a minute of CPU.
MAX_TUNE_WORK = 4_000_000
DEFAULT_FOLDS = 5
MAX_FOLDS = 20
NOT_SEARCHED = ("lexical_depth", "dense_depth", "bm25_k1", "bm25_b")  # they change what is retrieved
FOLD_SEED = 0


@attrs.frozen
class TuneMetrics:
    """Means over the cases tuned on (each case graded at the tuning's level)."""

    ndcg_at_10: float
    recall_at_20: float
    mrr: float


@attrs.frozen
class TuneResult:
    """A tuning and its verdict. ``proposal`` is set only when ``proposed``."""

    tune_id: str
    project_id: str
    created_at: str
    level: str
    folds: int
    cases: int  # cases with at least one relevant item: the ones tuned on
    excluded_cases: int  # cases without relevant items
    grid_size: int
    current: Mapping[str, Any]
    verdict: str  # in words: why there is a proposal or not
    left_out: tuple[str, ...]  # grid values not searched, and why
    # The outcome (None when there were too few cases to cross-validate).
    current_metrics: TuneMetrics | None = None
    best: Mapping[str, Any] | None = None  # the best setting on all cases, proposed or not
    cross_validated: TuneMetrics | None = None  # the held-out grades of each fold's choice
    gain: float | None = None  # cross-validated nDCG@10 minus the current's
    gain_low: float | None = None
    gain_high: float | None = None
    p_value: float | None = None
    proposed: bool = False
    proposal: Mapping[str, Any] | None = None
    estimated_similarities: int = 0
    not_searched: tuple[str, ...] = NOT_SEARCHED
    seconds: float = 0.0


@attrs.frozen
class PairedGain:
    """Held-out nDCG@10 against the current ranking's on the same cases, as both a tuning and a
    learning report it: the mean difference, its paired 95 % bootstrap interval, the sign-flip p."""

    gain: float
    gain_low: float
    gain_high: float
    p_value: float

    @classmethod
    def of(cls, held_out: Sequence[float], now: Sequence[float], resamples: int) -> PairedGain:
        interval = paired_bootstrap(held_out, now, resamples)
        return cls(interval.mean_diff, interval.low, interval.high, paired_randomization_p(held_out, now, resamples))

    @property
    def interval(self) -> str:
        return f"[{self.gain_low:+.4f}, {self.gain_high:+.4f}]"

    def fields(self) -> dict[str, Any]:
        """The result's keyword arguments (``TuneResult`` and ``LearnResult`` name them alike)."""
        return attrs.asdict(self)


# -- the grid ---------------------------------------------------------------------------------
def check_work(settings: int, cases: int) -> None:
    """``InvalidRequest`` when grading ``settings`` on ``cases`` is more than ``MAX_TUNE_WORK``."""
    if settings * cases > MAX_TUNE_WORK:
        raise InvalidRequest(
            f"{settings:,} settings x {cases:,} cases is {settings * cases:,} gradings, more than "
            f"{MAX_TUNE_WORK:,}: give fewer grid values (--grid) or tune on fewer cases",
            settings=settings, cases=cases, limit=MAX_TUNE_WORK,
        )


def fusion_name(current: Mapping[str, Any]) -> str:
    """The fusion a setting names (settings from before issue 32 name none: the convex-with-floor)."""
    return str(current.get(FUSION_SETTING, CONVEX_FLOOR))


def searched_keys(current: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``GRID_KEYS`` a tuning searches: the fusion stage's, and those the fusion in use takes."""
    takes = parameters_of(fusion_name(current))
    return tuple(k for k in GRID_KEYS if k in ("rrf_k", "rerank_depth") or k in takes)


def grid_settings(grid: Mapping[str, Sequence[Any]], current: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every combination, the current setting first (it is always graded); each setting is the
    whole of ``current`` with the searched keys varied. Bad values, a key the fusion in use does
    not take and a grid over ``MAX_GRID_SETTINGS`` are ``InvalidRequest``."""
    unknown = sorted(str(k) for k in grid if k not in GRID_KEYS)
    if unknown:
        raise InvalidRequest(f"unknown grid key(s): {', '.join(unknown)}; known: {', '.join(GRID_KEYS)}")
    keys = searched_keys(current)
    foreign = sorted(str(k) for k in grid if k not in keys)
    if foreign:
        raise InvalidRequest(
            f"the fusion in use ({fusion_name(current)}) does not take {', '.join(foreign)}; "
            f"searchable: {', '.join(keys)}", key=foreign[0],
        )  # fmt: skip
    axes = []
    for key in keys:
        given = grid.get(key, DEFAULT_GRID[key])
        if not isinstance(given, list | tuple):
            raise InvalidRequest(f"grid key {key} takes a list of values, got {given!r}", key=key)
        values = tuple(given)
        if not values:
            raise InvalidRequest(f"grid key {key} has no values", key=key)
        axes.append(values)
    size = math.prod(len(a) for a in axes)
    if size > MAX_GRID_SETTINGS:
        raise InvalidRequest(
            f"the grid has {size:,} settings, more than {MAX_GRID_SETTINGS:,}: give fewer values", size=size
        )
    fixed = {FUSION_SETTING: fusion_name(current), **{k: v for k, v in current.items() if k != FUSION_SETTING}}
    settings = [{**fixed, **dict(zip(keys, combo, strict=True))} for combo in itertools.product(*axes)]
    for key, values in zip(keys, axes, strict=True):
        for v in values:
            _check_setting({**settings[0], key: v})
    first = dict(fixed)
    return [first, *(s for s in settings if s != first)]


def check_folds(folds: object) -> None:
    if type(folds) is not int or not 2 <= folds <= MAX_FOLDS:
        raise InvalidRequest(f"folds must be an integer from 2 to {MAX_FOLDS}, got {folds!r}", folds=folds)


def _check_setting(setting: Mapping[str, Any]) -> None:
    for key, value in setting.items():
        check_setting_type(key, value)
    RankingProfile(rrf_k=setting["rrf_k"], rerank_depth=setting["rerank_depth"])
    fusion_of(setting)


def fusion_of(setting: Mapping[str, Any]) -> Fusion:
    """The registered fusion a setting names, with its parameters (the one formula it ranks by)."""
    name = fusion_name(setting)
    return fusion_from_settings({FUSION_SETTING: name, **{k: setting[k] for k in parameters_of(name) if k in setting}})


# -- one case, prepared once ------------------------------------------------------------------
@attrs.frozen
class _Input:
    """What the reranker reads of a candidate (``RerankInput``), from its stored record."""

    unit_id: str
    resource_id: str
    resource_hash: str
    exact_rank: int | None
    bm25_score: float | None
    dense_similarity: float | None
    lexical_rank: int | None
    dense_rank: int | None
    rrf_score: float = 0.0  # unused by the fusion reranker; the fused order is kept by position
    text: str = ""
    heading_path: tuple[str, ...] = ()
    item: RankedItem = attrs.field(init=False, eq=False)

    @item.default
    def _item(self) -> RankedItem:
        return RankedItem(self.unit_id, self.resource_id, self.resource_hash)


@attrs.frozen
class _Case:
    case_id: str
    inputs: tuple[_Input, ...]
    window: int  # the recorded rerank window
    estimated: frozenset[str]  # units whose cosine is an estimate
    judgments: Judgments


def _prepare(case: CaseInput) -> _Case:
    dense_floor = min((c.dense_score for c in case.candidates if c.dense_score is not None), default=None)
    inputs, estimated = [], set()
    for c in case.candidates:
        similarity = c.dense_similarity
        if similarity is None and dense_floor is not None:
            similarity = dense_floor
            estimated.add(c.unit_id)
        inputs.append(
            _Input(
                c.unit_id,
                c.resource_id,
                c.resource_hash,
                c.exact_rank,
                c.bm25_score,
                similarity,
                c.lexical_rank,
                c.dense_rank,
            )
        )
    window = sum(1 for c in case.candidates if c.rerank_rank is not None)
    return _Case(case.case_id, tuple(inputs), window, frozenset(estimated), case.judgments)


def _fused(case: _Case, rrf_k: int) -> list[_Input]:
    """The fused order for ``rrf_k`` (``pipeline.fuse``'s scores and tie rule)."""
    return sorted(case.inputs, key=lambda i: rrf_order(rrf_score(i.lexical_rank, i.dense_rank, rrf_k),
                                                       i.lexical_rank, i.dense_rank, i.unit_id))  # fmt: skip


def _items(order: Sequence[_Input]) -> list[RankedItem]:
    return [i.item for i in order]


def final_order(case: CaseInput, setting: Mapping[str, Any]) -> list[RankedItem]:
    """The whole final order a setting gives a case (as ``apply_rerank``: the window by score,
    ties in RRF order, then the rest in RRF order)."""
    prepared = _prepare(case)
    fused = _fused(prepared, setting["rrf_k"])
    depth = setting["rerank_depth"]
    head, tail = fused[:depth], fused[depth:]
    scores = fusion_of(setting).rerank("", head)
    ranked = [head[i] for i in sorted(range(len(head)), key=lambda i: -scores[i])]  # stable: RRF order on ties
    return _items(ranked + tail)


# -- the grades of every setting --------------------------------------------------------------
def _deciding(order: Sequence[int], resources: Sequence[str], level: MetricLevel) -> tuple[int, ...]:
    """The leading ranks that decide nDCG@10: ten units, or the units up to the tenth distinct resource."""
    if level is MetricLevel.UNIT:
        return tuple(order[:10])
    seen: set[str] = set()
    for n, i in enumerate(order):
        seen.add(resources[i])
        if len(seen) == 10:
            return tuple(order[: n + 1])
    return tuple(order)


def _alpha_scores(fusion: Fusion, head: Sequence[_Input], alphas: Sequence[float]) -> list[list[float]]:
    """The fusion's scores of ``head`` for each ``alpha``: the normalised parts once, then its
    ``combine`` per alpha where the fusion is convex, else its ``rerank`` per alpha."""
    components = getattr(fusion, "components", None)
    if components is not None:
        parts = list(zip(*components(head), strict=True))
        return [[fusion.combine(a, x, d, b) for x, d, b in parts] for a in alphas]  # type: ignore[attr-defined]
    return [fusion.rerank("", head) for _ in alphas]


def _grades(case: _Case, settings: Sequence[Mapping[str, Any]], level: MetricLevel) -> tuple[list[float], bool]:
    """nDCG@10 of every setting for one case, and whether any used an estimated cosine."""
    out = [0.0] * len(settings)
    memo: dict[tuple[Any, ...], float] = {}
    used_estimate = False
    groups: dict[tuple[Any, ...], list[int]] = {}  # settings that differ in alpha alone
    for index, s in enumerate(settings):
        groups.setdefault(tuple(sorted((k, v) for k, v in s.items() if k != "alpha")), []).append(index)
    fused_by_k: dict[int, list[_Input]] = {}
    for key_items, indices in groups.items():
        fixed = dict(key_items)
        rrf_k, depth = fixed["rrf_k"], fixed["rerank_depth"]
        fused = fused_by_k.get(rrf_k) or fused_by_k.setdefault(rrf_k, _fused(case, rrf_k))
        head, tail = fused[:depth], fused[depth:]
        if case.estimated and any(i.unit_id in case.estimated for i in head):
            used_estimate = True
        fusion = fusion_of(settings[indices[0]])
        alphas = [settings[i].get("alpha", 0.0) for i in indices]
        resources = [i.resource_id for i in head]
        positions = range(len(head))
        for index, fused_scores in zip(indices, _alpha_scores(fusion, head, alphas), strict=True):
            scores = [-v for v in fused_scores]
            order = sorted(positions, key=scores.__getitem__)  # stable: RRF order on ties, as apply_rerank
            top = _deciding(order, resources, level)
            key = (rrf_k, depth, top)
            if key not in memo:
                ranking = [head[j] for j in top] + (tail[:50] if len(top) == len(head) else [])
                memo[key] = ndcg_at(grade(_items(ranking), case.judgments, level), 10) or 0.0
            out[index] = memo[key]
    return out, used_estimate


def _folds(case_ids: Sequence[str], k: int) -> list[list[int]]:
    order = sorted(range(len(case_ids)), key=lambda i: case_ids[i])
    random.Random(FOLD_SEED).shuffle(order)
    return [sorted(order[f::k]) for f in range(k)]


def _best(matrix: Sequence[Sequence[float]], columns: Sequence[int]) -> int:
    """The setting with the highest mean over ``columns`` (``matrix[case][setting]``); the
    current (setting 0) on a tie, then grid order."""
    sums = [math.fsum(values) for values in zip(*(matrix[c] for c in columns), strict=True)]
    top = max(sums)
    tolerance = 1e-12 * max(1, len(columns))
    return 0 if sums[0] >= top - tolerance else next(i for i, v in enumerate(sums) if v >= top - tolerance)


def _metrics(cases: Sequence[CaseInput], chosen: Sequence[Mapping[str, Any]], level: MetricLevel) -> TuneMetrics:
    values: list[tuple[float, float, float]] = []
    for case, setting in zip(cases, chosen, strict=True):
        graded = grade(final_order(case, setting), case.judgments, level)
        values.append((ndcg_at(graded, 10) or 0.0, recall_at(graded, 20) or 0.0, mrr(graded) or 0.0))
    n = len(values)
    return TuneMetrics(*(math.fsum(v[i] for v in values) / n for i in range(3)))


def tune(
    cases: Sequence[CaseInput],
    current: Mapping[str, Any],
    *,
    tune_id: str,
    project_id: str,
    created_at: str,
    grid: Mapping[str, Sequence[Any]] | None = None,
    folds: int = DEFAULT_FOLDS,
    level: MetricLevel = MetricLevel.RESOURCE,
    resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    clock: Callable[[], float] = time.perf_counter,
    progress: Progress = no_progress,
) -> TuneResult:
    """Grade every setting of the grid on the cases, cross-validate the choice, and propose it
    only when it beats ``current`` (the fusion stage's keys, the fusion's name and every parameter
    it takes) with an interval above 0. ``progress``: ("grading", cases graded, cases)."""
    t0 = clock()
    check_folds(folds)
    settings = grid_settings(grid or {}, current)
    prepared = [_prepare(c) for c in cases]
    judged = [i for i, c in enumerate(cases) if grade([], c.judgments, level).relevant > 0]
    smallest_window = min((prepared[i].window for i in judged), default=0)
    left_out: list[str] = []
    longest = max((len(prepared[i].inputs) for i in judged), default=0)
    if judged and smallest_window < longest:
        too_deep = sorted({s["rerank_depth"] for s in settings[1:] if s["rerank_depth"] > smallest_window})
        if too_deep:
            left_out.append(
                f"rerank_depth {', '.join(map(str, too_deep))}: deeper than the smallest recorded "
                f"window ({smallest_window}), whose candidates past it have no recorded cosine"
            )
            settings = [settings[0], *(s for s in settings[1:] if s["rerank_depth"] <= smallest_window)]
    base: dict[str, Any] = dict(
        tune_id=tune_id,
        project_id=project_id,
        created_at=created_at,
        level=level.value,
        excluded_cases=len(cases) - len(judged),
        grid_size=len(settings),
        current=dict(current),
        left_out=tuple(left_out),
    )
    if len(judged) < max(MIN_CASES_FOR_INTERVAL, folds):
        verdict = (
            f"too few judged cases with a relevant item: {len(judged)}, at least "
            f"{max(MIN_CASES_FOR_INTERVAL, folds)} are needed for {folds}-fold cross-validation"
        )
        return TuneResult(folds=folds, cases=len(judged), verdict=verdict, seconds=round(clock() - t0, 3), **base)
    matrix: list[list[float]] = []  # matrix[case][setting]: the case's nDCG@10 under the setting
    estimated = 0
    for done, i in enumerate(judged):
        progress("grading", done, len(judged))
        grades, used = _grades(prepared[i], settings, level)
        matrix.append(grades)
        estimated += used
    progress("grading", len(judged), len(judged))
    chosen: list[int] = [0] * len(judged)
    for fold in _folds([prepared[i].case_id for i in judged], folds):
        held = set(fold)
        best = _best(matrix, [c for c in range(len(judged)) if c not in held])
        for c in fold:
            chosen[c] = best
    held_out = [matrix[c][chosen[c]] for c in range(len(judged))]
    now = [matrix[c][0] for c in range(len(judged))]
    gain = PairedGain.of(held_out, now, resamples)
    best_all = _best(matrix, list(range(len(judged))))
    judged_cases = [cases[i] for i in judged]
    current_metrics = _metrics(judged_cases, [settings[0]] * len(judged), level)
    cross_validated = _metrics(judged_cases, [settings[c] for c in chosen], level)
    proposed = gain.gain_low > 0 and best_all != 0
    if best_all == 0:
        verdict = "the current setting is already the best of the grid on these cases: nothing to propose"
    elif proposed:
        verdict = (
            f"proposed: cross-validated nDCG@10 {gain.gain:+.4f} over the current setting, "
            f"95% interval {gain.interval}, p = {gain.p_value:.3f}"
        )
    else:
        verdict = (
            f"no proposal: the cross-validated gain {gain.gain:+.4f} has a 95% interval "
            f"{gain.interval} that does not lie above 0 (p = {gain.p_value:.3f})"
        )
    best_setting = dict(settings[best_all])
    return TuneResult(
        folds=folds,
        cases=len(judged),
        current_metrics=current_metrics,
        best=best_setting,
        cross_validated=cross_validated,
        proposed=proposed,
        proposal=best_setting if proposed else None,
        verdict=verdict,
        estimated_similarities=estimated,
        seconds=round(clock() - t0, 3),
        **gain.fields(),
        **base,
    )


def current_setting(rrf_k: int, rerank_depth: int, fusion: Fusion) -> dict[str, Any]:
    """The setting a project ranks with now: the fusion stage's keys, the fusion's name and parameters."""
    return {"rrf_k": rrf_k, "rerank_depth": rerank_depth, **fusion.settings()}
