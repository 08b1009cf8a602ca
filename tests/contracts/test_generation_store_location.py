"""GenerationStore contract, Local Storage location part: FileGenerationStore and
InMemoryGenerationStore follow the recorded location, copy generations all or nothing, and
remove a moved project's storage where it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.adapters.files.generation_store import UNITS, FileGenerationStore
from memory_core.adapters.in_memory.storage import InMemoryGenerationStore
from memory_core.adapters.system.home import HomeLayout
from memory_core.domain.errors import GenerationCorrupted, InvalidStorageLocation, StorageUnavailable
from tests.contracts.test_generation_store import UNITS_A, UNITS_B, publish


@pytest.fixture(params=["file", "memory"])
def located(request, tmp_path):
    """A store whose locations come from a dict, as from the catalog; and a place to move to."""
    where: dict[str, str] = {}
    if request.param == "file":
        store = FileGenerationStore(tmp_path / "projects", locate=where.get)
        elsewhere = tmp_path / "elsewhere"
    else:
        store = InMemoryGenerationStore(locate=where.get)
        elsewhere = Path("/in-memory/elsewhere")
    return store, where, elsewhere


def test_the_recorded_location_is_where_generations_go(located):
    store, where, elsewhere = located
    assert store.location("alpha") == store.default_location("alpha")
    where["alpha"] = str(elsewhere / "alpha")
    directory = publish(store, "alpha", "rev1", UNITS_A)
    assert directory == elsewhere / "alpha" / "generations" / "rev1"
    assert store.load_units(directory) == UNITS_A
    assert store.list_generations("alpha") == ["rev1"]
    total, per = store.usage("alpha")
    assert set(per) == {"rev1"} and total >= per["rev1"] > 0


def test_copy_then_switch_then_drop_the_old_copy(located):
    store, where, elsewhere = located
    old = {"rev1": publish(store, "alpha", "rev1", UNITS_A), "rev2": publish(store, "alpha", "rev2", UNITS_B)}
    old_place = store.location("alpha")
    dest = store.prepare_location("alpha", elsewhere / "alpha", taken=[])
    moved = store.copy_generations("alpha", old, dest)
    assert set(moved) == {"rev1", "rev2"}
    assert store.load_units(moved["rev2"]) == UNITS_B
    where["alpha"] = str(dest)  # what the catalog's transaction records
    store.remove_project("alpha", old_place)
    assert store.list_generations("alpha") == ["rev1", "rev2"]
    assert store.load_units(store.generation_dir("alpha", "rev1")) == UNITS_A
    store.remove_project("alpha")  # where it is now
    assert store.list_generations("alpha") == []


def test_refused_destinations(located):
    store, where, elsewhere = located
    publish(store, "alpha", "rev1", UNITS_A)
    publish(store, "beta", "rev1", UNITS_B)
    with pytest.raises(InvalidStorageLocation) as same:
        store.prepare_location("alpha", store.location("alpha"), taken=[])
    assert same.value.details["reason"] == "same_location"
    with pytest.raises(InvalidStorageLocation) as inside:
        store.prepare_location("alpha", store.location("beta") / "x", taken=[store.location("beta")])
    assert inside.value.details["reason"] == "overlaps"
    with pytest.raises(InvalidStorageLocation) as around:
        store.prepare_location("alpha", elsewhere, taken=[elsewhere / "source"])
    assert around.value.details["reason"] == "overlaps"


def test_a_file_store_refuses_a_non_empty_destination_and_copies_nothing_damaged(tmp_path):
    store = FileGenerationStore(tmp_path / "projects")
    directory = publish(store, "alpha", "rev1", UNITS_A)
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("mine")
    with pytest.raises(InvalidStorageLocation) as refused:
        store.prepare_location("alpha", full, taken=[])
    assert refused.value.details["reason"] == "not_empty" and (full / "x").read_text() == "mine"
    (directory / UNITS).write_bytes(b"tampered\n")
    dest = store.prepare_location("alpha", tmp_path / "new", taken=[])
    with pytest.raises(GenerationCorrupted):
        store.copy_generations("alpha", {"rev1": directory}, dest)
    assert not (dest / "generations").exists()  # no half copy left behind
    assert (directory / UNITS).read_bytes() == b"tampered\n"  # the original untouched


def test_a_failed_move_is_abandoned_and_gone_generations_are_told_apart(located):
    store, where, elsewhere = located
    rev1 = publish(store, "alpha", "rev1", UNITS_A)
    dest = store.prepare_location("alpha", elsewhere / "new" / "alpha", taken=[])
    moved = store.copy_generations("alpha", {"rev1": rev1}, dest)
    assert not store.gone(rev1) and not store.gone(moved["rev1"])
    store.abandon_location("alpha", dest)  # the catalog switch failed
    assert store.gone(moved["rev1"]) and not store.gone(rev1)
    assert store.load_units(rev1) == UNITS_A  # the original serves on
    assert store.gone(store.generation_dir("alpha", "never"))


def test_overlap_is_in_or_around_in_both_orders(located):
    store, _, elsewhere = located
    places = [elsewhere / "a", elsewhere / "b"]
    assert store.overlap(elsewhere / "a" / "x", places) == elsewhere / "a"
    assert store.overlap(elsewhere, places) == elsewhere / "a"
    assert store.overlap(elsewhere / "b", places) == elsewhere / "b"
    assert store.overlap(elsewhere / "c", places) is None
    assert store.overlap(elsewhere / "ab", places) is None  # a prefix of the name is not a parent


def test_a_file_store_keeps_moves_out_of_its_home_and_removes_only_what_it_made(tmp_path):
    layout = HomeLayout.at(tmp_path / "home")
    store = FileGenerationStore(layout.projects_dir, home=layout)
    publish(store, "alpha", "rev1", UNITS_A)
    for place in [*(f / "alpha" for f in layout.own_folders if f != layout.projects_dir), layout.root / "x"]:
        with pytest.raises(InvalidStorageLocation) as refused:
            store.prepare_location("alpha", place, taken=[])
        assert refused.value.details["reason"] == "in_home" and not place.exists()
    made = store.prepare_location("alpha", tmp_path / "a" / "b" / "c", taken=[])
    store.abandon_location("alpha", made)
    assert not (tmp_path / "a").exists()  # every folder the move made, deepest first
    (tmp_path / "mine").mkdir()
    given = store.prepare_location("alpha", tmp_path / "mine", taken=[])
    store.copy_generations("alpha", {"rev1": store.generation_dir("alpha", "rev1")}, given)
    store.abandon_location("alpha", given)
    assert (tmp_path / "mine").is_dir() and list((tmp_path / "mine").iterdir()) == []  # the user's stays


def test_a_file_store_moves_one_at_a_time_and_not_during_a_build(tmp_path):
    store = FileGenerationStore(tmp_path / "projects")
    other = FileGenerationStore(tmp_path / "projects")  # another process's store on the same home
    with store.relocating("alpha"):
        for busy in (lambda: other.relocating("alpha"), lambda: other.relocating("beta")):
            with pytest.raises(StorageUnavailable) as refused, busy():
                pass
            assert refused.value.details["reason"] == "busy"
    with store.building("alpha"), other.building("alpha"):  # builds share
        with pytest.raises(StorageUnavailable) as refused, other.relocating("alpha"):
            pass
        assert "index" in refused.value.message
        with other.relocating("beta"):  # another project's move is not held up
            pass
    with other.relocating("alpha"):  # all released
        pass
