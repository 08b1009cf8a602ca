"""SourceScanner contract: FileSystemScanner and InMemoryScanner behave the same."""

from __future__ import annotations

import hashlib
import itertools
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.adapters.filesystem_sources import FileSystemScanner
from memory_core.adapters.in_memory.storage import InMemoryCatalog, InMemoryScanner
from memory_core.adapters.sqlite import SqliteCatalog, open_database
from memory_core.errors import SourceUnavailable
from memory_core.model import Layer, Source


class FsWorld:
    """Sources are real directories under tmp_path."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.scanner = FileSystemScanner(max_bytes=max_bytes)
        self._names = itertools.count()

    def source(self, files: dict[str, bytes], layer: Layer = Layer.PROJECT) -> Source:
        path = self.root / f"src{next(self._names)}"
        path.mkdir(parents=True)
        for rel, data in files.items():
            self.write(str(path), rel, data)
        return Source(str(path), layer)

    def write(self, source_path: str, rel: str, data: bytes) -> None:
        target = Path(source_path) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def missing(self) -> Source:
        return Source(str(self.root / "does-not-exist"))


class MemoryWorld:
    def __init__(self, max_bytes: int) -> None:
        self.scanner = InMemoryScanner({}, max_bytes=max_bytes)
        self._names = itertools.count()

    def source(self, files: dict[str, bytes], layer: Layer = Layer.PROJECT) -> Source:
        path = f"/mem/src{next(self._names)}"
        self.scanner.sources[path] = dict(files)
        return Source(path, layer)

    def write(self, source_path: str, rel: str, data: bytes) -> None:
        self.scanner.write(source_path, rel, data)

    def missing(self) -> Source:
        return Source("/mem/does-not-exist")


MAX_BYTES = 1000


def make_world(kind: str, root: Path):
    return FsWorld(root, MAX_BYTES) if kind == "fs" else MemoryWorld(MAX_BYTES)


@pytest.fixture(params=["fs", "memory"])
def world(request, tmp_path):
    return make_world(request.param, tmp_path)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_finds_markdown_and_text_with_media_types(world):
    files = {
        "notes.md": b"# Notes\n",
        "guide.markdown": b"guide",
        "README.TXT": b"plain",
        "image.png": b"\x89PNG",
        "script.py": b"print()",
        "noext": b"x",
    }
    source = world.source(files, Layer.LOCAL)
    resources, warnings = world.scanner.scan(source)
    assert warnings == []
    assert [(r.resource_id, r.media_type) for r in resources] == [
        ("README.TXT", "text/plain"),
        ("guide.markdown", "text/markdown"),
        ("notes.md", "text/markdown"),
    ]
    for r in resources:
        assert r.resource_hash == sha(files[r.resource_id])
        assert r.byte_size == len(files[r.resource_id])
        assert r.layer is Layer.LOCAL
    assert len({r.uri for r in resources}) == 3


def test_nested_paths_are_posix_relative_and_sorted(world):
    source = world.source({"b/c/d.md": b"d", "a.md": b"a", "b/a.md": b"ba", "a/z.md": b"az"})
    resources, _ = world.scanner.scan(source)
    assert [r.resource_id for r in resources] == ["a.md", "a/z.md", "b/a.md", "b/c/d.md"]


def test_hidden_files_and_directories_are_skipped_silently(world):
    source = world.source(
        {".hidden.md": b"h", ".git/HEAD.md": b"g", "a/.b/c.md": b"c", "visible.md": b"v", "a/ok.txt": b"ok"}
    )
    resources, warnings = world.scanner.scan(source)
    assert [r.resource_id for r in resources] == ["a/ok.txt", "visible.md"]
    assert warnings == []


def test_binary_and_non_utf8_files_are_skipped_with_a_warning(world):
    source = world.source({"nul.md": b"text\x00more", "latin1.txt": "café".encode("latin-1"), "ok.md": b"ok"})
    resources, warnings = world.scanner.scan(source)
    assert [r.resource_id for r in resources] == ["ok.md"]
    assert len(warnings) == 2
    assert any("latin1.txt" in w and "UTF-8" in w for w in warnings)
    assert any("nul.md" in w and "binary" in w for w in warnings)


def test_files_over_the_size_limit_are_skipped_with_a_warning(world):
    source = world.source({"big.md": b"x" * (MAX_BYTES + 1), "edge.md": b"y" * MAX_BYTES})
    resources, warnings = world.scanner.scan(source)
    assert [r.resource_id for r in resources] == ["edge.md"]
    assert len(warnings) == 1 and "big.md" in warnings[0] and str(MAX_BYTES) in warnings[0]


def test_missing_source_is_unavailable(world):
    with pytest.raises(SourceUnavailable) as info:
        world.scanner.scan(world.missing())
    assert info.value.code == "source_unavailable"


def test_empty_source_gives_nothing(world):
    assert world.scanner.scan(world.source({})) == ([], [])


def test_scanning_twice_gives_the_same_result(world):
    source = world.source({f"d{i % 3}/f{i}.md": f"body {i}".encode() for i in range(12)})
    assert world.scanner.scan(source) == world.scanner.scan(source)


def test_read_returns_the_scanned_bytes(world):
    source = world.source({"a.md": "ünïcode".encode()})
    (resource,), _ = world.scanner.scan(source)
    assert world.scanner.read(resource) == "ünïcode".encode()


def test_read_after_the_file_changed_is_refused(world):
    source = world.source({"a.md": b"before"})
    (resource,), _ = world.scanner.scan(source)
    world.write(source.path, "a.md", b"after!")
    with pytest.raises(SourceUnavailable, match="changed since"):
        world.scanner.read(resource)


_name = st.text(alphabet="abc.", min_size=1, max_size=4).filter(lambda n: n not in (".", ".."))
_ext = st.sampled_from([".md", ".txt", ".markdown", ".bin", ""])
_body = st.one_of(st.text(max_size=30).map(lambda t: t.encode("utf-8")), st.binary(max_size=30))
_trees = st.dictionaries(
    st.builds(lambda parts, ext: "/".join(parts) + ext, st.lists(_name, min_size=1, max_size=3), _ext),
    _body,
    max_size=8,
)


def _expected(files: dict[str, bytes]) -> list[str]:
    out = []
    for rel, data in files.items():
        if any(p.startswith(".") for p in rel.split("/")) or not rel.lower().endswith((".md", ".txt", ".markdown")):
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if b"\x00" not in data:
            out.append(rel)
    return sorted(out)


def _consistent(files: dict[str, bytes]) -> bool:
    """No path is both a file and a directory."""
    return not any(other.startswith(rel + "/") for rel in files for other in files)


@pytest.mark.parametrize("kind", ["fs", "memory"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=_trees.filter(_consistent))
def test_scan_finds_exactly_the_visible_text_files(kind, tmp_path, files):
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        world = make_world(kind, Path(scratch))
        resources, _ = world.scanner.scan(world.source(files))
        assert [r.resource_id for r in resources] == _expected(files)
        assert all(r.resource_hash == sha(files[r.resource_id]) for r in resources)


# -- FileSystemScanner only -------------------------------------------------------------------


def test_uri_and_path_point_at_the_file(tmp_path):
    world = FsWorld(tmp_path, MAX_BYTES)
    source = world.source({"dir with space/ü.md": b"x"})
    (resource,), _ = world.scanner.scan(source)
    expected = Path(source.path).resolve() / "dir with space" / "ü.md"
    assert resource.path == str(expected)
    assert resource.uri == expected.as_uri()
    assert resource.uri.startswith("file:///") and "%20" in resource.uri


def test_source_that_is_a_file_is_unavailable(tmp_path):
    (tmp_path / "file.md").write_text("x")
    with pytest.raises(SourceUnavailable, match="not a directory"):
        FileSystemScanner().scan(Source(str(tmp_path / "file.md")))


def test_symlinks_outside_the_source_are_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret")
    source = tmp_path / "src"
    source.mkdir()
    (source / "own.md").write_text("own")
    (source / "linked-dir").symlink_to(outside)
    (source / "linked.md").symlink_to(outside / "secret.md")
    (source / "dangling.md").symlink_to(tmp_path / "nowhere.md")
    resources, warnings = FileSystemScanner().scan(Source(str(source)))
    assert [r.resource_id for r in resources] == ["own.md"]
    assert sum("outside the source" in w for w in warnings) == 2
    assert any("dangling.md" in w for w in warnings)


def test_symlinks_inside_the_source_keep_real_paths_and_loops_end(tmp_path):
    source = tmp_path / "src"
    (source / "real").mkdir(parents=True)
    (source / "real" / "doc.md").write_text("doc")
    (source / "a-link").symlink_to(source / "real")  # sorts before its target
    (source / "real" / "loop").symlink_to(source)
    (source / "alias.md").symlink_to(source / "real" / "doc.md")
    resources, warnings = FileSystemScanner().scan(Source(str(source)))
    assert [r.resource_id for r in resources] == ["alias.md", "real/doc.md"]
    assert warnings == []


def test_fifo_is_ignored(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    os.mkfifo(source / "pipe.md")
    assert FileSystemScanner().scan(Source(str(source))) == ([], [])


@pytest.mark.parametrize("cache_kind", ["sqlite", "memory"])
def test_hash_cache_skips_rereading_unchanged_files(tmp_path, cache_kind):
    cache = SqliteCatalog(open_database(tmp_path / "local.db")) if cache_kind == "sqlite" else InMemoryCatalog()
    source = tmp_path / "src"
    source.mkdir()
    doc = source / "doc.md"
    doc.write_bytes(b"version one")
    old_ns = 1_600_000_000 * 10**9
    os.utime(doc, ns=(old_ns, old_ns))
    scanner = FileSystemScanner(hash_cache=cache)
    (first,), _ = scanner.scan(Source(str(source)))
    assert cache.get_file_hash(str(doc), 11, old_ns) == sha(b"version one")
    # Same size and mtime: the cache answers without reading, so a same-size edit that kept
    # its mtime goes unseen by scan() and is caught by read()'s hash check.
    doc.write_bytes(b"version two")
    os.utime(doc, ns=(old_ns, old_ns))
    (second,), _ = scanner.scan(Source(str(source)))
    assert second.resource_hash == first.resource_hash
    with pytest.raises(SourceUnavailable, match="changed since"):
        scanner.read(second)
    # Any mtime change is a miss.
    os.utime(doc, ns=(old_ns + 1, old_ns + 1))
    (third,), _ = scanner.scan(Source(str(source)))
    assert third.resource_hash == sha(b"version two")
    assert scanner.read(third) == b"version two"
    cache.close()


def test_recently_modified_files_are_not_cached(tmp_path):
    cache = InMemoryCatalog()
    source = tmp_path / "src"
    source.mkdir()
    (source / "fresh.md").write_text("just written")
    FileSystemScanner(hash_cache=cache).scan(Source(str(source)))
    st_ = (source / "fresh.md").stat()
    assert cache.get_file_hash(str(source / "fresh.md"), st_.st_size, st_.st_mtime_ns) is None
