"""A project's ranking profile, its tunings and learnings: the operations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from memory_core.domain import errors as err
from memory_core.domain.evaluation_errors import (
    EvaluationSetEmpty,
    LearnedModelRefused,
    LearningNotFound,
    TuningNotFound,
)
from memory_core.evaluation.learning import MAX_GROUP_SEPARATOR, LearnResult, group_by_separator
from memory_core.evaluation.tuning import DEFAULT_FOLDS, GRID_KEYS, MAX_FOLDS, TuneResult
from memory_core.operations.bounds import bounded, core_check, described
from memory_core.operations.registry import JOB, READ, UI, WRITE, operation, reported
from memory_core.retrieval.profile import SETTING_KEYS
from memory_core.services.engine import Engine
from memory_core.services.profiles import ProfileView


def _folds() -> Any:
    return attrs.field(default=DEFAULT_FOLDS, metadata={"schema": {"minimum": 2, "maximum": MAX_FOLDS}})


def _level() -> Any:
    return attrs.field(default="resource", metadata={"schema": {"enum": ["unit", "resource"]}})


def _cross_validation(req: TuneProjectRequest | LearnProjectRequest) -> dict[str, Any]:
    """How a tuning and a learning are cross-validated: the options both take."""
    return {"folds": req.folds, "level": req.level, "include_unreviewed": req.include_unreviewed}


@attrs.frozen(field_transformer=bounded)
class ShowProjectProfileRequest:
    project_id: str


@operation(READ | UI, ShowProjectProfileRequest, ProfileView,
           "A project's ranking settings in effect (its own profile, else the defaults), the revisions its Runs "
           "record, and every version it had.", (err.ProjectNotFound,))  # fmt: skip
def show_project_profile(engine: Engine, req: ShowProjectProfileRequest) -> ProfileView:
    return engine.project_profile(req.project_id)


@attrs.frozen(field_transformer=bounded)
class SetProjectProfileRequest:
    """Give a project its own ranking settings: a settings document or a tuning's proposal."""

    project_id: str
    settings: Mapping[str, Any] | None = described(
        "settings to use (keys left out keep the engine's): " + ", ".join(SETTING_KEYS), None
    )
    from_tune: str | None = attrs.field(
        default=None,
        metadata={"schema": {"minLength": 1, "maxLength": 64, "description": "apply this tuning's proposal"}},
    )


@operation(WRITE | UI, SetProjectProfileRequest, ProfileView,
           "Give a project its own ranking settings (a document, or a tuning's proposal); the previous version is "
           "kept. Unknown keys and out-of-range values are refused and nothing is stored.",
           (err.ProjectNotFound, err.InvalidRequest, TuningNotFound))  # fmt: skip
def set_project_profile(engine: Engine, req: SetProjectProfileRequest) -> ProfileView:
    return engine.set_project_profile(req.project_id, req.settings, from_tune=req.from_tune)


@attrs.frozen(field_transformer=bounded)
class RestoreProjectProfileRequest:
    project_id: str
    version: int | None = attrs.field(
        default=None,
        metadata={"schema": {"minimum": 0, "description": "the version to put back (0: the engine's defaults); "
                             "null: the one before the current"}},
    )


@operation(WRITE, RestoreProjectProfileRequest, ProfileView,
           "Put an earlier profile version back in use (appended as a copy; 0: the engine's defaults).",
           (err.ProjectNotFound, err.InvalidRequest))  # fmt: skip
def restore_project_profile(engine: Engine, req: RestoreProjectProfileRequest) -> ProfileView:
    return engine.restore_project_profile(req.project_id, req.version)


@attrs.frozen(field_transformer=bounded)
class TuneProjectRequest:
    """Search the project's fusion settings on its judged cases, cross-validated (docs/evaluation.md)."""

    project_id: str
    grid: Mapping[str, list[Any]] | None = described(
        "values to search per key (others keep the default grid): " + ", ".join(GRID_KEYS), None
    )
    folds: int = _folds()
    level: str = _level()
    include_unreviewed: bool = False


@operation(WRITE | UI | JOB, TuneProjectRequest, TuneResult,
           "Search the project's fusion settings on its judged (by default reviewed) cases from their stored traces, "
           "k-fold cross-validated; a proposal only when the paired 95% interval of the nDCG@10 gain lies above 0. "
           "Runs as a job, beside activations (seconds at 1,000 cases).",
           (err.ProjectNotFound, EvaluationSetEmpty, err.InvalidRequest, err.JobInterrupted))  # fmt: skip
def tune_project(engine: Engine, req: TuneProjectRequest) -> TuneResult:
    return engine.tune_project(req.project_id, grid=req.grid, progress=reported(), **_cross_validation(req))


@attrs.frozen(field_transformer=bounded)
class ListTuningsRequest:
    project_id: str


@attrs.frozen
class TuningList:
    """A project's tunings, newest first."""

    tunings: tuple[TuneResult, ...]


@operation(READ, ListTuningsRequest, TuningList, "A project's tunings, newest first.", (err.ProjectNotFound,))
def list_tunings(engine: Engine, req: ListTuningsRequest) -> TuningList:
    return TuningList(tuple(engine.tunings(req.project_id)))


@attrs.frozen(field_transformer=bounded)
class LearnProjectRequest:
    """Learn a ranker from the project's judged cases, cross-validated (docs/evaluation.md)."""

    project_id: str
    folds: int = _folds()
    level: str = _level()
    include_unreviewed: bool = False
    group_by: str | None = attrs.field(default=None, validator=core_check(group_by_separator), metadata={"schema": {
        "minLength": 1, "maxLength": MAX_GROUP_SEPARATOR,
        "description": "fold cases together by the text before this separator in their first judged resource's id "
                       "('/': its first folder; '-': LoCoMo's conversations); default: each case alone"}})  # fmt: skip


@operation(WRITE | UI | JOB, LearnProjectRequest, LearnResult,
           "Learn a ranker (LightGBM lambdarank) from the project's judged (by default reviewed) cases' stored "
           "traces, k-fold cross-validated against its ranking now; proposed only when the paired 95% interval of "
           "the nDCG@10 gain lies above 0. The model is kept by its SHA-256. Runs as a job, beside activations.",
           (err.ProjectNotFound, EvaluationSetEmpty, err.InvalidRequest, err.JobInterrupted))  # fmt: skip
def learn_project(engine: Engine, req: LearnProjectRequest) -> LearnResult:
    return engine.learn_project(req.project_id, progress=reported(), group_by=req.group_by, **_cross_validation(req))


@attrs.frozen(field_transformer=bounded)
class ListLearningsRequest:
    project_id: str


@attrs.frozen
class LearningList:
    """A project's learnings (`memcore eval learn`), newest first."""

    learnings: tuple[LearnResult, ...]


@operation(READ | UI, ListLearningsRequest, LearningList,
           "A project's learnings, newest first: cross-validated gain, verdict, most important features.",
           (err.ProjectNotFound,))  # fmt: skip
def list_learnings(engine: Engine, req: ListLearningsRequest) -> LearningList:
    return LearningList(tuple(engine.learnings(req.project_id)))


@attrs.frozen(field_transformer=bounded)
class SetProfileFromLearningRequest:
    """Put the model a learning proposed in use (a new profile version)."""

    project_id: str
    learn_id: str


@operation(WRITE | UI, SetProfileFromLearningRequest, ProfileView,
           "Rank a project with the model a learning proposed (a new profile version); refused when it proposed "
           "nothing, and learned_model_refused when the model cannot be applied.",
           (err.ProjectNotFound, err.InvalidRequest, LearningNotFound, LearnedModelRefused))  # fmt: skip
def set_profile_from_learning(engine: Engine, req: SetProfileFromLearningRequest) -> ProfileView:
    return engine.set_profile_from_learning(req.project_id, req.learn_id)
