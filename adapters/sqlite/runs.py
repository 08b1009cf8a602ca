"""The Retrieval Run store over ``local.db`` (seed "Storage", "Status and recovery"; brief §5-§6).

A Run is inserted ``running`` with its owner (pid, process start time, boot id); ``complete``
writes the candidates, makes sure the Run's manifest is stored and marks it ``succeeded`` in one
transaction. Manifests are stored once per hash (``record_manifest`` at index time), so recording
costs the number of candidates, never the corpus size.

Retention: at most ``MAX_RUNS_PER_PROJECT`` unpinned Runs per project; pinned Runs neither
count nor get pruned, and a ``running`` Run is never pruned (its owner is about to write it).
``clear`` deletes unpinned Runs (database first), then blob files no longer live (files after);
a crash between the two leaves orphans that the next ``clear`` sweeps.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import apsw

from memory_core.adapters.sqlite import run_queries as q
from memory_core.adapters.sqlite.database import fetch, read_snapshot, storage_errors, write_transaction
from memory_core.adapters.sqlite.run_rows import (
    INSERT_CANDIDATE,
    UnitColumns,
    candidate_rows,
    json_column,
)
from memory_core.adapters.sqlite.run_writer import RunWriter
from memory_core.adapters.system.crash_points import crash_point
from memory_core.domain.clock import utc_now_iso
from memory_core.domain.errors import InvalidRequest, RunNotFound
from memory_core.domain.model import EffectiveMemory, ManifestEntry
from memory_core.ports import BlobStore
from memory_core.runs.listing import check_listing
from memory_core.runs.owners import Owner, OwnerOfThisProcess, current_boot_id
from memory_core.runs.records import (
    FAILED,
    MAX_ERROR_SUMMARY,
    RUNNING,
    SUCCEEDED,
    ClearReport,
    RunDetail,
    RunFailure,
    RunFilter,
    RunPage,
    RunStart,
    RunTrace,
)
from memory_core.runs.rules import (
    BLOB_GRACE_S,
    MAX_ERROR_FIELD,
    bounded,
    check_manifest,
    collect_blobs,
    new_run_id,
    total_ms,
)

log = logging.getLogger(__name__)

MAX_UNWRITTEN_FAILURES = 1000  # Runs kept for a retry of their failure mark; beyond, recovery's job
# Named points where a test may crash the process (or a ``fault`` hook may raise).
AFTER_CANDIDATES = "runs.complete.after_candidates"
AFTER_CLEAR_COMMIT = "runs.clear.after_commit"


class _Clock(Protocol):
    def now_iso(self) -> str: ...


class _UtcClock:
    def now_iso(self) -> str:
        return utc_now_iso()


class SqliteRunStore:
    """Implements ``memory_core.ports.runs.RunStore`` over a connection from ``open_database``.

    ``blobs``: the CAS store whose unreferenced files ``clear`` collects (none: rows only).
    ``owner``: the owner recorded on new Runs (default: this process). ``write_behind``: commit
    a completed trace on the writer thread right behind the answer (default), or before
    ``complete`` returns (False: an answered Run is ``succeeded`` even if the process dies the
    next instant, for ~10% more activation latency at 10,000 units). ``fault``: a test seam
    called at the named points (``AFTER_CANDIDATES``, ``AFTER_CLEAR_COMMIT``).
    """

    def __init__(
        self,
        conn: apsw.Connection,
        blobs: BlobStore | None = None,
        owner: Owner | None = None,
        clock: _Clock | None = None,
        *,
        write_behind: bool = True,
        blob_grace_s: float = BLOB_GRACE_S,
        fault: Callable[[str], None] = crash_point,
    ) -> None:
        self._conn = conn
        self._blobs = blobs
        self._owner: Callable[[], Owner] = (lambda: owner) if owner is not None else OwnerOfThisProcess()
        self._clock = clock or _UtcClock()
        self._grace = blob_grace_s
        self._fault = fault
        # One connection may serve several threads; keep each of our transactions whole.
        self._lock = threading.RLock()
        self._writer = RunWriter(conn, self._lock)
        self._write_behind = write_behind
        self._open: set[str] = set()  # Runs this store started and nobody completed or failed yet
        self._unwritten_failures: dict[str, RunFailure] = {}  # touched on the writer thread only
        self._unit_columns = UnitColumns()

    def settle(self) -> None:
        """Return once every write this process queued (inserts, traces, prunes) has landed."""
        self._writer.settle()

    def close(self) -> None:
        """Finish pending Run writes and stop the writer thread (it restarts on the next Run)."""
        self._writer.close()

    @property
    def connection(self) -> apsw.Connection:
        return self._conn

    # -- recording ------------------------------------------------------------------------------

    def start(self, run: RunStart) -> str:
        """Return the new Run's id at once; its ``running`` row is inserted on the store's writer
        thread while the pipeline ranks, and the project's history pruned a moment behind the
        answer. ``complete`` and ``fail`` wait for that insert, and every read waits for both."""
        run_id = new_run_id()
        owner = self._owner()
        self._open.add(run_id)
        self._writer.submit(run_id, functools.partial(self._insert_running, run_id, run, owner))
        # The prune deletes an old Run's ~180 candidate rows: behind the answer, not beside the
        # ranking (every read settles first, so none sees more than the kept Runs).
        if not self._writer.write_behind(functools.partial(self._prune, run.project_id)):
            with self._lock:
                self._prune(run.project_id, self._conn)
        return run_id

    def _insert_running(self, run_id: str, run: RunStart, owner: Owner, conn: apsw.Connection) -> None:
        self._retry_unwritten_failures(conn)
        with storage_errors("cannot start Retrieval Run"), write_transaction(conn):
            conn.execute(
                "INSERT INTO retrieval_runs(run_id, project_id, query, state_fingerprint, token_budget, status, "
                "started_at, owner_pid, owner_started_at, owner_boot_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id, run.project_id, run.query, run.state_fingerprint, run.token_budget, RUNNING,
                    run.started_at, owner.pid, owner.started_at, owner.boot_id,
                ),
            )  # fmt: skip
        self._fault("runs.start.after_commit")

    def _prune(self, project_id: str, conn: apsw.Connection) -> None:
        """The project's retention (``run_queries.prune``); a failure is logged and the next Run's
        prune catches up (it deletes every Run over the bound)."""
        try:
            with storage_errors("cannot prune Retrieval Runs"), write_transaction(conn):
                q.prune(conn, project_id)
        except Exception:
            log.exception("could not prune the Retrieval Runs of %s; the next Run tries again", project_id)

    def complete(self, run_id: str, trace: RunTrace) -> None:
        """Make the Run ``succeeded`` with its trace, behind the answer.

        The trace's parameters are taken here; its candidates become rows on the writer thread,
        with the transaction, a moment behind the answer (~0.5 ms of the agent's wait at ~180
        candidates): the pipeline never changes a Candidate once its activation has answered, so
        what is stored is what was answered. Raises only when the Run's ``running`` row was never
        written (its ``run_id`` names nothing). A write that fails behind the answer is logged and
        the Run marked ``failed`` with ``history_write_failed``; were even that impossible, the
        store's next write tries again, and recovery fails it (``retrieval_interrupted``) once
        this process is gone.
        """
        latency = dict(trace.latency_ms)
        update = (
            SUCCEEDED, trace.finished_at, trace.effective_memory_hash, trace.index_revision,
            json_column(trace.revisions), json_column(latency), int(trace.warm), len(trace.candidates),
            trace.fragment_count, trace.token_count, total_ms(latency), run_id, RUNNING,
        )  # fmt: skip
        if self._claim(run_id) and self._write_behind:
            behind = functools.partial(self._write_behind_answer, run_id, update, trace)
            if self._writer.write_behind(behind):
                return  # queued; otherwise (no writer thread) it is written inline below
        rows = candidate_rows(run_id, trace.candidates, self._unit_columns)
        with self._lock:
            self._write_trace(self._conn, run_id, update, rows, trace.effective_memory_hash, trace.live_memory)

    def _write_trace(
        self,
        conn: apsw.Connection,
        run_id: str,
        update: tuple[Any, ...],
        rows: list[tuple[Any, ...]],
        manifest: str,
        live: EffectiveMemory | None = None,
    ) -> None:
        with storage_errors("cannot record Retrieval Run"), write_transaction(conn):
            conn.execute(
                "UPDATE retrieval_runs SET status = ?, finished_at = ?, effective_memory_hash = ?, "
                "index_revision = ?, revisions_json = ?, latency_json = ?, warm = ?, candidate_count = ?, "
                "fragment_count = ?, token_count = ?, total_ms = ? WHERE run_id = ? AND status = ?",
                update,
            )
            q.check_changed(conn, run_id)
            conn.executemany(INSERT_CANDIDATE, rows)
            self._fault(AFTER_CANDIDATES)
            q.ensure_manifest(conn, manifest, self._clock.now_iso, live)
        self._fault("runs.complete.after_commit")

    def _claim(self, run_id: str) -> bool:
        """Before a Run's terminal write: True when this store started it and no one else claimed
        it (it may then be written behind the answer); any other Run is checked against what has
        landed. Either way its ``running`` insert is waited for (its error re-raised)."""
        try:
            self._open.remove(run_id)  # atomic: of two calls for one Run, only one takes it
            ours = True
        except KeyError:
            ours = False
            self._writer.settle()
        self._writer.wait(run_id)
        return ours

    def _write_behind_answer(
        self, run_id: str, update: tuple[Any, ...], trace: RunTrace, conn: apsw.Connection
    ) -> None:
        self._retry_unwritten_failures(conn)
        try:
            rows = candidate_rows(run_id, trace.candidates, self._unit_columns)
            self._write_trace(conn, run_id, update, rows, trace.effective_memory_hash, trace.live_memory)
        except Exception:
            log.exception("could not record Retrieval Run %s; the agent got its answer", run_id)
            failure = RunFailure.history_write_failed(trace.latency_ms, trace.warm, trace.finished_at)
            try:
                self._write_failure(conn, run_id, failure)
            except Exception:
                log.warning("Retrieval Run %s stays running until a later write can fail it", run_id)
                if len(self._unwritten_failures) < MAX_UNWRITTEN_FAILURES:
                    self._unwritten_failures[run_id] = failure

    def _retry_unwritten_failures(self, conn: apsw.Connection) -> None:
        """Mark ``failed`` the Runs whose trace and failure could not be written (a full disk, a
        lock held too long): the next write of this store tries again, so such a Run does not stay
        ``running`` for as long as this process lives. Recovery covers it once the process is gone."""
        for run_id, failure in list(self._unwritten_failures.items()):
            try:
                self._write_failure(conn, run_id, failure)
            except (RunNotFound, InvalidRequest):
                pass  # cleared, or made terminal by someone else meanwhile
            except Exception:
                return  # still unwritable: try again on the next write
            self._unwritten_failures.pop(run_id, None)

    def fail(self, run_id: str, failure: RunFailure) -> None:
        self._claim(run_id)
        with self._lock:
            self._write_failure(self._conn, run_id, failure)

    def _write_failure(self, conn: apsw.Connection, run_id: str, failure: RunFailure) -> None:
        latency = dict(failure.latency_ms)
        with storage_errors("cannot record Retrieval Run"), write_transaction(conn):
            conn.execute(
                "UPDATE retrieval_runs SET status = ?, finished_at = ?, effective_memory_hash = ?, "
                "index_revision = ?, revisions_json = ?, latency_json = ?, warm = ?, total_ms = ?, "
                "error_stage = ?, error_code = ?, error_summary = ? WHERE run_id = ? AND status = ?",
                (
                    FAILED, failure.finished_at, failure.effective_memory_hash, failure.index_revision,
                    json_column(failure.revisions), json_column(latency), int(failure.warm), total_ms(latency),
                    bounded(failure.error_stage, MAX_ERROR_FIELD), bounded(failure.error_code, MAX_ERROR_FIELD),
                    bounded(failure.error_summary, MAX_ERROR_SUMMARY), run_id, RUNNING,
                ),
            )  # fmt: skip
            q.check_changed(conn, run_id)
            if failure.effective_memory_hash:
                q.ensure_manifest(conn, failure.effective_memory_hash, self._clock.now_iso)
            self._fault("runs.fail.before_commit")

    def record_manifest(self, effective_memory: EffectiveMemory) -> str:
        """Store the ordered manifest once under its hash (the indexer calls this); returns the hash."""
        with self._lock, storage_errors("cannot read manifest"):
            known = q.has_manifest(self._conn, effective_memory.hash)
        if known:
            return effective_memory.hash
        digest = check_manifest(effective_memory)
        with self._lock, storage_errors("cannot store manifest"), write_transaction(self._conn) as conn:
            q.insert_manifest(conn, digest, effective_memory.entries, self._clock.now_iso)
        self._fault("runs.record_manifest.after_commit")
        return digest

    def record_blob(self, sha256: str, byte_size: int, media_type: str) -> None:
        """Metadata of a content-addressed blob; the first sighting wins."""
        with self._lock, storage_errors("cannot record blob"), write_transaction(self._conn) as conn:
            conn.execute(
                "INSERT OR IGNORE INTO retrieval_corpus_blobs(sha256, byte_size, media_type, first_seen_at) "
                "VALUES (?, ?, ?, ?)",
                (sha256, byte_size, media_type, self._clock.now_iso()),
            )
        self._fault("runs.record_blob.after_commit")

    def run_manifest(self, manifest_hash: str) -> tuple[ManifestEntry, ...] | None:
        """The ordered manifest a Run saw, or None when it was never recorded."""
        self._writer.settle()  # a trace written behind its answer may have copied it
        with self._lock, storage_errors("cannot read manifest"):
            return q.manifest_entries(self._conn, manifest_hash)

    # -- pinning ----------------------------------------------------------------------------------

    def pin(self, run_id: str) -> None:
        """Keep this Run through retention and Clear History (an Evaluation Case refers to it)."""
        self._set_pinned(run_id, 1)

    def unpin(self, run_id: str) -> None:
        self._set_pinned(run_id, 0)

    def _set_pinned(self, run_id: str, pinned: int) -> None:
        self._writer.settle()  # read what this process has written
        with self._lock, storage_errors("cannot pin Retrieval Run"), write_transaction(self._conn) as conn:
            conn.execute("UPDATE retrieval_runs SET pinned = ? WHERE run_id = ?", (pinned, run_id))
            if conn.changes() == 0:
                raise RunNotFound(f"no Retrieval Run {run_id!r}", run_id=run_id)
        self._fault("runs.set_pinned.after_commit")

    # -- reading ----------------------------------------------------------------------------------

    def list_runs(self, run_filter: RunFilter, *, limit: int = 50, cursor: str | None = None) -> RunPage:
        """Newest first (``started_at``, then ``run_id``); keyset pages stay stable while Runs are
        inserted: no Run present throughout is repeated or skipped."""
        check_listing(run_filter, limit)
        sql, params = q.page_query(run_filter, limit, cursor)
        self._writer.settle()  # read what this process has written
        with self._lock, storage_errors("cannot list Retrieval Runs"):
            rows = fetch(self._conn, sql, params)
        return q.page_of(rows, limit)

    def get_run(self, run_id: str) -> RunDetail:
        self._writer.settle()  # read what this process has written
        with self._lock, storage_errors("cannot read Retrieval Run"), read_snapshot(self._conn):
            return q.read_run(self._conn, run_id)

    # -- recovery and clearing -------------------------------------------------------------------

    def recover_interrupted(self) -> int:
        """Fail every ``running`` Run whose owner is gone (``retrieval_interrupted``); a Run of a
        live process (another CLI, the daemon) stays ``running``. Returns how many were failed."""
        boot = current_boot_id()
        self._writer.settle()  # read what this process has written
        with self._lock, storage_errors("cannot recover Retrieval Runs"), write_transaction(self._conn) as conn:
            failed = q.fail_interrupted(conn, self._clock.now_iso(), boot)
            self._fault("runs.recover.before_commit")
        return failed

    def clear(self, project_id: str | None = None) -> ClearReport:
        """Delete unpinned Runs of one project (or all) except those still running in a live
        process, and the manifests nothing refers to; commit; then delete blob files no longer live."""
        boot = current_boot_id()
        self._writer.settle()  # read what this process has written
        with self._lock, storage_errors("cannot clear Retrieval Runs"), write_transaction(self._conn) as conn:
            deleted, kept = q.delete_cleared(conn, project_id, boot)
            self._fault("runs.clear.before_commit")
        self._fault(AFTER_CLEAR_COMMIT)
        deleted_blobs = 0
        if self._blobs is not None:
            deleted_blobs = collect_blobs(self._blobs, self.live_blobs, self._grace)
        return ClearReport(deleted_runs=deleted, kept_pinned=kept, deleted_blobs=deleted_blobs)

    def live_blobs(self) -> set[str]:
        """Digests a Run's manifest, a current/previous generation or an evaluation corpus names."""
        self._writer.settle()  # read what this process has written
        with self._lock, storage_errors("cannot read blob references"), read_snapshot(self._conn):
            return q.live_digests(self._conn)


__all__ = ["AFTER_CANDIDATES", "AFTER_CLEAR_COMMIT", "SqliteRunStore"]
