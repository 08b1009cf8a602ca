"""Indexing real directories through the real scanner and a real apsw catalog (its file-hash
cache): edits that keep size and mtime, ``--force`` past a stale cached hash, and files that
cannot become resources (a name that is not UTF-8, a FIFO, one that vanishes or keeps changing
while it is read) — none of them stops a project's index."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memory_core.adapters.files.filesystem_sources import FileStamp, FileSystemScanner
from memory_core.adapters.sqlite import SqliteCatalog, open_database
from memory_core.domain.errors import EmptyProject
from memory_core.domain.model import ScannedResource, Source
from memory_core.entrypoints.bootstrap import bootstrap_in_memory
from memory_core.services.engine import Engine

OLD_NS = 1_600_000_000 * 10**9


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class HookedScanner(FileSystemScanner):
    """The real scanner; ``after_scan`` runs after each scan, between it and the reads."""

    def __init__(self, hash_cache: SqliteCatalog) -> None:
        super().__init__(hash_cache=hash_cache)
        self.after_scan: Callable[[], None] = lambda: None
        self.scans = 0

    def scan(self, source: Source, *, rehash: bool = False) -> tuple[list[ScannedResource], list[str]]:
        found = super().scan(source, rehash=rehash)
        self.scans += 1
        self.after_scan()
        return found


@pytest.fixture
def world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Engine, SqliteCatalog, HookedScanner, Path]]:
    # Files written by the test are seconds old at most; cache them anyway, as an older tree's.
    monkeypatch.setattr("memory_core.adapters.files.filesystem_sources.RACY_WINDOW_NS", 0)
    catalog = SqliteCatalog(open_database(tmp_path / "local.db"))
    scanner = HookedScanner(catalog)
    engine = bootstrap_in_memory(catalog=catalog, scanner=scanner)
    source = tmp_path / "notes"
    source.mkdir()
    (source / "keep.md").write_bytes(b"# Keep\n\nThis one stays as it is.\n")
    engine.add_project("notes", [Source(str(source))])
    yield engine, catalog, scanner, source
    engine.close()


def indexed_hashes(catalog: SqliteCatalog, memory_hash: str) -> dict[str, str]:
    manifest = catalog.get_manifest(memory_hash)
    assert manifest is not None
    return {e.resource_id: e.resource_hash for e in manifest}


def test_an_edit_that_keeps_size_and_mtime_is_indexed_by_a_plain_index(world) -> None:
    engine, catalog, _, source = world
    doc = source / "doc.md"
    doc.write_bytes(b"# Doc\n\nversion one\n")
    os.utime(doc, ns=(OLD_NS, OLD_NS))
    first = engine.index("notes")
    assert indexed_hashes(catalog, first.effective_memory_hash)["doc.md"] == sha(b"# Doc\n\nversion one\n")
    assert catalog.get_file_hash(str(doc), FileStamp.of(doc.stat())) is not None  # cached
    doc.write_bytes(b"# Doc\n\nversion two\n")  # same size
    os.utime(doc, ns=(OLD_NS, OLD_NS))  # and the mtime put back, as cp -p / rsync -t / touch -r do
    second = engine.index("notes")
    assert second.status == "built"
    assert indexed_hashes(catalog, second.effective_memory_hash)["doc.md"] == sha(b"# Doc\n\nversion two\n")
    assert engine.index("notes").status == "unchanged"


def test_force_rehashes_past_a_stale_cached_hash(world) -> None:
    engine, catalog, _, source = world
    doc = source / "doc.md"
    doc.write_bytes(b"# Doc\n\nversion one\n")
    first = engine.index("notes")
    doc.write_bytes(b"# Doc\n\nversion two\n")
    # A stamp that did not move (a file system with coarse timestamps, an edit in the same
    # tick): the cache still holds the old hash for the file's current stamp.
    catalog.put_file_hashes([(str(doc), FileStamp.of(doc.stat()), sha(b"# Doc\n\nversion one\n"))])
    assert engine.index("notes").status == "unchanged"  # the stamp cannot tell; --force can
    forced = engine.index("notes", force=True)
    assert forced.status == "built" and forced.effective_memory_hash != first.effective_memory_hash
    assert indexed_hashes(catalog, forced.effective_memory_hash)["doc.md"] == sha(b"# Doc\n\nversion two\n")
    # ...and it corrected the cache, so a plain index agrees from now on.
    assert catalog.get_file_hash(str(doc), FileStamp.of(doc.stat())) == sha(b"# Doc\n\nversion two\n")
    assert engine.index("notes").status == "unchanged"


def test_a_stale_cached_hash_that_fails_the_read_check_is_rescanned_not_an_error(world) -> None:
    engine, catalog, scanner, source = world
    doc = source / "doc.md"
    doc.write_bytes(b"# Doc\n\nversion one\n")
    catalog.put_file_hashes([(str(doc), FileStamp.of(doc.stat()), "ab" * 32)])  # a hash of nothing on disk
    report = engine.index("notes")
    assert report.status == "built" and report.warnings == ()
    assert indexed_hashes(catalog, report.effective_memory_hash)["doc.md"] == sha(b"# Doc\n\nversion one\n")
    assert scanner.scans == 2  # the read saw the mismatch; the second scan hashed every file


def test_a_file_that_vanishes_between_scan_and_read_is_left_out(world) -> None:
    engine, catalog, scanner, source = world
    (source / "gone.md").write_bytes(b"# Gone\n\nSoon.\n")
    scanner.after_scan = lambda: (source / "gone.md").unlink(missing_ok=True)
    report = engine.index("notes")
    assert report.status == "built" and report.resources == 1
    assert list(indexed_hashes(catalog, report.effective_memory_hash)) == ["keep.md"]


def test_a_file_that_changes_at_every_read_is_skipped_with_a_warning(world) -> None:
    engine, catalog, scanner, source = world
    busy = source / "busy.md"
    busy.write_bytes(b"# Busy\n\nversion 0\n")
    versions = iter(range(1, 100))
    scanner.after_scan = lambda: busy.write_bytes(f"# Busy\n\nversion {next(versions)}\n".encode())
    report = engine.index("notes")
    assert report.status == "built" and report.resources == 1
    assert list(indexed_hashes(catalog, report.effective_memory_hash)) == ["keep.md"]
    assert len(report.warnings) == 1 and "busy.md" in report.warnings[0] and "changed since" in report.warnings[0]
    # The manifest left without it is an ordinary one: ordinals 0..n-1, its hash its id.
    assert [e.ordinal for e in catalog.get_manifest(report.effective_memory_hash) or ()] == [0]


def test_only_unreadable_files_is_an_empty_project_not_a_crash(world) -> None:
    engine, _, scanner, source = world
    (source / "keep.md").unlink()
    (source / "busy.md").write_bytes(b"0")
    scanner.after_scan = lambda: (source / "busy.md").write_bytes(str(scanner.scans).encode())
    with pytest.raises(EmptyProject):
        engine.index("notes")


def test_names_that_are_not_utf8_and_fifos_are_skipped_with_warnings(world) -> None:
    engine, catalog, _, source = world
    (source / os.fsdecode("café.md".encode("latin-1"))).write_bytes(b"# Latin-1 name\n")
    (source / os.fsdecode(b"dir-\xff")).mkdir()
    (source / os.fsdecode(b"dir-\xff") / "inside.md").write_bytes(b"# Inside\n")
    os.mkfifo(source / "pipe.md")
    report = engine.index("notes")
    assert report.status == "built" and report.resources == 1
    assert list(indexed_hashes(catalog, report.effective_memory_hash)) == ["keep.md"]
    assert sorted(w.rsplit(": ", 1)[1] for w in report.warnings) == [
        "its name is not valid UTF-8",
        "its name is not valid UTF-8",
        "not a regular file",
    ]
    assert any("caf\\xe9.md" in w for w in report.warnings) and any("dir-\\xff" in w for w in report.warnings)
    for warning in report.warnings:
        warning.encode("utf-8")  # printable and storable
    assert engine.index("notes").status == "unchanged"
