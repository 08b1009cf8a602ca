"""The Run writer: one thread with its own connection writes candidates behind the answer."""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable

import apsw

from memory_core.adapters.sqlite.database import SiblingSettings

log = logging.getLogger(__name__)

# How long a write behind the answer waits before it takes a core: time for the answer to reach
# its caller first. Through the daemon (docs/performance.md, "Recording behind the answer"), a
# trace written at once and a prune beside the ranking made a call ~9% slower than 3 ms later.
BEHIND_GRACE_S = 0.003

Job = Callable[[apsw.Connection], None]


class _Queued:
    __slots__ = ("behind", "due", "future", "job")

    def __init__(self, job: Job, behind: bool) -> None:
        self.job, self.behind = job, behind
        self.due = time.monotonic() + BEHIND_GRACE_S if behind else 0.0
        self.future: concurrent.futures.Future[None] = concurrent.futures.Future()


class RunWriter:
    """One writer thread with its own connection, in order: it inserts ``running`` Runs while the
    pipeline ranks, and writes what can wait (completed traces, the retention prune) a moment
    behind the answer.

    The insert (~0.2 ms) then overlaps the ranking pipeline instead of adding to the agent's
    latency; ``wait`` re-raises an insert's error to whoever completes or fails that Run (the
    engine then answers with ``run_id`` null, as for any history failure). A crash in the first
    moments of an activation can therefore leave no Run at all; the agent had no answer then.

    A write behind (a completed trace, its candidates turned into rows here: the pipeline never
    changes a Candidate once its activation has answered; a prune) starts ``BEHIND_GRACE_S`` after it was queued, or
    at once when an insert or a reader comes after it: the answer reaches its caller before a
    transaction takes the other core, and writes still land in the order they were queued (an
    answered Run's trace before the next Run's insert). The Run reads ``running`` until its
    trace lands, and a crash in between leaves it to recovery (``retrieval_interrupted``). Every
    read of this store ``settle``s first, so this process always reads its own writes.

    An in-memory database (no second connection can see it), or an interpreter shutting down
    (no new thread), gets every write inline instead.
    """

    def __init__(self, main: apsw.Connection, main_lock: threading.RLock) -> None:
        self._main, self._main_lock = main, main_lock
        self._sibling = SiblingSettings.of(main)
        if self._sibling is not None:
            # WAL checkpoints (~10 ms every few dozen Runs) then happen on the writer's commits,
            # off the agent's path, instead of inside a `complete` (SQLite's default: whichever
            # commit crosses 1,000 WAL pages).
            main.execute("PRAGMA wal_autocheckpoint = 0")
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)  # a job queued or due, a reader, a close
        self._queue: collections.deque[_Queued] = collections.deque()
        self._inserts_queued = 0  # any ends the grace of the writes queued before it
        self._thread: threading.Thread | None = None
        self._closing = False
        self._conn: apsw.Connection | None = None  # used by the writer thread only
        self._pid = 0
        self._pending: dict[str, concurrent.futures.Future[None]] = {}
        self._behind: set[concurrent.futures.Future[None]] = set()

    def _submit(self, job: Job, *, behind: bool) -> concurrent.futures.Future[None] | None:
        """Queue ``job`` for the writer thread (the caller holds ``self._lock``); None: no thread."""
        if self._sibling is None:
            return None
        if self._thread is None or self._pid != os.getpid():  # none yet, or forked
            thread = threading.Thread(target=self._serve, name="memcore-runs", daemon=True)
            self._queue, self._inserts_queued, self._pending, self._behind = collections.deque(), 0, {}, set()
            self._conn, self._closing = None, False
            try:
                thread.start()
            except RuntimeError:  # shutting down: no new threads
                return None
            self._thread, self._pid = thread, os.getpid()
            _drained_at_exit(self)
        queued = _Queued(job, behind)
        self._queue.append(queued)
        self._inserts_queued += not behind
        self._ready.notify()
        return queued.future

    def submit(self, run_id: str, insert: Job) -> None:
        with self._lock:
            future = self._submit(insert, behind=False)
            if future is not None:
                self._pending[run_id] = future
                return
        with self._main_lock:
            insert(self._main)

    def wait(self, run_id: str) -> None:
        """Wait for ``run_id``'s queued insert, if any, and re-raise its error."""
        with self._lock:
            future = self._pending.pop(run_id, None)
        if future is not None:
            future.result()

    def write_behind(self, write: Job) -> bool:
        """Queue ``write`` to run a moment behind the answer (it handles its own errors); False
        when it must run inline instead."""
        with self._lock:
            future = self._submit(write, behind=True)
            if future is None:
                return False
            self._behind.add(future)
        future.add_done_callback(self._forget)
        return True

    def _forget(self, future: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._behind.discard(future)

    def _next(self) -> _Queued | None:
        """The next job in order, once due (None: closed and all done)."""
        with self._lock:
            while True:
                if self._queue:
                    head = self._queue[0]
                    wait = head.due - time.monotonic()
                    if wait <= 0 or self._inserts_queued or self._closing:
                        self._queue.popleft()
                        self._inserts_queued -= not head.behind
                        return head
                    self._ready.wait(wait)
                elif self._closing:
                    return None
                else:
                    self._ready.wait()

    def _serve(self) -> None:
        while (queued := self._next()) is not None:
            if not queued.future.set_running_or_notify_cancel():
                continue
            try:
                if self._conn is None:
                    assert self._sibling is not None
                    self._conn = self._sibling.open()
                queued.job(self._conn)
            except BaseException as exc:
                queued.future.set_exception(exc)
            else:
                queued.future.set_result(None)

    def settle(self) -> None:
        """Write what waits now and wait for every queued write; forget the inserts that
        succeeded (``wait`` needs none)."""
        with self._lock:
            pending = list(self._pending.items())
            behind = list(self._behind)
            if self._queue:
                for queued in self._queue:
                    queued.due = 0.0  # a reader waits: no grace
                self._ready.notify()
        if not pending and not behind:
            return
        concurrent.futures.wait([f for _, f in pending] + behind)
        with self._lock:
            for run_id, future in pending:
                if future.exception() is None:
                    self._pending.pop(run_id, None)

    def close(self) -> None:
        self.settle()
        with self._lock:
            thread, self._thread = self._thread, None
            self._closing = True
            self._ready.notify()
        if thread is not None and thread is not threading.current_thread() and self._pid == os.getpid():
            thread.join()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _drained_at_exit(writer: RunWriter) -> None:
    """Writes queued when the interpreter exits land first (the thread is a daemon thread, so
    it never holds the exit; a weak reference, so a dropped writer is not kept alive)."""
    ref = weakref.ref(writer)

    def drain() -> None:
        alive = ref()
        if alive is not None:
            alive.close()

    atexit.register(drain)
