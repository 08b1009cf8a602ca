"""The source watcher: keeps indexed projects current while the daemon (or ``memcore index --watch``) runs.

One watch per project follows its source folders with ``watchfiles`` (inotify, FSEvents or kqueue
through Rust's ``notify``); where the OS runs out of watches (Linux's ``fs.inotify.max_user_watches``)
that project falls back to polling and its health says so. A watch hands over *batches*:
``watchfiles`` groups changes until none came for ``STEP_MS`` (at most ``DEBOUNCE_MS``), so an
editor's save (a temp file, then a rename) is one batch and a burst of thousands of writes a few.

One worker thread re-indexes: projects one at a time, each when it has changes and its last change
is ``SETTLE_MS`` old. Changes that land while a project re-indexes make one more re-index after it,
never one per change. Explicit ``index_project`` calls go to the same worker (``index_now``), so the
watcher and a person never build the same project at once. The worker owns its own indexer (its
own database connections): activations keep serving the current generation until the new one is
published, and are never blocked by the watcher.

A source folder that disappears (or is replaced, unreadable or a file) marks the project unhealthy
with the scanner's own ``source_unavailable`` error; the last generation keeps serving; the watch
checks again every ``RETRY_S`` and re-indexes when the folder is back. Every re-index, failed or
not, is recorded in the project's health (``ProjectHealth``), which ``runtime_status``, the Runtime
page and ``memcore project show`` show.

``WatchedMemory`` is the daemon's live Effective Memory: cached per project, dropped by the next
batch of changes, read again (through the (path, size, mtime) hash cache) by the first reader after.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, Protocol

import attrs

from memory_core.adapters.files.filesystem_sources import _open_root, is_hidden, media_type_for
from memory_core.domain.errors import MemoryCoreError, SourceUnavailable
from memory_core.domain.model import EffectiveMemory, Generation, Project
from memory_core.domain.progress import Progress
from memory_core.services.indexing import IndexReport

log = logging.getLogger("memory_core.watcher")

DEBOUNCE_MS = 1_600  # a batch is yielded at the latest this long after its first change
STEP_MS = 100  # ... or once no change came for this long (an editor's temp file + rename is one batch)
SETTLE_MS = 200  # a project re-indexes once its last batch is this old (a burst still being written waits)
CHECK_MS = 1_000  # how often a watch wakes without changes, to check its folders are still there
RETRY_S = 1.0  # how often a missing or unreadable source is looked for again
RECONCILE_S = 5.0  # how often the worker re-reads the project list (projects added by another process)
POLL_DELAY_MS = 500  # the polling fallback's period
CHANGED_PATHS_KEPT = 5  # the last change's paths a health record names

# Health states (ProjectHealth.state)
WATCHING, POLLING, SOURCE_UNAVAILABLE, STOPPED, NOT_WATCHED = (
    "watching", "polling", "source_unavailable", "stopped", "not_watched"
)
WATCH_LIMIT = "watch_limit_reached"  # the code of the health error when inotify ran out of watches


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- health values ----------------------------------------------------------------------------
@attrs.frozen
class HealthError:
    code: str = attrs.field(metadata={"schema": {"description": "a stable error code (source_unavailable, ...)"}})
    message: str
    at: str


@attrs.frozen
class ReindexRecord:
    """One re-index the daemon ran for a project (a watch batch, a request or the start-up check)."""

    trigger: str = attrs.field(metadata={"schema": {"enum": ["watch", "request", "start"]}})
    started_at: str
    finished_at: str
    seconds: float
    status: str = attrs.field(metadata={"schema": {"enum": ["built", "unchanged", "failed"]}})
    index_revision: str | None = None
    units: int | None = None
    embedded: int | None = attrs.field(default=None, metadata={"schema": {"description": "units embedded"}})
    error_code: str | None = None


@attrs.frozen
class ProjectHealth:
    """What a person needs to trust a project's index: is it followed, is it current, what went wrong."""

    project_id: str
    watching: bool = attrs.field(metadata={"schema": {"description": "changes to its sources are followed now"}})
    state: str = attrs.field(
        metadata={"schema": {"enum": [WATCHING, POLLING, SOURCE_UNAVAILABLE, STOPPED, NOT_WATCHED]}}
    )
    healthy: bool = attrs.field(metadata={"schema": {"description": "no current error"}})
    indexed: bool = attrs.field(metadata={"schema": {"description": "it has a generation (only those re-index)"}})
    last_change_at: str | None
    last_change_paths: tuple[str, ...] = attrs.field(
        metadata={"schema": {"description": f"up to {CHANGED_PATHS_KEPT} paths of the last change seen"}}
    )
    pending_changes: int = attrs.field(
        metadata={"schema": {"description": "changed paths seen that no finished re-index covers yet"}}
    )
    reindex_pending: bool = attrs.field(
        metadata={"schema": {"description": "a re-index is queued or running for changes seen"}}
    )
    indexing: bool
    progress: str | None = attrs.field(metadata={"schema": {"description": "the running re-index's stage"}})
    last_reindex: ReindexRecord | None
    error: HealthError | None = attrs.field(metadata={"schema": {"description": "the current problem, if any"}})
    last_error: HealthError | None = attrs.field(
        metadata={"schema": {"description": "the most recent problem, kept after it is resolved"}}
    )


# -- what the watcher needs -------------------------------------------------------------------
class _Catalog(Protocol):
    def list_projects(self) -> list[Project]: ...

    def get_project(self, project_id: str) -> Project: ...

    def current_generation(self, project_id: str) -> Generation | None: ...


class ProjectIndexer(Protocol):
    """An ``Indexer`` or an ``Engine``: what the worker calls (from its thread only)."""

    catalog: Any

    def index(self, project_id: str, *, force: bool = False, progress: Progress = ...) -> IndexReport: ...


class ReindexCancelled(Exception):
    """Raised from the progress callback when the project was removed mid-build (the build is discarded)."""


WatchFn = Callable[..., Iterator[set[tuple[Any, str]]]]


def _default_watch() -> WatchFn:
    import watchfiles

    return watchfiles.watch


def relevant_paths(changes: Iterable[tuple[Any, str]], roots: Iterable[str]) -> list[str]:
    """The changed paths the scanner could care about: markdown/text files and folders, not hidden.

    A deleted path cannot be asked whether it was a folder, so deletions of anything not hidden
    count (a removed folder takes its resources with it); a no-op re-index costs a scan."""
    import watchfiles

    roots = [r.rstrip(os.sep) for r in roots]
    kept = []
    for change, path in changes:
        root = next((r for r in roots if path == r or path.startswith(r + os.sep)), None)
        if root is None:
            continue
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if rel != "." and is_hidden(rel):
            continue
        if media_type_for(path) or change == watchfiles.Change.deleted or rel == "." or os.path.isdir(path):
            kept.append(path)
    return sorted(kept)


def _is_watch_limit(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and "watch limit" in str(exc).lower()


# -- one project's watch ----------------------------------------------------------------------
class _SourceWatch:
    """A thread following one project's source folders; reports batches and problems to the Watcher."""

    def __init__(self, owner: Watcher, project: Project) -> None:
        self.owner = owner
        self.project = project
        self.stop = threading.Event()
        self.polling = False
        # Off at first: with it on, watchfiles also hides the OS running out of watches.
        self.ignore_denied = False
        self.thread = threading.Thread(target=self._run, name=f"watch-{project.project_id}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self.stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def _roots(self) -> list[tuple[str, tuple[int, int]]]:
        """Each source's resolved folder and its identity; SourceUnavailable as the scanner words it."""
        out = []
        for source in self.project.sources:
            root = _open_root(source.path)
            st = os.stat(root)
            out.append((str(root), (st.st_dev, st.st_ino)))
        return out

    @staticmethod
    def _same(roots: list[tuple[str, tuple[int, int]]]) -> bool:
        for path, ident in roots:
            try:
                st = os.stat(path)
            except OSError:
                return False
            if (st.st_dev, st.st_ino) != ident:
                return False  # moved away and replaced: the old watch follows a folder no longer there
        return True

    def _run(self) -> None:
        pid = self.project.project_id
        was_unavailable = False
        while not self.stop.is_set():
            try:
                roots = self._roots()
            except SourceUnavailable as exc:
                if not was_unavailable:
                    self.owner._source_problem(pid, exc)
                    was_unavailable = True
                self.stop.wait(RETRY_S)
                continue
            if was_unavailable:  # back: what is there now may differ from the last generation
                was_unavailable = False
                self.owner._source_back(pid, [r for r, _ in roots])
            try:
                self._follow(roots)
            except Exception as exc:
                if _is_watch_limit(exc) and not self.polling:
                    self.polling = True
                    self.owner._watch_limit(pid, exc)
                    continue
                if isinstance(exc, PermissionError) and not self.ignore_denied:
                    self.ignore_denied = True  # an unreadable subfolder: the scanner warns about it
                    continue
                log.warning("watch failed", extra={"fields": {"project": pid, "error": str(exc)}})
                self.owner._source_problem(pid, SourceUnavailable(f"cannot watch the sources: {exc}"))
                was_unavailable = True
                self.stop.wait(RETRY_S)

    def _follow(self, roots: list[tuple[str, tuple[int, int]]]) -> None:
        watch = self.owner.watch_fn
        paths = [r for r, _ in roots]
        self.owner._watching(self.project.project_id, polling=self.polling)
        for changes in watch(
            *paths,
            debounce=DEBOUNCE_MS,
            step=STEP_MS,
            stop_event=self.stop,
            rust_timeout=CHECK_MS,
            yield_on_timeout=True,
            force_polling=self.polling,
            poll_delay_ms=POLL_DELAY_MS,
            ignore_permission_denied=self.ignore_denied,
        ):
            if changes:
                kept = relevant_paths(changes, paths)
                if kept:
                    self.owner._changed(self.project.project_id, kept)
            if not self._same(roots):
                return  # re-resolve: the folder went (or was replaced); _run reports it


# -- the watcher ------------------------------------------------------------------------------
@attrs.define
class _State:
    project: Project
    indexed: bool = False
    watch: _SourceWatch | None = None
    state: str = NOT_WATCHED
    seen: int = 0  # batches of changes seen (a version)
    covered: int = 0  # the ``seen`` the last finished re-index started from
    changed: set[str] = attrs.field(factory=set)
    last_change_at: str | None = None
    last_change_paths: tuple[str, ...] = ()
    last_event: float = 0.0
    trigger: str = "watch"
    indexing: bool = False
    progress: str | None = None
    last_reindex: ReindexRecord | None = None
    error: HealthError | None = None
    watch_error: HealthError | None = None  # a degraded watch (polling) that is not a failure
    last_error: HealthError | None = None
    memory: EffectiveMemory | None = None
    memory_seen: int = -1
    removed: bool = False


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
        self.watch_fn = watch_fn or _default_watch()
        self.on_reindex = on_reindex
        self.now = now
        self._states: dict[str, _State] = {}
        self._requests: deque[_Request] = deque()
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
            self._cond.notify_all()

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

    def _track(self, project: Project, *, indexed: bool) -> _State:
        """Call with the lock held."""
        pid = project.project_id
        state = self._states.get(pid)
        if state is None:
            state = self._states[pid] = _State(project, indexed=indexed)
            if self.watch and not self._closed:
                state.watch = _SourceWatch(self, project)
                state.state = STOPPED  # until the watch reports
                state.watch.start()
        state.indexed = state.indexed or indexed
        return state

    def _reconcile(self, first: bool) -> None:
        """Follow the catalog: projects added or removed by another process, generations built elsewhere."""
        catalog = self.indexer.catalog
        projects = [p for p in catalog.list_projects() if self.only is None or p.project_id in self.only]
        generations = {p.project_id: catalog.current_generation(p.project_id) is not None for p in projects}
        gone = []
        with self._cond:
            for project in projects:
                state = self._track(project, indexed=generations[project.project_id])
                if first and self.watch and state.indexed and not state.indexing:
                    # The sources may have changed while nothing watched them: a check (a no-op when not).
                    state.seen += 1
                    state.trigger = "start"
            known = {p.project_id for p in projects}
            for pid in list(self._states):
                if pid not in known and not self._states[pid].indexing:
                    gone.append(self._states.pop(pid))
            self._cond.notify_all()
        for state in gone:
            state.removed = True
            if state.watch is not None:
                state.watch.close()

    # -- reports from the watches (their threads) -----------------------------------------
    def _changed(self, project_id: str, paths: list[str]) -> None:
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

    def _watching(self, project_id: str, *, polling: bool) -> None:
        with self._cond:
            state = self._states.get(project_id)
            if state is not None:
                state.state = POLLING if polling else WATCHING
                self._cond.notify_all()  # a project whose folder came back may be due now

    def _source_problem(self, project_id: str, exc: MemoryCoreError) -> None:
        log.warning("source unavailable", extra={"fields": {"project": project_id, "error": exc.message}})
        with self._cond:
            state = self._states.get(project_id)
            if state is not None:
                state.state = SOURCE_UNAVAILABLE
                state.error = state.last_error = HealthError(exc.code, exc.message, self.now())
                state.last_change_at = self.now()

    def _source_back(self, project_id: str, roots: list[str]) -> None:
        log.info("source back", extra={"fields": {"project": project_id}})
        self._changed(project_id, roots)
        with self._cond:
            state = self._states.get(project_id)
            if state is not None and state.error is not None and state.error.code == SourceUnavailable.code:
                state.error = None  # the re-index this triggers reports anything else

    def _watch_limit(self, project_id: str, exc: BaseException) -> None:
        message = (
            f"the OS ran out of file watches ({exc}); following the sources by polling every "
            f"{POLL_DELAY_MS} ms instead (raise fs.inotify.max_user_watches to watch again)"
        )
        log.warning("watch limit reached", extra={"fields": {"project": project_id}})
        with self._cond:
            state = self._states.get(project_id)
            if state is not None:
                state.watch_error = state.last_error = HealthError(WATCH_LIMIT, message, self.now())

    # -- the worker -----------------------------------------------------------------------
    def _due(self, now: float) -> tuple[_State | None, float]:
        """The next project to re-index and how long until another may be due (lock held)."""
        wait = RECONCILE_S
        for state in self._states.values():
            if not state.indexed or state.seen == state.covered or state.state == SOURCE_UNAVAILABLE:
                continue
            ready = state.last_event + SETTLE_MS / 1000 - now
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
            with self._cond:
                if self._closed:
                    return
                request = self._requests.popleft() if self._requests else None
                state: _State | None = None
                if request is None:
                    state, wait = self._due(time.monotonic())
                    if state is None:
                        self._cond.wait(min(wait, max(0.0, next_reconcile - time.monotonic())))
                        continue
            if request is not None:
                self._serve_request(request)
            elif state is not None:
                self._reindex(state.project.project_id, force=False, trigger=state.trigger)

    def _serve_request(self, request: _Request) -> None:
        if not request.future.set_running_or_notify_cancel():
            return
        try:
            report = self._reindex(request.project_id, force=request.force, trigger="request", raise_errors=True)
        except BaseException as exc:
            request.future.set_exception(exc)
        else:
            assert report is not None
            request.future.set_result(report)

    def _progress(self, state: _State) -> Progress:
        def update(stage: str, done: int, total: int) -> None:
            if state.removed or self._closed:
                raise ReindexCancelled(state.project.project_id)
            state.progress = f"{stage} {done}/{total}"

        return update

    def _reindex(
        self, project_id: str, *, force: bool, trigger: str, raise_errors: bool = False
    ) -> IndexReport | None:
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
            seen = state.seen
            state.indexing, state.progress = True, None
        started_at, t0 = self.now(), time.perf_counter()
        report: IndexReport | None = None
        failure: BaseException | None = None
        try:
            report = self.indexer.index(project_id, force=force, progress=self._progress(state))
        except ReindexCancelled as exc:
            failure = MemoryCoreError(f"project {project_id!r} was removed while it re-indexed")
            failure.__cause__ = exc
        except BaseException as exc:  # recorded in the health; a request gets it raised
            failure = exc
            if not isinstance(exc, MemoryCoreError):
                log.exception("re-index failed", extra={"fields": {"project": project_id}})
        seconds = round(time.perf_counter() - t0, 3)
        if report is not None:
            record = ReindexRecord(trigger, started_at, self.now(), seconds, report.status, report.index_revision,
                                   report.units, report.embedded)
        else:
            code = failure.code if isinstance(failure, MemoryCoreError) else "internal_error"
            record = ReindexRecord(trigger, started_at, self.now(), seconds, "failed", error_code=code)
        with self._cond:
            state.indexing, state.progress = False, None
            state.last_reindex = record
            if report is not None:
                state.indexed = True
                state.covered = max(state.covered, seen)
                if state.covered == state.seen:
                    state.changed.clear()
                if state.error is not None and state.error.code != SourceUnavailable.code:
                    state.error = None  # a failed re-index's error, resolved by this one
            else:
                # Not retried in a loop: the next change (or request) tries again; the error says why.
                state.covered = max(state.covered, seen)
                if isinstance(failure, MemoryCoreError):
                    message = failure.message
                else:
                    message = f"{type(failure).__name__}: {failure}"
                state.error = state.last_error = HealthError(record.error_code or "internal_error", message, self.now())
            self._cond.notify_all()
        log.info(
            "reindex",
            extra={"fields": {"project": project_id, "trigger": trigger, "status": record.status, "s": seconds,
                              "embedded": record.embedded, "error": record.error_code}},
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

    @staticmethod
    def _pending(state: _State | None) -> bool:
        """A re-index is queued or running for changes seen (none is while a source is missing)."""
        if state is None or not state.indexed:
            return False
        return state.indexing or (state.seen != state.covered and state.state != SOURCE_UNAVAILABLE)

    def reindex_pending(self, project_id: str) -> bool:
        """Changes were seen that no finished re-index covers yet, and one is queued or running."""
        with self._cond:
            return self._pending(self._states.get(project_id))

    def wait_current(self, project_id: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until no re-index is pending for the project; True when none is."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                pending = self._pending(self._states.get(project_id))
                left = deadline - time.monotonic()
                if not pending or left <= 0:
                    return not pending
                self._cond.wait(left)

    def health(self, project_id: str | None = None) -> list[ProjectHealth]:
        with self._cond:
            states = [s for pid, s in sorted(self._states.items()) if project_id is None or pid == project_id]
            return [self._health(s) for s in states]

    def _health(self, s: _State) -> ProjectHealth:
        watching = s.watch is not None and s.state in (WATCHING, POLLING)
        error = s.error or s.watch_error
        return ProjectHealth(
            project_id=s.project.project_id,
            watching=watching,
            state=s.state,
            healthy=s.error is None,
            indexed=s.indexed,
            last_change_at=s.last_change_at,
            last_change_paths=s.last_change_paths,
            pending_changes=len(s.changed),
            reindex_pending=self._pending(s),
            indexing=s.indexing,
            progress=s.progress,
            last_reindex=s.last_reindex,
            error=error,
            last_error=s.last_error,
        )

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


class WatchedMemory:
    """The daemon's LiveMemory: the watcher's cached Effective Memory, read again after a change.

    ``fallback`` is the in-process LiveMemory (a scan through the hash cache); it is called on the
    engine's thread, as the engine would call it itself."""

    def __init__(self, watcher: Watcher, fallback: Any) -> None:
        self.watcher = watcher
        self.fallback = fallback

    def effective_memory(self, project: Project) -> EffectiveMemory:
        return self.watcher.cached_memory(project, self.fallback.effective_memory)

    def reindex_pending(self, project_id: str) -> bool:
        return self.watcher.reindex_pending(project_id)


__all__ = [
    "DEBOUNCE_MS",
    "SETTLE_MS",
    "STEP_MS",
    "HealthError",
    "ProjectHealth",
    "ReindexRecord",
    "WatchedMemory",
    "Watcher",
    "relevant_paths",
]
