"""The one dispatch table: every daemon method is one ``Method`` (name, request type, response
type, handler). The HTTP app, the OpenAPI document and the client are all derived from it, so
adding a method is adding one entry here (and its types in ``api``)."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from memory_core.engine import ActivationResponse, Engine, ProjectInfo
from memory_core.errors import (
    EmptyProject,
    InvalidActivationState,
    InvalidBudget,
    InvalidProjectName,
    InvalidQuery,
    InvalidRequest,
    MemoryCoreError,
    ProjectExists,
    ProjectNotFound,
    ProjectNotIndexed,
    RetrievalFailed,
    RunNotFound,
    SourceUnavailable,
)
from memory_core.indexing import IndexReport
from memory_core.recording import ClearReport, RunDetail, RunFilter, RunPage

from . import api

SERVICE = "memory-core"


@attrs.frozen
class Method:
    name: str
    request: type
    response: type
    handler: Callable[[Context, Any], Any]
    summary: str
    errors: tuple[type[MemoryCoreError], ...] = ()  # typical errors, for the contract
    allow_get: bool = False  # read-only and input-free: ``curl`` without ``-X POST`` works too
    uses_engine: bool = True  # False: answers from process state, even while the engine is busy


@attrs.define
class Context:
    """What handlers see: the engine (kept warm for the process lifetime) and runtime facts."""

    engine: Engine
    home: str
    socket: str | None = None
    started_at: str = ""
    started: float = attrs.field(factory=time.monotonic)
    # SqliteCatalog shares one apsw connection, which refuses use from two threads at once
    # (ThreadingViolationError), so engine calls are serialised until storage allows more.
    engine_lock: threading.Lock = attrs.field(factory=threading.Lock)
    in_flight: int = 0
    _gauge: threading.Lock = attrs.field(factory=threading.Lock)

    def call(self, method: Method, request: Any) -> Any:
        """Run a handler; blocking, so the app calls it from a worker thread."""
        if not method.uses_engine:
            return method.handler(self, request)
        self._count(+1)
        try:
            with self.engine_lock:
                return method.handler(self, request)
        finally:
            self._count(-1)

    def _count(self, delta: int) -> None:
        with self._gauge:
            self.in_flight += delta


# -- handlers ---------------------------------------------------------------------------------
def runtime_status(ctx: Context, _: api.RuntimeStatusRequest) -> api.RuntimeStatus:
    from importlib.metadata import PackageNotFoundError, version

    try:
        package_version = version("memory-core")
    except PackageNotFoundError:  # a plain checkout without an install
        package_version = "0+unknown"
    return api.RuntimeStatus(
        service=SERVICE,
        version=package_version,
        api_version=api.API_VERSION,
        pid=os.getpid(),
        home=ctx.home,
        socket=ctx.socket,
        started_at=ctx.started_at,
        uptime_seconds=round(time.monotonic() - ctx.started, 3),
        engine_busy=ctx.engine_lock.locked(),
        in_flight=ctx.in_flight,
    )


def add_project(ctx: Context, req: api.AddProjectRequest) -> ProjectInfo:
    if not req.sources:
        raise InvalidRequest("a project needs at least one source")
    for source in req.sources:
        # The daemon's working directory is not the caller's: a relative path would be wrong.
        if not os.path.isabs(source.path):
            raise InvalidRequest(f"source path {source.path!r} must be absolute", path=source.path)
    project = ctx.engine.add_project(req.project_id, req.sources)
    return ctx.engine.show_project(project.project_id)


def list_projects(ctx: Context, _: api.ListProjectsRequest) -> api.ProjectList:
    return api.ProjectList(tuple(ctx.engine.list_projects()))


def show_project(ctx: Context, req: api.ShowProjectRequest) -> ProjectInfo:
    return ctx.engine.show_project(req.project_id)


def remove_project(ctx: Context, req: api.RemoveProjectRequest) -> api.ProjectRemoved:
    ctx.engine.remove_project(req.project_id)
    return api.ProjectRemoved(req.project_id)


def index_project(ctx: Context, req: api.IndexProjectRequest) -> IndexReport:
    return ctx.engine.index(req.project_id, force=req.force)


def activate_memory(ctx: Context, req: api.ActivateMemoryRequest) -> ActivationResponse:
    activation = ctx.engine.activate(req.project_id, req.query, budget=req.budget, state=req.activation_state)
    return activation.response


def _instant(value: str | None, field: str) -> str | None:
    """An ISO-8601 time in the Runs' own format (UTC, milliseconds, ``Z``), so that comparing
    strings compares instants; a date alone is its midnight UTC."""
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        message = f"{field} must be an ISO-8601 date or date-time, not {value!r}"
        raise InvalidRequest(message, **{field: value}) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def list_retrieval_runs(ctx: Context, req: api.ListRetrievalRunsRequest) -> RunPage:
    run_filter = RunFilter(
        project_id=req.project_id,
        status=req.status,
        since=_instant(req.since, "since"),
        until=_instant(req.until, "until"),
        query_contains=req.query,
    )
    return ctx.engine.list_runs(run_filter, limit=req.limit, cursor=req.cursor)


def get_retrieval_run(ctx: Context, req: api.GetRetrievalRunRequest) -> RunDetail:
    return ctx.engine.get_run(req.run_id)


def clear_retrieval_runs(ctx: Context, req: api.ClearRetrievalRunsRequest) -> ClearReport:
    # Exactly one scope: an empty body must never mean "delete everything".
    if (req.project_id is None) == (not req.all):
        raise InvalidRequest("give exactly one of project_id or all: true", project_id=req.project_id, all=req.all)
    return ctx.engine.clear_runs(req.project_id)


METHODS: tuple[Method, ...] = (
    Method("runtime_status", api.RuntimeStatusRequest, api.RuntimeStatus, runtime_status,
           "The daemon's version, pid, home, socket, uptime and load; answers even while indexing.",
           allow_get=True, uses_engine=False),
    Method("add_project", api.AddProjectRequest, ProjectInfo, add_project,
           "Add a project with ordered sources.", (InvalidProjectName, ProjectExists)),
    Method("list_projects", api.ListProjectsRequest, api.ProjectList, list_projects,
           "Every project with its current commit generation.", allow_get=True),
    Method("show_project", api.ShowProjectRequest, ProjectInfo, show_project,
           "One project with its current commit generation.", (ProjectNotFound,)),
    Method("remove_project", api.RemoveProjectRequest, api.ProjectRemoved, remove_project,
           "Remove a project and its Project Local Storage.", (ProjectNotFound,)),
    Method("index_project", api.IndexProjectRequest, IndexReport, index_project,
           "Build the project's commit generation (a no-op when nothing changed).",
           (ProjectNotFound, SourceUnavailable, EmptyProject)),
    Method("activate_memory", api.ActivateMemoryRequest, ActivationResponse, activate_memory,
           "Rank the project's memory for a query and return fragments with their delta.",
           (InvalidQuery, InvalidBudget, InvalidActivationState, ProjectNotFound, ProjectNotIndexed,
            RetrievalFailed)),
    Method("list_retrieval_runs", api.ListRetrievalRunsRequest, RunPage, list_retrieval_runs,
           "Recorded Retrieval Runs, newest first, filtered and paged (keyset cursor).", allow_get=True),
    Method("get_retrieval_run", api.GetRetrievalRunRequest, RunDetail, get_retrieval_run,
           "One Retrieval Run with its full trace: revisions, stage latencies, every candidate.",
           (RunNotFound,)),
    Method("clear_retrieval_runs", api.ClearRetrievalRunsRequest, ClearReport, clear_retrieval_runs,
           "Clear History: delete unpinned Runs of one project or of all, then unreferenced blobs.",
           (ProjectNotFound,)),
)

TABLE: dict[str, Method] = {m.name: m for m in METHODS}
assert len(TABLE) == len(METHODS), "method names must be unique"


def lookup(name: str) -> Method:
    try:
        return TABLE[name]
    except KeyError:
        raise api.UnknownMethod(f"unknown method {name!r}", method=name, known=sorted(TABLE)) from None
