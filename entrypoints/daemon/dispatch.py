"""The daemon's side of the table of operations (``memory_core.operations``): each operation
as a ``Method``, with where the daemon runs it. By default an operation's handler runs on the
daemon's engine under the engine lock; the few that run elsewhere say so below (``@runs``): a
job in a child process, an index on the watcher's worker, a wait before the lock, the watcher
told of a new or removed project, the job board. The daemon adds one operation of its own,
``runtime_status``. From ``METHODS``: the HTTP routes (``app``), the OpenAPI document
(``openapi``), the typed client (``client``), the UI port's allow-list (``ui.app.UI_METHODS``)
and the MCP tools' methods (``MCP_METHODS``). A new operation needs nothing here."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import attrs

from memory_core.domain import errors as err
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.jobs import RUNNING, JobInfo
from memory_core.entrypoints.bootstrap import Watcher
from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.daemon.jobs import (
    BODIES_ENV,
    BODIES_HELD,
    BODY_BYTES_HELD,
    BODY_DEADLINE_ENV,
    BODY_DEADLINE_S,
    FROM_BODY,
    JOB_SLOTS,
    SLOTS_ENV,
    JobBoard,
    JobRunner,
    Refused,
    run_from_body,
)
from memory_core.entrypoints.daemon.jobs import OPERATIONS as JOB_OPERATIONS
from memory_core.operations import (
    JOB,
    MCP,
    OPERATIONS,
    READ,
    UI,
    WRITE,
    Operation,
    Trait,
    evaluation,
    profiles,
    projects,
)
from memory_core.operations import jobs as job_ops
from memory_core.operations import runs as run_ops
from memory_core.services.activation import ActivationResponse
from memory_core.services.engine import Engine, ProjectInfo
from memory_core.services.indexing import IndexReport
from memory_core.services.local_storage import ProjectRemoval, ProjectStorage

__all__ = ["JOB", "MCP", "READ", "UI", "WRITE", "Trait"]  # the traits, as the table's readers name them
SERVICE = "memory-core"
R = TypeVar("R")


@attrs.frozen
class Method:
    """An operation as the daemon serves it: the core's declaration, and how it runs here."""

    op: Operation[Any, Any]
    handler: Callable[[Context, Any], Any]
    # False: the handler takes the engine lock itself (``Context.engine_held``) if at all: process
    # state answers even while the engine is busy, and a wait need not hold the lock.
    uses_engine: bool = True
    # True: the handler gets the request's body (bytes) as it came, and the job that runs it
    # decodes it (``jobs.FROM_BODY``): a fixture's hundreds of MiB are parsed in the job's
    # process, not on the daemon's event loop and GIL beside every activation (issue 31).
    undecoded: bool = False
    # The operation's own request size limit (a test may lower it): the app reads it from here.
    max_body_bytes: int | None = attrs.field(default=attrs.Factory(lambda self: self.op.max_body_bytes,
                                                                   takes_self=True))  # fmt: skip

    name = property(lambda self: self.op.name)
    traits = property(lambda self: self.op.traits)
    request = property(lambda self: self.op.request)
    response = property(lambda self: self.op.response)
    summary = property(lambda self: self.op.summary)
    errors = property(lambda self: self.op.errors)
    allow_get = property(lambda self: self.op.allow_get)
    # A job (``jobs.OPERATIONS``): the app runs it in a job slot (``Context.job_slots``), apart
    # from the threads of quick calls.
    is_job = property(lambda self: self.op.name in JOB_OPERATIONS)


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
    # The undecoded bodies (``Method.undecoded``) held at once, and their bytes: the app holds one
    # from before it reads its body to its job's answer; past the bound it answers daemon_busy.
    bodies: HeldBodies = attrs.field(factory=lambda: HeldBodies())
    # The jobs that run at once (``jobs.JOB_SLOTS``); the app queues the next, listed and cancellable.
    job_slots: int = JOB_SLOTS

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
            with self.board.job(operation.__name__, args, in_process=True), self.engine_held():
                return operation(self.engine, *args, **kwargs)
        return cast(R, self._in_child(operation.__name__, *args, **kwargs))

    def run_job_from_body(self, name: str, body: bytes) -> Any:
        """A job whose request comes as its body, undecoded (``Method.undecoded``): decoded and
        checked where it runs, in the job's process; without a runner, here (run under the engine lock)."""
        if self.jobs is None:
            with self.board.job(name, (), in_process=True) as job:
                try:
                    return run_from_body(name, body, self._engine_held)
                except Refused as refusal:
                    job.refused = True  # as in a job's process: failed on its input alone
                    raise refusal.error from None
        return self._in_child(name, body)

    @contextlib.contextmanager
    def _engine_held(self) -> Iterator[Engine]:
        with self.engine_held():
            yield self.engine

    def _in_child(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        assert self.jobs is not None
        self._count(+1)
        try:
            return self.jobs.run(name, *args, **kwargs)
        finally:
            self._count(-1)

    def _count(self, delta: int) -> None:
        with self._gauge:
            self.in_flight += delta


def job_slots_from_env() -> int:
    """The job slots, or the count ``SLOTS_ENV`` names (tests lower it; at least one, or no job would run)."""
    value = os.environ.get(SLOTS_ENV)
    return _positive(SLOTS_ENV, value, int) if value else JOB_SLOTS


N = TypeVar("N", int, float)


def _positive(variable: str, text: str, kind: type[N], whole: str | None = None) -> N:
    """``text``, the value of the environment variable ``variable`` (or a part of it, ``whole``),
    as a positive ``kind``: else ``InvalidRequest`` naming it, so a daemon started with a
    malformed one says why, not a ValueError."""
    try:
        value = kind(text.strip())
    except ValueError:
        value = kind(0)
    if not 0 < value < float("inf"):  # NaN compares false too
        what = "a whole number" if kind is int else "a number of seconds"
        part = f" ({text!r} in {whole!r})" if whole is not None else f", not {text!r}"
        raise InvalidRequest(f"{variable} must be {what} greater than 0{part}", variable=variable,
                             value=text if whole is None else whole)  # fmt: skip
    return value


@attrs.define
class HeldBodies:
    """How many undecoded bodies (``jobs.FROM_BODY``: a fixture of up to 256 MiB each) the daemon
    holds at once, and their bytes, within ``max_bodies`` and ``max_bytes``. Without a bound a
    client sending many imports at once had the daemon keep every body (and start a job process
    for each) until its job ended; now the one past the bound is refused (``DaemonBusy``) before
    any of its body is kept, and those held go on as before. A body must arrive whole within
    ``deadline_s`` of being held (the app cuts it off then, letting its slot go)."""

    max_bodies: int = BODIES_HELD
    max_bytes: int = BODY_BYTES_HELD
    deadline_s: float = BODY_DEADLINE_S
    held: int = 0
    held_bytes: int = 0
    arriving: int = 0  # those held whose body is still arriving (the rest wait for their job's answer)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    @classmethod
    def from_env(cls) -> HeldBodies:
        """The bound, or the one ``BODIES_ENV`` names (``COUNT,BYTES``: tests lower it), and the
        deadline, or the one ``BODY_DEADLINE_ENV`` names (seconds)."""
        bound = cls()
        if value := os.environ.get(BODIES_ENV):
            count, comma, size = value.partition(",")
            if not comma:
                raise InvalidRequest(f"{BODIES_ENV} must be COUNT,BYTES, not {value!r}", variable=BODIES_ENV,
                                     value=value)  # fmt: skip
            bound.max_bodies = _positive(BODIES_ENV, count, int, value)
            bound.max_bytes = _positive(BODIES_ENV, size, int, value)
        if value := os.environ.get(BODY_DEADLINE_ENV):
            bound.deadline_s = _positive(BODY_DEADLINE_ENV, value, float)
        return bound

    def hold(self, operation: str, size: int) -> HeldBody:
        """One more body, of ``size`` bytes so far (its declared length, or 0), or ``DaemonBusy``."""
        with self._lock:
            reason = "bodies" if self.held >= self.max_bodies else self._room(size)
            if reason is not None:
                raise self._busy(operation, reason)
            self.held += 1
            self.held_bytes += size
            self.arriving += 1
        return HeldBody(self, operation, size)

    def _room(self, size: int) -> str | None:
        return "bytes" if self.held_bytes + size > self.max_bytes else None

    def _busy(self, operation: str, reason: str) -> api.DaemonBusy:
        what = (f"{self.held} bodies (at most {self.max_bodies} at once)" if reason == "bodies"
                else f"{self.held_bytes} bytes of bodies (at most {self.max_bytes} at once)")  # fmt: skip
        return api.DaemonBusy(
            f"the daemon holds {what} of jobs that take their request's body, {self.arriving} of them still "
            f"arriving (each cut off {self.deadline_s:g} s after it was held): {operation} was refused before "
            "its body was kept; try again once one has ended (list_jobs)",
            operation=operation, reason=reason, held_bodies=self.held, held_bytes=self.held_bytes,
            max_bodies=self.max_bodies, max_bytes=self.max_bytes,
        )  # fmt: skip


@attrs.define
class HeldBody:
    """One body ``HeldBodies`` counts: ``grow`` as more of it arrives, ``arrived`` once whole,
    ``release`` once its job answered (or it was cut off)."""

    bound: HeldBodies
    operation: str
    size: int
    released: bool = False
    complete: bool = False  # its body has arrived whole

    def grow(self, size: int) -> None:
        """Its body is ``size`` bytes now (a body without a length announces none): counted, or ``DaemonBusy``."""
        if size <= self.size:
            return
        with self.bound._lock:
            if self.bound._room(size - self.size) is not None:
                raise self.bound._busy(self.operation, "bytes")
            self.bound.held_bytes += size - self.size
            self.size = size

    def arrived(self) -> None:
        """Its body has arrived whole: no longer counted as arriving. (Never after ``release``:
        the app releases a body once its request is answered, after its one ``arrived``.)"""
        with self.bound._lock:
            if not self.complete:
                self.bound.arriving -= 1
            self.complete = True

    def release(self) -> None:
        with self.bound._lock:
            if not self.released:
                self.bound.held -= 1
                self.bound.held_bytes -= self.size
                self.bound.arriving -= 0 if self.complete else 1
                self.released = True


# -- where the daemon runs an operation other than on its engine under the lock ----------------
_HERE: dict[str, Method] = {}


def runs(op: Operation[Any, Any], *, uses_engine: bool = True,
         undecoded: bool = False) -> Callable[[Callable[[Context, Any], Any]], Any]:  # fmt: skip
    def declare(handler: Callable[[Context, Any], Any]) -> Callable[[Context, Any], Any]:
        _HERE[op.name] = Method(op, handler, uses_engine, undecoded)
        return handler

    return declare


@runs(projects.add_project)
def add_project(ctx: Context, req: projects.AddProjectRequest) -> ProjectInfo:
    info = projects.add_project.handler(ctx.engine, req)
    if ctx.watcher is not None:
        ctx.watcher.project_added(info.project)
    return info


@runs(projects.remove_project)
def remove_project(ctx: Context, req: projects.RemoveProjectRequest) -> ProjectRemoval:
    if ctx.watcher is None:
        return projects.remove_project.handler(ctx.engine, req)
    with ctx.watcher.removing(req.project_id):  # its watch stops and a re-index of it is discarded first
        return projects.remove_project.handler(ctx.engine, req)


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


@runs(projects.move_project_storage, uses_engine=False)
def move_project_storage(ctx: Context, req: projects.MoveProjectStorageRequest) -> ProjectStorage:
    with _no_reindex(ctx, req.project_id):
        return ctx.run_job(Engine.move_project_storage, req.project_id, req.destination)


@runs(projects.clear_project_storage)
def clear_project_storage(ctx: Context, req: projects.ClearProjectStorageRequest) -> ProjectStorage:
    with _no_reindex(ctx, req.project_id):
        return projects.clear_project_storage.handler(ctx.engine, req)


@runs(projects.index_project, uses_engine=False)
def index_project(ctx: Context, req: projects.IndexProjectRequest) -> IndexReport:
    if ctx.watcher is not None:
        # On the watcher's worker: never two builds of a project at once, and activations keep
        # serving the current generation meanwhile (the worker has its own connections).
        return ctx.watcher.index_now(req.project_id, force=req.force)
    with ctx.engine_held():
        return projects.index_project.handler(ctx.engine, req)


@runs(run_ops.activate_memory, uses_engine=False)
def activate_memory(ctx: Context, req: run_ops.ActivateMemoryRequest) -> ActivationResponse:
    if req.wait_for_index_ms and ctx.watcher is not None:
        # Before the engine lock: other activations are served while this one waits.
        ctx.watcher.wait_current(req.project_id, req.wait_for_index_ms / 1000)
    with ctx.engine_held():
        return run_ops.activate_memory.handler(ctx.engine, req)


@runs(evaluation.import_evaluation_set, uses_engine=False, undecoded=True)
def import_evaluation_set(ctx: Context, body: bytes) -> Any:
    # Its ImportEvaluationSetRequest is decoded in the job's process, errors and all.
    return ctx.run_job_from_body(evaluation.import_evaluation_set.name, body)


@runs(profiles.tune_project, uses_engine=False)
def tune_project(ctx: Context, req: profiles.TuneProjectRequest) -> Any:
    return ctx.run_job(Engine.tune_project, req.project_id, grid=req.grid, folds=req.folds, level=req.level,
                       include_unreviewed=req.include_unreviewed)  # fmt: skip


@runs(profiles.learn_project, uses_engine=False)
def learn_project(ctx: Context, req: profiles.LearnProjectRequest) -> Any:
    return ctx.run_job(Engine.learn_project, req.project_id, folds=req.folds, level=req.level,
                       include_unreviewed=req.include_unreviewed, group_by=req.group_by)  # fmt: skip


# -- jobs ---------------------------------------------------------------------------------------
INDEX_JOB = "index:"  # a re-index on the watcher's worker is listed as the job "index:<project>"


@runs(job_ops.list_jobs, uses_engine=False)
def list_jobs(ctx: Context, _: job_ops.ListJobsRequest) -> job_ops.JobList:
    jobs = ctx.board.jobs()
    indexing = [JobInfo(INDEX_JOB + h.project_id, "index_project", h.project_id, RUNNING, None, None, h.progress,
                        cancellable=False)
                for h in (ctx.watcher.health() if ctx.watcher is not None else []) if h.indexing]  # fmt: skip
    return job_ops.JobList(tuple(indexing + jobs))


@runs(job_ops.cancel_job, uses_engine=False)
def cancel_job(ctx: Context, req: job_ops.CancelJobRequest) -> JobInfo:
    if req.job_id.startswith(INDEX_JOB):
        # A re-index publishes nothing until it is done, and the next change starts another:
        # stopping one gains nothing (``project storage clear`` stops re-indexing a project).
        raise err.InvalidRequest(f"{req.job_id!r} is a re-index: it cannot be cancelled", job_id=req.job_id)
    return ctx.board.cancel(req.job_id)


# -- the daemon's own operation ----------------------------------------------------------------
def _runtime_status(_engine: Engine, _: api.RuntimeStatusRequest) -> api.RuntimeStatus:
    raise AssertionError("runtime_status is the daemon's: it runs on its Context")  # pragma: no cover


RUNTIME_STATUS = Operation(
    "runtime_status", READ | UI, api.RuntimeStatusRequest, api.RuntimeStatus, _runtime_status,
    "The daemon's version, pid, home, socket, uptime and load; answers even while indexing.",
    allow_get=True)  # fmt: skip


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


def _on_the_engine(op: Operation[Any, Any]) -> Method:
    return Method(op, lambda ctx, req: op.handler(ctx.engine, req))


assert set(_HERE) <= {op.name for op in OPERATIONS}, "@runs names an operation the table lacks"
assert {m.name for m in _HERE.values() if m.undecoded} == FROM_BODY, "an undecoded body is decoded by its job"
METHODS: tuple[Method, ...] = (
    Method(RUNTIME_STATUS, runtime_status, uses_engine=False),
    *(_HERE.get(op.name) or _on_the_engine(op) for op in OPERATIONS),
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
