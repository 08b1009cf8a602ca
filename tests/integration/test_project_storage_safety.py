"""Project Local Storage moves that must not hurt (issue 30 items 3, 5 and part of 8): the
product's composition root over a real home (apsw ``local.db``, sealed generations, usearch), a
hashing embedder for speed (``tests/reliability/harness.py``).

- No destination in the home's own folders (``eval import-beir`` replaced
  ``evaluation-sources/<id>`` wholesale, generations and all), and no source in or around any
  project's storage, in either order.
- A pointer to a generation whose folder is gone is forgotten by the next move, not a
  ``generation_corrupted`` that blocks every move after it.
- A full disk while a move copies, or while a re-index saves its vectors, is
  ``storage_unavailable`` naming the place; the failed move removes the folder it made.
- Two moves at once, or a move and an index, never both act on the same place.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core.adapters.files import generation_store
from memory_core.adapters.search import usearch_index
from memory_core.adapters.system.home import HomeLayout
from memory_core.domain.errors import (
    GenerationCorrupted,
    InvalidRequest,
    InvalidStorageLocation,
    RetrievalFailed,
    StorageUnavailable,
)
from memory_core.domain.model import Source
from memory_core.services.engine import Engine
from tests.reliability.full_disk import INJECTED, FullDisk
from tests.reliability.harness import PROJECT, QUERIES, engine_for, write_memory

pytestmark = pytest.mark.slow


@pytest.fixture
def home(tmp_path: Path) -> Iterator[tuple[Path, Engine]]:
    """``proj`` indexed twice (a current and a previous generation) over ``memory/``."""
    engine = engine_for(tmp_path / "home")
    engine.add_project(PROJECT, [Source(str(write_memory(tmp_path / "memory", 0)))])
    engine.index(PROJECT)
    write_memory(tmp_path / "memory", 1)
    engine.index(PROJECT)
    yield tmp_path / "home", engine
    engine.close()


@pytest.fixture
def other(home: tuple[Path, Engine]) -> Iterator[Engine]:
    """Another process's engine on the same home (its own connections)."""
    engine = engine_for(home[0])
    yield engine
    engine.close()


def serving(engine: Engine) -> bool:
    return bool(engine.activate(PROJECT, QUERIES[0]).response.fragments)


def test_no_move_into_the_homes_own_folders(home: tuple[Path, Engine], tmp_path: Path) -> None:
    root, engine = home
    layout = HomeLayout.at(root)
    before = engine.project_storage(PROJECT)
    places = [folder / PROJECT for folder in layout.own_folders if folder != layout.projects_dir]
    places += [root / "elsewhere", layout.projects_dir / "not-a-project", layout.evaluation_sources_dir]
    for place in places:
        existed = place.exists()
        with pytest.raises(InvalidStorageLocation) as refused:
            engine.move_project_storage(PROJECT, place)
        assert refused.value.details["reason"] == "in_home", (place, refused.value.message)
        assert str(root.resolve()) in refused.value.message
        assert place.exists() == existed  # nothing made
    assert "'evaluation-sources' folder" in _refusal(engine, layout.evaluation_sources_dir / PROJECT)
    assert engine.project_storage(PROJECT) == before and serving(engine)

    # Outside the home it moves, and back to its own default place (the one spot in the home).
    moved = engine.move_project_storage(PROJECT, tmp_path / "store")
    assert not moved.default_location
    back = engine.move_project_storage(PROJECT, layout.project_dir(PROJECT))
    assert back.default_location and serving(engine)


def _refusal(engine: Engine, place: Path) -> str:
    with pytest.raises(InvalidStorageLocation) as refused:
        engine.move_project_storage(PROJECT, place)
    return refused.value.message


def test_no_source_in_or_around_any_storage_location(home: tuple[Path, Engine], tmp_path: Path) -> None:
    root, engine = home
    default = HomeLayout.at(root).project_dir(PROJECT)
    store = tmp_path / "store" / "proj"
    (tmp_path / "around").mkdir()
    cases: list[tuple[Path, Path]] = [(default / "generations", default), (root, default)]
    for source, storage in cases:
        with pytest.raises(InvalidRequest) as refused:
            engine.add_project("other", [Source(str(source))])
        assert refused.value.details["reason"] == "overlaps_storage", refused.value.message
        assert refused.value.details["storage"] == str(storage)

    engine.move_project_storage(PROJECT, store)
    for source in (store / "generations", store, tmp_path / "store"):
        source.mkdir(parents=True, exist_ok=True)
        with pytest.raises(InvalidRequest) as refused:
            engine.add_project("other", [Source(str(source))])
        assert refused.value.details["reason"] == "overlaps_storage", refused.value.message
        assert refused.value.details["storage"] == str(store.resolve())
    # A symlink does not hide it either.
    (tmp_path / "around" / "link").symlink_to(store)
    with pytest.raises(InvalidRequest):
        engine.add_project("other", [Source(str(tmp_path / "around" / "link"))])
    assert [p.project_id for p in engine.catalog.list_projects()] == [PROJECT]

    # A source apart from every storage location is fine; the reverse order stays refused.
    other = engine.add_project("other", [Source(str(write_memory(tmp_path / "other-memory", 0)))])
    assert other.project_id == "other"
    with pytest.raises(InvalidStorageLocation) as refused:
        engine.move_project_storage(PROJECT, tmp_path / "other-memory" / "store")
    assert refused.value.details["reason"] == "overlaps"


@pytest.mark.parametrize("lost", ["previous", "current"])
def test_a_generation_gone_from_disk_never_blocks_a_later_move(
    home: tuple[Path, Engine], tmp_path: Path, lost: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, engine = home
    current = engine.catalog.current_generation(PROJECT)
    previous = engine.catalog.previous_generation(PROJECT)
    assert current is not None and previous is not None
    gone = previous if lost == "previous" else current
    kept = current if lost == "previous" else previous
    shutil.rmtree(gone.directory)  # as `eval import-beir` did to a folder it owned

    with caplog.at_level(logging.WARNING, logger="memory_core.services.engine"):
        moved = engine.move_project_storage(PROJECT, tmp_path / "first")
    assert any(gone.index_revision in r.getMessage() and "gone" in r.getMessage() for r in caplog.records)
    assert [g.index_revision for g in moved.generations] == [kept.index_revision]
    pointers = (engine.catalog.current_generation(PROJECT), engine.catalog.previous_generation(PROJECT))
    assert gone.index_revision not in {g.index_revision for g in pointers if g is not None}
    # And every later move works, with whatever is left.
    again = engine.move_project_storage(PROJECT, tmp_path / "second")
    assert [g.index_revision for g in again.generations] == [kept.index_revision]
    assert engine.index(PROJECT).status in ("built", "unchanged") and serving(engine)


def enospc(path: Path) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record_property: Any) -> Iterator[FullDisk]:
    """A full 1 MiB tmpfs; where mounting is refused, ENOSPC injected at the adapters' writes
    into it (a move's file copy, the vector index's files)."""
    full = FullDisk(tmp_path / "disk")
    record_property("full_disk", full.mode)
    if full.mode == INJECTED:
        real_copy, real_write = generation_store._copy_file, usearch_index.write_private

        def copy(source: Path, target: Path) -> None:
            if full.marker.exists() and target.is_relative_to(full.directory.resolve()):
                target.write_bytes(b"\0")  # part of it, as a disk that filled up midway
                raise enospc(target)
            real_copy(source, target)

        def write(path: Path, data: bytes) -> None:
            if full.marker.exists() and Path(path).is_relative_to(full.directory):
                raise enospc(path)
            real_write(path, data)

        monkeypatch.setattr(generation_store, "_copy_file", copy)
        monkeypatch.setattr(usearch_index, "write_private", write)
    yield full
    full.close()


@pytest.mark.parametrize("existing", [False, True])
def test_a_full_disk_while_a_move_copies(home: tuple[Path, Engine], disk: FullDisk, existing: bool) -> None:
    _, engine = home
    before = engine.project_storage(PROJECT)
    dest = disk.directory / "store"
    if existing:
        dest.mkdir()
    disk.fill()

    with pytest.raises(StorageUnavailable) as caught:
        engine.move_project_storage(PROJECT, dest)

    assert caught.value.details["path"] == str(dest.resolve()), caught.value.details
    assert caught.value.details["errno"] == "ENOSPC"
    assert "copy of generation" in caught.value.message
    assert dest.exists() == existing  # the folder it made goes, one that was there stays
    if existing:
        assert os.listdir(dest) == []
    disk.free()
    assert engine.project_storage(PROJECT) == before and serving(engine)
    # With room again the same move succeeds.
    assert engine.move_project_storage(PROJECT, dest).location == str(dest.resolve())
    assert serving(engine)


def test_the_vector_index_on_a_full_disk_is_storage_unavailable(disk: FullDisk) -> None:
    factory = usearch_index.UsearchIndexFactory()
    ids = [f"u{i}" for i in range(200)]
    vectors = [[float((i * j) % 7) + 1.0 for j in range(64)] for i in range(200)]
    disk.fill()
    with pytest.raises(StorageUnavailable) as caught:
        factory.build(disk.directory / "vectors", ids, vectors)
    assert caught.value.details["path"] == str(disk.directory / "vectors")
    assert caught.value.details["errno"] == "ENOSPC" and "vector index" in caught.value.message
    disk.free()
    factory.build(disk.directory / "vectors", ids, vectors)
    assert factory.open(disk.directory / "vectors").search(vectors[3], 1)[0][0] == "u3"


def test_a_full_disk_while_a_reindex_saves_its_vectors(
    home: tuple[Path, Engine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected at the vector index's file writes: on a really full disk the (stand-in) lexical
    index, built first, would fail first."""
    _, engine = home
    current = engine.catalog.current_generation(PROJECT)
    write_memory(tmp_path / "memory", 2)
    real_write = usearch_index.write_private

    def full(path: Path, data: bytes) -> None:
        raise enospc(path)

    monkeypatch.setattr(usearch_index, "write_private", full)
    with pytest.raises(StorageUnavailable) as caught:
        engine.index(PROJECT)

    gens = engine.generations.generations_dir(PROJECT)
    assert Path(caught.value.details["path"]).parent.parent == gens, caught.value.details
    assert caught.value.details["errno"] == "ENOSPC" and "vector index" in caught.value.message
    assert engine.catalog.current_generation(PROJECT) == current and serving(engine)
    assert [n for n in os.listdir(gens) if n.startswith(".staging-")] == []  # the half build is gone
    monkeypatch.setattr(usearch_index, "write_private", real_write)
    assert engine.index(PROJECT).status == "built"


class Paused:
    """Holds one call of ``function`` at its start until released (never a sleep)."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.go = threading.Event()

    def wrap(self, function: Any) -> Any:
        def paused(*args: Any, **kwargs: Any) -> Any:
            if not self.reached.is_set():
                self.reached.set()
                assert self.go.wait(60)
            return function(*args, **kwargs)

        return paused


def in_thread(call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = call()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


@contextlib.contextmanager
def held_in_thread(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, call: Any) -> Iterator[dict[str, Any]]:
    """Runs ``call`` in a thread held at its first call of ``owner.name`` for the body of the
    ``with`` (which gets the thread's outcome), then lets it finish and joins it."""
    pause = Paused()
    monkeypatch.setattr(owner, name, pause.wrap(getattr(owner, name)))
    thread, out = in_thread(call)
    try:
        assert pause.reached.wait(60)
        yield out
    finally:
        pause.go.set()
        thread.join(60)


def test_two_moves_at_once_the_second_is_refused(
    home: tuple[Path, Engine], other: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, engine = home
    first_move = functools.partial(engine.move_project_storage, PROJECT, tmp_path / "first")
    with held_in_thread(monkeypatch, generation_store, "_copy_file", first_move) as first:
        for call in (
            lambda: other.move_project_storage(PROJECT, tmp_path / "second"),
            lambda: other.move_project_storage(PROJECT, tmp_path / "first"),  # the very same place
            lambda: other.clear_project_storage(PROJECT),
        ):
            with pytest.raises(StorageUnavailable) as busy:
                call()
            assert busy.value.details["reason"] == "busy", busy.value.message
    assert "error" not in first, first
    assert first["result"].location == str((tmp_path / "first").resolve())
    assert not (tmp_path / "second").exists()
    assert other.project_storage(PROJECT) == first["result"] and serving(other)
    # Once the first is done, a move works again, from where the first put it.
    assert other.move_project_storage(PROJECT, tmp_path / "second").location == str((tmp_path / "second").resolve())
    assert not (tmp_path / "first").exists()


def test_an_index_waits_for_a_move_and_builds_at_the_new_place(
    home: tuple[Path, Engine], other: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, engine = home
    write_memory(tmp_path / "memory", 3)
    move = functools.partial(engine.move_project_storage, PROJECT, tmp_path / "store")
    with held_in_thread(monkeypatch, generation_store, "_copy_file", move) as moved:
        indexer, indexed = in_thread(lambda: other.index(PROJECT))
    indexer.join(60)
    assert "error" not in moved and "error" not in indexed, (moved, indexed)
    assert indexed["result"].status == "built"
    current = other.catalog.current_generation(PROJECT)
    assert current is not None and Path(current.directory).is_relative_to((tmp_path / "store").resolve())
    assert Path(current.directory).is_dir() and serving(other)
    assert not HomeLayout.at(root).project_dir(PROJECT).exists()


def test_a_move_while_the_project_indexes_is_refused(
    home: tuple[Path, Engine], other: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, engine = home
    write_memory(tmp_path / "memory", 4)
    factory = usearch_index.UsearchIndexFactory
    with held_in_thread(monkeypatch, factory, "build", lambda: other.index(PROJECT)) as indexed:  # a build under way
        with pytest.raises(StorageUnavailable) as busy:
            engine.move_project_storage(PROJECT, tmp_path / "store")
        assert busy.value.details["reason"] == "busy" and "index" in busy.value.message
        assert not (tmp_path / "store").exists()
    assert indexed["result"].status == "built"
    assert engine.move_project_storage(PROJECT, tmp_path / "store").generations
    assert serving(engine)


def test_a_move_between_reading_the_pointer_and_opening_it_never_fails_an_activation(
    home: tuple[Path, Engine], other: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in the jobs benchmark: a daemon job moved the storage (another process) after an
    activation had read the old pointer and before it opened the generation, whose folder the
    move then deleted: ``generation_corrupted`` (``lost lexical/_0.fdx``) reached the agent."""
    _, engine = home
    old = other.catalog.current_generation(PROJECT)
    assert old is not None
    verify = other.generations.verify
    opened: list[Path] = []

    def moved_meanwhile(directory: Path) -> None:
        if not opened:  # the first open: the move lands between the pointer's read and this
            engine.move_project_storage(PROJECT, tmp_path / "moved")
        opened.append(Path(directory))
        verify(directory)

    monkeypatch.setattr(other.generations, "verify", moved_meanwhile)
    activation = other.activate(PROJECT, QUERIES[0])  # `other` has nothing open yet: a cold open
    assert activation.response.fragments
    assert opened[0] == Path(old.directory) and not opened[0].exists()
    assert opened[-1].is_relative_to((tmp_path / "moved").resolve()), opened
    detail = other.get_run(activation.response.run_id)
    assert detail.summary.status == "succeeded" and detail.summary.index_revision == old.index_revision


def test_a_generation_that_fails_to_open_where_the_pointer_stays_is_still_reported(
    home: tuple[Path, Engine], other: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retry above is for a pointer that moved: a generation damaged in place is not retried."""
    current = other.catalog.current_generation(PROJECT)
    assert current is not None
    calls: list[Path] = []

    def damaged(directory: Path) -> None:
        calls.append(Path(directory))
        raise GenerationCorrupted(f"generation {str(directory)!r} lost lexical/_0.fdx", directory=str(directory))

    monkeypatch.setattr(other.generations, "verify", damaged)
    with pytest.raises(RetrievalFailed) as failed:
        other.activate(PROJECT, QUERIES[0])
    assert failed.value.details["error_code"] == "generation_corrupted", failed.value.details
    assert calls == [Path(current.directory)]
