"""Opening ``local.db``: owner-only file, WAL, foreign keys, busy timeout, migrations."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import attrs

from memory_core.adapters.sqlite.migrations import MIGRATIONS, migration_number
from memory_core.domain.clock import utc_now_iso
from memory_core.domain.errors import StorageUnavailable

SCHEMA_VERSION = len(MIGRATIONS)
BUSY_TIMEOUT_MS = 5000
MEMORY = ":memory:"

# apsw errors that mean "the storage cannot serve us now", not "the caller made a mistake".
_UNAVAILABLE = (
    apsw.BusyError,
    apsw.LockedError,
    apsw.ReadOnlyError,
    apsw.FullError,
    apsw.IOError,
    apsw.CantOpenError,
    apsw.CorruptError,
    apsw.NotADBError,
    apsw.PermissionsError,
)


# A row as the schema defines it. SQLite cells are dynamically typed (apsw types each one as
# the union of every storage class), so rows are read here, once, as Any, and each row mapper
# converts its columns (int(), str(), Layer()) to what its table's schema says they hold.
Row = tuple[Any, ...]


def fetch(conn: apsw.Connection, sql: str, params: apsw.Bindings | None = None) -> list[Row]:
    """Every row ``sql`` selects (``conn.execute(sql, params).fetchall()``)."""
    return conn.execute(sql, params).fetchall()


@contextlib.contextmanager
def read_snapshot(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """Several reads from one snapshot (a savepoint). Unlike ``with conn:``, typed as letting
    every exception through: apsw declares ``Connection.__exit__ -> bool``."""
    with conn:
        yield conn


@contextlib.contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Turn apsw's I/O, lock and read-only errors into StorageUnavailable."""
    try:
        yield
    except _UNAVAILABLE as exc:
        raise StorageUnavailable(f"{what}: {exc}", cause=type(exc).__name__) from exc


@contextlib.contextmanager
def write_transaction(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``: takes the write lock up front, so a read-then-write
    waits on the busy timeout instead of failing with a stale snapshot. Nested: a savepoint."""
    if conn.in_transaction:
        with conn:
            yield conn
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def schema_version(conn: apsw.Connection) -> int:
    return int(fetch(conn, "PRAGMA user_version")[0][0])


def migrate(conn: apsw.Connection, target_version: int | None = None) -> int:
    """Apply pending migrations up to ``target_version`` (default: the latest); returns the
    version reached. Each migration commits alone; a concurrent migrator is waited for."""
    target = SCHEMA_VERSION if target_version is None else target_version
    if not 0 <= target <= SCHEMA_VERSION:
        raise ValueError(f"target_version must be in 0..{SCHEMA_VERSION}, got {target}")
    current = schema_version(conn)
    if current > SCHEMA_VERSION:
        raise StorageUnavailable(
            f"local.db has schema version {current}, newer than this memory-core supports "
            f"({SCHEMA_VERSION}); upgrade memory-core",
            schema_version=current,
        )
    for fn in MIGRATIONS[current:target]:
        number = migration_number(fn)
        with write_transaction(conn):
            # Another process may have applied it while we waited for the write lock.
            if schema_version(conn) >= number:
                continue
            conn.execute(
                "CREATE TABLE IF NOT EXISTS _migrations ("
                " id INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            fn(conn)
            conn.execute(
                "INSERT INTO _migrations(id, name, applied_at) VALUES (?, ?, ?)",
                (number, fn.__name__, utc_now_iso()),
            )
            conn.execute(f"PRAGMA user_version = {number:d}")
    return max(current, schema_version(conn))


def _touch_owner_only(path: Path) -> None:
    """Create the file 0600 before SQLite does; SQLite gives -wal/-shm the same mode."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)


def _tighten_sidecars(path: Path) -> None:
    for suffix in ("-wal", "-shm", "-journal"):
        sidecar = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            os.chmod(sidecar, 0o600)


@attrs.frozen
class SiblingSettings:
    """How to open another connection to an open database: same file, VFS, flags and settings."""

    filename: str
    flags: int
    vfs: str
    busy_timeout_ms: int

    @classmethod
    def of(cls, conn: apsw.Connection) -> SiblingSettings | None:
        """None for an in-memory database (no other connection can see it)."""
        if not conn.filename:
            return None
        busy = int(fetch(conn, "PRAGMA busy_timeout")[0][0])
        return cls(conn.filename, conn.open_flags, conn.open_vfs, busy)

    def open(self) -> apsw.Connection:
        """The schema is the first connection's business: no migration here."""
        with storage_errors(f"cannot open database {self.filename!r}"):
            conn = apsw.Connection(self.filename, flags=self.flags, vfs=self.vfs)
            try:
                conn.setbusytimeout(self.busy_timeout_ms)
                conn.execute("PRAGMA foreign_keys = ON")  # per connection: cascades need it
                conn.execute("PRAGMA synchronous = NORMAL")
            except BaseException:
                conn.close()
                raise
        return conn


def open_database(
    path: str | os.PathLike[str],
    *,
    target_version: int | None = None,
    busy_timeout_ms: int = BUSY_TIMEOUT_MS,
) -> apsw.Connection:
    """Open (creating 0600) and migrate ``local.db``; ``":memory:"`` gives a private database."""
    in_memory = str(path) == MEMORY
    file_path = Path(path)
    try:
        if not in_memory:
            _touch_owner_only(file_path)
    except OSError as exc:
        raise StorageUnavailable(
            f"cannot create database {str(file_path)!r}: {exc.strerror or exc}", path=str(file_path)
        ) from exc
    with storage_errors(f"cannot open database {str(path)!r}"):
        conn = apsw.Connection(str(path))
    try:
        with storage_errors(f"cannot open database {str(path)!r}"):
            conn.setbusytimeout(busy_timeout_ms)
            conn.execute("PRAGMA foreign_keys = ON")
            if not in_memory:
                mode = fetch(conn, "PRAGMA journal_mode = WAL")[0][0]
                if str(mode).lower() != "wal":
                    raise StorageUnavailable(f"cannot enable WAL on {str(path)!r} (got {mode})")
                # NORMAL is durable across process crashes in WAL mode and much cheaper than FULL.
                conn.execute("PRAGMA synchronous = NORMAL")
            migrate(conn, target_version)
        if not in_memory:
            _tighten_sidecars(file_path)
    except BaseException:
        conn.close()
        raise
    return conn
