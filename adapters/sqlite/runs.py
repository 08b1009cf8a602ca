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

import concurrent.futures
import functools
import json
import logging
import operator
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, Protocol

import apsw
import attrs

from memory_core.adapters.sqlite.database import SiblingSettings, storage_errors, utc_now_iso, write_transaction
from memory_core.adapters.system.crash_points import CRASH_EXIT, CRASH_POINT_ENV, crash_point
from memory_core.domain.canonical import canonical_json
from memory_core.domain.errors import InvalidRequest, RunNotFound
from memory_core.domain.model import EffectiveMemory, Layer, ManifestEntry, Unit
from memory_core.ports import BlobStore
from memory_core.retrieval.pipeline import Candidate
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
    CandidateRecord,
    ClearReport,
    RunDetail,
    RunFailure,
    RunFilter,
    RunPage,
    RunStart,
    RunSummary,
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


# -- owners -------------------------------------------------------------------------------------
# -- rows ---------------------------------------------------------------------------------------

_CANDIDATE_FIELDS = [f.name for f in attrs.fields(CandidateRecord)]
_CANDIDATE_COLUMNS = [("heading_path_json" if f == "heading_path" else f) for f in _CANDIDATE_FIELDS]
_INSERT_CANDIDATE = (
    f"INSERT INTO retrieval_run_candidates(run_id, {', '.join(_CANDIDATE_COLUMNS)}) "
    f"VALUES (?{', ?' * len(_CANDIDATE_COLUMNS)})"
)
_SELECT_CANDIDATES = (
    f"SELECT {', '.join(_CANDIDATE_COLUMNS)} FROM retrieval_run_candidates WHERE run_id = ? ORDER BY final_rank"
)
_SUMMARY_COLUMNS = (
    "run_id, project_id, query, status, started_at, finished_at, state_fingerprint, token_budget, "
    "effective_memory_hash, index_revision, warm, candidate_count, fragment_count, token_count, total_ms, "
    "error_stage, error_code, error_summary, pinned"
)
_RESOURCE_COLUMNS = "manifest_hash, ordinal, resource_id, layer, uri, resource_hash, byte_size, media_type"


# A candidate row is the unit's identity columns then the Candidate's stage columns, in
# CandidateRecord's field order (checked here, so the two can never drift apart silently).
_UNIT_FIELDS = ("unit_id", "resource_id", "unit_hash", "resource_hash", "heading_path", "token_count")
_STAGE_FIELDS = tuple(_CANDIDATE_FIELDS[len(_UNIT_FIELDS) :])
if (
    tuple(_CANDIDATE_FIELDS[: len(_UNIT_FIELDS)]) != _UNIT_FIELDS
    or tuple(f.name for f in attrs.fields(Candidate) if f.name != "unit") != _STAGE_FIELDS
):
    raise ImportError("CandidateRecord and Candidate disagree on the stored columns")
_GET_UNIT_FIELDS = operator.attrgetter("unit_id", "resource_id", "unit_hash", "resource_hash")
_GET_STAGE_FIELDS = operator.attrgetter(*_STAGE_FIELDS)


class _UnitColumns:
    """The identity columns of a candidate row, per Unit, built once per Unit object.

    On the activation's hot path (one row per candidate, ~180 per Run); a loaded generation
    hands every activation the same Unit objects, so most candidates were seen before (saves
    ~0.08 ms a Run). Keyed by ``id(unit)`` beside a weak reference to the unit: a hit must be
    that very object (a freed unit's id can be reused), and the cache never keeps a replaced
    generation's texts alive. Emptied when full."""

    def __init__(self, limit: int = 100_000) -> None:
        self._limit = limit
        self._seen: dict[int, tuple[weakref.ref[Unit], tuple[Any, ...]]] = {}

    def __call__(self, unit: Unit) -> tuple[Any, ...]:
        hit = self._seen.get(id(unit))
        if hit is not None and hit[0]() is unit:
            return hit[1]
        columns = (*_GET_UNIT_FIELDS(unit), _heading_path_json(unit.heading_path), unit.token_count)
        if len(self._seen) >= self._limit:
            self._seen = {}
        self._seen[id(unit)] = (weakref.ref(unit), columns)
        return columns


def _candidate_rows(run_id: str, candidates: Iterable[Candidate], unit_columns: _UnitColumns) -> list[tuple[Any, ...]]:
    return [(run_id, *unit_columns(c.unit), *_GET_STAGE_FIELDS(c)) for c in candidates]


def _heading_path_json(heading_path: Sequence[str]) -> str:
    """``json.dumps(list(heading_path), ensure_ascii=False)``, byte for byte, in a quarter of the
    time: the C string encoder json.dumps itself uses, without its per-call set-up (~180 calls
    per Run, most of them for a heading path no earlier Run had)."""
    return "[" + ", ".join(map(encode_basestring, heading_path)) + "]"


def _json_list(value: Sequence[str]) -> str:
    return json.dumps(list(value), ensure_ascii=False)


def _candidate_from_row(row: Sequence[Any]) -> CandidateRecord:
    values = dict(zip(_CANDIDATE_FIELDS, row, strict=True))
    values["heading_path"] = tuple(json.loads(values["heading_path"]))
    return CandidateRecord(**values)


def _summary_from_row(row: Sequence[Any]) -> RunSummary:
    (run_id, project_id, query, status, started_at, finished_at, fingerprint, budget, em_hash, revision, warm,
     candidates, fragments, tokens, total, stage, code, summary, pinned) = row  # fmt: skip
    return RunSummary(
        run_id=run_id,
        project_id=project_id,
        query=query,
        status=status,
        started_at=started_at,
        finished_at=finished_at,
        state_fingerprint=fingerprint,
        token_budget=int(budget),
        effective_memory_hash=em_hash,
        index_revision=revision,
        warm=None if warm is None else bool(warm),
        candidate_count=int(candidates),
        fragment_count=int(fragments),
        token_count=int(tokens),
        total_ms=None if total is None else float(total),
        error_stage=stage,
        error_code=code,
        error_summary=summary,
        pinned=bool(pinned),
    )


def _manifest_rows(manifest_hash: str, entries: Iterable[ManifestEntry]) -> list[tuple[Any, ...]]:
    return [
        (manifest_hash, e.ordinal, e.resource_id, e.layer.value, e.uri, e.resource_hash, e.byte_size, e.media_type)
        for e in entries
    ]


# Where a blob is referenced. A blob is live while any of these names it (brief §6). Each entry is
# (table that must exist, query yielding digests): evaluation corpora arrive with their own
# migration, and adding a reference is one line here.
LIVE_BLOB_QUERIES: tuple[tuple[str, str], ...] = (
    (
        "retrieval_run_resources",
        "SELECT r.resource_hash FROM retrieval_run_resources r WHERE r.manifest_hash IN "
        "(SELECT effective_memory_hash FROM retrieval_runs WHERE effective_memory_hash IS NOT NULL)",
    ),
    (
        "project_generation_pointers",
        "SELECT json_extract(j.value, '$.resource_hash') FROM project_generation_pointers p "
        "JOIN generations g ON g.project_id = p.project_id "
        " AND g.index_revision IN (p.current_revision, p.previous_revision) "
        "JOIN manifests m ON m.manifest_hash = coalesce(g.manifest_hash, g.effective_memory_hash), "
        "json_each(m.entries_json) j",
    ),
    ("evaluation_corpus_resources", "SELECT resource_hash FROM evaluation_corpus_resources"),
)

# Manifest rows stay while a Run or a current/previous generation refers to them (so the first
# Run after an index never has to copy a manifest).
_DELETE_UNUSED_MANIFESTS = (
    "DELETE FROM retrieval_run_resources WHERE manifest_hash NOT IN ("
    " SELECT effective_memory_hash FROM retrieval_runs WHERE effective_memory_hash IS NOT NULL"
    " UNION SELECT coalesce(g.manifest_hash, g.effective_memory_hash) FROM project_generation_pointers p"
    " JOIN generations g ON g.project_id = p.project_id"
    "  AND g.index_revision IN (p.current_revision, p.previous_revision))"
)


class RunWriter:
    """One writer thread with its own connection, in order: it inserts ``running`` Runs while the
    pipeline ranks, and writes completed traces right behind the answer.

    The insert and the retention prune (~0.5 ms) then overlap the ranking pipeline instead of
    adding to the agent's latency: the query embedding holds one core and the other is idle.
    ``wait`` re-raises an insert's error to whoever completes or fails that Run (the engine
    then answers with ``run_id`` null, as for any history failure). A crash in the first
    moments of an activation can therefore leave no Run at all; the agent had no answer then.

    A completed trace (already turned into rows on the caller's thread, so what is stored is
    what was answered) is committed behind the answer; the Run reads ``running`` until then,
    and a crash in between leaves it to recovery (``retrieval_interrupted``). Every read of
    this store ``settle``s first, so this process always reads its own writes.

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
                return
        with self._main_lock:
            insert(self._main)

    def write_behind(self, write: Callable[[apsw.Connection], None]) -> bool:
        """Queue ``write`` (it handles its own errors); False when it must run inline instead."""
        with self._lock:
            future = self._submit(write)
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

    def wait(self, run_id: str) -> None:
        with self._lock:
            future = self._pending.pop(run_id, None)
        if future is not None:
            future.result()

    def settle(self) -> None:
        """Wait for every queued write; forget the inserts that succeeded (``wait`` needs none)."""
        with self._lock:
            pending = list(self._pending.items())
            behind = list(self._behind)
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
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


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



def _json(value: Mapping[str, Any]) -> str:
    return canonical_json(dict(value)).decode("utf-8")


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
