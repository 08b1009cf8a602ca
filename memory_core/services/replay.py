"""The replay gate (``memcore eval replay``): re-rank every case's frozen corpus with the current
pipeline as variant ``current`` and compare its nDCG@10 with the baseline's B4.

For each corpus of the set, the Workspace indexes its frozen bodies as a project
(``<prefix>-<corpus_id[:12]>``, one source holding ``resource_id -> body``) and the memory it
indexed must be that corpus, every resource id with its frozen hash (anything else is
``EvaluationReplayCorpusMismatch``, before any case is compared: a gate over another memory
proves nothing); each case's query runs through it and the final order is graded with the
case's current judgments. The baseline is the
B4 nDCG@10 of each case's frozen trace, or a baseline report's ``per_case`` values.

A case fails when its drop (baseline - current) exceeds ``max_drop``; the gate fails when the mean
drop over the compared cases does (a regression gate for CI: per-case results are diagnostics).
Only reviewed cases take part unless ``include_unreviewed`` (seed: only reviewed cases may become
a quality gate). The default level is ``resource``: it survives a chunker change, which renumbers
units.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.evaluation_errors import EvaluationReplayCorpusMismatch, EvaluationSetEmpty
from memory_core.domain.progress import Progress, no_progress
from memory_core.evaluation.beir import Prepared
from memory_core.evaluation.cases import Corpus, JudgmentSet
from memory_core.evaluation.fixture import EvaluationSet
from memory_core.evaluation.metrics import MetricLevel, grade, ndcg_at
from memory_core.evaluation.report import BASELINE, NDCG, variant_ranking
from memory_core.ports.evaluation import Workspace

CURRENT = "current"
TOLERANCE = 1e-12  # float noise never fails a gate
SHOWN = 20  # resource ids (and warnings) an error lists at most


@attrs.frozen
class ReplayCase:
    case_id: str
    baseline: float | None
    current: float | None
    drop: float | None
    passed: bool | None  # None: the case has no relevant item (excluded)


@attrs.frozen
class ReplayCorpus:
    """One frozen corpus as the replay indexed it (checked equal to the corpus)."""

    corpus_id: str
    project_id: str
    resources: int


@attrs.frozen
class ReplayResult:
    """The gate's outcome. Every value is a field (none derived on the fly), so its fields are its
    JSON document (``memcore eval replay --json``); ``of`` derives the counts."""

    level: str
    max_drop: float
    cases: tuple[ReplayCase, ...]
    baseline_mean: float | None
    current_mean: float | None
    mean_drop: float | None
    passed: bool
    corpora: tuple[ReplayCorpus, ...]
    compared: int
    excluded: int
    failed_cases: tuple[str, ...]
    variant: str = CURRENT
    baseline_variant: str = BASELINE.name
    metric: str = NDCG

    @classmethod
    def of(
        cls,
        level: str,
        max_drop: float,
        cases: tuple[ReplayCase, ...],
        means: tuple[float | None, float | None, float | None],
        passed: bool,
        corpora: tuple[ReplayCorpus, ...] = (),
    ) -> ReplayResult:
        compared = sum(1 for c in cases if c.passed is not None)
        failed = tuple(c.case_id for c in cases if c.passed is False)
        return cls(level, max_drop, cases, *means, passed, corpora, compared, len(cases) - compared, failed)


def baseline_from_report(
    report: Mapping[str, Any], level: MetricLevel = MetricLevel.RESOURCE
) -> dict[str, float | None]:
    """Per-case B4 nDCG@10 from a report document (``eval report --json`` or a fixture's)."""
    per_case = report.get("per_case") if isinstance(report, Mapping) else None
    if not isinstance(per_case, Mapping):
        raise InvalidRequest("the baseline report has no per_case values", place="/per_case")
    out: dict[str, float | None] = {}
    for case_id, levels in per_case.items():
        try:
            value = levels[level.value][BASELINE.name][NDCG]
        except (KeyError, TypeError):
            raise InvalidRequest(
                f"the baseline report lacks {level.value}/{BASELINE.name}/{NDCG} for case {case_id!r}",
                place=f"/per_case/{case_id}",
            ) from None
        if value is not None and (type(value) not in (int, float) or not 0 <= value <= 1):
            raise InvalidRequest(f"baseline nDCG@10 of case {case_id!r} is not in [0, 1]", place=f"/per_case/{case_id}")
        out[str(case_id)] = None if value is None else float(value)
    return out


def _check_max_drop(max_drop: object) -> float:
    if not isinstance(max_drop, (int, float)) or isinstance(max_drop, bool) or not 0 <= max_drop <= 1:
        raise InvalidRequest("max_drop must be a number in [0, 1]", max_drop=max_drop)
    return float(max_drop)


def replay(
    evaluation_set: EvaluationSet,
    workspace: Workspace,
    *,
    max_drop: float = 0.0,
    level: MetricLevel = MetricLevel.RESOURCE,
    include_unreviewed: bool = False,
    baseline: Mapping[str, float | None] | None = None,
    project_prefix: str = "replay",
    progress: Progress = no_progress,
) -> ReplayResult:
    threshold = _check_max_drop(max_drop)
    records = [r for r in evaluation_set.records if include_unreviewed or r.case.reviewed]
    if not records:
        raise EvaluationSetEmpty(
            "no reviewed case to replay: review the judgments or pass include_unreviewed",
            cases=len(evaluation_set.records),
        )
    projects: dict[str, str] = {}
    corpora: list[ReplayCorpus] = []
    for corpus_id in dict.fromkeys(r.case.corpus_id for r in records):
        project_id = f"{project_prefix}-{corpus_id[:12]}"
        prepared = workspace.prepare(project_id, evaluation_set.files(corpus_id), progress)
        corpus = evaluation_set.corpora[corpus_id]
        check_indexed(corpus, prepared, project_id)
        projects[corpus_id] = project_id
        corpora.append(ReplayCorpus(corpus_id, project_id, len(corpus.resources)))
    results = []
    for done, r in enumerate(records, start=1):
        current_set = r.judgment_sets[-1] if r.judgment_sets else JudgmentSet(r.case.case_id, 0, (), None)
        judgments = current_set.to_metric_judgments(r.trace.unit_resources())
        if baseline is not None:
            before = baseline.get(r.case.case_id)
        else:
            before = ndcg_at(grade(variant_ranking(r.trace.candidates, BASELINE), judgments, level), 10)
        # Ranked as the case's project ranks now (its own profile, if it has one).
        ranking = workspace.rank(projects[r.case.corpus_id], r.case.query, ranked_as=r.case.project_id)
        after = ndcg_at(grade(ranking, judgments, level), 10)
        if before is None or after is None:
            results.append(ReplayCase(r.case.case_id, before, after, None, None))
        else:
            drop = before - after
            results.append(ReplayCase(r.case.case_id, before, after, drop, drop <= threshold + TOLERANCE))
        progress("replay", done, len(records))
    compared = [c for c in results if c.drop is not None]
    if not compared:
        return ReplayResult.of(level.value, threshold, tuple(results), (None, None, None), True, tuple(corpora))
    baseline_mean = math.fsum(c.baseline or 0.0 for c in compared) / len(compared)
    current_mean = math.fsum(c.current or 0.0 for c in compared) / len(compared)
    mean_drop = baseline_mean - current_mean
    passed = mean_drop <= threshold + TOLERANCE
    means = (baseline_mean, current_mean, mean_drop)
    return ReplayResult.of(level.value, threshold, tuple(results), means, passed, tuple(corpora))


def check_indexed(corpus: Corpus, prepared: Prepared, project_id: str) -> None:
    """The replay project's Effective Memory must be the frozen corpus: the same resource ids,
    each with its frozen hash. Paths, layers and so the manifest hash may differ (the bodies
    were written to another folder); what ranking and grading read may not."""
    frozen = corpus.hashes()
    indexed = dict(prepared.resources)
    if indexed == frozen:
        return
    missing = sorted(set(frozen) - set(indexed))
    unexpected = sorted(set(indexed) - set(frozen))
    changed = sorted(k for k in set(frozen) & set(indexed) if frozen[k] != indexed[k])
    parts = [
        f"{len(ids)} {what} (first: {ids[0][:200]!r})"
        for ids, what in ((missing, "left out"), (unexpected, "not in the corpus"), (changed, "read differently"))
        if ids
    ]
    raise EvaluationReplayCorpusMismatch(
        f"replay project {project_id!r} indexed another memory than corpus {corpus.corpus_id[:12]}: "
        + ", ".join(parts)
        + (f"; the scan said: {prepared.warnings[0]}" if prepared.warnings else "")
        + "; nothing was compared",
        corpus_id=corpus.corpus_id,
        project_id=project_id,
        missing=missing[:SHOWN],
        unexpected=unexpected[:SHOWN],
        changed=changed[:SHOWN],
        warnings=list(prepared.warnings[:SHOWN]),
    )
