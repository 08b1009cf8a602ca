"""The Catalog port over ``local.db``: projects, generation pointers, manifests, file-hash cache."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import apsw

from memory_core.adapters.sqlite.database import fetch, read_snapshot, storage_errors, write_transaction
from memory_core.adapters.storage_format import CONVERTER as STORED
from memory_core.adapters.system.crash_points import crash_point
from memory_core.domain.canonical import canonical_json, sha256_hex
from memory_core.domain.clock import utc_now_iso
from memory_core.domain.errors import InvalidRequest, ProjectExists, ProjectNotFound
from memory_core.domain.model import (
    EffectiveMemory,
    Generation,
    IndexRevisions,
    Layer,
    ManifestEntry,
    Project,
    Source,
    validate_project_id,
)
from memory_core.domain.storage_rules import manifest_json  # noqa: F401  (re-exported)

# (path, (size, mtime_ns, ctime_ns, inode), sha256): filesystem_sources.FileStamp is the stamp.
FileHashRow = tuple[str, tuple[int, int, int, int], str]

_GENERATION_COLUMNS = (
    "project_id, index_revision, effective_memory_hash, unit_count, resource_count, "
    "revisions_json, created_at, directory"
)
_G_COLUMNS = ", ".join(f"g.{c.strip()}" for c in _GENERATION_COLUMNS.split(","))


class _Clock(Protocol):
    def now_iso(self) -> str: ...


class _UtcClock:
    def now_iso(self) -> str:
        return utc_now_iso()


def _generation_from_row(row: Sequence[Any]) -> Generation:
    revisions = json.loads(str(row[5]))
    return Generation(
        project_id=str(row[0]),
        index_revision=str(row[1]),
        effective_memory_hash=str(row[2]),
        unit_count=int(row[3]),
        resource_count=int(row[4]),
        revisions=IndexRevisions(**revisions),
        created_at=str(row[6]),
        directory=str(row[7]),
    )


class SqliteCatalog:
    """Implements ``memory_core.ports.Catalog``; the connection comes from ``open_database``."""

    def __init__(self, conn: apsw.Connection, clock: _Clock | None = None) -> None:
        self._conn = conn
        self._clock = clock or _UtcClock()

    @property
    def connection(self) -> apsw.Connection:
        return self._conn

    # -- projects ---------------------------------------------------------------------------

    def add_project(self, project: Project) -> None:
        validate_project_id(project.project_id)
        with storage_errors("cannot add project"), write_transaction(self._conn) as conn:
            if self._exists(project.project_id):
                raise ProjectExists(f"project {project.project_id!r} already exists", project=project.project_id)
            conn.execute(
                "INSERT INTO projects(project_id, created_at) VALUES (?, ?)",
                (project.project_id, project.created_at),
            )
            conn.executemany(
                "INSERT INTO project_sources(project_id, ordinal, path, layer) VALUES (?, ?, ?, ?)",
                [(project.project_id, i, s.path, s.layer.value) for i, s in enumerate(project.sources)],
            )

    def get_project(self, project_id: str) -> Project:
        with storage_errors("cannot read project"), read_snapshot(self._conn):
            rows = fetch(self._conn, "SELECT created_at FROM projects WHERE project_id = ?", (project_id,))
            if not rows:
                raise project_not_found(self._conn, project_id)
            return Project(project_id, self._sources(project_id), str(rows[0][0]))

    def list_projects(self) -> list[Project]:
        with storage_errors("cannot list projects"), read_snapshot(self._conn):
            rows = fetch(self._conn, "SELECT project_id, created_at FROM projects ORDER BY project_id")
            return [Project(str(pid), self._sources(str(pid)), str(created)) for pid, created in rows]

    def remove_project(self, project_id: str) -> None:
        """Deletes the project, its sources, generation rows and pointer (cascade)."""
        with storage_errors("cannot remove project"), write_transaction(self._conn) as conn:
            conn.execute("DELETE FROM projects WHERE project_id = ?", (project_id,))
            if conn.changes() == 0:
                raise project_not_found(self._conn, project_id)

    # -- Project Local Storage ----------------------------------------------------------------

    def storage_location(self, project_id: str) -> str | None:
        """The directory ``project storage move`` recorded, or None (the default place, and
        for a project not in the catalog)."""
        return _storage_location(self._conn, project_id)

    def set_storage_location(
        self, project_id: str, location: str | None, directories: Mapping[str, str], forget: Iterable[str] = ()
    ) -> None:
        """One transaction: record the location (None: the default), the new directory of each
        moved generation (index revision -> directory), and forget the generations ``forget``
        names (gone from disk): their rows go and a pointer naming one becomes NULL."""
        gone = sorted(set(forget))
        with storage_errors("cannot record project storage"), write_transaction(self._conn) as conn:
            conn.execute("UPDATE projects SET storage_dir = ? WHERE project_id = ?", (location, project_id))
            if conn.changes() == 0:
                raise project_not_found(self._conn, project_id)
            conn.executemany(
                "UPDATE generations SET directory = ? WHERE project_id = ? AND index_revision = ?",
                [(directory, project_id, revision) for revision, directory in directories.items()],
            )
            for revision in gone:
                for column in ("current_revision", "previous_revision"):
                    conn.execute(
                        f"UPDATE project_generation_pointers SET {column} = NULL WHERE project_id = ? AND {column} = ?",
                        (project_id, revision),
                    )
                conn.execute(
                    "DELETE FROM generations WHERE project_id = ? AND index_revision = ?", (project_id, revision)
                )
            crash_point("catalog.set_storage.before_commit")

    def clear_generations(self, project_id: str) -> None:
        """Forget the project's generations (rows and pointer): the next index rebuilds."""
        with storage_errors("cannot clear generations"), write_transaction(self._conn) as conn:
            if not self._exists(project_id):
                raise project_not_found(self._conn, project_id)
            conn.execute("DELETE FROM project_generation_pointers WHERE project_id = ?", (project_id,))
            conn.execute("DELETE FROM generations WHERE project_id = ?", (project_id,))

    # -- generations ------------------------------------------------------------------------

    def current_generation(self, project_id: str) -> Generation | None:
        return self._pointed(project_id, "current_revision")

    def previous_generation(self, project_id: str) -> Generation | None:
        return self._pointed(project_id, "previous_revision")

    def set_current_generation(self, generation: Generation) -> None:
        """One transaction: upsert the generation row, move the pointer (old current becomes
        previous) and drop rows of generations that are now neither current nor previous."""
        g = generation
        with storage_errors("cannot record generation"), write_transaction(self._conn) as conn:
            if not self._exists(g.project_id):
                raise project_not_found(self._conn, g.project_id)
            conn.execute(
                f"INSERT OR REPLACE INTO generations({_GENERATION_COLUMNS}, manifest_hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    g.project_id,
                    g.index_revision,
                    g.effective_memory_hash,
                    g.unit_count,
                    g.resource_count,
                    canonical_json(STORED.unstructure(g.revisions)).decode("utf-8"),
                    g.created_at,
                    g.directory,
                    g.effective_memory_hash,
                ),
            )
            rows = fetch(
                conn,
                "SELECT current_revision, previous_revision FROM project_generation_pointers WHERE project_id = ?",
                (g.project_id,),
            )
            current, previous = (rows[0][0], rows[0][1]) if rows else (None, None)
            if current != g.index_revision:
                previous, current = current, g.index_revision
            conn.execute(
                "INSERT OR REPLACE INTO project_generation_pointers"
                "(project_id, current_revision, previous_revision) VALUES (?, ?, ?)",
                (g.project_id, current, previous),
            )
            conn.execute(
                "DELETE FROM generations WHERE project_id = ? AND index_revision NOT IN (?, ?)",
                (g.project_id, current, previous if previous is not None else current),
            )
            crash_point("catalog.set_current.before_commit")
        crash_point("catalog.set_current.after_commit")

    # -- manifests --------------------------------------------------------------------------

    def put_manifest(self, effective_memory: EffectiveMemory) -> str:
        """Store the canonical manifest once under its hash; returns the hash."""
        body = manifest_json(effective_memory.entries)
        digest = sha256_hex(body)
        if digest != effective_memory.hash:
            raise InvalidRequest(
                "Effective Memory hash does not match its manifest",
                expected=effective_memory.hash,
                actual=digest,
            )
        with storage_errors("cannot store manifest"), write_transaction(self._conn) as conn:
            conn.execute(
                "INSERT OR IGNORE INTO manifests(manifest_hash, entries_json, created_at) VALUES (?, ?, ?)",
                (digest, body.decode("utf-8"), self._clock.now_iso()),
            )
        crash_point("catalog.put_manifest.after_commit")
        return digest

    def get_manifest(self, manifest_hash: str) -> tuple[ManifestEntry, ...] | None:
        with storage_errors("cannot read manifest"):
            rows = fetch(self._conn, "SELECT entries_json FROM manifests WHERE manifest_hash = ?", (manifest_hash,))
        if not rows:
            return None
        return tuple(STORED.structure(json.loads(str(rows[0][0])), list[ManifestEntry]))

    # -- file-hash cache (used by FileSystemScanner) ----------------------------------------

    def get_file_hash(self, path: str, stamp: tuple[int, int, int, int]) -> str | None:
        """The cached hash when the file's whole stamp matches; rows written before the stamp
        had ctime and inode (migration 6) hold NULL there and never match."""
        size, mtime_ns, ctime_ns, inode = stamp
        with storage_errors("cannot read file-hash cache"):
            rows = fetch(
                self._conn,
                "SELECT sha256 FROM file_hash_cache "
                "WHERE path = ? AND size = ? AND mtime_ns = ? AND ctime_ns = ? AND inode = ?",
                (path, size, mtime_ns, ctime_ns, inode),
            )
        return str(rows[0][0]) if rows else None

    def put_file_hashes(self, rows: Iterable[FileHashRow]) -> None:
        batch = [(path, *stamp, digest) for path, stamp, digest in rows]
        if not batch:
            return
        with storage_errors("cannot write file-hash cache"), write_transaction(self._conn) as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO file_hash_cache(path, size, mtime_ns, ctime_ns, inode, sha256) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                batch,
            )

    def close(self) -> None:
        self._conn.close()

    # -- helpers ----------------------------------------------------------------------------

    def _exists(self, project_id: str) -> bool:
        return bool(fetch(self._conn, "SELECT 1 FROM projects WHERE project_id = ?", (project_id,)))

    def _sources(self, project_id: str) -> tuple[Source, ...]:
        rows = fetch(
            self._conn, "SELECT path, layer FROM project_sources WHERE project_id = ? ORDER BY ordinal", (project_id,)
        )
        return tuple(Source(str(path), Layer(layer)) for path, layer in rows)

    def _pointed(self, project_id: str, column: str) -> Generation | None:
        with storage_errors("cannot read generation"), read_snapshot(self._conn):
            if not self._exists(project_id):
                raise project_not_found(self._conn, project_id)
            rows = fetch(
                self._conn,
                f"SELECT {_G_COLUMNS} FROM project_generation_pointers p "
                f"JOIN generations g ON g.project_id = p.project_id AND g.index_revision = p.{column} "
                "WHERE p.project_id = ?",
                (project_id,),
            )
        return _generation_from_row(rows[0]) if rows else None


def _storage_location(conn: apsw.Connection, project_id: str) -> str | None:
    with storage_errors("cannot read project storage"):
        rows = fetch(conn, "SELECT storage_dir FROM projects WHERE project_id = ?", (project_id,))
    return str(rows[0][0]) if rows and rows[0][0] is not None else None


class StorageLocations:
    """``SqliteCatalog.storage_location`` on a connection of its own, behind a lock: the
    generation store asks from any thread (the daemon's re-index worker too), and an apsw
    connection refuses two threads at once."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    @classmethod
    def beside(cls, catalog: SqliteCatalog) -> StorageLocations:
        from memory_core.adapters.sqlite.database import open_database

        return cls(open_database(catalog.connection.filename))

    def __call__(self, project_id: str) -> str | None:
        with self._lock:
            return _storage_location(self._conn, project_id)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def project_not_found(conn: Any, project_id: str) -> ProjectNotFound:
    known = [str(row[0]) for row in conn.execute("SELECT project_id FROM projects ORDER BY project_id")]
    return ProjectNotFound.among(project_id, known)
