"""The one table of operations: every use case the daemon serves is one ``Method`` (name, what it
is, request type, response type, handler). What it is (``Trait``): read-only or writing, allowed
on the UI port, exposed over MCP, a job (long: it runs beside activations) or a quick call.
Derived from it: the HTTP routes (``app``), the OpenAPI document (``openapi``), the typed client
(``client``), the UI port's allow-list (``ui.app.UI_METHODS``), the MCP tools' methods
(``MCP_METHODS``) and the CLI's daemon calls (through the client). Adding a method is adding one
entry here, its handler and its types in ``api``."""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import attrs

from memory_core.domain import errors as err
from memory_core.domain.evaluation_errors import (
    EvaluationCaseNotFound,
    EvaluationCorpusIncomplete,
    EvaluationCorpusNotFound,
    EvaluationImportConflict,
    EvaluationJudgmentConflict,
    EvaluationRunNotSucceeded,
    EvaluationSetEmpty,
    FixtureHashMismatch,
    InvalidFixture,
    InvalidJudgments,
    LearnedModelRefused,
    LearningNotFound,
    TuningNotFound,
)
from memory_core.domain.jobs import RUNNING, JobInfo
from memory_core.entrypoints.bootstrap import Watcher
from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.daemon.jobs import JobBoard, JobRunner
from memory_core.evaluation.cases import Case, JudgmentSet
from memory_core.evaluation.fixture import ImportResult
from memory_core.evaluation.learning import LearnResult
from memory_core.evaluation.tuning import TuneResult
from memory_core.runs.records import ClearReport, RunDetail, RunFilter, RunPage
from memory_core.services.activation import ActivationResponse
from memory_core.services.corpus_search import CorpusQuery, search_corpus
from memory_core.services.engine import Engine, ProjectInfo
from memory_core.services.indexing import IndexReport
from memory_core.services.local_storage import ProjectRemoval, ProjectStorage
from memory_core.services.profiles import ProfileView

SERVICE = "memory-core"
R = TypeVar("R")


class Trait(enum.Flag):
    """What an operation is; ``READ`` (no flag) is a read-only quick call."""

    READ = 0
    WRITE = enum.auto()  # changes stored state (a Run recorded counts)
    UI = enum.auto()  # allowed on the UI port (a page in the user's browser may call it)
    MCP = enum.auto()  # what an MCP tool forwards to
    JOB = enum.auto()  # long: runs as a job beside activations (list_jobs shows it)


READ, WRITE, UI, MCP, JOB = Trait.READ, Trait.WRITE, Trait.UI, Trait.MCP, Trait.JOB


@attrs.frozen
class Method:
    name: str
    traits: Trait
    request: type
    response: type
    handler: Callable[[Context, Any], Any]
    summary: str
    errors: tuple[type[err.MemoryCoreError], ...] = ()  # typical errors, for the contract
    allow_get: bool = False  # read-only and input-free: ``curl`` without ``-X POST`` works too
    # False: the handler takes the engine lock itself (``Context.engine_held``) if at all: process
    # state answers even while the engine is busy, and a wait need not hold the lock.
    uses_engine: bool = True
    max_body_bytes: int | None = None  # this method's own request size limit (None: the app's)
    # The Engine method it serves as it is (same arguments, the same value back): the CLI's engine
    # over a daemon (``cli/client_engine.py``) forwards it to this method without a line of its own.
    engine: str | None = None


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
    # The daemon's source watcher and re-index worker (None: index on the engine, under its lock).
    watcher: Watcher | None = None
    # The daemon's IdleClock (server.py): how long it has been idle, when it stops (None: in tests).
    idle: Any = None
    # Where long jobs run: a child process each, off the engine lock (None: an engine of other
    # parts, whose jobs run here under the lock).
    jobs: JobRunner | None = None
    # Every job, run in a child or here: what list_jobs shows and cancel_job finds (the runner's too).
    board: JobBoard = attrs.field(factory=JobBoard)

    def __attrs_post_init__(self) -> None:
        if self.jobs is not None:
            self.jobs.board = self.board

    def call(self, method: Method, request: Any) -> Any:
        """Run a handler; blocking, so the app calls it from a worker thread."""
        if not method.uses_engine:
            return method.handler(self, request)
        with self.engine_held():
            return method.handler(self, request)

    @contextlib.contextmanager
    def engine_held(self) -> Iterator[None]:
        """Hold the engine lock, counted in ``in_flight`` while queued or running."""
        self._count(+1)
        try:
            with self.engine_lock:
                yield
        finally:
            self._count(-1)

    def run_job(self, operation: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        """An Engine method that takes long (``jobs.OPERATIONS``): in a child process, so no
        activation waits for it; without a runner, here under the engine lock."""
        if self.jobs is None:
            with self.board.job(operation.__name__, args), self.engine_held():
                return operation(self.engine, *args, **kwargs)
        self._count(+1)
        try:
            return cast(R, self.jobs.run(operation.__name__, *args, **kwargs))
        finally:
            self._count(-1)

    def _count(self, delta: int) -> None:
        with self._gauge:
            self.in_flight += delta


# -- handlers ---------------------------------------------------------------------------------
def runtime_status(ctx: Context, _: api.RuntimeStatusRequest) -> api.RuntimeStatus:
    from memory_core.domain.version import package_version

    return api.RuntimeStatus(
        service=SERVICE,
        version=package_version(),
        api_version=api.API_VERSION,
        pid=os.getpid(),
        home=ctx.home,
        socket=ctx.socket,
        started_at=ctx.started_at,
        uptime_seconds=round(time.monotonic() - ctx.started, 3),
        engine_busy=ctx.engine_lock.locked(),
        in_flight=ctx.in_flight,
        watching=ctx.watcher is not None and ctx.watcher.watch,
        projects=tuple(ctx.watcher.health()) if ctx.watcher is not None else (),
        on_demand=bool(ctx.idle is not None and ctx.idle.on_demand),
        idle_exit_seconds=ctx.idle.limit_s if ctx.idle is not None else None,
    )


def add_project(ctx: Context, req: api.AddProjectRequest) -> ProjectInfo:
    project = ctx.engine.add_project(req.project_id, req.sources)
    if ctx.watcher is not None:
        ctx.watcher.project_added(project)
    return ctx.engine.show_project(project.project_id)


def list_projects(ctx: Context, _: api.ListProjectsRequest) -> api.ProjectList:
    return api.ProjectList(tuple(ctx.engine.list_projects()))


def show_project(ctx: Context, req: api.ShowProjectRequest) -> ProjectInfo:
    return ctx.engine.show_project(req.project_id)


def remove_project(ctx: Context, req: api.RemoveProjectRequest) -> ProjectRemoval:
    if ctx.watcher is None:
        return ctx.engine.remove_project(req.project_id, purge=req.purge)
    with ctx.watcher.removing(req.project_id):  # its watch stops and a re-index of it is discarded first
        return ctx.engine.remove_project(req.project_id, purge=req.purge)


def show_project_storage(ctx: Context, req: api.ShowProjectStorageRequest) -> ProjectStorage:
    return ctx.engine.project_storage(req.project_id)


@contextlib.contextmanager
def _no_reindex(ctx: Context, project_id: str) -> Iterator[None]:
    """Moving or clearing changes where a project's generations are: the watcher's re-index of
    it (on its own thread) must not publish into the old place meanwhile, so its re-indexes are
    paused (one in flight is cancelled first); changes seen and requests made meanwhile run after."""
    if ctx.watcher is None:
        yield
        return
    with ctx.watcher.paused(project_id):
        yield


def move_project_storage(ctx: Context, req: api.MoveProjectStorageRequest) -> ProjectStorage:
    with _no_reindex(ctx, req.project_id):
        return ctx.run_job(Engine.move_project_storage, req.project_id, req.destination)


def clear_project_storage(ctx: Context, req: api.ClearProjectStorageRequest) -> ProjectStorage:
    with _no_reindex(ctx, req.project_id):
        return ctx.engine.clear_project_storage(req.project_id)


def index_project(ctx: Context, req: api.IndexProjectRequest) -> IndexReport:
    if ctx.watcher is not None:
        # On the watcher's worker: never two builds of a project at once, and activations keep
        # serving the current generation meanwhile (the worker has its own connections).
        return ctx.watcher.index_now(req.project_id, force=req.force)
    with ctx.engine_held():
        return ctx.engine.index(req.project_id, force=req.force)


def activate_memory(ctx: Context, req: api.ActivateMemoryRequest) -> ActivationResponse:
    if req.wait_for_index_ms and ctx.watcher is not None:
        # Before the engine lock: other activations are served while this one waits.
        ctx.watcher.wait_current(req.project_id, req.wait_for_index_ms / 1000)
    with ctx.engine_held():
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
        raise err.InvalidRequest(message, **{field: value}) from None
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
    return ctx.engine.get_run(req.run_id, manifest=req.manifest)


def clear_retrieval_runs(ctx: Context, req: api.ClearRetrievalRunsRequest) -> ClearReport:
    return ctx.engine.clear_runs(req.project_id)


# -- Evaluation Sets --------------------------------------------------------------------------
def create_evaluation_case(ctx: Context, req: api.CreateEvaluationCaseRequest) -> Case:
    return ctx.engine.create_evaluation_case(req.run_id)


def list_evaluation_cases(ctx: Context, req: api.ListEvaluationCasesRequest) -> api.EvaluationCaseList:
    cases = ctx.engine.evaluations().list_cases(req.project_id, req.case_ids)
    return api.EvaluationCaseList(tuple(cases))


def get_evaluation_case(ctx: Context, req: api.GetEvaluationCaseRequest) -> api.EvaluationCaseDetail:
    service = ctx.engine.evaluations()
    detail = service.show_case(req.case_id)
    return api.EvaluationCaseDetail(
        case=detail.case,
        trace=detail.trace,
        corpus=service.get_corpus(detail.case.corpus_id),
        judgments=detail.judgments,
        judgment_history=tuple(service.judgment_history(req.case_id)),
        metrics=detail.metrics,
        missed_evidence=detail.missed,
        passages=detail.passages,
    )


def search_corpus_resources(ctx: Context, req: api.SearchCorpusResourcesRequest) -> api.CorpusResourcePage:
    service = ctx.engine.evaluations()
    query = CorpusQuery(req.case_id, req.text, req.limit, req.cursor)
    return search_corpus(service.store, service.blobs, query)


def replace_evaluation_judgments(ctx: Context, req: api.ReplaceEvaluationJudgmentsRequest) -> JudgmentSet:
    judgments = [j.to_judgment() for j in req.judgments]
    return ctx.engine.replace_evaluation_judgments(req.case_id, req.expected_judgment_version, judgments)


def mark_evaluation_reviewed(ctx: Context, req: api.MarkEvaluationReviewedRequest) -> Case:
    return ctx.engine.evaluations().mark_reviewed(req.case_id, req.expected_judgment_version, req.reviewed)


def evaluation_report(ctx: Context, req: api.EvaluationReportRequest) -> api.EvaluationReport:
    return api.EvaluationReport.of(ctx.engine.evaluation_report(req.project_id, req.case_ids))


def export_evaluation_set(ctx: Context, req: api.ExportEvaluationSetRequest) -> api.EvaluationFixture:
    # The document, not its bytes: the client writes the same bytes with fixture.dump.
    document = ctx.engine.export_evaluation_document(
        project_id=req.project_id,
        case_ids=req.case_ids,
        with_history=req.with_history,
        with_uris=req.with_uris,
    )
    return api.EvaluationFixture(document)


def import_evaluation_set(ctx: Context, req: api.ImportEvaluationSetRequest) -> ImportResult:
    return ctx.run_job(Engine.import_evaluation_set, req.fixture.document)


def show_project_profile(ctx: Context, req: api.ShowProjectProfileRequest) -> ProfileView:
    return ctx.engine.project_profile(req.project_id)


def set_project_profile(ctx: Context, req: api.SetProjectProfileRequest) -> ProfileView:
    return ctx.engine.set_project_profile(req.project_id, req.settings, from_tune=req.from_tune)


def restore_project_profile(ctx: Context, req: api.RestoreProjectProfileRequest) -> ProfileView:
    return ctx.engine.restore_project_profile(req.project_id, req.version)


def tune_project(ctx: Context, req: api.TuneProjectRequest) -> TuneResult:
    return ctx.run_job(Engine.tune_project, req.project_id, grid=req.grid, folds=req.folds, level=req.level,
                       include_unreviewed=req.include_unreviewed)  # fmt: skip


def list_tunings(ctx: Context, req: api.ListTuningsRequest) -> api.TuningList:
    return api.TuningList(tuple(ctx.engine.tunings(req.project_id)))


def learn_project(ctx: Context, req: api.LearnProjectRequest) -> LearnResult:
    return ctx.run_job(Engine.learn_project, req.project_id, folds=req.folds, level=req.level,
                       include_unreviewed=req.include_unreviewed)  # fmt: skip


def list_learnings(ctx: Context, req: api.ListLearningsRequest) -> api.LearningList:
    return api.LearningList(tuple(ctx.engine.learnings(req.project_id)))


def set_profile_from_learning(ctx: Context, req: api.SetProfileFromLearningRequest) -> ProfileView:
    return ctx.engine.set_profile_from_learning(req.project_id, req.learn_id)


# -- jobs ---------------------------------------------------------------------------------------
INDEX_JOB = "index:"  # a re-index on the watcher's worker is listed as the job "index:<project>"


def list_jobs(ctx: Context, _: api.ListJobsRequest) -> api.JobList:
    jobs = ctx.board.jobs()
    indexing = [JobInfo(INDEX_JOB + h.project_id, "index_project", h.project_id, RUNNING, None, None, h.progress,
                        cancellable=False)
                for h in (ctx.watcher.health() if ctx.watcher is not None else []) if h.indexing]  # fmt: skip
    return api.JobList(tuple(indexing + jobs))


def cancel_job(ctx: Context, req: api.CancelJobRequest) -> JobInfo:
    if req.job_id.startswith(INDEX_JOB):
        # A re-index publishes nothing until it is done, and the next change starts another:
        # stopping one gains nothing (``project storage clear`` stops re-indexing a project).
        raise err.InvalidRequest(f"{req.job_id!r} is a re-index: it cannot be cancelled", job_id=req.job_id)
    return ctx.board.cancel(req.job_id)


_BLOBS = (err.BlobNotFound, err.BlobCorrupted)
METHODS: tuple[Method, ...] = (
    Method("runtime_status", READ | UI, api.RuntimeStatusRequest, api.RuntimeStatus, runtime_status,
           "The daemon's version, pid, home, socket, uptime and load; answers even while indexing.",
           allow_get=True, uses_engine=False),
    Method("add_project", WRITE, api.AddProjectRequest, ProjectInfo, add_project,
           "Add a project with ordered sources.", (err.InvalidProjectName, err.ProjectExists)),
    Method("list_projects", READ | UI | MCP, api.ListProjectsRequest, api.ProjectList, list_projects,
           "Every project with its current commit generation.", allow_get=True, engine="list_projects"),
    Method("show_project", READ, api.ShowProjectRequest, ProjectInfo, show_project,
           "One project with its current commit generation.", (err.ProjectNotFound,), engine="show_project"),
    Method("remove_project", WRITE, api.RemoveProjectRequest, ProjectRemoval, remove_project,
           "Remove a project, its unpinned Runs and its Project Local Storage; its Evaluation Cases and their "
           "pinned Runs stay unless purge: true. Unreferenced blobs are collected as Clear History does.",
           (err.ProjectNotFound,), engine="remove_project"),
    Method("show_project_storage", READ, api.ShowProjectStorageRequest, ProjectStorage, show_project_storage,
           "Where a project's Local Storage is, its size and its generations (current, previous, unreferenced).",
           (err.ProjectNotFound,), engine="project_storage"),
    Method("move_project_storage", WRITE | JOB, api.MoveProjectStorageRequest, ProjectStorage, move_project_storage,
           "Move a project's generations to an empty or new directory (made owner-only) and record it; a failure "
           "leaves the old location serving. Runs, Cases and blobs are not touched. Runs as a job, beside "
           "activations.",
           (err.ProjectNotFound, err.InvalidStorageLocation, err.GenerationCorrupted, err.JobInterrupted),
           uses_engine=False),
    Method("clear_project_storage", WRITE, api.ClearProjectStorageRequest, ProjectStorage, clear_project_storage,
           "Delete a project's generations; the next index_project rebuilds them, and until then activate_memory "
           "answers project_not_indexed (a failed Run). Runs, Cases and blobs are not touched.",
           (err.ProjectNotFound,), engine="clear_project_storage"),
    Method("index_project", WRITE | JOB, api.IndexProjectRequest, IndexReport, index_project,
           "Build the project's commit generation (a no-op when nothing changed); in the daemon it runs "
           "beside activations, which serve the current generation until the new one is published.",
           (err.ProjectNotFound, err.SourceUnavailable, err.EmptyProject), uses_engine=False),
    Method("activate_memory", WRITE | MCP, api.ActivateMemoryRequest, ActivationResponse, activate_memory,
           "Rank the project's memory for a query and return fragments with their delta.",
           (err.InvalidQuery, err.InvalidBudget, err.InvalidActivationState, err.ProjectNotFound, err.ProjectNotIndexed,
            err.RetrievalFailed), uses_engine=False),
    Method("list_retrieval_runs", READ | UI, api.ListRetrievalRunsRequest, RunPage, list_retrieval_runs,
           "Recorded Retrieval Runs, newest first, filtered and paged (keyset cursor).", allow_get=True,
           engine="list_runs"),
    Method("get_retrieval_run", READ | UI, api.GetRetrievalRunRequest, RunDetail, get_retrieval_run,
           "One Retrieval Run with its full trace: revisions, stage latencies, every candidate.",
           (err.RunNotFound,), engine="get_run"),
    Method("clear_retrieval_runs", WRITE | UI, api.ClearRetrievalRunsRequest, ClearReport, clear_retrieval_runs,
           "Clear History: delete unpinned Runs of one project or of all, then unreferenced blobs.",
           (err.ProjectNotFound,)),
    Method("create_evaluation_case", WRITE | UI, api.CreateEvaluationCaseRequest, Case, create_evaluation_case,
           "Freeze a succeeded Run as an Evaluation Case (corpus, trace) and pin the Run.",
           (err.RunNotFound, EvaluationRunNotSucceeded, EvaluationCorpusIncomplete), engine="create_evaluation_case"),
    Method("list_evaluation_cases", READ | UI,
           api.ListEvaluationCasesRequest, api.EvaluationCaseList, list_evaluation_cases,
           "Evaluation Cases, oldest first: all, a project's, or the chosen ones.", (EvaluationCaseNotFound,),
           allow_get=True),
    Method("get_evaluation_case", READ | UI,
           api.GetEvaluationCaseRequest, api.EvaluationCaseDetail, get_evaluation_case,
           "One case: trace, frozen corpus manifest, current judgments, every judgment version, metrics, "
           "missed evidence, and each candidate's text from the frozen corpus (verified against its unit hash).",
           (EvaluationCaseNotFound, EvaluationCorpusNotFound)),
    Method("search_corpus_resources", READ | UI, api.SearchCorpusResourcesRequest, api.CorpusResourcePage,
           search_corpus_resources,
           "Resources of a case's frozen corpus whose id or body contains a text, with the passages that match "
           "(the missed-evidence picker).",
           (EvaluationCaseNotFound, EvaluationCorpusNotFound, *_BLOBS)),
    Method("replace_evaluation_judgments", WRITE | UI, api.ReplaceEvaluationJudgmentsRequest, JudgmentSet,
           replace_evaluation_judgments,
           "Replace a case's whole judgment set if it is still at expected_judgment_version; returns the new "
           "version (a stale one: evaluation_judgment_conflict with details.current_version).",
           (InvalidJudgments, EvaluationCaseNotFound, EvaluationJudgmentConflict),
           engine="replace_evaluation_judgments"),
    Method("mark_evaluation_reviewed", WRITE | UI, api.MarkEvaluationReviewedRequest, Case, mark_evaluation_reviewed,
           "Record that a person reviewed the current judgment version (only reviewed cases may gate).",
           (EvaluationCaseNotFound, EvaluationJudgmentConflict)),
    Method("evaluation_report", READ | UI, api.EvaluationReportRequest, api.EvaluationReport, evaluation_report,
           "The B1-B4 benchmark report (unit and resource level, B4 comparisons, latency, missed evidence).",
           (EvaluationCaseNotFound,), allow_get=True),
    Method("export_evaluation_set", READ, api.ExportEvaluationSetRequest, api.EvaluationFixture, export_evaluation_set,
           "The self-contained evaluation fixture (a JSON object; written as canonical JSON it is the file "
           "`memcore eval export` writes).", (EvaluationCaseNotFound, *_BLOBS)),
    Method("import_evaluation_set", WRITE | UI | JOB,
           api.ImportEvaluationSetRequest, ImportResult, import_evaluation_set,
           f"Import a fixture: every hash verified, all or nothing. Bodies up to {api.MAX_IMPORT_BODY_BYTES >> 20} "
           "MiB. Runs as a job, beside activations.",
           (InvalidFixture, FixtureHashMismatch, EvaluationImportConflict, err.JobInterrupted),
           max_body_bytes=api.MAX_IMPORT_BODY_BYTES, uses_engine=False, engine="import_evaluation_set"),
    Method("show_project_profile", READ | UI, api.ShowProjectProfileRequest, ProfileView, show_project_profile,
           "A project's ranking settings in effect (its own profile, else the defaults), the revisions its Runs "
           "record, and every version it had.", (err.ProjectNotFound,), engine="project_profile"),
    Method("set_project_profile", WRITE | UI, api.SetProjectProfileRequest, ProfileView, set_project_profile,
           "Give a project its own ranking settings (a document, or a tuning's proposal); the previous version is "
           "kept. Unknown keys and out-of-range values are refused and nothing is stored.",
           (err.ProjectNotFound, err.InvalidRequest, TuningNotFound), engine="set_project_profile"),
    Method("restore_project_profile", WRITE, api.RestoreProjectProfileRequest, ProfileView, restore_project_profile,
           "Put an earlier profile version back in use (appended as a copy; 0: the engine's defaults).",
           (err.ProjectNotFound, err.InvalidRequest), engine="restore_project_profile"),
    Method("tune_project", WRITE | UI | JOB, api.TuneProjectRequest, TuneResult, tune_project,
           "Search the project's fusion settings on its judged (by default reviewed) cases from their stored traces, "
           "k-fold cross-validated; a proposal only when the paired 95% interval of the nDCG@10 gain lies above 0. "
           "Runs as a job, beside activations (seconds at 1,000 cases).",
           (err.ProjectNotFound, EvaluationSetEmpty, err.InvalidRequest, err.JobInterrupted), uses_engine=False,
           engine="tune_project"),
    Method("list_jobs", READ | UI, api.ListJobsRequest, api.JobList, list_jobs,
           "The jobs running beside activations (tunings, imports, storage moves, re-indexes) and those ended "
           "lately, with their progress where they say it.", allow_get=True, uses_engine=False),
    Method("cancel_job", WRITE | UI, api.CancelJobRequest, JobInfo, cancel_job,
           "Stop a running job: its caller gets job_interrupted (reason cancelled) and nothing it started is "
           "kept. A re-index cannot be cancelled.", (err.JobNotFound, err.InvalidRequest), uses_engine=False),
    Method("list_tunings", READ, api.ListTuningsRequest, api.TuningList, list_tunings,
           "A project's tunings, newest first.", (err.ProjectNotFound,), engine="tunings"),
    Method("learn_project", WRITE | UI | JOB, api.LearnProjectRequest, LearnResult, learn_project,
           "Learn a ranker (LightGBM lambdarank) from the project's judged (by default reviewed) cases' stored "
           "traces, k-fold cross-validated against its ranking now; proposed only when the paired 95% interval of "
           "the nDCG@10 gain lies above 0. The model is kept by its SHA-256. Runs as a job, beside activations.",
           (err.ProjectNotFound, EvaluationSetEmpty, err.InvalidRequest, err.JobInterrupted), uses_engine=False,
           engine="learn_project"),
    Method("list_learnings", READ | UI, api.ListLearningsRequest, api.LearningList, list_learnings,
           "A project's learnings, newest first: cross-validated gain, verdict, most important features.",
           (err.ProjectNotFound,), engine="learnings"),
    Method("set_profile_from_learning", WRITE | UI, api.SetProfileFromLearningRequest, ProfileView,
           set_profile_from_learning,
           "Rank a project with the model a learning proposed (a new profile version); refused when it proposed "
           "nothing, and learned_model_refused when the model cannot be applied.",
           (err.ProjectNotFound, err.InvalidRequest, LearningNotFound, LearnedModelRefused),
           engine="set_profile_from_learning"),
)

TABLE: dict[str, Method] = {m.name: m for m in METHODS}
assert len(TABLE) == len(METHODS), "method names must be unique"


def names(trait: Trait) -> frozenset[str]:
    """The methods that are ``trait`` (e.g. ``names(UI)``: the UI port's allow-list)."""
    return frozenset(m.name for m in METHODS if trait in m.traits)


MCP_METHODS = names(MCP)


def lookup(name: str) -> Method:
    try:
        return TABLE[name]
    except KeyError:
        raise api.UnknownMethod(f"unknown method {name!r}", method=name, known=sorted(TABLE)) from None
