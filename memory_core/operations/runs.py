"""Activation and the Retrieval Runs it records: the operations."""

from __future__ import annotations

import datetime as dt

import attrs

from memory_core.domain import errors as err
from memory_core.operations.bounds import bounded, core_check, described
from memory_core.operations.registry import MCP, READ, UI, WRITE, operation
from memory_core.retrieval.activation_state import ActivationState
from memory_core.retrieval.profile import MAX_BUDGET, MAX_QUERY_CHARS, MIN_BUDGET
from memory_core.runs.records import FAILED, MAX_PAGE, RUNNING, SUCCEEDED, ClearReport, RunDetail, RunFilter, RunPage
from memory_core.services.activation import ActivationResponse, validate_budget, validate_query
from memory_core.services.engine import Engine

MAX_WAIT_FOR_INDEX_MS = 60_000  # activate_memory's wait for a pending re-index, at most


@attrs.frozen(field_transformer=bounded)
class ActivateMemoryRequest:
    project_id: str
    query: str = attrs.field(
        # Not blank: the engine trims the query and refuses an empty one (its one check).
        validator=core_check(validate_query),
        metadata={"schema": {"minLength": 1, "maxLength": MAX_QUERY_CHARS, "pattern": "\\S"}}
    )
    budget: int | None = attrs.field(
        default=None,
        validator=core_check(lambda budget: validate_budget(budget, 0)),
        metadata={"schema": {"minimum": MIN_BUDGET, "maximum": MAX_BUDGET, "description": "token budget"}},
    )
    activation_state: ActivationState | None = described(
        "what the agent already holds: the previous answer's activation_state", None
    )
    wait_for_index_ms: int = attrs.field(
        default=0,
        metadata={"schema": {"minimum": 0, "maximum": MAX_WAIT_FOR_INDEX_MS, "description": (
            "wait up to this long for a re-index the daemon's watcher has pending for the project (changes it "
            "saw, not yet served) before ranking; 0 (the default) answers at once from the current generation"
        )}},
    )


@operation(WRITE | MCP, ActivateMemoryRequest, ActivationResponse,
           "Rank the project's memory for a query and return fragments with their delta.",
           (err.InvalidQuery, err.InvalidBudget, err.InvalidActivationState, err.ProjectNotFound,
            err.ProjectNotIndexed, err.RetrievalFailed))  # fmt: skip
def activate_memory(engine: Engine, req: ActivateMemoryRequest) -> ActivationResponse:
    # In process nothing re-indexes behind the caller: wait_for_index_ms has nothing to wait for.
    return engine.activate(req.project_id, req.query, budget=req.budget, state=req.activation_state).response


RUN_STATUSES = (RUNNING, SUCCEEDED, FAILED)
_TIME = "ISO-8601 date or date-time; without an offset it is UTC"


@attrs.frozen(field_transformer=bounded)
class ListRetrievalRunsRequest:
    """Filters combine with AND; Runs come newest first, a page at a time."""

    project_id: str | None = None
    status: str | None = attrs.field(default=None, metadata={"schema": {"enum": [*RUN_STATUSES, None]}})
    since: str | None = described(f"started at or after this time (inclusive); {_TIME}", None)
    until: str | None = described(f"started before this time (exclusive); {_TIME}", None)
    query: str | None = described("only Runs whose query contains this text", None)
    limit: int = attrs.field(default=50, metadata={"schema": {"minimum": 1, "maximum": MAX_PAGE}})
    cursor: str | None = described("next_cursor of the previous page", None)

    @classmethod
    def of(
        cls, run_filter: RunFilter | None, *, limit: int = 50, cursor: str | None = None
    ) -> ListRetrievalRunsRequest:
        """The request of the engine's filter and page."""
        f = run_filter or RunFilter()
        return cls(f.project_id, f.status, f.since, f.until, f.query_contains, limit, cursor)


def _instant(value: str | None, field: str) -> str | None:
    """An ISO-8601 time in the Runs' own format (UTC, milliseconds, ``Z``), so that comparing
    strings compares instants; a date alone is its midnight UTC."""
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        message = f"{field} must be an ISO-8601 date or date-time, not {value!r}"
        raise err.InvalidRequest(message, **{field: value}) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@operation(READ | UI, ListRetrievalRunsRequest, RunPage,
           "Recorded Retrieval Runs, newest first, filtered and paged (keyset cursor).", allow_get=True)  # fmt: skip
def list_retrieval_runs(engine: Engine, req: ListRetrievalRunsRequest) -> RunPage:
    run_filter = RunFilter(
        project_id=req.project_id,
        status=req.status,
        since=_instant(req.since, "since"),
        until=_instant(req.until, "until"),
        query_contains=req.query,
    )
    return engine.list_runs(run_filter, limit=req.limit, cursor=req.cursor)


@attrs.frozen(field_transformer=bounded)
class GetRetrievalRunRequest:
    run_id: str
    manifest: bool = described("also return the Effective Memory manifest the Run saw at activation", False)


@operation(READ | UI, GetRetrievalRunRequest, RunDetail,
           "One Retrieval Run with its full trace: revisions, stage latencies, every candidate.",
           (err.RunNotFound,))  # fmt: skip
def get_retrieval_run(engine: Engine, req: GetRetrievalRunRequest) -> RunDetail:
    return engine.get_run(req.run_id, manifest=req.manifest)


@attrs.frozen(field_transformer=bounded)
class ClearRetrievalRunsRequest:
    """Clear History: exactly one of ``project_id`` or ``all: true``."""

    project_id: str | None = described("clear this project's unpinned Runs", None)
    all: bool = described("clear every project's unpinned Runs", False)

    def __attrs_post_init__(self) -> None:
        # Exactly one scope: an empty body must never mean "delete everything".
        if (self.project_id is None) == (not self.all):
            said = "give exactly one of project_id or all: true"
            raise err.InvalidRequest(said, project_id=self.project_id, all=self.all)


@operation(WRITE | UI, ClearRetrievalRunsRequest, ClearReport,
           "Clear History: delete unpinned Runs of one project or of all, then unreferenced blobs.",
           (err.ProjectNotFound,))  # fmt: skip
def clear_retrieval_runs(engine: Engine, req: ClearRetrievalRunsRequest) -> ClearReport:
    return engine.clear_runs(req.project_id)
