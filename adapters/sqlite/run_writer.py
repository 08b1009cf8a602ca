"""The Run writer: one thread with its own connection writes candidates behind the answer."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable

import apsw

from memory_core.adapters.sqlite.database import SiblingSettings

log = logging.getLogger(__name__)

# How long a write behind the answer waits before it takes a core: time for the answer to reach
# its caller first. Through the daemon (docs/performance.md, "Recording behind the answer"), a
# trace written at once and a prune beside the ranking made a call ~9% slower than 3 ms later.
BEHIND_GRACE_S = 0.003


class RunWriter:
    """One writer thread with its own connection, in order: it inserts ``running`` Runs while the
    pipeline ranks, and writes what can wait (completed traces, the retention prune) a moment
    behind the answer.

    The insert (~0.2 ms) then overlaps the ranking pipeline instead of adding to the agent's
    latency; ``wait`` re-raises an insert's error to whoever completes or fails that Run (the
    engine then answers with ``run_id`` null, as for any history failure). A crash in the first
    moments of an activation can therefore leave no Run at all; the agent had no answer then.

    A write behind (a completed trace, whose candidates become rows there: the pipeline never
    changes a Candidate once its activation has answered; a prune) waits ``BEHIND_GRACE_S``
    after it was queued, or less when an insert or a reader comes after it, before it starts:
    the answer reaches its caller before a transaction takes the other core. One thread runs
    every write in the order queued, so an answered Run's trace still lands before the next
    Run's insert. The Run reads ``running`` until its trace lands, and a crash in between leaves
    it to recovery (``retrieval_interrupted``). Every read of this store ``settle``s first, so
    this process always reads its own writes.

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
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._conn: apsw.Connection | None = None  # used by the writer thread only
        self._pid = 0
        self._pending: dict[str, concurrent.futures.Future[None]] = {}
        self._behind: set[concurrent.futures.Future[None]] = set()
        # Bumped by every insert and reader: a write behind queued before stops waiting its grace.
        self._hurried = threading.Condition()
        self._hurry_count = 0

    def _submit(self, job: Callable[[apsw.Connection], None]) -> concurrent.futures.Future[None] | None:
        """Queue ``job`` for the writer thread (the caller holds ``self._lock``); None: no thread."""
        if self._sibling is None:
            return None
        if self._executor is None or self._pid != os.getpid():  # none yet, or forked
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="memcore-runs")
            self._pid, self._pending, self._behind, self._conn = os.getpid(), {}, set(), None
        try:
            return self._executor.submit(self._run, job)
        except RuntimeError:  # shutting down: no new threads
            return None

    def submit(self, run_id: str, insert: Callable[[apsw.Connection], None]) -> None:
        with self._lock:
            future = self._submit(insert)
            if future is not None:
                self._pending[run_id] = future
        if future is not None:
            self._hurry()  # the writes queued before it go now: the insert never waits a grace
            return
        with self._main_lock:
            insert(self._main)

    def _hurry(self) -> None:
        with self._hurried:
            self._hurry_count += 1
            self._hurried.notify_all()

    def _after_grace(self, write: Callable[[apsw.Connection], None]) -> Callable[[apsw.Connection], None]:
        """``write``, once ``BEHIND_GRACE_S`` has passed since now or an insert or reader came."""
        due = time.monotonic() + BEHIND_GRACE_S
        with self._hurried:
            count = self._hurry_count

        def after_grace(conn: apsw.Connection) -> None:
            with self._hurried:
                self._hurried.wait_for(lambda: self._hurry_count != count, max(0.0, due - time.monotonic()))
            write(conn)

        return after_grace

    def wait(self, run_id: str) -> None:
        """Wait for ``run_id``'s queued insert, if any, and re-raise its error."""
        with self._lock:
            future = self._pending.pop(run_id, None)
        if future is not None:
            future.result()

    def write_behind(self, write: Callable[[apsw.Connection], None]) -> bool:
        """Queue ``write`` to start a moment behind the answer (it handles its own errors); False
        when it must run inline instead."""
        with self._lock:
            future = self._submit(self._after_grace(write))
            if future is None:
                return False
            self._behind.add(future)
        future.add_done_callback(self._forget)
        return True

    def _forget(self, future: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._behind.discard(future)

    def _run(self, job: Callable[[apsw.Connection], None]) -> None:
        if self._conn is None:
            assert self._sibling is not None
            self._conn = self._sibling.open()
        job(self._conn)

    def settle(self) -> None:
        """Wait for every queued write, hurried (no grace); forget the inserts that succeeded
        (``wait`` needs none)."""
        with self._lock:
            pending = list(self._pending.items())
            behind = list(self._behind)
        if not pending and not behind:
            return
        self._hurry()  # after the snapshot: a write queued just before it waits no grace either
        concurrent.futures.wait([f for _, f in pending] + behind)
        with self._lock:
            for run_id, future in pending:
                if future.exception() is None:
                    self._pending.pop(run_id, None)

    def close(self) -> None:
        self.settle()
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
