"""What each daemon method takes: one attrs request type per method of the dispatch table.

Field metadata ``{"schema": {...}}`` adds JSON Schema keywords to the OpenAPI document; the
converter enforces the types, and every request type is ``attrs.frozen(field_transformer=bounded)``,
whose validators enforce each bound the schema declares (``minimum``/``maximum``,
``minLength``/``maxLength``, ``minItems``/``maxItems``) as an ``InvalidRequest`` naming the field,
whoever builds the request (the daemon decoding a body, the client before sending). A field whose check is a rule of the
core (the query, the budget) is given that check as its validator instead, so there is one check
of each bound and its typed error (``InvalidQuery``, ``InvalidBudget``) is the engine's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sized
from typing import Any

import attrs

from memory_core.domain.errors import InvalidRequest, InvalidStorageLocation
from memory_core.domain.model import PROJECT_ID_RE, Source
from memory_core.evaluation.cases import CASE_ID_RE, MAX_JUDGMENTS, MAX_NOTE_CHARS, Judgment
from memory_core.evaluation.fixture import dump
from memory_core.evaluation.metrics import MAX_RELEVANCE
from memory_core.evaluation.tuning import DEFAULT_FOLDS, GRID_KEYS, MAX_FOLDS
from memory_core.retrieval.activation_state import ActivationState
from memory_core.retrieval.profile import MAX_BUDGET, MAX_QUERY_CHARS, MIN_BUDGET, SETTING_KEYS
from memory_core.runs.records import FAILED, MAX_PAGE, RUNNING, SUCCEEDED
from memory_core.services.activation import validate_budget, validate_query
from memory_core.services.corpus_search import MAX_CORPUS_PAGE, MAX_SEARCH_CHARS

MAX_WAIT_FOR_INDEX_MS = 60_000  # activate_memory's wait for a pending re-index, at most


def _check_bounds(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """The bounds ``attribute``'s schema declares, enforced (None is left to the types)."""
    bounds = attribute.metadata.get("schema", {})
    name = attribute.name
    if value is None:
        return
    if isinstance(value, int) and not isinstance(value, bool):
        low, high = bounds.get("minimum"), bounds.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            said = f"from {low} to {high}" if low is not None and high is not None else (
                f"of at least {low}" if low is not None else f"of at most {high}")
            raise InvalidRequest(f"{name} must be an integer {said}", **{name: value})
    elif isinstance(value, Sized):
        unit = "characters" if isinstance(value, str) else "items"
        low = bounds.get("minLength" if unit == "characters" else "minItems")
        high = bounds.get("maxLength" if unit == "characters" else "maxItems")
        if low is not None and len(value) < low:
            raise InvalidRequest(f"{name} must have at least {low} {unit}", **{name: len(value)})
        if high is not None and len(value) > high:  # the core's wording ("query is longer than ...")
            said = "is longer than" if unit == "characters" else "has more than"
            raise InvalidRequest(f"{name} {said} {high} {unit}", **{name: len(value)})


_BOUNDS = frozenset({"minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"})


def bounded(cls: type, fields: list[attrs.Attribute[Any]]) -> list[attrs.Attribute[Any]]:
    """Each field that declares a bound and has no check of its own gets :func:`_check_bounds`."""
    return [f.evolve(validator=_check_bounds)
            if f.validator is None and _BOUNDS & set(f.metadata.get("schema", {})) else f
            for f in fields]  # fmt: skip


def _core_check(check: Callable[[Any], Any]) -> Callable[[Any, Any, Any], None]:
    """A rule of the core as a field validator (its typed error, its message)."""

    def validate(_instance: Any, _attribute: Any, value: Any) -> None:
        if value is not None:
            check(value)

    return validate


def _nonempty_sources(_instance: Any, _attribute: Any, sources: tuple[Source, ...]) -> None:
    if not sources:
        raise InvalidRequest("a project needs at least one source")
    for source in sources:
        # The daemon's working directory is not the caller's: a relative path would be wrong.
        if not os.path.isabs(source.path):
            raise InvalidRequest(f"source path {source.path!r} must be absolute", path=source.path)


def _absolute_destination(_instance: Any, _attribute: Any, destination: str) -> None:
    # The daemon's working directory is not the caller's: a relative path would be wrong.
    if not destination or not os.path.isabs(destination):
        raise InvalidStorageLocation(
            f"destination {destination!r} must be absolute", destination=destination, reason="not_absolute"
        )


def _described(text: str, default: Any = attrs.NOTHING) -> Any:
    """A field whose schema is only its description (as ``services.freshness`` writes its fields)."""
    return attrs.field(default=default, metadata={"schema": {"description": text}})


@attrs.frozen(field_transformer=bounded)
class RuntimeStatusRequest:
    """No inputs."""


@attrs.frozen(field_transformer=bounded)
class AddProjectRequest:
    project_id: str = attrs.field(
        metadata={"schema": {"pattern": PROJECT_ID_RE.pattern, "description": "lowercase slug, 1-63 characters"}}
    )
    sources: tuple[Source, ...] = attrs.field(
        validator=_nonempty_sources,
        metadata={"schema": {"minItems": 1, "description": "absolute paths, in precedence order"}},
    )


@attrs.frozen(field_transformer=bounded)
class ListProjectsRequest:
    """No inputs."""


@attrs.frozen(field_transformer=bounded)
class ShowProjectRequest:
    project_id: str


@attrs.frozen(field_transformer=bounded)
class RemoveProjectRequest:
    project_id: str
    purge: bool = _described("also delete the project's Evaluation Cases and their pinned Runs", False)


@attrs.frozen(field_transformer=bounded)
class ShowProjectStorageRequest:
    project_id: str


@attrs.frozen(field_transformer=bounded)
class MoveProjectStorageRequest:
    """Move a project's Local Storage (its rebuildable generations) to another directory."""

    project_id: str
    destination: str = attrs.field(
        validator=_absolute_destination,
        metadata={"schema": {"minLength": 1, "description": "absolute path of an empty or new directory"}},
    )


@attrs.frozen(field_transformer=bounded)
class ClearProjectStorageRequest:
    """Delete a project's generations; the next index rebuilds them."""

    project_id: str


@attrs.frozen(field_transformer=bounded)
class IndexProjectRequest:
    project_id: str
    force: bool = _described("rebuild even when unchanged", False)


@attrs.frozen(field_transformer=bounded)
class ActivateMemoryRequest:
    project_id: str
    query: str = attrs.field(
        # Not blank: the engine trims the query and refuses an empty one (its one check).
        validator=_core_check(validate_query),
        metadata={"schema": {"minLength": 1, "maxLength": MAX_QUERY_CHARS, "pattern": "\\S"}}
    )
    budget: int | None = attrs.field(
        default=None,
        validator=_core_check(lambda budget: validate_budget(budget, 0)),
        metadata={"schema": {"minimum": MIN_BUDGET, "maximum": MAX_BUDGET, "description": "token budget"}},
    )
    activation_state: ActivationState | None = _described(
        "what the agent already holds: the previous answer's activation_state", None
    )
    wait_for_index_ms: int = attrs.field(
        default=0,
        metadata={"schema": {"minimum": 0, "maximum": MAX_WAIT_FOR_INDEX_MS, "description": (
            "wait up to this long for a re-index the daemon's watcher has pending for the project (changes it "
            "saw, not yet served) before ranking; 0 (the default) answers at once from the current generation"
        )}},
    )


RUN_STATUSES = (RUNNING, SUCCEEDED, FAILED)
_TIME = "ISO-8601 date or date-time; without an offset it is UTC"


@attrs.frozen(field_transformer=bounded)
class ListRetrievalRunsRequest:
    """Filters combine with AND; Runs come newest first, a page at a time."""

    project_id: str | None = None
    status: str | None = attrs.field(default=None, metadata={"schema": {"enum": [*RUN_STATUSES, None]}})
    since: str | None = _described(f"started at or after this time (inclusive); {_TIME}", None)
    until: str | None = _described(f"started before this time (exclusive); {_TIME}", None)
    query: str | None = _described("only Runs whose query contains this text", None)
    limit: int = attrs.field(default=50, metadata={"schema": {"minimum": 1, "maximum": MAX_PAGE}})
    cursor: str | None = _described("next_cursor of the previous page", None)


@attrs.frozen(field_transformer=bounded)
class GetRetrievalRunRequest:
    run_id: str
    manifest: bool = _described("also return the Effective Memory manifest the Run saw at activation", False)


@attrs.frozen(field_transformer=bounded)
class ClearRetrievalRunsRequest:
    """Clear History: exactly one of ``project_id`` or ``all: true``."""

    project_id: str | None = _described("clear this project's unpinned Runs", None)
    all: bool = _described("clear every project's unpinned Runs", False)

    def __attrs_post_init__(self) -> None:
        # Exactly one scope: an empty body must never mean "delete everything".
        if (self.project_id is None) == (not self.all):
            said = "give exactly one of project_id or all: true"
            raise InvalidRequest(said, project_id=self.project_id, all=self.all)


# -- Evaluation Sets: requests ----------------------------------------------------------------
_CASE_ID = {"pattern": CASE_ID_RE.pattern, "description": "an Evaluation Case id"}


@attrs.frozen(field_transformer=bounded)
class CreateEvaluationCaseRequest:
    """Freeze a succeeded Run as an Evaluation Case (pins the Run); again for the same Run gives the same case."""

    run_id: str


@attrs.frozen(field_transformer=bounded)
class ListEvaluationCasesRequest:
    """Every case, a project's, or the chosen ones (unknown ids are evaluation_case_not_found)."""

    project_id: str | None = None
    case_ids: tuple[str, ...] | None = _described("only these cases (with project_id: those of it)", None)


@attrs.frozen(field_transformer=bounded)
class GetEvaluationCaseRequest:
    case_id: str = attrs.field(metadata={"schema": _CASE_ID})


@attrs.frozen(field_transformer=bounded)
class SearchCorpusResourcesRequest:
    """A page of a case's frozen corpus: resources whose id or body contains text (any case).

    In manifest order; without ``text``, every resource. A call reads a bounded amount of bodies,
    so a page may hold fewer than ``limit`` matches while ``next_cursor`` is not null."""

    case_id: str = attrs.field(metadata={"schema": _CASE_ID})
    text: str | None = attrs.field(default=None, metadata={"schema": {"maxLength": MAX_SEARCH_CHARS}})
    limit: int = attrs.field(default=20, metadata={"schema": {"minimum": 1, "maximum": MAX_CORPUS_PAGE}})
    cursor: str | None = _described("next_cursor of the previous page", None)


@attrs.frozen(field_transformer=bounded)
class JudgmentInput:
    """One judgment: relevance 0-3 of exactly one target, given as unit_id or resource_id.

    ``unit_id`` names a unit of the source trace, ``resource_id`` a resource of the frozen corpus
    (a relevant resource the Run did not select is missed evidence)."""

    relevance: int = attrs.field(metadata={"schema": {"minimum": 0, "maximum": MAX_RELEVANCE}})
    unit_id: str | None = attrs.field(default=None, metadata={"schema": {"type": "string", "minLength": 1}})
    resource_id: str | None = attrs.field(default=None, metadata={"schema": {"type": "string", "minLength": 1}})
    note: str | None = attrs.field(default=None, metadata={"schema": {"maxLength": MAX_NOTE_CHARS}})

    @classmethod
    def of(cls, judgment: Judgment) -> JudgmentInput:
        return cls(judgment.relevance, judgment.unit_id, judgment.resource_id, judgment.note)

    def to_judgment(self) -> Judgment:
        return Judgment(self.relevance, self.unit_id, self.resource_id, self.note)


@attrs.frozen(field_transformer=bounded)
class ReplaceEvaluationJudgmentsRequest:
    """Replace a case's whole judgment set (compare-and-set on its version)."""

    case_id: str = attrs.field(metadata={"schema": _CASE_ID})
    expected_judgment_version: int = attrs.field(
        metadata={"schema": {"minimum": 0, "description": "the version you edited (0: none yet)"}}
    )
    judgments: tuple[JudgmentInput, ...] = attrs.field(metadata={"schema": {"maxItems": MAX_JUDGMENTS}})


@attrs.frozen(field_transformer=bounded)
class MarkEvaluationReviewedRequest:
    """Record that a person reviewed (or, with ``reviewed: false``, un-reviewed) the current judgments."""

    case_id: str = attrs.field(metadata={"schema": _CASE_ID})
    expected_judgment_version: int = attrs.field(metadata={"schema": {"minimum": 0}})
    reviewed: bool = True


@attrs.frozen(field_transformer=bounded)
class EvaluationReportRequest:
    """The B1-B4 report of every case, a project's, or the chosen ones."""

    project_id: str | None = None
    case_ids: tuple[str, ...] | None = None


@attrs.frozen(field_transformer=bounded)
class ExportEvaluationSetRequest:
    """The self-contained fixture of every case, a project's, or the chosen ones."""

    project_id: str | None = None
    case_ids: tuple[str, ...] | None = None
    with_history: bool = _described("include earlier judgment versions", False)
    with_uris: bool = _described(
        "keep each resource's file:/// URI (local paths); by default a resource's uri is its resource_id", False
    )


@attrs.frozen(field_transformer=bounded)
class EvaluationFixture:
    """An evaluation fixture document, passed whole: the wire value is the document itself.

    Its JSON Schema is ``contracts/evaluation-fixture.schema.json``."""

    document: Mapping[str, Any]

    def to_bytes(self) -> bytes:
        """The file ``memcore eval export`` writes: canonical JSON and a newline."""
        return dump(self.document)


@attrs.frozen(field_transformer=bounded)
class ImportEvaluationSetRequest:
    """Import a fixture: every hash verified first; all or nothing."""

    fixture: EvaluationFixture



# -- ranking profiles and tuning (issue 18) -------------------------------------------------
@attrs.frozen(field_transformer=bounded)
class ShowProjectProfileRequest:
    project_id: str


@attrs.frozen(field_transformer=bounded)
class SetProjectProfileRequest:
    """Give a project its own ranking settings: a settings document or a tuning's proposal."""

    project_id: str
    settings: Mapping[str, Any] | None = _described(
        "settings to use (keys left out keep the engine's): " + ", ".join(SETTING_KEYS), None
    )
    from_tune: str | None = attrs.field(
        default=None,
        metadata={"schema": {"minLength": 1, "maxLength": 64, "description": "apply this tuning's proposal"}},
    )


@attrs.frozen(field_transformer=bounded)
class RestoreProjectProfileRequest:
    project_id: str
    version: int | None = attrs.field(
        default=None,
        metadata={"schema": {"minimum": 0, "description": "the version to put back (0: the engine's defaults); "
                             "null: the one before the current"}},
    )


@attrs.frozen(field_transformer=bounded)
class TuneProjectRequest:
    """Search the project's fusion settings on its judged cases, cross-validated (docs/evaluation.md)."""

    project_id: str
    grid: Mapping[str, list[Any]] | None = _described(
        "values to search per key (others keep the default grid): " + ", ".join(GRID_KEYS), None
    )
    folds: int = attrs.field(default=DEFAULT_FOLDS, metadata={"schema": {"minimum": 2, "maximum": MAX_FOLDS}})
    level: str = attrs.field(default="resource", metadata={"schema": {"enum": ["unit", "resource"]}})
    include_unreviewed: bool = False


@attrs.frozen(field_transformer=bounded)
class ListTuningsRequest:
    project_id: str


@attrs.frozen(field_transformer=bounded)
class LearnProjectRequest:
    """Learn a ranker from the project's judged cases, cross-validated (docs/evaluation.md)."""

    project_id: str
    folds: int = attrs.field(default=DEFAULT_FOLDS, metadata={"schema": {"minimum": 2, "maximum": MAX_FOLDS}})
    level: str = attrs.field(default="resource", metadata={"schema": {"enum": ["unit", "resource"]}})
    include_unreviewed: bool = False


@attrs.frozen(field_transformer=bounded)
class ListLearningsRequest:
    project_id: str


@attrs.frozen(field_transformer=bounded)
class SetProfileFromLearningRequest:
    """Put the model a learning proposed in use (a new profile version)."""

    project_id: str
    learn_id: str


# -- jobs (issue 31) ------------------------------------------------------------------------------
@attrs.frozen(field_transformer=bounded)
class ListJobsRequest:
    """No inputs."""


@attrs.frozen(field_transformer=bounded)
class CancelJobRequest:
    """Stop a running job (list_jobs gives the ids); nothing it started is kept."""

    job_id: str = attrs.field(metadata={"schema": {"minLength": 1, "maxLength": 64}})
