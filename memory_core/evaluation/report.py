"""The benchmark report over Evaluation Cases: B1-B4 at unit and resource level (brief §7).

Pure functions over frozen traces, judgments and corpora. Conventions (also exported in every
fixture as ``metric_conventions``):

- Variants rank the same source trace four ways: B1 ``lexical_rank`` (exact matches, then BM25),
  B2 ``dense_rank``, B3 ``rrf_rank``, B4 ``final_rank``. A candidate without a rank in that stage
  is absent from B1 and B2. Beside them, one variant per registered fusion (``fusion_<name>``,
  ``retrieval.fusion.FUSIONS`` at its registered parameters): the fusion scores the source Run's
  recorded rerank window (its candidates with a rerank rank) from their recorded BM25 score,
  cosine, exact rank and RRF score, the window is ordered by that score (ties in RRF order) and
  the rest follows in RRF order, as ``apply_rerank`` orders it; so every fusion is compared with
  what the Run returned on the same candidates without running retrieval again.
- Recall@20, nDCG@10 and MRR follow ``memory_core.evaluation.metrics`` at both levels; a case without any
  relevant item is excluded from their means and counted (``excluded``). Resource Diversity@10,
  Scope Violation@20 and Stale Result@20 need no judgment: every case with a non-empty ranking
  counts. At resource level they are taken over the resource ranking (first unit of each resource).
- Latency: warm Runs only; nearest-rank p50/p95 per stage and per variant, a variant's latency
  being the sum of the stages it needs (``Variant.stages``) in each Run.
- B4 is compared with B1-B3 and every fusion variant on nDCG@10 over the judged cases: mean
  difference, paired percentile bootstrap 95 % interval and a paired sign-flip randomization
  p-value (seeded, deterministic).
  Under ``MIN_CASES_FOR_INTERVAL`` paired cases the interval and p-value are null and
  ``interval_reason`` says why: with n cases the sign-flip p cannot go below 2^(1-n), so under 6
  it can never reach 0.05, and a bootstrap of one case is a zero-width "interval".
- What the agent was given (B4 only: the source Run's selected fragments, in final order):
  wasted tokens, relevant items per 1,000 returned tokens, reuse that skipped a changed unit
  (``RETURNED_METRICS``; definitions in ``memory_core.evaluation.metrics``, docs/evaluation.md).
  ``None`` values are excluded from the means and counted, as for the judged metrics.
- Missed evidence: every resource of relevance >= 1 (resource level) that the source Run did not
  select gets one category, the first that applies:
  ``never_retrieved`` (no unit in the fused recall set), ``lost_in_fusion`` (ranked by a stage but
  no unit inside the rerank window), ``demoted_by_reranker`` (a unit inside the window would have
  been reached in RRF order, i.e. its RRF rank is within the selection depth D = the last selected
  final rank, but the reranker moved all its units below D), ``cut_at_selection`` (otherwise,
  with the exclusion code of its best-ranked unit).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from memory_core.evaluation import metric_registry as registry
from memory_core.evaluation.metric_registry import JUDGED, RANKING, RETURNED, MetricInput
from memory_core.evaluation.metrics import Judgments, MetricLevel, RankedItem, ReturnedFragment, grade, resource_ranking
from memory_core.evaluation.statistics import (
    DEFAULT_BOOTSTRAP_RESAMPLES,
    paired_bootstraps,
    paired_randomization_ps,
    percentile_nearest_rank,
    summarize,
)
from memory_core.retrieval.fusion import FUSIONS
from memory_core.runs.records import CandidateRecord

REPORT_VERSION = 1
MIN_CASES_FOR_INTERVAL = 6  # the fewest paired cases whose sign-flip p can fall below 0.05 (2^(1-n))
SELECTED = "selected"


@attrs.frozen
class Variant:
    name: str
    label: str
    rank_field: str
    stages: tuple[str, ...]
    fusion: str | None = None  # a registered fusion rescoring the recorded window (module docstring)


_LEXICAL = ("exact", "bm25")
_DENSE = ("embed_query", "dense")
_RERANKED = (*_LEXICAL, *_DENSE, "fusion", "rerank")
STAGE_VARIANTS = (
    Variant("b1_bm25", "B1", "lexical_rank", _LEXICAL),
    Variant("b2_dense_vector", "B2", "dense_rank", _DENSE),
    Variant("b3_hybrid_rrf", "B3", "rrf_rank", (*_LEXICAL, *_DENSE, "fusion")),
    Variant("b4_reranked", "B4", "final_rank", _RERANKED),
)
FUSION_VARIANTS = tuple(Variant(f"fusion_{name}", name, "rrf_rank", _RERANKED, fusion=name) for name in FUSIONS)
VARIANTS = (*STAGE_VARIANTS, *FUSION_VARIANTS)
BASELINE = STAGE_VARIANTS[3]
VARIANT_NAMES = tuple(v.name for v in VARIANTS)
LEVELS = (MetricLevel.UNIT, MetricLevel.RESOURCE)

# The metrics, from the registry (evaluation/metric_registry.py); the names stay importable here.
RECALL, NDCG, MRR = registry.RECALL.name, registry.NDCG.name, registry.MRR.name
DIVERSITY, SCOPE, STALE = registry.DIVERSITY.name, registry.SCOPE.name, registry.STALE.name
METRICS = tuple(m.name for m in registry.of_kind(JUDGED, RANKING))
JUDGED_METRICS = tuple(m.name for m in registry.of_kind(JUDGED))
WASTED, DENSITY, CHANGED_REUSE = registry.WASTED.name, registry.DENSITY.name, registry.CHANGED_REUSE.name
# Of what the source Run returned, so of B4 alone (the selection walks the final order).
RETURNED_METRICS = tuple(m.name for m in registry.of_kind(RETURNED))

NEVER_RETRIEVED = "never_retrieved"
LOST_IN_FUSION = "lost_in_fusion"
DEMOTED_BY_RERANKER = "demoted_by_reranker"
CUT_AT_SELECTION = "cut_at_selection"
MISSED_CATEGORIES = (NEVER_RETRIEVED, LOST_IN_FUSION, DEMOTED_BY_RERANKER, CUT_AT_SELECTION)

BOOTSTRAP_SEED = 0

METRIC_CONVENTIONS: dict[str, Any] = {
    "levels": {
        "unit": "ranking items are units; a unit earns its own judgment, else its resource's judgment "
        "once per resource; relevant items = judged units >= 1 plus judged resources >= 1 none of whose "
        "units has its own judgment >= 1",
        "resource": "first unit of each resource; relevance = max(resource judgment, its units' judgments)",
    },
    "unjudged_relevance": 0,
    **{m.name: m.definition for m in registry.of_kind(JUDGED)},
    "cases_without_relevant_items": "excluded from recall, nDCG and MRR means, and counted",
    **{m.name: m.definition for m in registry.of_kind(RANKING)},
    "variants": {v.name: {"label": v.label, "rank": v.rank_field, "stages": list(v.stages)} for v in VARIANTS},
    "absent_rank": "a candidate without a rank in a variant's stage is absent from that variant",
    "latency": "warm Runs only; nearest-rank p50 and p95 in ms; a variant sums the stages it needs",
    "comparison": {
        "baseline": BASELINE.name,
        "metric": NDCG,
        "bootstrap": "paired percentile bootstrap, 95 %",
        "randomization": "paired sign-flip test, two-sided",
        "resamples": DEFAULT_BOOTSTRAP_RESAMPLES,
        "seed": BOOTSTRAP_SEED,
        "min_cases_for_interval": MIN_CASES_FOR_INTERVAL,
    },
    "missed_evidence": list(MISSED_CATEGORIES),
    "returned": {
        "variant": BASELINE.name,
        "fragments": "the source Run's selected fragments in final order; a reuse carries no text and returns 0 tokens",
        **{m.name: m.definition for m in registry.of_kind(RETURNED)},
    },
}


# -- one case -------------------------------------------------------------------------------------


@attrs.frozen
class CaseInput:
    """What the report needs of one case: its frozen trace, judgments and corpus hashes."""

    case_id: str
    candidates: tuple[CandidateRecord, ...]
    latency_ms: Mapping[str, float]
    warm: bool
    judgments: Judgments
    corpus_hashes: Mapping[str, str]  # resource_id -> frozen resource hash


@attrs.frozen
class _WindowInput:
    """What a fusion reads of a recorded candidate (``RerankInput``); no fusion reads the text."""

    record: CandidateRecord
    text: str = ""

    @property
    def heading_path(self) -> tuple[str, ...]:
        return self.record.heading_path

    @property
    def exact_rank(self) -> int | None:
        return self.record.exact_rank

    @property
    def bm25_score(self) -> float | None:
        return self.record.bm25_score

    @property
    def dense_similarity(self) -> float | None:
        return self.record.dense_similarity

    @property
    def rrf_score(self) -> float:
        return self.record.rrf_score

    @property
    def resource_id(self) -> str:
        return self.record.resource_id


def _fused(by_rrf: Sequence[CandidateRecord], window: Sequence[CandidateRecord], fusion: str) -> list[CandidateRecord]:
    """``apply_rerank``'s order with ``fusion`` scoring the recorded window (module docstring):
    ``by_rrf`` is every candidate in RRF order, ``window`` those of them with a rerank rank."""
    scores = FUSIONS[fusion]().rerank("", [_WindowInput(c) for c in window]) if window else []
    by_score = sorted(range(len(window)), key=lambda i: (-scores[i], window[i].rrf_rank))
    return [window[i] for i in by_score] + [c for c in by_rrf if c.rerank_rank is None]


def _ranked(candidates: Sequence[CandidateRecord], variants: Sequence[Variant]) -> dict[str, list[CandidateRecord]]:
    """Each variant's candidates in its order; the RRF order and the window are sorted once for
    every fusion variant."""
    out: dict[str, list[CandidateRecord]] = {}
    by_rrf: list[CandidateRecord] | None = None
    window: list[CandidateRecord] = []
    for variant in variants:
        if variant.fusion is not None:
            if by_rrf is None:
                by_rrf = sorted(candidates, key=lambda c: c.rrf_rank)
                window = [c for c in by_rrf if c.rerank_rank is not None]
            out[variant.name] = _fused(by_rrf, window, variant.fusion)
        else:
            ranked = [c for c in candidates if getattr(c, variant.rank_field) is not None]
            ranked.sort(key=lambda c: (getattr(c, variant.rank_field), c.final_rank))
            out[variant.name] = ranked
    return out


def variant_rankings(candidates: Iterable[CandidateRecord]) -> dict[str, list[RankedItem]]:
    """The units every variant ranks (``VARIANTS``), in its order; each candidate's item made once."""
    records = list(candidates)
    item = {id(c): RankedItem(c.unit_id, c.resource_id, c.resource_hash) for c in records}
    return {name: [item[id(c)] for c in ranked] for name, ranked in _ranked(records, VARIANTS).items()}


def variant_ranking(candidates: Iterable[CandidateRecord], variant: Variant) -> list[RankedItem]:
    """The units a variant ranks, in its order; a candidate without that stage's rank is absent."""
    ranked = _ranked(list(candidates), (variant,))[variant.name]
    return [RankedItem(c.unit_id, c.resource_id, c.resource_hash) for c in ranked]


def ranking_metrics(
    ranking: Sequence[RankedItem], judgments: Judgments, corpus_hashes: Mapping[str, str], level: MetricLevel
) -> dict[str, float | None]:
    """The registered judged and ranking metrics of one ranking at one level."""
    items = list(ranking) if level is MetricLevel.UNIT else resource_ranking(ranking)
    # Graded from ``items``: at resource level grading keeps the first unit of each resource, which
    # ``items`` already is, so it is not deduplicated twice.
    value = MetricInput(grade(items, judgments, level), items, corpus_hashes, judgments, level)
    return {m.name: m.compute(value) for m in registry.of_kind(JUDGED, RANKING)}


CaseMetrics = dict[str, dict[str, dict[str, float | None]]]  # level -> variant -> metric -> value


def returned_fragments(candidates: Iterable[CandidateRecord]) -> list[ReturnedFragment]:
    """The fragments the source Run returned: its selected candidates, in final order."""
    chosen = sorted((c for c in candidates if c.disposition == SELECTED), key=lambda c: c.final_rank)
    return [
        ReturnedFragment(c.unit_id, c.resource_id, c.unit_hash, c.resource_hash, c.token_count, c.delta_action or "")
        for c in chosen
    ]


def returned_metrics(case: CaseInput, level: MetricLevel) -> dict[str, float | None]:
    """The RETURNED_METRICS of one case at one level."""
    value = MetricInput(None, (), case.corpus_hashes, case.judgments, level, returned_fragments(case.candidates))
    return {m.name: m.compute(value) for m in registry.of_kind(RETURNED)}


def case_metrics(case: CaseInput) -> CaseMetrics:
    rankings = variant_rankings(case.candidates)  # one ranking per variant, graded at each level
    out: CaseMetrics = {}
    for level in LEVELS:
        # Variants often rank alike (B3 and fusion_rrf; B4 and the fusion the project runs): an
        # order already graded at this level is not graded again (its items are the same objects).
        graded: dict[tuple[int, ...], dict[str, float | None]] = {}
        values = out[level.value] = {}
        for name, ranking in rankings.items():
            key = tuple(map(id, ranking))
            if key not in graded:
                graded[key] = ranking_metrics(ranking, case.judgments, case.corpus_hashes, level)
            values[name] = dict(graded[key])
        out[level.value][BASELINE.name].update(returned_metrics(case, level))
    return out


# -- missed evidence ------------------------------------------------------------------------------


@attrs.frozen
class MissedEvidence:
    """A relevant resource the source Run did not select, and where it was lost."""

    case_id: str
    resource_id: str
    relevance: int
    category: str
    exclusion_code: str | None
    best_lexical_rank: int | None
    best_dense_rank: int | None
    best_rrf_rank: int | None
    best_rerank_rank: int | None
    best_final_rank: int | None


def _best(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def missed_evidence(case_id: str, candidates: Sequence[CandidateRecord], judgments: Judgments) -> list[MissedEvidence]:
    """Attribution for every relevant resource not selected (categories in the module docstring)."""
    relevant = {r: rel for r, rel in judgments.resource_relevance().items() if rel >= 1}
    by_resource: dict[str, list[CandidateRecord]] = {}
    for c in candidates:
        by_resource.setdefault(c.resource_id, []).append(c)
    selected = {c.resource_id for c in candidates if c.disposition == SELECTED}
    depth = max((c.final_rank for c in candidates if c.disposition == SELECTED), default=0)
    out: list[MissedEvidence] = []
    for resource_id in sorted(relevant, key=lambda r: (-relevant[r], r)):
        if resource_id in selected:
            continue
        units = by_resource.get(resource_id, [])
        window = [c for c in units if c.rerank_rank is not None]
        code: str | None = None
        if not units:
            category = NEVER_RETRIEVED
        elif not window:
            category = LOST_IN_FUSION
        elif min(c.rrf_rank for c in window) <= depth < min(c.final_rank for c in window):
            category = DEMOTED_BY_RERANKER
        else:
            category = CUT_AT_SELECTION
            code = min(units, key=lambda c: c.final_rank).exclusion_code
        out.append(
            MissedEvidence(
                case_id=case_id,
                resource_id=resource_id,
                relevance=relevant[resource_id],
                category=category,
                exclusion_code=code,
                best_lexical_rank=_best(c.lexical_rank for c in units),
                best_dense_rank=_best(c.dense_rank for c in units),
                best_rrf_rank=_best(c.rrf_rank for c in units),
                best_rerank_rank=_best(c.rerank_rank for c in units),
                best_final_rank=_best(c.final_rank for c in units),
            )
        )
    return out


# -- the report -----------------------------------------------------------------------------------


@attrs.frozen
class MetricSummary:
    mean: float | None
    counted: int
    excluded: int


@attrs.frozen
class Comparison:
    """B4 minus another variant on nDCG@10 over the judged cases."""

    variant: str
    other: str
    metric: str
    cases: int
    mean_diff: float | None
    ci95_low: float | None
    ci95_high: float | None
    p_value: float | None
    interval_reason: str | None = attrs.field(
        default=None,
        metadata={
            "schema": {
                "description": "why ci95_low, ci95_high and p_value are null (too few paired cases); null when given"
            }
        },
    )


@attrs.frozen
class LevelReport:
    judged_cases: int
    unjudged_cases: int
    variants: Mapping[str, Mapping[str, MetricSummary]]
    comparisons: tuple[Comparison, ...]


@attrs.frozen
class Percentiles:
    p50: float | None
    p95: float | None
    runs: int


@attrs.frozen
class LatencyReport:
    warm_runs: int
    cold_runs: int
    stages: Mapping[str, Percentiles]
    variants: Mapping[str, Percentiles]


# Every missed resource, and how many fell in each category (all present). No docstring: the
# OpenAPI component (the daemon's EvaluationReport carries this class) has no description.
@attrs.frozen
class MissedEvidenceSummary:
    counts: Mapping[str, int]
    items: tuple[MissedEvidence, ...]

    @classmethod
    def of(cls, items: Iterable[MissedEvidence]) -> MissedEvidenceSummary:
        missed = tuple(items)
        counts = dict.fromkeys(MISSED_CATEGORIES, 0)
        for m in missed:
            counts[m.category] += 1
        return cls(counts, missed)


@attrs.frozen
class Report:
    """The benchmark report of a set of cases. Its fields are its JSON document (``plain`` and
    every wire converter write them as they are): the counts are fields, made by ``build_report``."""

    report_version: int = attrs.field(default=REPORT_VERSION, kw_only=True)
    project_id: str | None
    cases: int
    reviewed_cases: int
    levels: Mapping[str, LevelReport]
    latency_ms: LatencyReport
    missed_evidence: MissedEvidenceSummary
    per_case: Mapping[str, CaseMetrics]  # case id -> level -> variant -> the JUDGED_METRICS only

    def level(self, level: MetricLevel | str) -> LevelReport:
        return self.levels[level.value if isinstance(level, MetricLevel) else level]

    def mean(self, level: MetricLevel | str, variant: str, metric: str) -> float | None:
        return self.level(level).variants[variant][metric].mean


def judged_only(metrics: CaseMetrics) -> CaseMetrics:
    """A case's metrics as the report keeps them: the judged ones (the others need no judgment
    and are in the level means)."""
    return {
        level: {v: {m: values[m] for m in JUDGED_METRICS} for v, values in variants.items()}
        for level, variants in metrics.items()
    }


def too_few_cases(n: int) -> str:
    return f"n={n}: too few paired cases for an interval or p-value (needs {MIN_CASES_FOR_INTERVAL})"


def _comparisons(per_case: Mapping[str, CaseMetrics], resamples: int) -> dict[str, tuple[Comparison, ...]]:
    """Each level's comparisons. Every comparison with as many paired cases draws from the same
    resamples and sign flips (both levels usually judge the same cases): the draws are made once,
    and each result still equals paired_bootstrap(a, b) and paired_randomization_p(a, b) at the seed."""
    others = [v for v in VARIANTS if v is not BASELINE]
    out: dict[str, list[Comparison | None]] = {}
    drawn: dict[int, list[tuple[str, int, list[float], list[float]]]] = {}  # cases -> (level, slot, a, b)
    for level in (lv.value for lv in LEVELS):
        judged = [m for m in per_case.values() if m[level][BASELINE.name][NDCG] is not None]
        a = [float(m[level][BASELINE.name][NDCG] or 0.0) for m in judged]
        slots: list[Comparison | None] = out.setdefault(level, [])
        for slot, other in enumerate(others):
            b = [float(m[level][other.name][NDCG] or 0.0) for m in judged]
            if not judged:
                slots.append(Comparison(BASELINE.name, other.name, NDCG, 0, None, None, None, None, "no judged case"))
            elif len(a) < MIN_CASES_FOR_INTERVAL:
                reason = too_few_cases(len(a))
                slots.append(
                    Comparison(BASELINE.name, other.name, NDCG, len(a), _mean_diff(a, b), None, None, None, reason)
                )
            else:
                slots.append(None)
                drawn.setdefault(len(a), []).append((level, slot, a, b))
    for group in drawn.values():
        pairs = [(a, b) for _, _, a, b in group]
        intervals = paired_bootstraps(pairs, resamples=resamples, seed=BOOTSTRAP_SEED)
        ps = paired_randomization_ps(pairs, resamples=resamples, seed=BOOTSTRAP_SEED)
        for (level, slot, a, _), interval, p in zip(group, intervals, ps, strict=True):
            out[level][slot] = Comparison(BASELINE.name, others[slot].name, NDCG, len(a), *interval, p)
    filled = {level: tuple(c for c in slots if c is not None) for level, slots in out.items()}
    assert all(len(c) == len(others) for c in filled.values()), "every comparison is made"
    return filled


def _mean_diff(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum(x - y for x, y in zip(a, b, strict=True)) / len(a)


def _percentiles(values: Sequence[float]) -> Percentiles:
    return Percentiles(percentile_nearest_rank(values, 50), percentile_nearest_rank(values, 95), len(values))


def latency_report(cases: Sequence[CaseInput]) -> LatencyReport:
    warm = [c for c in cases if c.warm]
    stage_values: dict[str, list[float]] = {}
    for c in warm:
        for stage, ms in c.latency_ms.items():
            stage_values.setdefault(stage, []).append(float(ms))
    variant_values: dict[str, list[float]] = {v.name: [] for v in VARIANTS}
    for c in warm:
        for v in VARIANTS:
            if all(s in c.latency_ms for s in v.stages):
                variant_values[v.name].append(math.fsum(float(c.latency_ms[s]) for s in v.stages))
    return LatencyReport(
        warm_runs=len(warm),
        cold_runs=len(cases) - len(warm),
        stages={s: _percentiles(vals) for s, vals in sorted(stage_values.items())},
        variants={name: _percentiles(vals) for name, vals in variant_values.items()},
    )


def build_report(
    cases: Sequence[CaseInput],
    *,
    project_id: str | None = None,
    reviewed_cases: int = 0,
    resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
) -> Report:
    per_case = {c.case_id: case_metrics(c) for c in cases}
    comparisons = _comparisons(per_case, resamples)
    levels: dict[str, LevelReport] = {}
    for level in LEVELS:
        name = level.value
        variants = {
            v.name: {
                metric: MetricSummary(*attrs.astuple(summarize(m[name][v.name][metric] for m in per_case.values())))
                for metric in (*METRICS, *(RETURNED_METRICS if v is BASELINE else ()))
            }
            for v in VARIANTS
        }
        judged = variants[BASELINE.name][NDCG]
        levels[name] = LevelReport(
            judged_cases=judged.counted,
            unjudged_cases=judged.excluded,
            variants=variants,
            comparisons=comparisons[name],
        )
    missed = (m for c in cases for m in missed_evidence(c.case_id, c.candidates, c.judgments))
    return Report(
        project_id=project_id,
        cases=len(cases),
        reviewed_cases=reviewed_cases,
        levels=levels,
        latency_ms=latency_report(cases),
        missed_evidence=MissedEvidenceSummary.of(missed),
        per_case={case_id: judged_only(m) for case_id, m in per_case.items()},
    )
