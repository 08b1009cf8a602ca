"""``memcore eval tune`` (issue 18): tune a project's fusion settings on its own judged cases.

Only reviewed cases take part unless ``include_unreviewed`` (as for replay: seed, only reviewed
cases may become a quality gate). The result is kept whole, so ``project profile set
--from-tune`` applies exactly what was measured, and only when the guard proposed it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.ids import new_id
from memory_core.domain.progress import Progress, no_progress
from memory_core.evaluation.metrics import MetricLevel
from memory_core.evaluation.tuning import (
    DEFAULT_FOLDS,
    TuneResult,
    check_folds,
    check_work,
    current_setting,
    grid_settings,
    tune,
)
from memory_core.retrieval.fusion import Fusion, is_fusion
from memory_core.services.evaluation import EvaluationService
from memory_core.services.profiles import ProjectProfiles


def tune_project(
    evaluation: EvaluationService,
    profiles: ProjectProfiles,
    project_id: str,
    *,
    now: Callable[[], str],
    grid: Mapping[str, Sequence[Any]] | None = None,
    folds: int = DEFAULT_FOLDS,
    level: str = MetricLevel.RESOURCE.value,
    include_unreviewed: bool = False,
    progress: Progress = no_progress,
) -> TuneResult:
    """Tune ``project_id`` and keep the result (``EvaluationSetEmpty`` when no case may be used);
    ``progress``: reading the cases' traces, then grading (``evaluation.tuning.tune``)."""
    levels = {m.value: m for m in MetricLevel}
    if level not in levels:
        raise InvalidRequest(f"level must be one of {', '.join(levels)}, got {level!r}", level=level)
    ranking = profiles.ranking_for(project_id)
    if not is_fusion(ranking.reranker):
        learned = profiles.learned_model_of(project_id)
        said = (f"; project {project_id}'s profile names learned model {learned[:12]}: `memcore project profile "
                f"restore {project_id} --version N` puts back a version without it (0: the defaults)"
                if learned is not None else "")  # fmt: skip
        raise InvalidRequest(f"tuning searches a registered fusion function's settings; this engine reranks with "
                             f"{ranking.reranker.revision}{said}")  # fmt: skip
    fusion: Fusion = ranking.reranker  # type: ignore[assignment]
    current = current_setting(ranking.profile.rrf_k, ranking.profile.rerank_depth, fusion)
    check_folds(folds)
    settings = grid_settings(grid or {}, current)  # a bad grid is refused before any case is read
    usable = evaluation.cases_to_learn_from(project_id, include_unreviewed=include_unreviewed, verb="tune",
                                            use="to tune on")  # fmt: skip
    check_work(len(settings), len(usable))  # before the traces are read
    result = tune(evaluation.case_inputs(usable, progress=progress), current, tune_id=new_id(),
                  project_id=project_id, created_at=now(), grid=grid, folds=folds, level=levels[level],
                  progress=progress)  # fmt: skip
    if profiles.store is not None:
        profiles.store.put_tuning(result)
    return result
