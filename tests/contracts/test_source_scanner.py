"""SourceScanner contract: FileSystemScanner and InMemoryScanner behave the same."""

from __future__ import annotations

import hashlib
import itertools
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.adapters.files.filesystem_sources import FileStamp, FileSystemScanner
from memory_core.adapters.in_memory.storage import InMemoryCatalog, InMemoryScanner
from memory_core.adapters.sqlite import SqliteCatalog, open_database
from memory_core.domain.errors import SourceUnavailable
from memory_core.domain.model import Layer, Source


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


def encodable(warnings: list[str]) -> bool:
    """A warning reaches JSON output and terminals: it must encode as UTF-8 (raises if not)."""
    return all(isinstance(w.encode("utf-8"), bytes) for w in warnings)


def test_a_file_name_that_is_not_utf8_is_skipped_with_a_warning(world):
    # os.fsdecode turns the bytes a file system holds into a str with lone surrogates.
    latin1 = os.fsdecode("café.md".encode("latin-1"))
    source = world.source({"ok.md": b"ok", latin1: b"body", os.fsdecode(b"\xff.png"): b"x", "d/fine.txt": b"f"})
    resources, warnings = world.scanner.scan(source)
    assert [r.resource_id for r in resources] == ["d/fine.txt", "ok.md"]
    assert len(warnings) == 1 and "caf\\xe9.md" in warnings[0] and "not valid UTF-8" in warnings[0]
    assert encodable(warnings)


def test_a_path_no_fixture_could_carry_is_skipped_with_a_warning(world):
    # resource_rules: a replay writes resources back as files; a backslash it refuses to write.
    source = world.source({"back\\slash.md": b"x", "ok.md": b"ok"})
    resources, warnings = world.scanner.scan(source)
    assert [r.resource_id for r in resources] == ["ok.md"]
    assert len(warnings) == 1 and "back\\slash.md" in warnings[0] and "'\\'" in warnings[0]


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


def test_a_fifo_or_socket_with_a_text_name_is_skipped_with_a_warning(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    os.mkfifo(source / "pipe.md")
    os.mkfifo(source / "pipe")  # no text extension: ignored silently like any other file
    (source / "ok.md").write_text("ok")
    resources, warnings = FileSystemScanner().scan(Source(str(source)))
    assert [r.resource_id for r in resources] == ["ok.md"]
    assert len(warnings) == 1 and "pipe.md" in warnings[0] and "not a regular file" in warnings[0]


def test_reading_a_file_replaced_by_a_fifo_fails_at_once(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.md").write_text("body")
    (resource,), _ = FileSystemScanner().scan(Source(str(source)))
    (source / "a.md").unlink()
    os.mkfifo(source / "a.md")
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            FileSystemScanner().read(resource)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # a blocking open() waits for a writer forever; give it one
        with open(source / "a.md", "wb"):
            pass
        reader.join(timeout=10)
        pytest.fail("read() blocked on a FIFO")
    assert isinstance(outcome[0], SourceUnavailable) and "not a regular file" in outcome[0].message


def test_a_directory_whose_name_is_not_utf8_is_skipped_with_a_warning(tmp_path):
    source = tmp_path / "src"
    (source / os.fsdecode(b"\xfe\xfe")).mkdir(parents=True)
    (source / os.fsdecode(b"\xfe\xfe") / "inside.md").write_text("x")
    (source / "ok.md").write_text("ok")
    resources, warnings = FileSystemScanner().scan(Source(str(source)))
    assert [r.resource_id for r in resources] == ["ok.md"]
    assert len(warnings) == 1 and "\\xfe\\xfe" in warnings[0] and encodable(warnings)


def test_a_source_that_resolves_to_a_name_that_is_not_utf8_is_unavailable(tmp_path):
    real = tmp_path / os.fsdecode(b"r\xe9el")
    real.mkdir()
    (real / "a.md").write_text("a")
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(SourceUnavailable, match="not valid UTF-8") as info:
        FileSystemScanner().scan(Source(str(tmp_path / "link")))
    assert info.value.message.encode("utf-8") and "r\\xe9el" in info.value.message


def test_a_tree_deeper_than_the_recursion_limit_is_walked(tmp_path):
    depth = 1200
    assert depth > sys.getrecursionlimit()
    source = tmp_path / "src"
    source.mkdir()
    (source / "top.md").write_text("top")
    try:
        # One component at a time through a directory fd (os.makedirs recurses too).
        fd = os.open(source, os.O_RDONLY)
        try:
            for _ in range(depth):
                os.mkdir("d", dir_fd=fd)
                fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
                os.close(old)
            leaf = os.open("leaf.md", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
            os.write(leaf, b"# Deep\n")
            os.close(leaf)
        finally:
            os.close(fd)
        resources, warnings = FileSystemScanner().scan(Source(str(source)))
        assert warnings == []
        assert [r.resource_id for r in resources] == ["d/" * depth + "leaf.md", "top.md"]
        assert FileSystemScanner().read(resources[0]) == b"# Deep\n"
    finally:  # bottom up: pytest's clean-up (shutil.rmtree) recurses and would fail on it
        (source / ("d/" * depth) / "leaf.md").unlink(missing_ok=True)
        for level in range(depth, 0, -1):
            if (source / ("d/" * level)).exists():
                os.rmdir(source / ("d/" * level))


def _stamp(path: Path) -> FileStamp:
    return FileStamp.of(path.stat())


@pytest.fixture(params=["sqlite", "memory"])
def hash_cache(request, tmp_path, monkeypatch) -> Iterator[SqliteCatalog | InMemoryCatalog]:
    """Each file-hash cache, with no racy window (a file written just now may be cached)."""
    monkeypatch.setattr("memory_core.adapters.files.filesystem_sources.RACY_WINDOW_NS", 0)
    cache = SqliteCatalog(open_database(tmp_path / "local.db")) if request.param == "sqlite" else InMemoryCatalog()
    yield cache
    cache.close()


@pytest.fixture
def doc(tmp_path) -> Path:
    """``src/doc.md``, holding ``version one``."""
    (tmp_path / "src").mkdir()
    doc = tmp_path / "src" / "doc.md"
    doc.write_bytes(b"version one")
    return doc


def test_hash_cache_answers_for_an_unchanged_stamp_and_rehash_bypasses_it(hash_cache, doc):
    source = doc.parent
    scanner = FileSystemScanner(hash_cache=hash_cache)
    (first,), _ = scanner.scan(Source(str(source)))
    assert hash_cache.get_file_hash(str(doc), _stamp(doc)) == sha(b"version one")
    # The cache answers without reading: a row planted for the file's exact stamp is believed...
    hash_cache.put_file_hashes([(str(doc), _stamp(doc), "ab" * 32)])
    (cached,), _ = scanner.scan(Source(str(source)))
    assert cached.resource_hash == "ab" * 32
    # ...and rehash reads the file whatever the cache says, and corrects the row.
    (reread,), _ = scanner.scan(Source(str(source)), rehash=True)
    assert reread.resource_hash == sha(b"version one") and scanner.read(reread) == b"version one"
    assert hash_cache.get_file_hash(str(doc), _stamp(doc)) == sha(b"version one")


def test_an_edit_that_keeps_size_and_mtime_is_seen(hash_cache, doc):
    source = doc.parent
    old_ns = 1_600_000_000 * 10**9
    os.utime(doc, ns=(old_ns, old_ns))
    scanner = FileSystemScanner(hash_cache=hash_cache)
    (first,), _ = scanner.scan(Source(str(source)))
    assert first.resource_hash == sha(b"version one")
    before = _stamp(doc)
    # What cp -p, rsync -t or touch -r leave: the same size and mtime, other bytes.
    doc.write_bytes(b"version two")
    os.utime(doc, ns=(old_ns, old_ns))
    after = _stamp(doc)
    assert (after.size, after.mtime_ns) == (before.size, before.mtime_ns) and after.ctime_ns != before.ctime_ns
    (second,), _ = scanner.scan(Source(str(source)))
    assert second.resource_hash == sha(b"version two")
    assert scanner.read(second) == b"version two"
    # A file replaced by another (a rename over it, tar) is a new inode: a miss too.
    replacement = source / "new.tmp"
    replacement.write_bytes(b"version 3!!")
    os.utime(replacement, ns=(old_ns, old_ns))
    os.replace(replacement, doc)
    (third,), _ = scanner.scan(Source(str(source)))
    assert third.resource_hash == sha(b"version 3!!")


def test_recently_changed_files_are_not_cached(tmp_path):
    cache = InMemoryCatalog()
    source = tmp_path / "src"
    source.mkdir()
    (source / "fresh.md").write_text("just written")
    (source / "old-mtime.md").write_text("mtime set back, ctime now")
    os.utime(source / "old-mtime.md", ns=(1_600_000_000 * 10**9,) * 2)
    FileSystemScanner(hash_cache=cache).scan(Source(str(source)))
    for name in ("fresh.md", "old-mtime.md"):
        assert cache.get_file_hash(str(source / name), _stamp(source / name)) is None


# -- issue 30: what the scanner checked is what it opens (real directories only) ----------------

SECRET = b"# Secret\n\nzqx-outside-marker: never memory\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside every source, holding the names the sources below hold, all secret."""
    folder = tmp_path / "outside"
    folder.mkdir()
    for name in ("secret.md", "a.md", "inner.md", "only.md"):
        (folder / name).write_bytes(SECRET)
    return folder


def _swap_for_link(path: Path, target: Path) -> None:
    """``path`` replaced by a symlink to ``target`` in one rename over it, as a racer would."""
    link = path.with_name(f".{path.name}.link")
    link.symlink_to(target)
    os.replace(link, path)


def _source_folder(tmp_path: Path, files: dict[str, bytes]) -> Path:
    """``tmp_path/src`` holding ``files`` (relative paths; their folders are made)."""
    source = tmp_path / "src"
    for rel, data in files.items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_bytes(data)
    return source


def _scan_raced(monkeypatch, source: Path, method: str, race):  # type: ignore[no-untyped-def]
    """A fresh scanner and its scan of ``source`` with its ``method`` replaced by ``race``, which is
    called with the original method and its arguments (and so decides what happens around it)."""
    scanner = FileSystemScanner()
    original = getattr(scanner, method)
    monkeypatch.setattr(scanner, method, lambda *args: race(original, *args))
    return scanner, *scanner.scan(Source(str(source)))


def _no_secret(resources, warnings) -> bool:  # type: ignore[no-untyped-def]
    return all(r.resource_hash != sha(SECRET) for r in resources) and all("zqx" not in w for w in warnings)


def _link_refused(resources, warnings, read: list[str], swapped: str) -> None:  # type: ignore[no-untyped-def]
    """What a scan raced by a link swap must show: only ``read`` was read, nothing of the secret
    outside, and one warning naming the ``swapped`` path as a symbolic link."""
    assert [r.resource_id for r in resources] == read and _no_secret(resources, warnings)
    assert len(warnings) == 1 and swapped in warnings[0] and "symbolic link" in warnings[0]


def test_a_file_swapped_for_a_link_after_the_walk_is_not_followed(tmp_path, outside, monkeypatch):
    source = _source_folder(tmp_path, {"a.md": b"inside a", "b.md": b"inside b"})

    def walk_then_swap(walk, *args):  # type: ignore[no-untyped-def]
        found = walk(*args)  # a.md was a regular file here...
        _swap_for_link(source / "a.md", outside / "secret.md")  # ...and is a link when it is read
        return found

    _, resources, warnings = _scan_raced(monkeypatch, source, "_walk", walk_then_swap)
    _link_refused(resources, warnings, ["b.md"], "a.md")


def test_a_folder_swapped_for_a_link_during_the_walk_is_not_followed(tmp_path, outside, monkeypatch):
    source = _source_folder(tmp_path, {"sub/inner.md": b"inside", "top.md": b"top"})

    def list_then_swap(listing, root, folder, *rest):  # type: ignore[no-untyped-def]
        subfolders = listing(root, folder, *rest)
        if folder.rel == "":  # sub was listed as a folder of the source; now a link takes its name
            os.rename(source / "sub", tmp_path / "sub-moved")
            (source / "sub").symlink_to(outside)
        return subfolders

    _, resources, warnings = _scan_raced(monkeypatch, source, "_list", list_then_swap)
    _link_refused(resources, warnings, ["top.md"], "sub")


def test_a_source_folder_swapped_for_a_link_during_the_scan_is_read_as_it_was_opened(tmp_path, outside, monkeypatch):
    source = _source_folder(tmp_path, {"a.md": b"inside a", "sub/inner.md": b"inside inner"})

    def swap_then_walk(walk, root, warnings):  # type: ignore[no-untyped-def]
        os.rename(source, tmp_path / "src-moved")  # the scan holds the folder it opened
        source.symlink_to(outside)
        return walk(root, warnings)

    scanner, resources, warnings = _scan_raced(monkeypatch, source, "_walk", swap_then_walk)
    assert [r.resource_id for r in resources] == ["a.md", "sub/inner.md"] and warnings == []
    assert [r.resource_hash for r in resources] == [sha(b"inside a"), sha(b"inside inner")]
    # Read later through its path, it is refused: the source folder is a link now.
    with pytest.raises(SourceUnavailable, match="symbolic link"):
        scanner.read(resources[0])


def test_a_source_folder_replaced_by_a_link_is_unavailable_naming_it(tmp_path, outside):
    from memory_core.adapters.files.filesystem_sources import source_root

    source = tmp_path / "src"
    source.mkdir()
    (source / "a.md").write_bytes(SECRET)  # the same bytes as outside: only the path decides
    scanner = FileSystemScanner()
    (resource,), _ = scanner.scan(Source(str(source)))
    os.rename(source, tmp_path / "src-moved")
    for target in (outside, tmp_path / "src-moved"):  # elsewhere, or the very folder moved away
        source.symlink_to(target)
        with pytest.raises(SourceUnavailable, match="symbolic link") as info:
            scanner.scan(Source(str(source)))
        assert info.value.details["path"] == str(source) and str(source) in info.value.message
        with pytest.raises(SourceUnavailable, match="symbolic link"):
            source_root(str(source))
        with pytest.raises(SourceUnavailable, match="symbolic link"):
            scanner.read(resource)
        source.unlink()


def test_reading_a_file_swapped_for_a_link_outside_is_refused(tmp_path, outside):
    source = tmp_path / "src"
    (source / "real").mkdir(parents=True)
    (source / "a.md").write_bytes(SECRET)  # the same bytes: the hash check alone would pass
    (source / "real" / "doc.md").write_bytes(b"doc")
    (source / "alias.md").symlink_to(source / "real" / "doc.md")
    (source / "link").symlink_to(source / "real")
    (source / ".hidden").mkdir()
    (source / ".hidden" / "only.md").write_bytes(b"only")
    (source / "only-link").symlink_to(source / ".hidden")
    scanner = FileSystemScanner()
    resources, warnings = scanner.scan(Source(str(source)))
    by_id = {r.resource_id: r for r in resources}
    assert sorted(by_id) == ["a.md", "alias.md", "only-link/only.md", "real/doc.md"] and warnings == []
    # Links inside the source still read, through the names they resolve to below it.
    assert scanner.read(by_id["alias.md"]) == b"doc" and scanner.read(by_id["only-link/only.md"]) == b"only"
    _swap_for_link(source / "a.md", outside / "secret.md")
    with pytest.raises(SourceUnavailable, match="outside its source"):
        scanner.read(by_id["a.md"])
    _swap_for_link(source / "only-link", outside)  # a folder link repointed outside
    with pytest.raises(SourceUnavailable, match="outside its source"):
        scanner.read(by_id["only-link/only.md"])


def test_a_source_configured_as_a_link_is_unavailable(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.md").write_text("a")
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(SourceUnavailable, match="symbolic link") as info:
        FileSystemScanner().scan(Source(str(tmp_path / "link")))
    assert str(real) in info.value.message  # says which folder to name instead
    # A link above the source folder is followed, as configured (a home under a linked /home).
    (tmp_path / "up").symlink_to(tmp_path)
    resources, _ = FileSystemScanner().scan(Source(str(tmp_path / "up" / "real")))
    assert [r.path for r in resources] == [str(real / "a.md")]
