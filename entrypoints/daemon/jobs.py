"""Long operator jobs (a tuning, a fixture import, a storage move) run in a child process.

In the daemon the engine's catalog is one apsw connection used under one lock, and a job that
held it for minutes held every agent's activation with it (issue 30, item 2). A job therefore
runs in a process of its own over the same home, with its own database connections (SQLite's WAL
lets the daemon read and record Runs meanwhile), at a lower CPU priority, under a memory limit,
and with nothing loaded that it does not need (no model, no JVM). The daemon's request thread
only waits for its answer.

Stopping the daemon cancels every job: the child gets SIGTERM, which it turns into an exception
so the job's own clean-up runs (a move removes the copy it was making; an import's transaction
rolls back), then SIGKILL if it has not ended within ``CANCEL_GRACE_S``. The request that waited
gets ``job_interrupted``.

Both sides live here: ``JobRunner`` in the daemon, ``main`` in the child
(``python -m memory_core.entrypoints.daemon.jobs HOME``). They speak length-prefixed pickle frames
over the child's stdin and stdout: a request ``(operation, args, kwargs)`` (for a ``FROM_BODY``
job, ``args`` is the HTTP request's body, undecoded), any number of
``("progress", text)`` while it runs (at most one each ``PROGRESS_EVERY_S``: ``list_jobs`` shows
the last), then an answer ``("ok", value, retiring, False)`` or ``("error", exception, retiring,
refused)`` (domain errors pickle whole: ``MemoryCoreError.__reduce__``; ``refused``: the body did
not decode, or held a bad fixture (``InvalidFixture``: the import wrote nothing), so the job
failed on its input alone and is kept apart, ``REFUSED_KEPT``). A child
that answered is kept for the next job (at most ``IDLE_KEPT`` wait), so a job pays no interpreter
start-up; one that grew past ``RETIRE_RSS_BYTES`` says it retires, and exits.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import functools
import itertools
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import attrs

from memory_core.domain.clock import utc_now_iso
from memory_core.domain.errors import InvalidRequest, JobInterrupted, JobNotFound, MemoryCoreError
from memory_core.domain.evaluation_errors import InvalidFixture
from memory_core.domain.ids import new_id
from memory_core.domain.jobs import CANCELLED, FAILED, QUEUED, RUNNING, SUCCEEDED, JobInfo
from memory_core.domain.progress import Progress, progress_text

log = logging.getLogger("memory_core.daemon")

# The Engine methods a job may run: the operations that take long and need no model.
OPERATIONS = frozenset({"tune_project", "learn_project", "import_evaluation_set", "move_project_storage"})
# Those whose one argument is the HTTP request's body as the daemon received it: the child decodes
# and checks it as the app checks every other body (``request_from_body``), so the daemon spends
# nothing on a fixture of hundreds of MiB but receiving its bytes (issue 31).
FROM_BODY = frozenset({"import_evaluation_set"})
# Their first argument is a project.
PROJECT_OPERATIONS = frozenset({"tune_project", "learn_project", "move_project_storage"})
ENDED_KEPT = 20  # ended jobs list_jobs still shows
# Jobs refused for their input (a FROM_BODY job's body that does not decode, or whose fixture is
# bad: ``InvalidFixture``): listed too, but kept
# apart and fewer, so a client's bad requests never push real jobs' ends out of the listing.
REFUSED_KEPT = 10
# The FROM_BODY requests the daemon holds at once, from the first byte of their body to their
# job's answer (their body stays in its memory meanwhile, with a copy for the job), and their
# bodies' bytes: two imports at the largest, or four smaller ones. Past either, the next one is
# answered daemon_busy (503) at once, before its body is kept (issue 31).
BODIES_HELD = 4
BODY_BYTES_HELD = 512 << 20
BODIES_ENV = "MEMORY_CORE_JOB_BODIES"  # tests: "COUNT,BYTES" instead of those two (read by the server)
# A held body must have arrived whole within this many seconds of being held (its slot is taken by
# its Content-Length, before any byte): else it is answered invalid_request (reason body_deadline)
# and its slot let go. Without it two clients announcing 256 MiB and sending nothing held every
# import off (daemon_busy) for ever. A total deadline, not one on silence, so a byte now and then
# extends nothing; generous: 256 MiB crosses a Unix socket in well under a second, so 120 s leaves
# a client reading its fixture from a slow disk, on a loaded machine, about 2 MiB/s (the UI port
# gives the same body 30 s over loopback TCP).
BODY_DEADLINE_S = 120.0
BODY_DEADLINE_ENV = "MEMORY_CORE_JOB_BODY_DEADLINE"  # tests: seconds instead of BODY_DEADLINE_S (read by the server)
CANCEL_GRACE_S = 3.0  # SIGTERM lets the job clean up; SIGKILL after this
JOB_NICENESS = 10  # activations come first on a machine with few cores
# A job's address-space limit. A 256 MiB fixture decodes to about 2 GiB of Python objects; a
# tuning of 2,000 cases needs well under 1 GiB. Over it the job fails (job_interrupted,
# reason "memory") and the daemon, which never held that memory, goes on serving.
JOB_MEMORY_BYTES = 6 << 30
# The jobs that run at once, each in its own process; the next waits for a slot, listed (its
# progress says so) and cancellable, holding no thread (the app's ``job_call``). Jobs are CPU-bound
# (grading, training, decoding, copying) at a lower priority, and each may take JOB_MEMORY_BYTES:
# on the two cores this daemon is sized for, a third would only share the same cores and add its
# memory. Two rather than one, so a short move or import need not wait out an hour's tuning.
JOB_SLOTS = 2
SLOTS_ENV = "MEMORY_CORE_JOB_SLOTS"  # tests: a count instead of JOB_SLOTS (read by the server)
WAITING = "waiting for a job slot"  # a queued job's progress
PAUSE_POINT_ENV = "MEMORY_CORE_JOB_PAUSE"  # tests: the child stops itself (SIGSTOP) once started
MEMORY_EXIT = 3  # the child's status when it ran out of memory (it answers nothing then)
IDLE_KEPT = 1  # children kept waiting for the next job
RETIRE_RSS_BYTES = 512 << 20  # a child that grew past this (an import, say) exits after its answer
PROGRESS_EVERY_S = 0.2  # a job's progress frames: no more often than this (the last one always)
_FRAME = struct.Struct(">Q")
# The record of the job a call was queued as (``JobBoard.waiting``), set in the thread that runs
# the call once it has a slot: ``JobBoard.job`` takes that record over instead of making one.
QUEUED_RECORD: contextvars.ContextVar[_Job | None] = contextvars.ContextVar("queued_job", default=None)


@attrs.define
class _Job:
    """A job's record: its child while it runs (None: a job run in process), then how it ended."""

    job_id: str
    operation: str
    project_id: str | None
    started_at: str
    child: subprocess.Popen[bytes] | None = None
    state: str = RUNNING  # QUEUED while it waits for a job slot (``JobBoard.waiting``), no process started
    ended_at: str | None = None
    error_code: str | None = None
    cancelled: bool = False
    progress: str | None = None  # progress_text of its stage, as the child last said it
    refused: bool = False  # failed on its input alone: its body did not decode, or its fixture is bad (REFUSED_KEPT)
    order: int = 0  # when it ended, among the board's ends (ended_at's milliseconds can tie)
    wake: Callable[[], object] | None = None  # ends its wait while it is queued
    in_process: bool = False  # runs in the daemon's process (no runner): cannot be stopped once started

    def info(self) -> JobInfo:
        cancellable = self.state == QUEUED or (self.state == RUNNING and not self.in_process)
        progress = WAITING if self.state == QUEUED else self.progress
        return JobInfo(self.job_id, self.operation, self.project_id, self.state, self.started_at, self.ended_at,
                       progress, cancellable, self.error_code)  # fmt: skip

    def interrupted(self) -> JobInterrupted:
        """The error of a job stopped before its process ran: cancelled, else the daemon stopped
        it (nothing else stops a job then). One cancelled and then stopped says cancelled, as its
        listed state does."""
        reason = "cancelled" if self.cancelled else "stopping"
        return JobInterrupted(f"{self.operation} was {'cancelled' if self.cancelled else 'stopped'} before it started "
                              f"({_why(reason)}); nothing was done", reason=reason)  # fmt: skip


@attrs.define
class JobBoard:
    """Every job of a daemon, running or among the last ``ENDED_KEPT`` ended (and the last
    ``REFUSED_KEPT`` refused for their input, kept apart): what ``list_jobs`` shows and
    ``cancel_job`` finds, whether the job runs in a child (``JobRunner``) or in process."""

    _running: dict[str, _Job] = attrs.field(factory=dict)
    _ended: collections.deque[_Job] = attrs.field(factory=lambda: collections.deque(maxlen=ENDED_KEPT))
    _refused: collections.deque[_Job] = attrs.field(factory=lambda: collections.deque(maxlen=REFUSED_KEPT))
    _ends: Iterator[int] = attrs.field(factory=itertools.count)
    # Re-entrant: the stop signal's handler (``JobRunner.cancel_all``) runs on the event loop's
    # thread, which may hold the lock at that moment (``waiting``).
    _lock: threading.RLock = attrs.field(factory=threading.RLock)
    _stopping: bool = False  # the daemon stops (``stop``): no job is queued or started from then on

    @contextlib.contextmanager
    def waiting(self, operation: str, project_id: str | None, wake: Callable[[], object]) -> Iterator[_Job]:
        """A job's record while its call waits for a slot: listed (state ``queued``, progress ``WAITING``) and
        cancellable (``cancel_job`` calls ``wake``, which must end the wait), until the call,
        given a slot, runs with it as ``QUEUED_RECORD`` and ``job`` takes it over; if the block ends
        first (cancelled, stopped, or it failed before), the record ends here."""
        job = _Job(new_id(), operation, project_id, utc_now_iso(), state=QUEUED, wake=wake)
        with self._lock:
            if self._stopping:
                raise job.interrupted()
            self._running[job.job_id] = job
        with self._ending(job) as end:
            yield job
            end.append(SUCCEEDED)

    @contextlib.contextmanager
    def job(self, operation: str, args: tuple[Any, ...], *, in_process: bool = False) -> Iterator[_Job]:
        """A job's record from its start to its end (its state from how the block ended): the one
        it was queued as (``QUEUED_RECORD``), else a new one. One stopped while it waited is not started."""
        project_id = args[0] if operation in PROJECT_OPERATIONS and args else None
        queued = QUEUED_RECORD.get()
        with self._lock:
            if queued is not None and queued.operation == operation and queued.state == QUEUED:
                QUEUED_RECORD.set(None)  # taken over once
                if queued.cancelled or self._stopping:
                    raise queued.interrupted()  # its waiting block ends its record
                job, job.state, job.wake = queued, RUNNING, None
                job.project_id = project_id if project_id is not None else job.project_id
            else:
                job = _Job(new_id(), operation, project_id, utc_now_iso())
                self._running[job.job_id] = job
            job.in_process = in_process
        with self._ending(job) as end:
            yield job
            end.append(SUCCEEDED)

    @contextlib.contextmanager
    def _ending(self, job: _Job) -> Iterator[list[str]]:
        """End ``job``'s record as the block ends, unless it ended already (taken over by
        ``job`` and ended there): succeeded if the block said so, else failed or cancelled."""
        said: list[str] = []
        try:
            yield said
        except MemoryCoreError as exc:
            if job.error_code is None and job.job_id in self._running:
                job.error_code = exc.code
            raise
        finally:
            with self._lock:
                if self._running.pop(job.job_id, None) is not None:
                    stopped = job.state == QUEUED and self._stopping  # the daemon ended its wait
                    state = said[0] if said else FAILED
                    job.state = CANCELLED if job.cancelled and state == FAILED else state
                    if job.state != SUCCEEDED and job.error_code is None and (job.cancelled or stopped):
                        job.error_code = JobInterrupted.code  # its wait was ended: no error reached here
                    job.ended_at, job.child, job.wake, job.order = utc_now_iso(), None, None, next(self._ends)
                    job.refused = job.refused and job.state == FAILED
                    (self._refused if job.refused else self._ended).appendleft(job)

    def _ended_lately(self) -> list[_Job]:
        """Those ended lately, refused ones among them, newest first."""
        return sorted((*self._ended, *self._refused), key=lambda j: j.order, reverse=True)

    def jobs(self) -> list[JobInfo]:
        """Running jobs (oldest first), then those ended lately (newest first)."""
        with self._lock:
            return [j.info() for j in (*self._running.values(), *self._ended_lately())]

    def children(self) -> list[subprocess.Popen[bytes]]:
        with self._lock:
            return [j.child for j in self._running.values() if j.child is not None]

    def cancel(self, job_id: str) -> JobInfo:
        """Stop a running job: its child gets SIGTERM (its clean-up runs, nothing it started is
        kept); one waiting for a slot, or whose child has not started yet, is never started. Its
        caller gets ``job_interrupted`` (reason ``cancelled``). An ended job is left as it is; a
        job that runs in the daemon's process cannot be stopped once it started."""
        with self._lock:
            job = self._running.get(job_id) or next((j for j in self._ended_lately() if j.job_id == job_id), None)
            if job is None:
                raise JobNotFound(f"no job {job_id!r} is running or ended lately", job_id=job_id)
            if job.state not in (QUEUED, RUNNING):
                return job.info()
            if job.in_process:  # never a queued one: set as it starts
                raise InvalidRequest(f"job {job_id!r} runs in the daemon's process: it cannot be cancelled",
                                     job_id=job_id)  # fmt: skip
            job.cancelled = True
            child, wake = job.child, job.wake
            info = job.info()
        log.info("job cancelled", extra={"fields": {"job": job.operation, "job_id": job_id,
                                                    "started": child is not None}})  # fmt: skip
        if child is not None:
            _signal(child, signal.SIGTERM)
            _signal(child, signal.SIGCONT)
        if wake is not None:
            wake()
        return info

    def started(self, job: _Job, child: subprocess.Popen[bytes]) -> bool:
        """Record ``job``'s child, unless the job was cancelled, or the daemon began to stop,
        before it had one (False): a child recorded here is one ``stop``'s caller signals."""
        with self._lock:
            if job.cancelled or self._stopping:
                return False
            job.child = child
            return True

    def answered(self, job: _Job) -> bool:
        """``job``'s child answered: it is the job's no more, so a ``cancel`` from now on signals
        nothing (the child may be waiting for the next job by then); whether it may be kept for
        the next job (False: the job was cancelled first, so its child may have been signalled).
        Both at once, under the lock: a cancel landing between them SIGTERMed a kept child."""
        with self._lock:
            job.child = None
            return not job.cancelled

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """The daemon stops: every queued job ends now (``job_interrupted``, reason ``stopping``),
        and none is queued or started from now on."""
        with self._lock:
            self._stopping = True
            wakes = [j.wake for j in self._running.values() if j.state == QUEUED and j.wake is not None]
        for wake in wakes:
            wake()


@attrs.define
class JobRunner:
    """Runs jobs for the daemon of ``home``, each in a child process (one kept from an earlier job
    when there is one), recorded on ``board``; ``cancel_all`` at stop."""

    home: Path
    board: JobBoard = attrs.field(factory=JobBoard)
    _idle: list[subprocess.Popen[bytes]] = attrs.field(factory=list)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def run(self, operation: str, /, *args: Any, **kwargs: Any) -> Any:
        """The Engine's ``operation`` over the home, in a child; its result, or its error raised."""
        if operation not in OPERATIONS:
            raise ValueError(f"{operation!r} is not a job")
        if operation in FROM_BODY and not (len(args) == 1 and isinstance(args[0], bytes) and not kwargs):
            raise ValueError(f"{operation!r} takes its request's body, undecoded")
        request = pickle.dumps((operation, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        with self.board.job(operation, args) as job:
            child = self._child()
            if not self.board.started(job, child):  # cancelled or stopped before its child had its request
                self._done_with(child, keep=True)
                raise job.interrupted()
            fields = {"job": operation, "job_id": job.job_id}
            log.info("job started", extra={"fields": {**fields, "pid": child.pid}})
            answer = _exchange(child, request, job)
            if answer is None:
                child.wait()
                out_of_memory = child.returncode in (MEMORY_EXIT, -signal.SIGKILL)
                reason = ("cancelled" if job.cancelled else "stopping" if self.board.stopping
                          else "memory" if out_of_memory else "exited")  # fmt: skip
                log.warning("job ended without an answer",
                            extra={"fields": {**fields, "exit": child.returncode, "reason": reason}})
                raise JobInterrupted(
                    f"{operation} ended before it finished ({_why(reason)}); nothing it started was kept",
                    reason=reason,
                    exit_status=child.returncode,
                )
            status, value, retiring, job.refused = answer
            self._done_with(child, keep=self.board.answered(job) and not retiring)
            log.info("job ended", extra={"fields": {**fields, "status": status, "child_retires": retiring}})
            if status == "error":
                raise value
            return value

    def _child(self) -> subprocess.Popen[bytes]:
        """A child for the next job: one waiting (still alive), else a new one."""
        with self._lock:
            if self.board.stopping:
                raise JobInterrupted("the daemon is stopping: the job was not started", reason="stopping")
            while self._idle:
                child = self._idle.pop()
                if child.poll() is None:
                    return child
            return subprocess.Popen(
                [sys.executable, "-m", __name__, str(self.home)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                close_fds=True,
            )

    def _done_with(self, child: subprocess.Popen[bytes], *, keep: bool) -> None:
        with self._lock:
            if keep and not self.board.stopping and len(self._idle) < IDLE_KEPT:
                self._idle.append(child)
                return
        _release(child)

    def running(self) -> int:
        return len(self.board.children())

    def cancel_all(self) -> None:
        """Refuse new jobs, end those waiting for a slot, let waiting children go, and ask every
        running child to stop (SIGTERM, and SIGCONT so a child stopped by a signal hears it);
        ``close`` escalates."""
        self.board.stop()  # first: a child ``_done_with`` sees after this is not kept
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            _release(child)
        for child in self.board.children():
            _signal(child, signal.SIGTERM)
            _signal(child, signal.SIGCONT)

    def close(self, grace_s: float = CANCEL_GRACE_S) -> None:
        """Cancel every job and wait at most ``grace_s`` for them; SIGKILL what is left."""
        self.cancel_all()
        for child in self.board.children():
            try:
                child.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal(child, signal.SIGKILL)
                child.wait()


def _exchange(child: subprocess.Popen[bytes], request: bytes, job: _Job) -> tuple[str, Any, bool, bool] | None:
    """Send one request and read its answer (None: the child ended without one); the progress
    it reports meanwhile goes on the job's record."""
    assert child.stdin is not None and child.stdout is not None
    try:
        _write_frame(child.stdin, request)
        while (frame := _read_frame(child.stdout)) is not None:
            message = pickle.loads(frame)
            if message[0] != "progress":
                return message  # type: ignore[no-any-return]
            job.progress = message[1]
        return None
    except (OSError, EOFError, pickle.UnpicklingError):
        return None


def _release(child: subprocess.Popen[bytes]) -> None:
    """A child that waits for no job: closing its stdin ends it; SIGKILL if it lingers."""
    with contextlib.suppress(OSError):
        if child.stdin is not None:
            child.stdin.close()
    try:
        child.wait(timeout=CANCEL_GRACE_S)
    except subprocess.TimeoutExpired:
        _signal(child, signal.SIGKILL)
        child.wait()
    if child.stdout is not None:
        child.stdout.close()


def _write_frame(out: IO[bytes], payload: bytes) -> None:
    out.write(_FRAME.pack(len(payload)))
    out.write(payload)
    out.flush()


def _read_frame(source: IO[bytes]) -> bytes | None:
    head = source.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None
    (size,) = _FRAME.unpack(head)
    payload = source.read(size)
    return payload if len(payload) == size else None


def _signal(child: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        child.send_signal(sig)


def _why(reason: str) -> str:
    return {
        "cancelled": "it was cancelled",
        "stopping": "the daemon is stopping",
        "memory": f"it needed more than {JOB_MEMORY_BYTES >> 30} GiB of memory, or was killed",
    }.get(reason, "its process exited")


class Refused(Exception):  # noqa: N818 (not an error of its own: it carries one)
    """A ``FROM_BODY`` job's body did not decode, or its fixture is bad: its error, which fails the
    job on its input alone (``run_from_body``)."""

    def __init__(self, error: MemoryCoreError) -> None:
        super().__init__(error)
        self.error = error


class _Cancelled(BaseException):
    """SIGTERM in a job: unwinds like KeyboardInterrupt, so ``finally`` and clean-up run."""


def _cancel(*_: Any) -> None:
    raise _Cancelled()


def main(argv: list[str] | None = None) -> int:
    """The child: run requests from stdin on an engine over the home, one at a time, answering
    each on stdout, until stdin closes (or it retires)."""
    args = sys.argv[1:] if argv is None else argv
    home = args[0]
    # stdout carries the answers alone: anything else printed goes to stderr (the daemon's log).
    requests, answers = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    signal.signal(signal.SIGTERM, _cancel)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon's Ctrl-C reaches us through it
    os.nice(JOB_NICENESS)
    _limit_memory()
    from memory_core.entrypoints.daemon.logs import configure_logging

    configure_logging()  # JSON lines, as the daemon's own, into the same log
    while (frame := _read_frame(requests)) is not None:
        operation, op_args, op_kwargs = pickle.loads(frame)
        if os.environ.get(PAUSE_POINT_ENV) == operation:
            os.kill(os.getpid(), signal.SIGSTOP)
        refused = False
        try:
            status, value = "ok", _run(home, operation, op_args, op_kwargs, _Reporter(answers))
        except Refused as refusal:
            status, value, refused = "error", refusal.error, True
        except MemoryCoreError as exc:
            status, value = "error", exc
        except MemoryError:
            return MEMORY_EXIT  # no answer: the daemon reports job_interrupted
        except _Cancelled:
            return 143
        retiring = _resident_bytes() > RETIRE_RSS_BYTES
        answer = (status, value, retiring, refused)
        _write_frame(answers, pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
        if retiring:
            break
    return 0


class _Reporter:
    """A job's ``Progress`` in the child: a progress frame to the daemon, at most one each
    ``PROGRESS_EVERY_S`` (the last of a stage, done == total, always)."""

    def __init__(self, answers: IO[bytes]) -> None:
        self.answers = answers
        self.sent = 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.sent < PROGRESS_EVERY_S:
            return
        self.sent = now
        text = progress_text(stage, done, total)
        _write_frame(self.answers, pickle.dumps(("progress", text), protocol=pickle.HIGHEST_PROTOCOL))


def _resident_bytes() -> int:
    """This process's resident memory now (not ``ru_maxrss``: Linux carries the daemon's peak
    across fork and exec into the child)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _run(home: str, operation: str, args: tuple[Any, ...], kwargs: dict[str, Any], progress: Progress) -> Any:
    from memory_core.entrypoints.bootstrap import bootstrap
    from memory_core.operations.registry import reporting

    if operation not in OPERATIONS:
        raise ValueError(f"{operation!r} is not a job")
    # No recovery: the daemon owns its Runs; this process starts none.
    if operation in FROM_BODY:

        @contextlib.contextmanager
        def reporting_engine() -> Iterator[Any]:
            with bootstrap(home, recover=False) as opened, reporting(progress):
                yield opened

        return run_from_body(operation, args[0], reporting_engine)
    with bootstrap(home, recover=False) as engine:
        return getattr(engine, operation)(*args, progress=progress, **kwargs)


def run_from_body(operation: str, body: bytes, engine: Callable[[], contextlib.AbstractContextManager[Any]]) -> Any:
    """A ``FROM_BODY`` job: its request decoded from ``body`` (before ``engine`` is entered: a
    malformed body opens nothing), then its handler run on the engine. A body that does not
    decode, or whose fixture is bad (an import writes all or nothing, so nothing was written),
    raises ``Refused``: it failed on its input alone. In a job's process and in the daemon's own
    (no runner) alike."""
    try:
        op, request = request_from_body(operation, body)
    except MemoryCoreError as exc:
        raise Refused(exc) from None
    with engine() as opened:
        try:
            return op.handler(opened, request)
        except InvalidFixture as exc:
            raise Refused(exc) from None


def request_from_body(operation: str, body: bytes) -> tuple[Any, Any]:
    """A ``FROM_BODY`` job's operation and its request, decoded from ``body`` (the HTTP request's
    body, which the daemon's app did not read) and checked as the app checks every other body:
    a malformed one gets the same typed error, raised here."""
    from memory_core.entrypoints.daemon import api
    from memory_core.operations import OPERATIONS as TABLE

    (op,) = (o for o in TABLE if o.name == operation)
    return op, api.structure_body(_converter(), body, op.request)


@functools.cache
def _converter() -> Any:
    from memory_core.entrypoints.daemon import api

    return api.make_converter()


def _limit_memory() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = JOB_MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(JOB_MEMORY_BYTES, hard)
    if soft == resource.RLIM_INFINITY or soft > limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


if __name__ == "__main__":
    sys.exit(main())
