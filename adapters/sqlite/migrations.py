"""Ordered, numbered schema migrations for ``local.db``.

To add one, append a function named ``mNNN_what(conn)`` decorated with ``@migration`` at the end
of this module, numbered one past the last. Each runs inside its own transaction together with
its ``_migrations`` row and ``PRAGMA user_version``; never edit a migration once released.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import apsw

Migration = Callable[[apsw.Connection], None]

MIGRATIONS: list[Migration] = []

_NAME = re.compile(r"^m(\d{3})_[a-z0-9_]+$")


def migration(fn: Migration) -> Migration:
    """Register ``fn``; its name carries its number, which must be the next one."""
    match = _NAME.match(fn.__name__)
    if match is None or int(match.group(1)) != len(MIGRATIONS) + 1:
        raise RuntimeError(f"migration {fn.__name__} must be named m{len(MIGRATIONS) + 1:03d}_<what>")
    MIGRATIONS.append(fn)
    return fn


def migration_number(fn: Migration) -> int:
    return int(fn.__name__[1:4])


@migration
def m001_projects(conn: apsw.Connection) -> None:
    conn.execute(
        """
        CREATE TABLE projects (
            project_id TEXT PRIMARY KEY,
            created_at TEXT NOT NULL
        );
        CREATE TABLE project_sources (
            project_id TEXT NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
            ordinal INTEGER NOT NULL,
            path TEXT NOT NULL,
            layer TEXT NOT NULL,
            PRIMARY KEY (project_id, ordinal)
        );
        CREATE TABLE generations (
            project_id TEXT NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
            index_revision TEXT NOT NULL,
            effective_memory_hash TEXT NOT NULL,
            unit_count INTEGER NOT NULL,
            resource_count INTEGER NOT NULL,
            revisions_json TEXT NOT NULL,
            created_at TEXT NOT NULL,
            directory TEXT NOT NULL,
            PRIMARY KEY (project_id, index_revision)
        );
        CREATE TABLE project_generation_pointers (
            project_id TEXT PRIMARY KEY REFERENCES projects(project_id) ON DELETE CASCADE,
            current_revision TEXT,
            previous_revision TEXT
        );
        CREATE TABLE file_hash_cache (
            path TEXT PRIMARY KEY,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            sha256 TEXT NOT NULL
        );
        """
    )


@migration
def m002_manifests(conn: apsw.Connection) -> None:
    # Effective Memory manifests, stored once per hash and shared by everything that saw them.
    conn.execute(
        """
        CREATE TABLE manifests (
            manifest_hash TEXT PRIMARY KEY,
            entries_json TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        ALTER TABLE generations ADD COLUMN manifest_hash TEXT;
        -- The manifest hash is the Effective Memory hash by definition (brief §3).
        UPDATE generations SET manifest_hash = effective_memory_hash WHERE manifest_hash IS NULL;
        CREATE INDEX generations_manifest_hash ON generations(manifest_hash);
        """
    )
