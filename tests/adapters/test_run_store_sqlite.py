"""SqliteRunStore on disk: the schema 2 -> latest migration, atomic completion, crash recovery,
blob garbage collection with a real FileBlobStore, and owner-only modes."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.adapters.files.blob_store import FileBlobStore
from memory_core.adapters.sqlite import SCHEMA_VERSION, SqliteCatalog, open_database, schema_version
from memory_core.adapters.sqlite.run_rows import UnitColumns, heading_path_json
from memory_core.adapters.sqlite.runs import AFTER_CANDIDATES, AFTER_CLEAR_COMMIT, SqliteRunStore
from memory_core.adapters.system.crash_points import CRASH_EXIT, CRASH_POINT_ENV
from memory_core.domain.canonical import plain
from memory_core.domain.errors import InvalidRequest, RunNotFound, StorageUnavailable
from memory_core.domain.model import (
    EffectiveMemory,
    Layer,
    ManifestEntry,
    Project,
    Source,
    Unit,
)
from memory_core.runs.records import FAILED, RUNNING, SUCCEEDED, RunFilter
from memory_core.runs.rules import INTERRUPTED
from tests.adapters.test_database import dump, populate_projects
from tests.contracts.test_run_store import (
    REVISIONS,
    complete_runs,
    dead_pid,
    failure,
    index,
    ranked,
    run_start,
    trace_of,
    ts,
)

ROOT = Path(__file__).resolve().parents[2]
V2_TABLES = {
    "projects": "project_id, created_at",
    "project_sources": "project_id, ordinal, path, layer",
    "generations": "project_id, index_revision, effective_memory_hash, unit_count, resource_count, "
    "revisions_json, created_at, directory, manifest_hash",
    "project_generation_pointers": "project_id, current_revision, previous_revision",
    "file_hash_cache": "path, size, mtime_ns, sha256",
    "manifests": "manifest_hash, entries_json, created_at",
}


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def real_memory(blobs: FileBlobStore, tag: str, n: int, project: str = "alpha") -> EffectiveMemory:
    """A manifest whose resource hashes are real blobs in ``blobs``."""
    entries = []
    for i in range(n):
        digest = blobs.put(f"{tag} resource {i}\n".encode())
        entries.append(
            ManifestEntry(i, f"{tag}/{i}.md", Layer.PROJECT, f"file:///{tag}/{i}.md", digest, 20, "text/markdown")
        )
    return EffectiveMemory.from_entries(project, entries)


def age(blobs: FileBlobStore, seconds: float = 7200) -> None:
    """Make every blob file look old enough to collect."""
    past = time.time() - seconds
    for digest in blobs.digests():
        os.utime(blobs.path_of(digest), (past, past))


def count(conn: apsw.Connection, table: str, where: str = "", params: tuple = ()) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {table} {where}", params).fetchall()[0][0])


@pytest.fixture
def home(tmp_path):
    conn = open_database(tmp_path / "local.db")
    blobs = FileBlobStore(tmp_path / "evaluation-corpora" / "blobs")
    yield conn, SqliteCatalog(conn), blobs
    conn.close()


# -- migration ------------------------------------------------------------------------------------


def _populate_v2(conn: apsw.Connection, n_projects: int) -> None:
    def generation(p: int, pid: str, rev: int) -> None:
        entries = [
            ManifestEntry(
                k, f"{pid}/{k}.md", Layer.PROJECT, f"file:///{pid}/{rev}/{k}",
                hashlib.sha256(f"{pid}-{rev}-{k}".encode()).hexdigest(), k, "text/markdown",
            )
            for k in range(3)
        ]  # fmt: skip
        body = json.dumps(plain(entries), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(body.encode()).hexdigest()
        conn.execute("INSERT INTO manifests VALUES (?, ?, ?)", (digest, body, "t"))
        conn.execute(
            "INSERT INTO generations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (pid, f"rev{rev}", digest, 10, 3, json.dumps(plain(REVISIONS)), "t", f"/d/{pid}/rev{rev}", digest),
        )

    populate_projects(conn, n_projects, generation)


def reopen_migrated(
    path: Path, tables: Mapping[str, str], before: dict[str, list[tuple]], new_tables: Iterable[str], at_least: int
) -> apsw.Connection:
    """``path`` opened again, so migrated to the latest schema (``at_least`` or later): ``tables`` hold
    the rows they held ``before``, the integrity and foreign key checks pass, ``new_tables`` are empty."""
    conn = open_database(path)
    assert schema_version(conn) == SCHEMA_VERSION >= at_least
    assert dump(conn, tables) == before
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    for table in new_tables:
        assert count(conn, table) == 0
    return conn


def test_populated_v2_database_migrates_to_latest_without_losing_rows(tmp_path):
    path = tmp_path / "local.db"
    conn = open_database(path, target_version=2)
    with conn:
        _populate_v2(conn, n_projects=20)
    before = dump(conn, V2_TABLES)
    assert {t: len(rows) for t, rows in before.items()} == {
        "projects": 20, "project_sources": 60, "generations": 40, "project_generation_pointers": 20,
        "file_hash_cache": 20, "manifests": 40,
    }  # fmt: skip
    assert not conn.execute("SELECT name FROM sqlite_master WHERE name = 'retrieval_runs'").fetchall()
    conn.close()

    new_tables = ("retrieval_runs", "retrieval_run_candidates", "retrieval_run_resources", "retrieval_corpus_blobs")
    conn = reopen_migrated(path, V2_TABLES, before, new_tables, at_least=3)

    # The new tables are usable, and the old manifests feed them.
    catalog = SqliteCatalog(conn)
    store = SqliteRunStore(conn)
    current = catalog.current_generation("project-4")
    run_id = store.start(run_start("project-4"))
    store.complete(run_id, trace_of(ranked(3), current.effective_memory_hash))
    assert store.get_run(run_id).summary.status == SUCCEEDED
    assert [e.resource_id for e in store.run_manifest(current.effective_memory_hash)] == [
        "project-4/0.md", "project-4/1.md", "project-4/2.md",
    ]  # fmt: skip
    # Blobs named by the migrated generations are live (previous and current, every project).
    assert len(store.live_blobs()) == 20 * 2 * 3
    assert store.list_runs(RunFilter(project_id="project-4")).runs[0].run_id == run_id
    assert store.clear().deleted_runs == 1
    catalog.remove_project("project-0")
    assert len(catalog.list_projects()) == 19
    conn.close()


# -- atomicity ------------------------------------------------------------------------------------


def _one_resource_manifest(catalog) -> EffectiveMemory:
    memory = EffectiveMemory.from_entries(
        "alpha", [ManifestEntry(0, "a.md", Layer.PROJECT, "file:///a.md", "ab" * 32, 1, "text/markdown")]
    )
    catalog.put_manifest(memory)  # known to the catalog only: completing would copy it
    return memory


def test_a_failure_after_the_candidates_insert_leaves_the_run_running_and_empty(home):
    """Written inline (write_behind=False): the caller hears of the failure; nothing is left."""
    conn, catalog, _ = home
    memory = _one_resource_manifest(catalog)

    def fault(point: str) -> None:
        if point == AFTER_CANDIDATES:
            raise OSError("disk vanished mid-write")

    store = SqliteRunStore(conn, fault=fault, write_behind=False)
    run_id = store.start(run_start())
    with pytest.raises(OSError, match="disk vanished"):
        store.complete(run_id, trace_of(ranked(11, n_units=25), memory.hash))
    assert store.get_run(run_id).summary.status == RUNNING
    assert count(conn, "retrieval_run_candidates") == 0
    assert count(conn, "retrieval_run_resources") == 0
    assert not conn.in_transaction
    # The same Run can still complete once the fault is gone.
    SqliteRunStore(conn).complete(run_id, trace_of(ranked(11, n_units=25), memory.hash))
    assert store.get_run(run_id).summary.status == SUCCEEDED
    assert count(conn, "retrieval_run_resources") == 1


def test_a_failure_behind_the_answer_marks_the_run_failed_and_empty(home):
    """Written behind the answer (the default): ``complete`` returns, the write fails on the
    writer thread, and the Run says so instead of staying ``running``."""
    conn, catalog, _ = home
    memory = _one_resource_manifest(catalog)

    def fault(point: str) -> None:
        if point == AFTER_CANDIDATES:
            raise OSError("disk vanished mid-write")

    store = SqliteRunStore(conn, fault=fault)
    run_id = store.start(run_start())
    store.complete(run_id, trace_of(ranked(11, n_units=25), memory.hash))  # no error: the answer stands
    s = store.get_run(run_id).summary
    assert (s.status, s.error_stage, s.error_code) == (FAILED, "record", "history_write_failed")
    assert (s.candidate_count, s.warm, s.total_ms) == (0, True, 3.75)
    assert count(conn, "retrieval_run_candidates") == 0
    assert count(conn, "retrieval_run_resources") == 0
    assert not conn.in_transaction
    with pytest.raises(InvalidRequest, match="already failed"):
        store.complete(run_id, trace_of(ranked(11, n_units=25), memory.hash))


def test_a_run_whose_failure_cannot_be_written_either_stays_running_for_recovery(home):
    conn, catalog, _ = home
    memory = _one_resource_manifest(catalog)

    def fault(point: str) -> None:
        if point in (AFTER_CANDIDATES, "runs.fail.before_commit"):
            raise OSError("disk vanished mid-write")

    store = SqliteRunStore(conn, fault=fault)
    run_id = store.start(run_start())
    store.complete(run_id, trace_of(ranked(11, n_units=25), memory.hash))
    assert store.get_run(run_id).summary.status == RUNNING
    assert count(conn, "retrieval_run_candidates") == 0
    # Once its owner is gone, recovery fails it like any interrupted Run.
    conn.execute("UPDATE retrieval_runs SET owner_pid = ? WHERE run_id = ?", (dead_pid(), run_id))
    assert SqliteRunStore(conn).recover_interrupted() == 1
    assert store.get_run(run_id).summary.error_code == INTERRUPTED


@pytest.mark.parametrize("write_behind", [True, False])
def test_a_constraint_violation_in_the_middle_of_the_candidates_rolls_everything_back(home, write_behind):
    conn, _, _ = home
    store = SqliteRunStore(conn, write_behind=write_behind)
    candidates = ranked(12, n_units=30)
    assert len(candidates) > 3
    candidates[-1].final_rank = candidates[1].final_rank  # a duplicate key, late in the batch
    run_id = store.start(run_start())
    if write_behind:
        store.complete(run_id, trace_of(candidates))
        detail = store.get_run(run_id)
        assert (detail.summary.status, detail.summary.error_code) == (FAILED, "history_write_failed")
    else:
        with pytest.raises(apsw.ConstraintError):
            store.complete(run_id, trace_of(candidates))
        detail = store.get_run(run_id)
        assert detail.summary.status == RUNNING
    assert detail.summary.candidate_count == 0
    assert count(conn, "retrieval_run_candidates") == 0


def test_a_busy_database_is_storage_unavailable_and_records_nothing(tmp_path):
    holder = open_database(tmp_path / "local.db")
    store = SqliteRunStore(open_database(tmp_path / "local.db", busy_timeout_ms=50), write_behind=False)
    run_id = store.start(run_start())
    assert store.get_run(run_id).summary.status == RUNNING  # reads wait for pending inserts
    holder.execute("BEGIN IMMEDIATE")
    try:
        # start answers at once; its insert (on the writer thread) times out on the lock, and
        # whoever completes that Run gets the error.
        blocked = store.start(run_start())
        with pytest.raises(StorageUnavailable):
            store.complete(blocked, trace_of(ranked(1)))
        with pytest.raises(StorageUnavailable):
            store.complete(run_id, trace_of(ranked(1)))
    finally:
        holder.execute("ROLLBACK")
    assert store.get_run(run_id).summary.status == RUNNING
    with pytest.raises(RunNotFound):
        store.get_run(blocked)
    assert count(holder, "retrieval_runs") == 1
    store.complete(run_id, trace_of(ranked(1)))
    holder.close()


def test_a_busy_database_behind_the_answer_leaves_the_run_running_and_loses_nothing_else(tmp_path):
    holder = open_database(tmp_path / "local.db")
    store = SqliteRunStore(open_database(tmp_path / "local.db", busy_timeout_ms=50))
    run_id = store.start(run_start())
    store.settle()
    holder.execute("BEGIN IMMEDIATE")
    try:
        blocked = store.start(run_start())
        with pytest.raises(StorageUnavailable):  # its Run was never written: the caller hears
            store.complete(blocked, trace_of(ranked(1)))
        store.complete(run_id, trace_of(ranked(1)))  # its Run exists: the write goes behind
        store.settle()  # ... and times out, as does marking it failed
    finally:
        holder.execute("ROLLBACK")
    assert store.get_run(run_id).summary.status == RUNNING
    assert count(holder, "retrieval_runs") == 1 and count(holder, "retrieval_run_candidates") == 0
    holder.close()


def test_recording_cost_does_not_grow_with_the_manifest(home):
    conn, _, blobs = home
    store = SqliteRunStore(conn, blobs, write_behind=False)  # every change on this connection
    changed = {}
    for size in (10, 3000):
        memory = EffectiveMemory.from_entries(
            "alpha",
            [
                ManifestEntry(i, f"{size}/{i}.md", Layer.PROJECT, f"file:///{i}", f"{i:064x}", 1, "text/markdown")
                for i in range(size)
            ],
        )
        store.record_manifest(memory)  # once, at index time
        candidates = ranked(4, n_units=30)
        run_id = store.start(run_start())
        before = conn.total_changes()
        store.complete(run_id, trace_of(candidates, memory.hash))
        changed[size] = conn.total_changes() - before - len(candidates)
    assert changed == {10: 1, 3000: 1}  # one Run row updated, whatever the corpus size


def test_two_connections_record_concurrently(tmp_path):
    stores = [SqliteRunStore(open_database(tmp_path / "local.db")) for _ in range(2)]
    made: list[list[str]] = [[], []]

    def work(k: int) -> None:
        for i in range(40):
            run_id = stores[k].start(run_start(f"p{k}", i=i))
            stores[k].complete(run_id, trace_of(ranked(i, n_units=8)))
            made[k].append(run_id)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stores[1].settle()  # its last trace may still be behind its answer; stores[0]'s reads settle its own
    runs = stores[0].list_runs(RunFilter(status=SUCCEEDED), limit=500).runs
    assert sorted(r.run_id for r in runs) == sorted(made[0] + made[1])


# -- crashes (a real process exiting hard at a named point) -----------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from memory_core.adapters.files.blob_store import FileBlobStore
    from memory_core.adapters.sqlite import open_database
    from memory_core.adapters.sqlite.runs import SqliteRunStore
    from tests.contracts.test_run_store import ranked, run_start, trace_of

    db, blobs, action = sys.argv[1], sys.argv[2], sys.argv[3]
    store = SqliteRunStore(open_database(db), FileBlobStore(blobs), blob_grace_s=0)
    if action == "activate":
        run_id = store.start(run_start(query="interrupted"))
        print(run_id, flush=True)
        store.complete(run_id, trace_of(ranked(21, n_units=40)))
    else:
        store.clear()
    sys.exit(3)  # never reached: the crash point exits first
    """
)


def _child(tmp_path: Path, point: str, action: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, CRASH_POINT_ENV: point, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "local.db"), str(tmp_path / "blobs"), action],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.slow
def test_a_process_dying_mid_completion_leaves_a_recoverable_running_run(tmp_path):
    open_database(tmp_path / "local.db").close()
    done = _child(tmp_path, AFTER_CANDIDATES, "activate")
    assert done.returncode == CRASH_EXIT, done.stderr
    run_id = done.stdout.strip()
    conn = open_database(tmp_path / "local.db")
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    store = SqliteRunStore(conn)
    assert store.get_run(run_id).summary.status == RUNNING
    assert count(conn, "retrieval_run_candidates") == 0
    assert store.recover_interrupted() == 1
    s = store.get_run(run_id).summary
    assert (s.status, s.error_code) == (FAILED, INTERRUPTED)
    # No terminal Run has partial candidates.
    assert conn.execute(
        "SELECT count(*) FROM retrieval_runs r WHERE status != 'running' AND candidate_count != "
        "(SELECT count(*) FROM retrieval_run_candidates c WHERE c.run_id = r.run_id)"
    ).fetchall() == [(0,)]
    conn.close()


@pytest.mark.slow
def test_a_crash_between_the_row_delete_and_the_file_delete_leaves_orphans_the_next_clear_sweeps(tmp_path):
    conn = open_database(tmp_path / "local.db")
    blobs = FileBlobStore(tmp_path / "blobs")
    store = SqliteRunStore(conn, blobs, blob_grace_s=0)
    memory = real_memory(blobs, "run", 4)
    store.record_manifest(memory)
    run_id = store.start(run_start())
    store.complete(run_id, trace_of(ranked(2), memory.hash))
    done = _child(tmp_path, AFTER_CLEAR_COMMIT, "clear")
    assert done.returncode == CRASH_EXIT, done.stderr
    assert count(conn, "retrieval_runs") == 0  # the database committed first
    assert len(set(blobs.digests())) == 4  # the files are orphans now
    report = store.clear()
    assert (report.deleted_runs, report.deleted_blobs) == (0, 4)
    assert list(blobs.digests()) == []
    conn.close()


def test_a_raising_fault_after_the_clear_commit_also_leaves_sweepable_orphans(home):
    conn, _, blobs = home

    def fault(point: str) -> None:
        if point == AFTER_CLEAR_COMMIT:
            raise KeyboardInterrupt

    crashing = SqliteRunStore(conn, blobs, blob_grace_s=0, fault=fault)
    memory = real_memory(blobs, "run", 3)
    crashing.record_manifest(memory)
    crashing.complete(crashing.start(run_start()), trace_of(ranked(2), memory.hash))
    with pytest.raises(KeyboardInterrupt):
        crashing.clear()
    assert count(conn, "retrieval_runs") == 0 and len(set(blobs.digests())) == 3
    assert SqliteRunStore(conn, blobs, blob_grace_s=0).clear().deleted_blobs == 3


# -- garbage collection ---------------------------------------------------------------------------


def test_gc_deletes_exactly_the_unreferenced_blob_files(home, tmp_path):
    conn, catalog, blobs = home
    store = SqliteRunStore(conn, blobs)  # the default grace period
    catalog.add_project(Project("alpha", (Source("/src"),), ts(0)))
    gen1, gen2, gen3 = (real_memory(blobs, f"gen{i}", 3) for i in (1, 2, 3))
    for revision, memory in (("rev1", gen1), ("rev2", gen2), ("rev3", gen3)):
        store.record_manifest(memory)
        index(catalog, "alpha", revision, memory)  # rev1 falls out: neither current nor previous
    cleared, pinned = real_memory(blobs, "cleared", 2), real_memory(blobs, "pinned", 2)
    corpus = real_memory(blobs, "corpus", 2)
    stray = blobs.put(b"nobody refers to me")
    for memory in (cleared, pinned):
        store.record_manifest(memory)
    runs = complete_runs(store, {"cleared": cleared, "pinned": pinned, "gen3": gen3}, seed=5)
    store.pin(runs["pinned"])
    # An evaluation corpus (migration m004) keeps its blobs live too.
    conn.execute("INSERT INTO evaluation_corpora VALUES ('c', 2, 't')")
    conn.executemany(
        "INSERT INTO evaluation_corpus_resources VALUES ('c', ?, ?, 'project', 'file:///c', ?, 1, 'text/markdown')",
        [(i, f"c{i}.md", e.resource_hash) for i, e in enumerate(corpus.entries)],
    )
    local_storage = tmp_path / "projects" / "alpha" / "generations" / "rev3"
    local_storage.mkdir(parents=True)
    (local_storage / "units.jsonl").write_text("{}")

    # Fresh files are spared: they may belong to an index build in progress.
    report = store.clear()
    assert (report.deleted_runs, report.kept_pinned, report.deleted_blobs) == (2, 1, 0)
    age(blobs)
    before = set(blobs.digests())
    report = store.clear()
    assert report.deleted_runs == 0
    dead = {e.resource_hash for e in (*gen1.entries, *cleared.entries)} | {stray}
    assert report.deleted_blobs == len(dead)
    assert set(blobs.digests()) == before - dead
    live = {e.resource_hash for m in (gen2, gen3, pinned, corpus) for e in m.entries}
    assert set(blobs.digests()) == live == store.live_blobs()
    for digest in live:
        blobs.get(digest)  # still there and intact
    # Metadata follows the files; manifests nothing refers to are gone.
    assert {d for (d,) in conn.execute("SELECT sha256 FROM retrieval_corpus_blobs")} <= live
    manifests = {h for (h,) in conn.execute("SELECT DISTINCT manifest_hash FROM retrieval_run_resources")}
    assert manifests == {gen2.hash, gen3.hash, pinned.hash}
    assert (local_storage / "units.jsonl").read_text() == "{}"  # Project Local Storage untouched


def test_clearing_one_project_keeps_blobs_another_projects_runs_use(home):
    conn, _, blobs = home
    store = SqliteRunStore(conn, blobs, blob_grace_s=0)
    shared = real_memory(blobs, "shared", 2)
    store.record_manifest(shared)
    for project in ("alpha", "beta"):
        store.complete(store.start(run_start(project)), trace_of(ranked(1), shared.hash))
    assert store.clear("alpha").deleted_blobs == 0
    assert len(set(blobs.digests())) == 2
    assert store.clear("beta").deleted_blobs == 2


def test_record_blob_keeps_the_first_sighting(home):
    conn, _, _ = home
    store = SqliteRunStore(conn)
    store.record_blob("ab" * 32, 10, "text/markdown")
    store.record_blob("ab" * 32, 99, "text/plain")
    assert conn.execute("SELECT byte_size, media_type FROM retrieval_corpus_blobs").fetchall() == [
        (10, "text/markdown")
    ]


def test_files_stay_owner_only_with_a_loose_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        home = tmp_path / "home"
        conn = open_database(home / "local.db")
        blobs = FileBlobStore(home / "evaluation-corpora" / "blobs")
        store = SqliteRunStore(conn, blobs, blob_grace_s=0)
        memory = real_memory(blobs, "m", 3)
        store.record_manifest(memory)
        kept = store.start(run_start())
        store.complete(kept, trace_of(ranked(1), memory.hash))
        store.pin(kept)
        store.fail(store.start(run_start()), failure())
        store.clear()
        assert len(set(blobs.digests())) == 3
        for name in ("local.db", "local.db-wal", "local.db-shm"):
            assert mode(home / name) == 0o600, name
        for path in blobs.root.rglob("*"):
            assert mode(path) == (0o700 if path.is_dir() else 0o600), path
        conn.close()
    finally:
        os.umask(previous)


# -- the writer thread: a Run's `running` insert overlaps the pipeline --------------------------


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("memcore-runs")]


def test_running_inserts_use_their_own_connection_so_the_store_connection_stays_free(home):
    conn, _, _ = home
    store = SqliteRunStore(conn)
    run_ids = []
    for i in range(40):
        run_ids.append(store.start(run_start(i=i)))
        # The store's own connection is never busy in the writer thread (apsw would raise
        # ThreadingViolationError if it were shared).
        conn.execute("SELECT count(*) FROM retrieval_runs").fetchall()
    for run_id in run_ids:
        store.complete(run_id, trace_of(ranked(3)))
    statuses = [store.get_run(r).summary.status for r in run_ids]
    assert statuses == [SUCCEEDED] * len(run_ids)
    assert count(conn, "retrieval_runs") == len(run_ids)


def test_reads_wait_for_the_runs_this_store_started(home):
    conn, _, _ = home
    store = SqliteRunStore(conn)
    run_ids = [store.start(run_start(i=i)) for i in range(25)]
    page = store.list_runs(RunFilter(status=RUNNING), limit=100)
    assert {r.run_id for r in page.runs} == set(run_ids)
    assert store.get_run(run_ids[-1]).summary.status == RUNNING


def test_close_finishes_pending_inserts_and_stops_the_writer_thread(home):
    conn, _, _ = home
    before = set(_writer_threads())
    store = SqliteRunStore(conn)
    first = store.start(run_start(i=1))
    assert set(_writer_threads()) - before  # started on demand
    store.close()
    assert not set(_writer_threads()) - before
    assert count(conn, "retrieval_runs", "WHERE run_id = ?", (first,)) == 1
    second = store.start(run_start(i=2))  # usable again: a new writer thread
    store.complete(second, trace_of(ranked(2)))
    assert store.get_run(second).summary.status == SUCCEEDED
    store.close()


def test_a_failed_insert_reaches_whoever_fails_that_run_and_leaves_no_row(tmp_path):
    holder = open_database(tmp_path / "local.db")
    store = SqliteRunStore(open_database(tmp_path / "local.db", busy_timeout_ms=50))
    holder.execute("BEGIN IMMEDIATE")
    try:
        run_id = store.start(run_start())
        with pytest.raises(StorageUnavailable):
            store.fail(run_id, failure())
    finally:
        holder.execute("ROLLBACK")
    with pytest.raises(RunNotFound):
        store.get_run(run_id)


def test_an_in_memory_database_inserts_inline(tmp_path):
    before = set(_writer_threads())
    store = SqliteRunStore(open_database(":memory:"))
    run_id = store.start(run_start())
    assert not set(_writer_threads()) - before
    assert count(store.connection, "retrieval_runs") == 1
    store.complete(run_id, trace_of(ranked(2)))
    assert store.get_run(run_id).summary.status == SUCCEEDED


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(), max_size=6))
def test_a_heading_path_is_stored_as_json_dumps_writes_it(heading_path: list[str]) -> None:
    # The hot path's encoder is hand-assembled from json's own string encoder: it must agree
    # with json.dumps byte for byte, so stored traces and fixtures hash the same as ever.
    assert heading_path_json(tuple(heading_path)) == json.dumps(heading_path, ensure_ascii=False)
    assert json.loads(heading_path_json(heading_path)) == heading_path


def _unit(i: int, text: str = "t") -> Unit:
    return Unit(f"u{i}", f"r{i}", i, 0, 1, (f"H{i}",), text, i, f"{i:064x}", f"{i + 1:064x}")


def test_unit_columns_are_each_units_own() -> None:
    columns = UnitColumns()
    units = [_unit(i) for i in range(50)]
    for _ in range(2):  # the second pass is all hits
        for i, unit in enumerate(units):
            assert columns(unit) == (f"u{i}", f"r{i}", f"{i:064x}", f"{i + 1:064x}", json.dumps([f"H{i}"]), i)


def test_unit_columns_ignore_an_entry_left_by_a_dead_unit_at_the_same_address() -> None:
    # The cache is keyed by id(unit), and CPython may give a freed unit's address to a new
    # one: an entry whose unit is gone (or is another object) must be rebuilt, not served.
    columns = UnitColumns()
    dead = _unit(1)
    stale = (weakref.ref(dead), columns(dead))
    del dead
    gc.collect()
    fresh = _unit(2)
    columns._seen[id(fresh)] = stale
    assert columns(fresh)[0] == "u2"
    other = _unit(3)
    columns._seen[id(fresh)] = (weakref.ref(other), columns(other))
    assert columns(fresh)[0] == "u2"


def test_unit_columns_do_not_keep_units_alive() -> None:
    columns = UnitColumns()
    unit = _unit(0, "a long text " * 100)
    columns(unit)
    alive = weakref.ref(unit)
    del unit
    gc.collect()
    assert alive() is None


def test_unit_columns_stay_bounded() -> None:
    columns = UnitColumns(limit=10)
    units = [_unit(i) for i in range(25)]
    for unit in units:
        columns(unit)
    assert len(columns._seen) <= 10
    assert [columns(u)[0] for u in units] == [f"u{i}" for i in range(25)]
