"""Migration 6 (the file-hash cache keys on ctime and inode too) on a populated database, then the
real scanner over it: an old row is kept but never trusted, and the next scan replaces it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from memory_core.adapters.files.filesystem_sources import FileStamp, FileSystemScanner
from memory_core.adapters.sqlite import SCHEMA_VERSION, SqliteCatalog, open_database, schema_version
from memory_core.adapters.sqlite.migrations import MIGRATIONS, m006_file_stamp, migration_number
from memory_core.domain.model import Source

OLD_NS = 1_600_000_000 * 10**9


def test_migration_6_keeps_old_rows_which_never_match_and_the_next_scan_replaces_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The file's ctime is now; without this the scan would not cache it for another 2 s.
    monkeypatch.setattr("memory_core.adapters.files.filesystem_sources.RACY_WINDOW_NS", 0)
    assert MIGRATIONS.index(m006_file_stamp) + 1 == migration_number(m006_file_stamp) == 6
    source = tmp_path / "src"
    source.mkdir()
    doc = source / "doc.md"
    doc.write_bytes(b"the bytes on disk now")
    os.utime(doc, ns=(OLD_NS, OLD_NS))
    size = doc.stat().st_size
    path = tmp_path / "local.db"
    conn = open_database(path, target_version=5)
    with conn:
        # What a version-5 scanner wrote: (path, size, mtime) and a hash of bytes since replaced
        # by an edit that kept size and mtime. Trusted, it would serve the old content.
        conn.execute("INSERT INTO file_hash_cache VALUES (?, ?, ?, ?)", (str(doc), size, OLD_NS, "ab" * 32))
        conn.executemany(
            "INSERT INTO file_hash_cache VALUES (?, ?, ?, ?)",
            [(f"/gone/{i}.md", i, i * 7, "cd" * 32) for i in range(50)],
        )
    conn.close()

    conn = open_database(path)
    assert schema_version(conn) == SCHEMA_VERSION >= 6
    columns = [row[1] for row in conn.execute("PRAGMA table_info(file_hash_cache)")]
    assert columns == ["path", "size", "mtime_ns", "sha256", "ctime_ns", "inode"]
    rows = conn.execute("SELECT path, size, mtime_ns, sha256, ctime_ns, inode FROM file_hash_cache").fetchall()
    assert len(rows) == 51 and all(r[4] is None and r[5] is None for r in rows)
    catalog = SqliteCatalog(conn)
    assert catalog.get_file_hash(str(doc), FileStamp.of(doc.stat())) is None

    (resource,), warnings = FileSystemScanner(hash_cache=catalog).scan(Source(str(source)))
    assert warnings == []
    assert resource.resource_hash == hashlib.sha256(b"the bytes on disk now").hexdigest()
    st = doc.stat()
    assert conn.execute(
        "SELECT size, mtime_ns, ctime_ns, inode, sha256 FROM file_hash_cache WHERE path = ?", (str(doc),)
    ).fetchall() == [(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, resource.resource_hash)]
    catalog.close()
