"""The LiveMemory port (issue 15): every implementation reads what the sources hold now.

Run against the in-process scan over the in-memory scanner, the same over real directories, and
the stat-fingerprinted one the embedded engine uses over real directories. The daemon's
watcher-backed one has its own tests beside the watcher.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memory_core.adapters.files.filesystem_sources import FileSystemScanner
from memory_core.adapters.files.live_memory import FileSystemLiveMemory
from memory_core.adapters.in_memory.storage import InMemoryCatalog, InMemoryScanner
from memory_core.domain.errors import SourceUnavailable
from memory_core.domain.model import EffectiveMemory, Layer, Project, Source
from memory_core.ports import LiveMemory
from memory_core.services.live_memory import ScanningLiveMemory, read_effective_memory


class World:
    """Two sources (organization, project) and a LiveMemory over them."""

    def __init__(self, kind: str, ahead: bool, tmp: Path) -> None:
        self.kind = kind
        self.ahead = ahead
        if kind == "in-memory":
            self.scanner: Any = InMemoryScanner()
            self.org, self.proj = "/org", "/proj"
            self.scanner.sources[self.org] = {}
            self.scanner.sources[self.proj] = {}
        else:
            self.scanner = FileSystemScanner(hash_cache=InMemoryCatalog())
            self.org, self.proj = str(tmp / "org"), str(tmp / "proj")
            os.mkdir(self.org)
            os.mkdir(self.proj)
        self.live: LiveMemory = (
            FileSystemLiveMemory(self.scanner, racy_window_ns=0)
            if kind == "fingerprinted"
            else ScanningLiveMemory(self.scanner)
        )
        self.project = Project("p", (Source(self.org, Layer.ORGANIZATION), Source(self.proj)), "t")

    def write(self, source: str, rel: str, text: str) -> None:
        if self.kind == "in-memory":
            self.scanner.write(source, rel, text.encode())
            return
        path = Path(source, rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def delete(self, source: str, rel: str) -> None:
        if self.kind == "in-memory":
            self.scanner.remove(source, rel)
        else:
            Path(source, rel).unlink()

    def drop_source(self, source: str) -> None:
        if self.kind == "in-memory":
            del self.scanner.sources[source]
        else:
            import shutil

            shutil.rmtree(source)

    def read(self) -> EffectiveMemory:
        """As the engine reads it (begun as the activation starts, finished after ranking), or at once."""
        return self.live.read_ahead(self.project)() if self.ahead else self.live.effective_memory(self.project)

    def hashes(self) -> dict[str, str]:
        return {e.resource_id: e.resource_hash for e in self.read().entries}


@pytest.fixture(params=["in-memory", "scanning", "fingerprinted"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[False, True], ids=["read", "read-ahead"])
def world(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> World:
    return World(kind, bool(request.param), tmp_path)


def test_it_is_the_effective_memory_of_the_sources(world: World) -> None:
    world.write(world.org, "a.md", "# A\n\norg a\n")
    world.write(world.org, "b.md", "# B\n\norg b\n")
    world.write(world.proj, "b.md", "# B\n\nproject b overrides\n")
    read = world.read()
    assert read == read_effective_memory(world.project, world.scanner)
    assert [(e.resource_id, e.layer) for e in read.entries] == [("a.md", Layer.ORGANIZATION), ("b.md", Layer.PROJECT)]
    assert world.live.reindex_pending("p") is False


def test_every_change_shows_on_the_next_read(world: World) -> None:
    world.write(world.proj, "keep.md", "# Keep\n\nsame\n")
    world.write(world.proj, "edit.md", "# Edit\n\nbefore\n")
    world.write(world.proj, "gone.md", "# Gone\n\nsoon\n")
    first = world.hashes()
    assert world.hashes() == first  # an unchanged read is the same memory
    world.write(world.proj, "edit.md", "# Edit\n\nafter, and longer\n")
    world.delete(world.proj, "gone.md")
    world.write(world.proj, "deep/new.md", "# New\n\nin a new folder\n")
    second = world.hashes()
    assert set(second) == {"keep.md", "edit.md", "deep/new.md"}
    assert second["keep.md"] == first["keep.md"] and second["edit.md"] != first["edit.md"]
    # An override appears and disappears as the higher layer's file does.
    world.write(world.org, "keep.md", "# Keep\n\norg version, overridden\n")
    assert world.hashes()["keep.md"] == first["keep.md"]
    world.delete(world.proj, "keep.md")
    assert world.hashes()["keep.md"] != first["keep.md"]


def test_a_vanished_source_is_source_unavailable(world: World) -> None:
    world.write(world.proj, "a.md", "# A\n\ntext\n")
    world.read()
    world.drop_source(world.org)
    with pytest.raises(SourceUnavailable):
        world.read()


# -- the fingerprinted one: no scan when a stat walk shows nothing changed ---------------------


class CountingScanner(FileSystemScanner):
    def __init__(self) -> None:
        super().__init__(hash_cache=InMemoryCatalog())
        self.scans = 0

    def scan(self, source: Source, **kwargs: Any) -> Any:
        self.scans += 1
        return super().scan(source, **kwargs)


@pytest.fixture
def counted(tmp_path: Path) -> tuple[CountingScanner, Project, Path]:
    folder = tmp_path / "notes"
    folder.mkdir()
    for name in ("a.md", "b.md"):
        (folder / name).write_text(f"# {name}\n\ntext\n", encoding="utf-8")
    return CountingScanner(), Project("p", (Source(str(folder)),), "t"), folder


def test_an_unchanged_tree_is_not_scanned_again(counted: tuple[CountingScanner, Project, Path]) -> None:
    scanner, project, folder = counted
    live = FileSystemLiveMemory(scanner, racy_window_ns=0)
    first = live.effective_memory(project)
    assert scanner.scans == 1
    assert live.effective_memory(project) is first and scanner.scans == 1
    (folder / ".hidden.md").write_text("never memory", encoding="utf-8")  # the folder's mtime moves
    assert live.effective_memory(project) == first
    changes: list[Callable[[], object]] = [
        lambda: (folder / "a.md").write_text("# a\n\nedited\n", encoding="utf-8"),
        lambda: os.chmod(folder / "b.md", 0o400),  # same bytes, ctime moves: the scan decides
        lambda: os.rename(folder / "b.md", folder / "c.md"),
        lambda: (folder / "a.md").unlink(),
    ]
    for change in changes:
        before = scanner.scans
        change()
        live.effective_memory(project)
        assert scanner.scans == before + 1, change


def test_a_racy_file_is_always_scanned(counted: tuple[CountingScanner, Project, Path]) -> None:
    scanner, project, folder = counted
    live = FileSystemLiveMemory(scanner)  # the default racy window (2 s)
    live.effective_memory(project)
    live.effective_memory(project)
    # Just written: its mtime/ctime are too recent to vouch for its content, so every read scans.
    assert scanner.scans == 2
    (folder / "a.md").write_text("# a\n\nsame size!\n", encoding="utf-8")
    assert {e.resource_id for e in live.effective_memory(project).entries} == {"a.md", "b.md"}
    assert scanner.scans == 3


def test_a_read_ahead_walks_on_another_thread_and_scans_on_the_callers(
    counted: tuple[CountingScanner, Project, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from memory_core.adapters.files import live_memory as module

    scanner, project, folder = counted
    walked_on: list[int] = []
    scanned_on: list[int] = []
    walk = module.fingerprint
    monkeypatch.setattr(module, "fingerprint", lambda *a: walked_on.append(threading.get_ident()) or walk(*a))
    scan = scanner.scan
    monkeypatch.setattr(scanner, "scan", lambda *a, **k: scanned_on.append(threading.get_ident()) or scan(*a, **k))
    live = FileSystemLiveMemory(scanner, racy_window_ns=0)
    first = live.read_ahead(project)()
    assert live.read_ahead(project)() is first  # the walk proved it unchanged: no second scan
    (folder / "a.md").write_text("# a\n\nedited\n", encoding="utf-8")
    assert live.read_ahead(project)() != first
    me = threading.get_ident()
    assert len(walked_on) == 3 and me not in walked_on  # the stat walk overlaps the caller's ranking
    assert scanned_on == [me, me]  # the scan queries the catalog: only ever on the caller's thread


@pytest.mark.parametrize("fingerprinted", [False, True], ids=["scanning", "fingerprinted"])
def test_a_source_folder_replaced_by_a_link_is_unavailable_not_the_last_answer(
    counted: tuple[CountingScanner, Project, Path], fingerprinted: bool
) -> None:
    # Issue 30: even a link to the very folder, moved away (its files, stats and inode unchanged).
    scanner, project, folder = counted
    live: LiveMemory = FileSystemLiveMemory(scanner, racy_window_ns=0) if fingerprinted else ScanningLiveMemory(scanner)
    live.effective_memory(project)
    moved = folder.with_name("notes-moved")
    os.rename(folder, moved)
    folder.symlink_to(moved)
    with pytest.raises(SourceUnavailable, match="symbolic link") as info:
        live.effective_memory(project)
    assert info.value.details["path"] == str(folder)
