"""The source watcher: keeps indexed projects current while the daemon (or ``memcore index --watch``) runs.

One watch per project (``source_watch.SourceWatch``) follows its source folders and hands over
batches of changes. One worker thread re-indexes: projects one at a time, each when it has changes
and its last change is ``SETTLE_MS`` old. Changes that land while a project re-indexes make one
more re-index after it, never one per change. Explicit ``index_project`` calls go to the same
worker (``index_now``), so the watcher and a person never build the same project at once. The
worker owns its own indexer (its own database connections): activations keep serving the current
generation until the new one is published, and are never blocked by the watcher. A missing source
folder marks the project unhealthy; the last generation keeps serving and the project re-indexes
when the folder is back. A failed re-index leaves its changes pending and is tried again after a
backoff (``watch_health.retry_delay``). Every re-index, failed or not, is recorded in the project's
health (``watch_health.ProjectHealth``). ``paused`` holds a project's re-indexes while its storage
moves; what was seen meanwhile (and any request) runs once it ends.

``WatchedMemory`` is the daemon's live Effective Memory: cached per project, dropped by the next
batch of changes, read again (through the (path, size, mtime) hash cache) by the first reader after.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, Protocol

import attrs

from memory_core.adapters.files.live_memory import WatchedMemory
from memory_core.adapters.files.source_watch import (
    DEBOUNCE_MS,
    POLL_DELAY_MS,
    STEP_MS,
    SourceWatch,
    WatchFn,
    default_watch,
    relevant_paths,
)
from memory_core.adapters.files.watch_health import (
    CHANGED_PATHS_KEPT,
    POLLING,
    SOURCE_UNAVAILABLE,
    STOPPED,
    UNDECODABLE_FOLDER,
    WATCH_LIMIT,
    WATCHING,
    HealthError,
    ProjectHealth,
    ProjectState,
    ReindexRecord,
    utc_now,
)
from memory_core.domain.errors import MemoryCoreError, SourceUnavailable
from memory_core.domain.model import EffectiveMemory, IndexReport, Project
from memory_core.domain.progress import Progress, parse_progress, progress_text

log = logging.getLogger("memory_core.watcher")

SETTLE_MS = 200  # a project re-indexes once its last batch is this old (a burst still being written waits)
RECONCILE_S = 5.0  # how often the worker re-reads the project list (projects added by another process)


# -- what the watcher needs -------------------------------------------------------------------
class ProjectIndexer(Protocol):
    """An ``Indexer`` or an ``Engine``: what the worker calls (from its thread only)."""

    catalog: Any

    def index(self, project_id: str, *, force: bool = False, progress: Progress = ...) -> IndexReport: ...


class ReindexCancelled(Exception):
    """Raised from the progress callback when the project was removed or paused mid-build (the build is discarded)."""


class _Held(Exception):
    """The project is paused: its re-index did not start (or was cancelled) and runs after the pause."""


# -- the watcher ------------------------------------------------------------------------------
@attrs.frozen
class _Request:
    project_id: str
    force: bool
    future: Future[IndexReport]


class Watcher:
    """Watches every project of a catalog and re-indexes changed ones on one worker thread.

    ``indexer`` is used from the worker thread only (give it its own database connections when
    another thread uses the engine). ``only``: watch just these projects (``memcore index --watch``);
    ``watch=False``: no watches, the worker serves ``index_now`` only.
    ``on_reindex``: called on the worker thread after each re-index (the CLI prints a line)."""

    def __init__(
        self,
        indexer: ProjectIndexer,
        *,
        only: Iterable[str] | None = None,
        watch: bool = True,
        watch_fn: WatchFn | None = None,
        on_reindex: Callable[[str, ReindexRecord], None] | None = None,
        now: Callable[[], str] = utc_now,
    ) -> None:
        self.indexer = indexer
        self.only = set(only) if only is not None else None
        self.watch = watch  # False: the worker only (explicit requests), no source watches
        self.watch_fn = watch_fn or default_watch()
        self.on_reindex = on_reindex
        self.now = now
        self._states: dict[str, ProjectState] = {}
        self._requests: deque[_Request] = deque()
        self._paused: dict[str, int] = {}  # project -> how many ``paused`` blocks hold it
        self._recheck: set[str] = set()  # paused projects whose generation may have moved or gone
        # A catalog read that began before this process added or removed a project must not undo it:
        # project -> the read count when the change was complete (None while it is in progress).
        self._catalog_reads = 0
        self._changed_here: dict[str, int | None] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._started = False
        self._worker = threading.Thread(target=self._run, name="reindex", daemon=True)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Watcher:
        self._started = True
        self._worker.start()
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Stop every watch; a re-index in flight finishes (or is discarded) before this returns."""
        with self._cond:
            self._closed = True
            watches = [s.watch for s in self._states.values() if s.watch is not None]
            requests, self._requests = list(self._requests), deque()
            self._cond.notify_all()
        for w in watches:
            w.close()
        for r in requests:
            r.future.set_exception(MemoryCoreError("the daemon is shutting down; index again"))
        if self._started and self._worker.is_alive():
            self._worker.join(timeout)

    # -- projects come and go -------------------------------------------------------------
    def project_added(self, project: Project) -> None:
        """Start following a project (the daemon calls it after ``add_project``)."""
        with self._cond:
            self._track(project, indexed=False)
            self._changed_here[project.project_id] = self._catalog_reads
            self._cond.notify_all()

    @contextlib.contextmanager
    def removing(self, project_id: str, timeout: float = 60.0) -> Iterator[None]:
        """Stop following a project for the block that removes it from the catalog: a catalog read
        made before the removal committed does not bring its watch back."""
        with self._cond:
            self._changed_here[project_id] = None
        try:
            self.project_removed(project_id, timeout)
            yield
        finally:
            with self._cond:
                self._changed_here[project_id] = self._catalog_reads

    def project_removed(self, project_id: str, timeout: float = 60.0) -> None:
        """Stop following a project and wait until no re-index of it runs (call before removing it)."""
        with self._cond:
            state = self._states.pop(project_id, None)
            if state is None:
                return
            state.removed = True
            watch = state.watch
            deadline = time.monotonic() + timeout
            while state.indexing and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
        if watch is not None:
            watch.close()

    @contextlib.contextmanager
    def paused(self, project_id: str, timeout: float = 60.0) -> Iterator[None]:
        """Hold the project's re-indexes (watch, retry and requests) while its storage moves or
        is cleared, so none publishes into the old place. Entering cancels a re-index in flight
        (its build is discarded) and waits, up to ``timeout``, until none runs. The watch keeps
        following the sources: changes seen before or during the pause, and requests queued,
        run after it, and whether the project still has a generation is read again."""
        with self._cond:
            self._paused[project_id] = self._paused.get(project_id, 0) + 1
            deadline = time.monotonic() + timeout
            while (state := self._states.get(project_id)) is not None and state.indexing:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
        try:
            yield
        finally:
            with self._cond:
                holds = self._paused.pop(project_id) - 1
                if holds:
                    self._paused[project_id] = holds
                else:
                    self._recheck.add(project_id)
                self._cond.notify_all()

    def _recheck_generations(self) -> None:
        """On the worker: after a pause, whether each project still has a generation (a cleared one
        has none: only ``memcore index`` builds it again)."""
        with self._cond:
            projects, self._recheck = self._recheck, set()
        for project_id in projects:
            try:
                indexed = self.indexer.catalog.current_generation(project_id) is not None
            except MemoryCoreError:
                continue  # removed meanwhile
            with self._cond:
                if (state := self._states.get(project_id)) is not None:
                    state.indexed = indexed
                    self._cond.notify_all()

    def _track(self, project: Project, *, indexed: bool) -> ProjectState:
        """Call with the lock held."""
        pid = project.project_id
        state = self._states.get(pid)
        if state is None:
            state = self._states[pid] = ProjectState(project, indexed=indexed)
            if self.watch and not self._closed:
                state.watch = SourceWatch(self, project)
                state.state = STOPPED  # until the watch reports
                state.watch.start()
        state.indexed = state.indexed or indexed
        return state

    def _reconcile(self, first: bool) -> None:
        """Follow the catalog: projects added or removed by another process, generations built elsewhere."""
        catalog = self.indexer.catalog
        with self._cond:
            self._catalog_reads += 1
            read = self._catalog_reads
        projects = [p for p in catalog.list_projects() if self.only is None or p.project_id in self.only]
        generations = {p.project_id: catalog.current_generation(p.project_id) is not None for p in projects}
        gone = []
        with self._cond:
            # What this process added or removed since the read began stays as it is.
            for pid, done in list(self._changed_here.items()):
                if done is not None and done < read:
                    del self._changed_here[pid]
            projects = [p for p in projects if p.project_id not in self._changed_here]
            for project in projects:
                state = self._track(project, indexed=generations[project.project_id])
                if first and self.watch and state.indexed and not state.indexing:
                    # The sources may have changed while nothing watched them: a check (a no-op when not).
                    state.seen += 1
                    state.trigger = "start"
            known = {p.project_id for p in projects} | set(self._changed_here)
            for pid in list(self._states):
                if pid not in known and not self._states[pid].indexing:
                    gone.append(self._states.pop(pid))
            self._cond.notify_all()
        for state in gone:
            state.removed = True
            if state.watch is not None:
                state.watch.close()

    # -- reports from the watches (their threads) -----------------------------------------
    def report_changes(self, project_id: str, paths: list[str]) -> None:
        with self._cond:
            state = self._states.get(project_id)
            if state is None:
                return
            state.seen += 1
            state.trigger = "watch"
            state.changed.update(paths)
            state.last_change_at = self.now()
            state.last_change_paths = tuple(paths[:CHANGED_PATHS_KEPT])
            state.last_event = time.monotonic()
            self._cond.notify_all()

    def models_changed(self, project_ids: list[str] | None) -> None:
        """A project's embedding model changed (None: the home default, so every project): its
        next re-index, on the worker, builds a generation of the new model while the current
        one serves; its health shows the progress. A project never indexed waits for an index."""
        with self._cond:
            for pid, state in self._states.items():
                if project_ids is None or pid in project_ids:
                    state.seen += 1
                    state.trigger = "model"
                    state.last_event = time.monotonic()
            self._cond.notify_all()

    def report_watching(self, project_id: str, *, polling: bool) -> None:
        with self._cond:
            state = self._states.get(project_id)
            if state is not None:
                state.state = POLLING if polling else WATCHING
                self._cond.notify_all()  # a project whose folder came back may be due now

    def report_source_problem(self, project_id: str, exc: MemoryCoreError) -> None:
        log.warning("source unavailable", extra={"fields": {"project": project_id, "error": exc.message}})
        with self._cond:
            state = self._states.get(project_id)
            if state is not None:
                state.state = SOURCE_UNAVAILABLE
                state.error = state.last_error = HealthError(exc.code, exc.message, self.now())
                state.last_change_at = self.now()

    def report_source_back(self, project_id: str, roots: list[str]) -> None:
        log.info("source back", extra={"fields": {"project": project_id}})
        self.report_changes(project_id, roots)
        with self._cond:
            state = self._states.get(project_id)
            if state is not None:
                state.reset_backoff()  # a failure may have been the folder missing: try at once
            if state is not None and state.error is not None and state.error.code == SourceUnavailable.code:
                state.error = None  # the re-index this triggers reports anything else

    def report_watch_limit(self, project_id: str, exc: BaseException) -> None:
        message = (
            f"the OS ran out of file watches ({exc}); following the sources by polling every "
            f"{POLL_DELAY_MS} ms instead (raise fs.inotify.max_user_watches to watch again)"
        )
        log.warning("watch limit reached", extra={"fields": {"project": project_id}})
        with self._cond:
            state = self._states.get(project_id)
            if state is not None:
                state.watch_error = state.last_error = HealthError(WATCH_LIMIT, message, self.now())

    def report_undecodable_folder(self, project_id: str, exc: BaseException) -> None:
        message = (
            f"a folder name that is not valid UTF-8 stops the OS file watch ({exc}); following the "
            f"sources by polling every {POLL_DELAY_MS} ms instead (the index skips such names; rename "
            "the folder to watch again)"
        )
        log.warning("undecodable folder name: polling", extra={"fields": {"project": project_id}})
        with self._cond:
            state = self._states.get(project_id)
            if state is not None:
                state.watch_error = state.last_error = HealthError(UNDECODABLE_FOLDER, message, self.now())

    # -- the worker -----------------------------------------------------------------------
    def _due(self, now: float) -> tuple[ProjectState | None, float]:
        """The next project to re-index and how long until another may be due (lock held)."""
        wait = RECONCILE_S
        for pid, state in self._states.items():
            if not state.indexed or state.seen == state.covered or state.state == SOURCE_UNAVAILABLE:
                continue
            if pid in self._paused:
                continue  # its pause's end notifies
            settled_at = state.last_event + SETTLE_MS / 1000
            ready = (max(settled_at, state.retry_at) if state.failures else settled_at) - now
            if ready <= 0:
                return state, 0.0
            wait = min(wait, ready)
        return None, wait

    def _run(self) -> None:
        next_reconcile = 0.0
        first = True
        while True:
            now = time.monotonic()
            if now >= next_reconcile:
                try:
                    self._reconcile(first)
                    first = False
                except Exception:
                    log.exception("could not read the project list; trying again")
                next_reconcile = now + RECONCILE_S
            if self._recheck:
                try:
                    self._recheck_generations()
                except Exception:
                    log.exception("could not read a paused project's generation")
            with self._cond:
                if self._closed:
                    return
                # Requests first, in order; one for a paused project waits for the pause's end.
                request = next((r for r in self._requests if r.project_id not in self._paused), None)
                if request is not None:
                    self._requests.remove(request)
                state: ProjectState | None = None
                if request is None:
                    state, wait = self._due(time.monotonic())
                    if state is None:
                        self._cond.wait(min(wait, max(0.0, next_reconcile - time.monotonic())))
                        continue
            if request is not None:
                self._serve_request(request)
            elif state is not None:
                trigger = "retry" if state.failures else state.trigger
                with contextlib.suppress(_Held):
                    self._reindex(state.project.project_id, force=False, trigger=trigger)

    def _serve_request(self, request: _Request) -> None:
        # A request held by a pause comes back here: it is running already.
        if not request.future.running() and not request.future.set_running_or_notify_cancel():
            return
        try:
            report = self._reindex(request.project_id, force=request.force, trigger="request", raise_errors=True)
        except _Held:
            with self._cond:
                self._requests.appendleft(request)
                self._cond.notify_all()
        except BaseException as exc:
            request.future.set_exception(exc)
        else:
            assert report is not None
            request.future.set_result(report)

    def _progress(self, state: ProjectState) -> Progress:
        def update(stage: str, done: int, total: int) -> None:
            if state.removed or self._closed or state.project.project_id in self._paused:
                raise ReindexCancelled(state.project.project_id)
            state.progress = progress_text(stage, done, total)

        return update

    def _reindex(self, project_id: str, *, force: bool, trigger: str, raise_errors: bool = False) -> IndexReport | None:
        with self._cond:
            state = self._states.get(project_id)
            if state is None:  # a request for a project not tracked yet (added by another process)
                try:
                    project = self.indexer.catalog.get_project(project_id)
                except MemoryCoreError:
                    if raise_errors:
                        raise
                    return None
                state = self._track(project, indexed=False)
            if project_id in self._paused:
                raise _Held(project_id)
            seen = state.seen
            state.indexing, state.progress = True, None
        started_at, t0 = self.now(), time.perf_counter()
        report: IndexReport | None = None
        failure: BaseException | None = None
        try:
            report = self.indexer.index(project_id, force=force, progress=self._progress(state))
        except ReindexCancelled as exc:
            with self._cond:
                if not (state.removed or self._closed):  # paused: nothing failed, it runs after the pause
                    state.indexing, state.progress = False, None
                    self._cond.notify_all()
                    raise _Held(project_id) from exc
            failure = MemoryCoreError(f"project {project_id!r} was removed while it re-indexed")
            failure.__cause__ = exc
        except BaseException as exc:  # recorded in the health; a request gets it raised
            failure = exc
            if not isinstance(exc, MemoryCoreError):
                log.exception("re-index failed", extra={"fields": {"project": project_id}})
        seconds = round(time.perf_counter() - t0, 3)
        if report is not None:
            record = ReindexRecord(
                trigger,
                started_at,
                self.now(),
                seconds,
                report.status,
                report.index_revision,
                report.units,
                report.embedded,
            )
        else:
            code = failure.code if isinstance(failure, MemoryCoreError) else "internal_error"
            record = ReindexRecord(trigger, started_at, self.now(), seconds, "failed", error_code=code)
        with self._cond:
            state.finished(record, seen, failure, self.now(), time.monotonic())
            next_retry_at = state.next_retry_at if failure is not None else None
            self._cond.notify_all()
        log.info(
            "reindex",
            extra={
                "fields": {
                    "project": project_id,
                    "trigger": trigger,
                    "status": record.status,
                    "s": seconds,
                    "embedded": record.embedded,
                    "error": record.error_code,
                    "next_retry_at": next_retry_at,
                }
            },
        )
        if self.on_reindex is not None:
            try:
                self.on_reindex(project_id, record)
            except Exception:
                log.exception("on_reindex callback failed")
        if failure is not None and raise_errors:
            raise failure
        return report

    # -- what the daemon asks -------------------------------------------------------------
    def index_now(self, project_id: str, *, force: bool = False, timeout: float | None = None) -> IndexReport:
        """Index on the worker (serialised with the watcher's re-indexes); blocks until done."""
        future: Future[IndexReport] = Future()
        with self._cond:
            if self._closed:
                raise MemoryCoreError("the daemon is shutting down; index again")
            self._requests.append(_Request(project_id, force, future))
            self._cond.notify_all()
        return future.result(timeout)

    def reindex_pending(self, project_id: str) -> bool:
        """Changes were seen that no finished re-index covers yet, and one is queued or running."""
        with self._cond:
            return (state := self._states.get(project_id)) is not None and state.pending()

    def wait_current(self, project_id: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until no re-index is pending for the project; True when none is."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                pending = (state := self._states.get(project_id)) is not None and state.pending()
                if pending and state is not None and not state.indexing and state.backing_off(time.monotonic()):
                    return False  # its re-index failed and waits for a retry: waiting would not help
                left = deadline - time.monotonic()
                if not pending or left <= 0:
                    return not pending
                self._cond.wait(left)

    def health(self, project_id: str | None = None) -> list[ProjectHealth]:
        with self._cond:
            states = [s for pid, s in sorted(self._states.items()) if project_id is None or pid == project_id]
            # An index request waits for the re-index running and the requests queued ahead of it.
            running = int(any(s.indexing for s in self._states.values()))
            positions: dict[str, int] = {}
            for ahead, request in enumerate(self._requests):
                positions.setdefault(request.project_id, running + ahead)
            return [s.health(positions.get(s.project.project_id)) for s in states]

    # -- live Effective Memory (the LiveMemory port) --------------------------------------
    def cached_memory(self, project: Project, read: Callable[[Project], EffectiveMemory]) -> EffectiveMemory:
        """The project's Effective Memory as its sources are now: the cached read while no change
        was seen since, else ``read`` again (and cached, when no change came in between)."""
        pid = project.project_id
        with self._cond:
            state = self._states.get(pid)
            followed = state is not None and state.state in (WATCHING, POLLING)
            if followed and state is not None and state.memory is not None and state.memory_seen == state.seen:
                return state.memory
            seen = state.seen if state is not None else -1
        memory = read(project)
        if followed:
            with self._cond:
                state = self._states.get(pid)
                if state is not None and state.seen == seen and state.state in (WATCHING, POLLING):
                    state.memory, state.memory_seen = memory, seen
        return memory


__all__ = [
    "DEBOUNCE_MS",
    "SETTLE_MS",
    "STEP_MS",
    "HealthError",
    "ProjectHealth",
    "ReindexRecord",
    "WatchedMemory",
    "Watcher",
    "parse_progress",
    "relevant_paths",
]
