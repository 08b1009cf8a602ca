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
import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import apsw

from memory_core.adapters.sqlite.database import storage_errors, utc_now_iso, write_transaction
from memory_core.adapters.sqlite.run_rows import (
    _DELETE_UNUSED_MANIFESTS,
    _INSERT_CANDIDATE,
    _RESOURCE_COLUMNS,
    _SELECT_CANDIDATES,
    _SUMMARY_COLUMNS,
    LIVE_BLOB_QUERIES,
    _candidate_from_row,
    _candidate_rows,
    _json,
    _manifest_rows,
    _summary_from_row,
    _UnitColumns,
)
from memory_core.adapters.sqlite.run_writer import RunWriter
from memory_core.adapters.system.crash_points import CRASH_EXIT, CRASH_POINT_ENV, crash_point
from memory_core.domain.errors import InvalidRequest, RunNotFound
from memory_core.domain.model import EffectiveMemory, Layer, ManifestEntry
from memory_core.ports import BlobStore
from memory_core.runs.listing import (  # noqa: F401  (re-exported)
    STATUSES,
    check_listing,
    contains_ascii_nocase,
    decode_cursor,
    encode_cursor,
    like_escape,
)
from memory_core.runs.owners import Owner, OwnerOfThisProcess, current_boot_id, owner_gone  # noqa: F401
from memory_core.runs.records import (
    FAILED,
    MAX_ERROR_SUMMARY,
    MAX_RUNS_PER_PROJECT,
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
from memory_core.runs.rules import (  # noqa: F401  (re-exported)
    BLOB_GRACE_S,
    INTERRUPTED,
    INTERRUPTED_STAGE,
    MAX_ERROR_FIELD,
    bounded,
    check_manifest,
    collect_blobs,
    interrupted_summary,
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


# -- rows ---------------------------------------------------------------------------------------


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
        self._unit_columns = _UnitColumns()

    def settle(self) -> None:
        """Return once every write this process queued (inserts, traces) has landed."""
        self._writer.settle()

    def close(self) -> None:
        """Finish pending Run writes and stop the writer thread (it restarts on the next Run)."""
        self._writer.close()

    @property
    def connection(self) -> apsw.Connection:
        return self._conn

    # -- recording ------------------------------------------------------------------------------

    def start(self, run: RunStart) -> str:
        """Return the new Run's id at once; its ``running`` row is inserted (and the project's
        history pruned) on the store's writer thread while the pipeline ranks. ``complete`` and
        ``fail`` wait for that insert, and every read waits for pending inserts first."""
        run_id = new_run_id()
        owner = self._owner()
        self._open.add(run_id)
        self._writer.submit(run_id, functools.partial(self._insert_running, run_id, run, owner))
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
            self._prune(conn, run.project_id)
        self._fault("runs.start.after_commit")

    def _prune(self, conn: apsw.Connection, project_id: str) -> None:
        unpinned = conn.execute(
            "SELECT count(*) FROM retrieval_runs WHERE project_id = ? AND pinned = 0", (project_id,)
        ).fetchall()[0][0]
        excess = int(unpinned) - MAX_RUNS_PER_PROJECT
        if excess > 0:
            conn.execute(
                "DELETE FROM retrieval_runs WHERE run_id IN (SELECT run_id FROM retrieval_runs "
                "WHERE project_id = ? AND pinned = 0 AND status != 'running' "
                "ORDER BY started_at, run_id LIMIT ?)",
                (project_id, excess),
            )

    def complete(self, run_id: str, trace: RunTrace) -> None:
        """Make the Run ``succeeded`` with its trace, right behind the answer.

        The trace becomes rows and parameters here, on the caller's thread (what is stored is
        what was answered, whatever happens to the candidates next); the transaction runs on the
        writer thread. Raises only when the Run's ``running`` row was never written (its
        ``run_id`` names nothing). A write that fails behind the answer is logged and the Run
        marked ``failed`` with ``history_write_failed``; were even that impossible, the store's
        next write tries again, and recovery fails it (``retrieval_interrupted``) once this
        process is gone.
        """
        rows = _candidate_rows(run_id, trace.candidates, self._unit_columns)
        latency = dict(trace.latency_ms)
        update = (
            SUCCEEDED, trace.finished_at, trace.effective_memory_hash, trace.index_revision,
            _json(trace.revisions), _json(latency), int(trace.warm), len(rows), trace.fragment_count,
            trace.token_count, total_ms(latency), run_id, RUNNING,
        )  # fmt: skip
        if self._claim(run_id) and self._write_behind:
            behind = functools.partial(self._write_behind_answer, run_id, update, rows, trace)
            if self._writer.write_behind(behind):
                return  # queued; otherwise (no writer thread) it is written inline below
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
            self._check_changed(conn, run_id)
            conn.executemany(_INSERT_CANDIDATE, rows)
            self._fault(AFTER_CANDIDATES)
            self._ensure_manifest(conn, manifest, live)
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
        self, run_id: str, update: tuple[Any, ...], rows: list[tuple[Any, ...]], trace: RunTrace, conn: apsw.Connection
    ) -> None:
        self._retry_unwritten_failures(conn)
        try:
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
                    _json(failure.revisions), _json(latency), int(failure.warm), total_ms(latency),
                    bounded(failure.error_stage, MAX_ERROR_FIELD), bounded(failure.error_code, MAX_ERROR_FIELD),
                    bounded(failure.error_summary, MAX_ERROR_SUMMARY), run_id, RUNNING,
                ),
            )  # fmt: skip
            self._check_changed(conn, run_id)
            if failure.effective_memory_hash:
                self._ensure_manifest(conn, failure.effective_memory_hash)
            self._fault("runs.fail.before_commit")

    def _check_changed(self, conn: apsw.Connection, run_id: str) -> None:
        if conn.changes() == 1:
            return
        rows = conn.execute("SELECT status FROM retrieval_runs WHERE run_id = ?", (run_id,)).fetchall()
        if not rows:
            raise RunNotFound(f"no Retrieval Run {run_id!r}", run_id=run_id)
        raise InvalidRequest(f"Retrieval Run {run_id!r} is already {rows[0][0]}", run_id=run_id, status=rows[0][0])

    def _ensure_manifest(self, conn: apsw.Connection, manifest_hash: str, live: EffectiveMemory | None = None) -> None:
        """Known manifests cost one index probe; an unknown one is copied once from the catalog,
        or, for a live Effective Memory no generation holds, stored once from the trace."""
        known = conn.execute(
            "SELECT 1 FROM retrieval_run_resources WHERE manifest_hash = ? LIMIT 1", (manifest_hash,)
        ).fetchall()
        if known:
            return
        if live is not None and live.hash == manifest_hash:
            self._insert_manifest(conn, check_manifest(live), live.entries)
            return
        rows = conn.execute("SELECT entries_json FROM manifests WHERE manifest_hash = ?", (manifest_hash,)).fetchall()
        if not rows:
            log.warning("Effective Memory manifest %s is unknown; the Run refers to it by hash only", manifest_hash)
            return
        entries = [ManifestEntry.from_dict(e) for e in json.loads(str(rows[0][0]))]
        self._insert_manifest(conn, manifest_hash, entries)

    def _insert_manifest(self, conn: apsw.Connection, manifest_hash: str, entries: Sequence[ManifestEntry]) -> None:
        conn.executemany(
            f"INSERT OR IGNORE INTO retrieval_run_resources({_RESOURCE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            _manifest_rows(manifest_hash, entries),
        )
        now = self._clock.now_iso()
        conn.executemany(
            "INSERT OR IGNORE INTO retrieval_corpus_blobs(sha256, byte_size, media_type, first_seen_at) "
            "VALUES (?, ?, ?, ?)",
            [(e.resource_hash, e.byte_size, e.media_type, now) for e in entries],
        )

    def record_manifest(self, effective_memory: EffectiveMemory) -> str:
        """Store the ordered manifest once under its hash (the indexer calls this); returns the hash."""
        with self._lock, storage_errors("cannot read manifest"):
            known = self._conn.execute(
                "SELECT 1 FROM retrieval_run_resources WHERE manifest_hash = ? LIMIT 1", (effective_memory.hash,)
            ).fetchall()
        if known:
            return effective_memory.hash
        digest = check_manifest(effective_memory)
        with self._lock, storage_errors("cannot store manifest"), write_transaction(self._conn) as conn:
            self._insert_manifest(conn, digest, effective_memory.entries)
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
            rows = self._conn.execute(
                f"SELECT {_RESOURCE_COLUMNS} FROM retrieval_run_resources WHERE manifest_hash = ? ORDER BY ordinal",
                (manifest_hash,),
            ).fetchall()
        if not rows:
            return None
        return tuple(ManifestEntry(int(r[1]), r[2], Layer(r[3]), r[4], r[5], int(r[6]), r[7]) for r in rows)

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
        where, params = self._where(run_filter)
        if cursor is not None:
            started_at, run_id = decode_cursor(cursor)
            where.append("(started_at < ? OR (started_at = ? AND run_id < ?))")
            params += [started_at, started_at, run_id]
        sql = f"SELECT {_SUMMARY_COLUMNS} FROM retrieval_runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at DESC, run_id DESC LIMIT ?"
        self._writer.settle()  # read what this process has written
        with self._lock, storage_errors("cannot list Retrieval Runs"):
            rows = self._conn.execute(sql, (*params, limit + 1)).fetchall()
        runs = tuple(_summary_from_row(r) for r in rows[:limit])
        more = len(rows) > limit
        return RunPage(runs, encode_cursor(runs[-1].started_at, runs[-1].run_id) if more else None)

    @staticmethod
    def _where(f: RunFilter) -> tuple[list[str], list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        for column, op, value in (
            ("project_id", "=", f.project_id),
            ("status", "=", f.status),
            ("started_at", ">=", f.since),
            ("started_at", "<", f.until),
        ):
            if value is not None:
                where.append(f"{column} {op} ?")
                params.append(value)
        if f.query_contains:
            where.append("query LIKE ? ESCAPE '\\'")
            params.append(like_escape(f.query_contains))
        return where, params

    def get_run(self, run_id: str) -> RunDetail:
        self._writer.settle()  # read what this process has written
        with self._lock, storage_errors("cannot read Retrieval Run"), self._conn:
            rows = self._conn.execute(
                f"SELECT {_SUMMARY_COLUMNS}, revisions_json, latency_json FROM retrieval_runs WHERE run_id = ?",
                (run_id,),
            ).fetchall()
            if not rows:
                raise RunNotFound(f"no Retrieval Run {run_id!r}", run_id=run_id)
            candidates = self._conn.execute(_SELECT_CANDIDATES, (run_id,)).fetchall()
        row = rows[0]
        return RunDetail(
            summary=_summary_from_row(row[:-2]),
            revisions=json.loads(row[-2]),
            latency_ms=json.loads(row[-1]),
            candidates=tuple(_candidate_from_row(c) for c in candidates),
        )

    # -- recovery and clearing -------------------------------------------------------------------

    def recover_interrupted(self) -> int:
        """Fail every ``running`` Run whose owner is gone (``retrieval_interrupted``); a Run of a
        live process (another CLI, the daemon) stays ``running``. Returns how many were failed."""
        boot = current_boot_id()
        self._writer.settle()  # read what this process has written
        with self._lock, storage_errors("cannot recover Retrieval Runs"), write_transaction(self._conn) as conn:
            rows = conn.execute(
                "SELECT run_id, owner_pid, owner_started_at, owner_boot_id FROM retrieval_runs WHERE status = ?",
                (RUNNING,),
            ).fetchall()
            gone = [(r[0], r[1]) for r in rows if owner_gone(r[1], r[2], r[3], boot)]
            now = self._clock.now_iso()
            conn.executemany(
                "UPDATE retrieval_runs SET status = ?, finished_at = ?, error_stage = ?, error_code = ?, "
                "error_summary = ? WHERE run_id = ? AND status = ?",
                [(FAILED, now, INTERRUPTED_STAGE, INTERRUPTED, interrupted_summary(pid), run_id, RUNNING)
                 for run_id, pid in gone],
            )  # fmt: skip
            self._fault("runs.recover.before_commit")
        return len(gone)

    def clear(self, project_id: str | None = None) -> ClearReport:
        """Delete unpinned Runs of one project (or all) except those still running in a live
        process, and the manifests nothing refers to; commit; then delete blob files no longer live."""
        scope, params = ("AND project_id = ?", [project_id]) if project_id is not None else ("", [])
        boot = current_boot_id()
        self._writer.settle()  # read what this process has written
        with self._lock, storage_errors("cannot clear Retrieval Runs"), write_transaction(self._conn) as conn:
            running = conn.execute(
                "SELECT run_id, owner_pid, owner_started_at, owner_boot_id FROM retrieval_runs "
                f"WHERE pinned = 0 AND status = 'running' {scope}",
                params,
            ).fetchall()
            in_flight = [r[0] for r in running if not owner_gone(r[1], r[2], r[3], boot)]
            spare = f"AND run_id NOT IN ({', '.join('?' * len(in_flight))})" if in_flight else ""
            conn.execute(f"DELETE FROM retrieval_runs WHERE pinned = 0 {scope} {spare}", [*params, *in_flight])
            deleted = conn.changes()
            kept = conn.execute(f"SELECT count(*) FROM retrieval_runs WHERE pinned = 1 {scope}", params).fetchall()
            conn.execute(_DELETE_UNUSED_MANIFESTS)
            live = self._live_digests(conn)
            stale = [(d,) for (d,) in conn.execute("SELECT sha256 FROM retrieval_corpus_blobs") if d not in live]
            conn.executemany("DELETE FROM retrieval_corpus_blobs WHERE sha256 = ?", stale)
            self._fault("runs.clear.before_commit")
        self._fault(AFTER_CLEAR_COMMIT)
        deleted_blobs = 0
        if self._blobs is not None:
            deleted_blobs = collect_blobs(self._blobs, self.live_blobs, self._grace)
        return ClearReport(deleted_runs=deleted, kept_pinned=int(kept[0][0]), deleted_blobs=deleted_blobs)

    def live_blobs(self) -> set[str]:
        """Digests a Run's manifest, a current/previous generation or an evaluation corpus names."""
        self._writer.settle()  # read what this process has written
        with self._lock, storage_errors("cannot read blob references"), self._conn:
            return self._live_digests(self._conn)

    def _live_digests(self, conn: apsw.Connection) -> set[str]:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        live: set[str] = set()
        for table, sql in LIVE_BLOB_QUERIES:
            if table in tables:
                live.update(str(d) for (d,) in conn.execute(sql) if d is not None)
        return live





__all__ = [
    "AFTER_CANDIDATES",
    "AFTER_CLEAR_COMMIT",
    "BLOB_GRACE_S",
    "CRASH_EXIT",
    "CRASH_POINT_ENV",
    "INTERRUPTED",
    "LIVE_BLOB_QUERIES",
    "Owner",
    "SqliteRunStore",
]
