"""The Run store's SQL over one connection: pruning, manifests, listing, reading, recovery and
clearing. ``SqliteRunStore`` holds the connection, its lock and writer thread, and calls these
inside its transactions; each function is one step of one of them."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import apsw

from memory_core.adapters.sqlite.database import fetch
from memory_core.adapters.sqlite.run_rows import (
    DELETE_UNUSED_MANIFESTS,
    LIVE_BLOB_QUERIES,
    RESOURCE_COLUMNS,
    SELECT_CANDIDATES,
    SUMMARY_COLUMNS,
    candidate_from_row,
    manifest_rows,
    summary_from_row,
)
from memory_core.adapters.storage_format import CONVERTER as STORED
from memory_core.domain.errors import InvalidRequest, RunNotFound
from memory_core.domain.model import EffectiveMemory, Layer, ManifestEntry
from memory_core.runs.listing import decode_cursor, encode_cursor, like_escape
from memory_core.runs.owners import owner_gone
from memory_core.runs.records import FAILED, MAX_RUNS_PER_PROJECT, RUNNING, RunDetail, RunFilter, RunPage
from memory_core.runs.rules import INTERRUPTED, INTERRUPTED_STAGE, check_manifest, interrupted_summary

log = logging.getLogger(__name__)


def prune(conn: apsw.Connection, project_id: str) -> None:
    """Keep the project's newest ``MAX_RUNS_PER_PROJECT`` unpinned Runs (a running one stays)."""
    unpinned = fetch(conn, "SELECT count(*) FROM retrieval_runs WHERE project_id = ? AND pinned = 0", (project_id,))
    excess = int(unpinned[0][0]) - MAX_RUNS_PER_PROJECT
    if excess > 0:
        conn.execute(
            "DELETE FROM retrieval_runs WHERE run_id IN (SELECT run_id FROM retrieval_runs "
            "WHERE project_id = ? AND pinned = 0 AND status != 'running' "
            "ORDER BY started_at, run_id LIMIT ?)",
            (project_id, excess),
        )


def check_changed(conn: apsw.Connection, run_id: str) -> None:
    """After a terminal write of a ``running`` Run: it named no Run, or one already terminal."""
    if conn.changes() == 1:
        return
    rows = fetch(conn, "SELECT status FROM retrieval_runs WHERE run_id = ?", (run_id,))
    if not rows:
        raise RunNotFound(f"no Retrieval Run {run_id!r}", run_id=run_id)
    raise InvalidRequest(f"Retrieval Run {run_id!r} is already {rows[0][0]}", run_id=run_id, status=rows[0][0])


def has_manifest(conn: apsw.Connection, manifest_hash: str) -> bool:
    return bool(
        fetch(conn, "SELECT 1 FROM retrieval_run_resources WHERE manifest_hash = ? LIMIT 1", (manifest_hash,))
    )


def ensure_manifest(
    conn: apsw.Connection, manifest_hash: str, now: Callable[[], str], live: EffectiveMemory | None = None
) -> None:
    """Known manifests cost one index probe; an unknown one is copied once from the catalog,
    or, for a live Effective Memory no generation holds, stored once from the trace."""
    if has_manifest(conn, manifest_hash):
        return
    if live is not None and live.hash == manifest_hash:
        insert_manifest(conn, check_manifest(live), live.entries, now)
        return
    rows = fetch(conn, "SELECT entries_json FROM manifests WHERE manifest_hash = ?", (manifest_hash,))
    if not rows:
        log.warning("Effective Memory manifest %s is unknown; the Run refers to it by hash only", manifest_hash)
        return
    entries = STORED.structure(json.loads(str(rows[0][0])), list[ManifestEntry])
    insert_manifest(conn, manifest_hash, entries, now)


def insert_manifest(
    conn: apsw.Connection, manifest_hash: str, entries: Sequence[ManifestEntry], now: Callable[[], str]
) -> None:
    conn.executemany(
        f"INSERT OR IGNORE INTO retrieval_run_resources({RESOURCE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        manifest_rows(manifest_hash, entries),
    )
    seen = now()
    conn.executemany(
        "INSERT OR IGNORE INTO retrieval_corpus_blobs(sha256, byte_size, media_type, first_seen_at) "
        "VALUES (?, ?, ?, ?)",
        [(e.resource_hash, e.byte_size, e.media_type, seen) for e in entries],
    )


def manifest_entries(conn: apsw.Connection, manifest_hash: str) -> tuple[ManifestEntry, ...] | None:
    rows = fetch(
        conn,
        f"SELECT {RESOURCE_COLUMNS} FROM retrieval_run_resources WHERE manifest_hash = ? ORDER BY ordinal",
        (manifest_hash,),
    )
    if not rows:
        return None
    return tuple(ManifestEntry(int(r[1]), r[2], Layer(r[3]), r[4], r[5], int(r[6]), r[7]) for r in rows)


def page_query(run_filter: RunFilter, limit: int, cursor: str | None) -> tuple[str, list[Any]]:
    """The keyset page's statement: newest first (``started_at``, then ``run_id``), one row more
    than ``limit`` to tell whether another page follows."""
    where, params = _where(run_filter)
    if cursor is not None:
        started_at, run_id = decode_cursor(cursor)
        where.append("(started_at < ? OR (started_at = ? AND run_id < ?))")
        params += [started_at, started_at, run_id]
    sql = f"SELECT {SUMMARY_COLUMNS} FROM retrieval_runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY started_at DESC, run_id DESC LIMIT ?"
    return sql, [*params, limit + 1]


def page_of(rows: Sequence[Sequence[Any]], limit: int) -> RunPage:
    runs = tuple(summary_from_row(r) for r in rows[:limit])
    more = len(rows) > limit
    return RunPage(runs, encode_cursor(runs[-1].started_at, runs[-1].run_id) if more else None)


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


def read_run(conn: apsw.Connection, run_id: str) -> RunDetail:
    """One Run whole (call inside one read snapshot)."""
    rows = fetch(
        conn,
        f"SELECT {SUMMARY_COLUMNS}, revisions_json, latency_json FROM retrieval_runs WHERE run_id = ?",
        (run_id,),
    )
    if not rows:
        raise RunNotFound(f"no Retrieval Run {run_id!r}", run_id=run_id)
    candidates = fetch(conn, SELECT_CANDIDATES, (run_id,))
    row = rows[0]
    return RunDetail(
        summary=summary_from_row(row[:-2]),
        revisions=json.loads(row[-2]),
        latency_ms=json.loads(row[-1]),
        candidates=tuple(candidate_from_row(c) for c in candidates),
    )


def fail_interrupted(conn: apsw.Connection, now: str, boot: str | None) -> int:
    """Mark ``failed`` every ``running`` Run whose owner is gone; returns how many."""
    rows = fetch(
        conn,
        "SELECT run_id, owner_pid, owner_started_at, owner_boot_id FROM retrieval_runs WHERE status = ?",
        (RUNNING,),
    )
    gone = [(r[0], r[1]) for r in rows if owner_gone(r[1], r[2], r[3], boot)]
    conn.executemany(
        "UPDATE retrieval_runs SET status = ?, finished_at = ?, error_stage = ?, error_code = ?, "
        "error_summary = ? WHERE run_id = ? AND status = ?",
        [(FAILED, now, INTERRUPTED_STAGE, INTERRUPTED, interrupted_summary(pid), run_id, RUNNING)
         for run_id, pid in gone],
    )  # fmt: skip
    return len(gone)


def delete_cleared(conn: apsw.Connection, project_id: str | None, boot: str | None) -> tuple[int, int]:
    """Clear History's rows: unpinned Runs (of one project, or all) but those running in a live
    process, the manifests nothing refers to and the blob metadata no longer live. Returns
    (Runs deleted, pinned Runs kept)."""
    scope, params = ("AND project_id = ?", [project_id]) if project_id is not None else ("", [])
    running = fetch(
        conn,
        "SELECT run_id, owner_pid, owner_started_at, owner_boot_id FROM retrieval_runs "
        f"WHERE pinned = 0 AND status = 'running' {scope}",
        params,
    )
    in_flight = [r[0] for r in running if not owner_gone(r[1], r[2], r[3], boot)]
    spare = f"AND run_id NOT IN ({', '.join('?' * len(in_flight))})" if in_flight else ""
    conn.execute(f"DELETE FROM retrieval_runs WHERE pinned = 0 {scope} {spare}", [*params, *in_flight])
    deleted = conn.changes()
    kept = fetch(conn, f"SELECT count(*) FROM retrieval_runs WHERE pinned = 1 {scope}", params)
    conn.execute(DELETE_UNUSED_MANIFESTS)
    live = live_digests(conn)
    stale = [(d,) for (d,) in conn.execute("SELECT sha256 FROM retrieval_corpus_blobs") if d not in live]
    conn.executemany("DELETE FROM retrieval_corpus_blobs WHERE sha256 = ?", stale)
    return deleted, int(kept[0][0])


def live_digests(conn: apsw.Connection) -> set[str]:
    """Digests a Run's manifest, a current/previous generation or an evaluation corpus names."""
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    live: set[str] = set()
    for table, sql in LIVE_BLOB_QUERIES:
        if table in tables:
            live.update(str(d) for (d,) in conn.execute(sql) if d is not None)
    return live
