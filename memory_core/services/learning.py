"""``memcore eval learn`` (issue 32, item 2): learn a ranker from a project's judged cases.

As ``eval tune``: only reviewed cases take part unless ``include_unreviewed``; the result is
kept whole with the model trained on all cases (content-addressed by its SHA-256), and
``project profile set --from-learn`` puts the model in use only when the guard proposed it.
Learning reads the cases' frozen traces, corpora (the window units' texts) and judgments and
writes none of them: a project's judgments are never changed by learning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.ids import new_id
from memory_core.domain.progress import Progress, no_progress
from memory_core.evaluation.learning import (
    SETTINGS,
    FeatureInput,
    FittedModel,
    LearnedReranker,
    LearnerSetting,
    LearningCase,
    LearnResult,
    RankingData,
    RefusedModelFallback,
    group_by_separator,
    learn,
    learning_cases,
)
from memory_core.evaluation.metrics import MetricLevel
from memory_core.evaluation.tuning import DEFAULT_FOLDS, check_folds
from memory_core.ports import Reranker
from memory_core.ports.learning import RankLearner
from memory_core.services.evaluation import EvaluationService
from memory_core.services.profiles import ProjectProfiles


def _replayable(reranker: Reranker) -> Reranker:
    """The project's reranker, if it scores from what a trace records (a fusion function or a
    learned model; a cross-encoder's scores are not recorded in a trace, and learning does not run
    its model again over the frozen corpus)."""
    if isinstance(reranker, RefusedModelFallback):
        return reranker  # the fusion it ranks with now
    if isinstance(reranker, LearnedReranker) or hasattr(reranker, "score_range"):
        return reranker
    raise InvalidRequest(f"learning compares with the project's ranking replayed on its recorded traces; this "
                         f"engine reranks with {reranker.revision}, whose scores the traces do not record and "
                         f"learning does not compute again")  # fmt: skip


def _baseline(profiles: ProjectProfiles, project_id: str) -> tuple[Reranker, str]:
    """What a learning is graded against, and what its verdict says of it: the ranking the project
    uses now; but a learned model in use learned from judged cases like these, and scoring it on
    its own training cases would flatter it, so a learning then compares with the profile's fusion
    (the ranking the model replaced) and says so."""
    in_use = _replayable(profiles.in_use(project_id).reranker)
    if not isinstance(in_use, LearnedReranker):
        return in_use, ""
    fusion = profiles.fusion_for(project_id).reranker
    return fusion, (f"; the project ranks with learned model {in_use.digest[:12]}, which learned from judged cases "
                    f"like these and is not graded on them, so this compares with the fusion it replaced")  # fmt: skip


def learn_project(
    evaluation: EvaluationService,
    profiles: ProjectProfiles,
    learner: RankLearner | None,
    project_id: str,
    *,
    now: Callable[[], str],
    folds: int = DEFAULT_FOLDS,
    level: str = MetricLevel.RESOURCE.value,
    include_unreviewed: bool = False,
    group_by: str | None = None,
    group_of: Callable[[LearningCase], str] | None = None,
    settings: Sequence[LearnerSetting | None] = SETTINGS,
    progress: Progress = no_progress,
) -> LearnResult:
    """Learn ``project_id``'s ranker and keep the result and model (``EvaluationSetEmpty`` when
    no case may be used). ``group_by``: a separator the folds group cases by
    (``group_by_separator``); ``group_of``: the unit folds are made of (default: each case);
    ``settings``: the grid chosen among (tests narrow it); ``progress``: reading the cases' traces,
    then training (``evaluation.learning.learn``)."""
    if group_by is not None:
        if group_of is not None:
            raise InvalidRequest("give group_by or group_of, not both")
        group_of = group_by_separator(group_by)
    levels = {m.value: m for m in MetricLevel}
    if level not in levels:
        raise InvalidRequest(f"level must be one of {', '.join(levels)}, got {level!r}", level=level)
    check_folds(folds)
    if learner is None:
        raise InvalidRequest("this engine has no learner (a learning-to-rank library) to learn with")
    current, baseline_note = _baseline(profiles, project_id)
    usable = evaluation.cases_to_learn_from(project_id, include_unreviewed=include_unreviewed, verb="learn",
                                            use="to learn from")  # fmt: skip
    inputs = evaluation.case_inputs(usable, progress=progress)
    # Bounded on the traces' row counts first, then each window unit's text cut from the case's
    # frozen corpus (the text columns read it), once per distinct unit for the whole learning and
    # only for the cases learned from (the others are never featured).
    learning = learning_cases(inputs, [c.query for c in usable], evaluation.blobs.get, levels[level])
    if group_of is not None:
        learning = [attrs.evolve(c, group=group_of(c)) for c in learning]

    def score_now(query: str, window: Sequence[FeatureInput]) -> Sequence[float]:
        return current.rerank(query, window)

    def fit(data: RankingData, setting: LearnerSetting) -> FittedModel:
        return learner.with_setting(setting).fit(data)

    result, model = learn(learning, fit=fit, load=learner.load, current=score_now,
                          current_revision=current.revision, trainer=lambda s: learner.with_setting(s).revision,
                          learn_id=new_id(), project_id=project_id, created_at=now(), folds=folds,
                          level=levels[level], settings=settings, progress=progress,
                          baseline_note=baseline_note)  # fmt: skip
    if profiles.store is not None:
        profiles.store.put_learning(result, model.to_bytes() if model is not None else None)
    return result
