"""Home directory and local.db: modes, pragmas, migrations (incl. the populated v1 -> latest)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

import apsw
import platformdirs
import pytest

from memory_core.adapters.files.filesystem_sources import FileStamp
from memory_core.adapters.sqlite import (
    SCHEMA_VERSION,
    SqliteCatalog,
    migrate,
    open_database,
    schema_version,
    write_transaction,
)
from memory_core.adapters.sqlite.migrations import MIGRATIONS
from memory_core.adapters.system.home import HOME_ENV, HomeLayout, prepare_home, resolve_home
from memory_core.domain.errors import StorageUnavailable
from memory_core.domain.model import EffectiveMemory, Layer, ManifestEntry, Project, Source

NOBODY = 65534


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(autouse=True)
def _restore_umask():
    # prepare_home sets the process umask on purpose; keep other tests' world unchanged.
    previous = os.umask(0o077)
    os.umask(previous)
    yield
    os.umask(previous)


# -- home ---------------------------------------------------------------------------------------


def test_resolve_home_prefers_explicit_then_env_then_platform(monkeypatch, tmp_path):
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "from-env"))
    assert resolve_home(tmp_path / "explicit") == tmp_path / "explicit"
    assert resolve_home(None) == tmp_path / "from-env"
    monkeypatch.setenv(HOME_ENV, "")
    assert resolve_home(None) == Path(platformdirs.user_data_dir("memory-core", appauthor=False))
    monkeypatch.delenv(HOME_ENV)
    assert resolve_home() == Path(platformdirs.user_data_dir("memory-core", appauthor=False))


def test_prepare_home_creates_0700_and_sets_umask(tmp_path):
    home = prepare_home(tmp_path / "a" / "home")
    assert home.is_dir() and mode(home) == 0o700
    assert os.umask(0o077) == 0o077
    assert list(home.iterdir()) == []  # the write probe cleans up


def test_prepare_home_tightens_an_existing_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    prepare_home(home)
    assert mode(home) == 0o700


def test_layout(tmp_path):
    layout = HomeLayout.at(tmp_path)
    assert layout.db_path == tmp_path / "local.db"
    assert layout.blobs_dir == tmp_path / "evaluation-corpora" / "blobs"
    assert layout.project_dir("alpha") == tmp_path / "projects" / "alpha"


@pytest.mark.parametrize("shape", ["under-a-file", "is-a-file"])
def test_unusable_home_is_storage_unavailable(tmp_path, shape):
    # Works as root too: no permission bit can make a regular file a directory.
    (tmp_path / "file").write_text("x")
    home = tmp_path / "file" / "home" if shape == "under-a-file" else tmp_path / "file"
    with pytest.raises(StorageUnavailable, match="cannot be created or written") as info:
        prepare_home(home)
    assert info.value.code == "storage_unavailable"


def _prepare_home_as_unprivileged(workdir: Path, relative_home: str) -> int:
    """Run prepare_home in a child that dropped root (chmod does not stop root); the child
    starts inside ``workdir`` (mode 0755) because pytest's base directory is closed to others.
    Returns 0 for StorageUnavailable, 1 for success, 2 for anything else."""
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 2
        try:
            os.chdir(workdir)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                prepare_home(Path(relative_home))
                code = 1
            except StorageUnavailable:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_read_only_home_is_storage_unavailable(tmp_path):
    world = tmp_path / "world"
    (world / "readonly" / "existing-home").mkdir(parents=True, mode=0o700)
    (world / "mine").mkdir()
    os.chmod(world, 0o755)
    os.chmod(world / "readonly", 0o555)
    try:
        if os.geteuid() == 0:
            # Root ignores permission bits, so the check runs in a child as "nobody".
            os.chown(world / "mine", NOBODY, NOBODY)
            assert _prepare_home_as_unprivileged(world, "mine/home") == 1  # control: it can work
            assert _prepare_home_as_unprivileged(world, "readonly/home") == 0  # cannot create
            assert _prepare_home_as_unprivileged(world, "readonly/existing-home") == 0  # not ours
        else:
            with pytest.raises(StorageUnavailable):
                prepare_home(world / "readonly" / "home")
    finally:
        os.chmod(world / "readonly", 0o755)


# -- database -----------------------------------------------------------------------------------


def test_pragmas(tmp_path):
    conn = open_database(tmp_path / "local.db")
    assert conn.execute("PRAGMA journal_mode").fetchall() == [("wal",)]
    assert conn.execute("PRAGMA foreign_keys").fetchall() == [(1,)]
    assert conn.execute("PRAGMA busy_timeout").fetchall() == [(5000,)]
    assert conn.execute("PRAGMA synchronous").fetchall() == [(1,)]  # NORMAL
    assert schema_version(conn) == SCHEMA_VERSION == len(MIGRATIONS)
    conn.close()


def test_foreign_keys_are_enforced(tmp_path):
    conn = open_database(tmp_path / "local.db")
    with pytest.raises(apsw.ConstraintError):
        conn.execute("INSERT INTO project_sources VALUES ('ghost', 0, '/x', 'project')")
    conn.close()


def test_database_files_are_owner_only_even_with_a_loose_umask(tmp_path):
    os.umask(0o022)
    home = tmp_path / "home"
    conn = open_database(home / "local.db")
    SqliteCatalog(conn).add_project(Project("alpha", (Source("/s"),), "t"))
    files = sorted(p.name for p in home.iterdir())
    assert files == ["local.db", "local.db-shm", "local.db-wal"]
    for name in files:
        assert mode(home / name) == 0o600, name
    assert mode(home) == 0o700
    conn.close()


def test_busy_database_is_storage_unavailable(tmp_path):
    holder = open_database(tmp_path / "local.db")
    waiter = SqliteCatalog(open_database(tmp_path / "local.db", busy_timeout_ms=50))
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(StorageUnavailable):
        waiter.add_project(Project("alpha", (), "t"))
    holder.execute("ROLLBACK")
    waiter.add_project(Project("alpha", (), "t"))
    waiter.close()
    holder.close()


def test_database_under_a_file_is_storage_unavailable(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageUnavailable):
        open_database(tmp_path / "file" / "local.db")


def test_not_a_database_is_storage_unavailable(tmp_path):
    (tmp_path / "local.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageUnavailable):
        open_database(tmp_path / "local.db")


def test_migrations_are_idempotent(tmp_path):
    path = tmp_path / "local.db"
    open_database(path).close()
    conn = open_database(path)
    assert migrate(conn) == SCHEMA_VERSION
    rows = conn.execute("SELECT id, name FROM _migrations ORDER BY id").fetchall()
    assert rows == [(i + 1, fn.__name__) for i, fn in enumerate(MIGRATIONS)]
    conn.close()


def test_migrate_to_a_given_version_and_never_down(tmp_path):
    conn = open_database(tmp_path / "local.db", target_version=1)
    assert schema_version(conn) == 1
    assert not conn.execute("SELECT name FROM sqlite_master WHERE name = 'manifests'").fetchall()
    assert migrate(conn, 0) == 1
    with pytest.raises(ValueError):
        migrate(conn, SCHEMA_VERSION + 1)
    assert migrate(conn) == SCHEMA_VERSION
    conn.close()


def test_newer_schema_is_refused(tmp_path):
    conn = open_database(tmp_path / "local.db")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StorageUnavailable, match="newer"):
        open_database(tmp_path / "local.db")


def test_a_failing_migration_leaves_no_trace(tmp_path):
    path = tmp_path / "local.db"
    conn = open_database(path, target_version=1)
    # Occupy the index name migration 2 creates last, so it fails after its other statements.
    conn.execute("CREATE INDEX generations_manifest_hash ON projects(created_at)")
    conn.execute("INSERT INTO projects VALUES ('alpha', 't')")
    with pytest.raises(apsw.SQLError):
        migrate(conn)
    assert schema_version(conn) == 1
    assert conn.execute("SELECT id FROM _migrations").fetchall() == [(1,)]
    assert not conn.execute("SELECT name FROM sqlite_master WHERE name = 'manifests'").fetchall()
    columns = [row[1] for row in conn.execute("PRAGMA table_info(generations)")]
    assert "manifest_hash" not in columns
    assert conn.execute("SELECT project_id FROM projects").fetchall() == [("alpha",)]
    conn.close()


def test_write_transaction_rolls_back_and_nests(tmp_path):
    conn = open_database(tmp_path / "local.db")
    with pytest.raises(RuntimeError), write_transaction(conn):
        conn.execute("INSERT INTO projects(project_id, created_at) VALUES ('a', 't')")
        raise RuntimeError("boom")
    with write_transaction(conn):
        conn.execute("INSERT INTO projects(project_id, created_at) VALUES ('b', 't')")
        with pytest.raises(RuntimeError), write_transaction(conn):
            conn.execute("INSERT INTO projects(project_id, created_at) VALUES ('c', 't')")
            raise RuntimeError("inner")
    assert conn.execute("SELECT project_id FROM projects").fetchall() == [("b",)]
    assert not conn.in_transaction
    conn.close()


def populate_projects(conn: apsw.Connection, n_projects: int, generation: Callable[[int, str, int], None]) -> None:
    """Raw rows of the v1 tables for ``n_projects`` projects: three sources, two generations (written
    by ``generation(p, project_id, rev)``, as the schema at hand has them), the pointers and
    a cached file hash."""
    for p in range(n_projects):
        pid = f"project-{p}"
        conn.execute("INSERT INTO projects VALUES (?, ?)", (pid, f"2025-01-{p + 1:02d}"))
        for i in range(3):
            conn.execute("INSERT INTO project_sources VALUES (?, ?, ?, ?)", (pid, i, f"/src/{pid}/{i}", "project"))
        for rev in range(2):
            generation(p, pid, rev)
        conn.execute("INSERT INTO project_generation_pointers VALUES (?, 'rev1', 'rev0')", (pid,))
        conn.execute("INSERT INTO file_hash_cache VALUES (?, ?, ?, ?)", (f"/src/{pid}/a.md", p, p * 7, "ab" * 32))


def _populate_v1(conn: apsw.Connection, n_projects: int) -> dict[str, int]:
    def generation(p: int, pid: str, rev: int) -> None:
        conn.execute(
            "INSERT INTO generations VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                pid,
                f"rev{rev}",
                f"{p:02d}{rev:02d}" * 16,
                10 * rev,
                rev,
                '{"parser":"p1","chunker":"c1","embedding_model":"e1","lexical":"l1","vector":"v1"}',
                "t",
                f"/d/{pid}/rev{rev}",
            ),
        )

    populate_projects(conn, n_projects, generation)
    return {
        table: conn.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
        for table in ["projects", "project_sources", "generations", "project_generation_pointers", "file_hash_cache"]
    }


def dump(conn: apsw.Connection, tables: Mapping[str, str]) -> dict[str, list[tuple]]:
    """Each table's rows (``tables``: table -> its columns), in a stable order."""
    return {t: conn.execute(f"SELECT {cols} FROM {t} ORDER BY 1, 2").fetchall() for t, cols in tables.items()}


V1_COLUMNS = {
    "projects": "project_id, created_at",
    "project_sources": "project_id, ordinal, path, layer",
    "generations": "project_id, index_revision, effective_memory_hash, unit_count, resource_count, "
    "revisions_json, created_at, directory",
    "project_generation_pointers": "project_id, current_revision, previous_revision",
    "file_hash_cache": "path, size, mtime_ns, sha256",
}


def test_populated_v1_database_migrates_to_latest_without_losing_rows(tmp_path):
    path = tmp_path / "local.db"
    conn = open_database(path, target_version=1)
    assert schema_version(conn) == 1
    with conn:
        counts = _populate_v1(conn, n_projects=25)
    before = dump(conn, V1_COLUMNS)
    conn.close()

    conn = open_database(path)
    assert schema_version(conn) == SCHEMA_VERSION
    after = dump(conn, V1_COLUMNS)
    assert after == before
    assert {t: len(rows) for t, rows in after.items()} == counts
    assert conn.execute("SELECT count(*) FROM generations WHERE manifest_hash = effective_memory_hash").fetchall() == [
        (counts["generations"],)
    ]

    # The migrated database is fully usable through the catalog, new table and column included.
    catalog = SqliteCatalog(conn)
    assert catalog.current_generation("project-3").index_revision == "rev1"
    assert catalog.previous_generation("project-3").effective_memory_hash == "0300" * 16
    assert catalog.get_project("project-0").sources[2] == Source("/src/project-0/2", Layer.PROJECT)
    entry = ManifestEntry(0, "a.md", Layer.PROJECT, "file:///a.md", "ab" * 32, 1, "text/markdown")
    memory = EffectiveMemory.from_entries("project-0", [entry])
    assert catalog.get_manifest(catalog.put_manifest(memory)) == (entry,)
    # A v1 row has no ctime or inode (migration 6): kept, but never a hit; the next scan replaces it.
    assert catalog.get_file_hash("/src/project-2/a.md", FileStamp(2, 14, 14, 1)) is None
    catalog.remove_project("project-0")
    assert len(catalog.list_projects()) == 24
    catalog.close()
