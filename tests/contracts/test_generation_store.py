"""GenerationStore contract: FileGenerationStore and InMemoryGenerationStore behave the same."""

from __future__ import annotations

import itertools
import json
import os
import stat
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.adapters.files.generation_store import SEALED, TRASH_PREFIX, UNITS, FileGenerationStore
from memory_core.adapters.in_memory.storage import InMemoryGenerationStore
from memory_core.domain.errors import GenerationCorrupted, InvalidProjectName, InvalidRequest
from memory_core.domain.model import Unit
from tests.units import whole_text_unit


def unit(resource_id: str, ordinal: int, text: str, heading: tuple[str, ...] = ("Title",)) -> Unit:
    return whole_text_unit(resource_id, ordinal, text, heading, resource_hash="ab" * 32)


UNITS_A = [unit("a.md", 0, "# Title\nalpha"), unit("a.md", 1, "naïve ☃ text\nline two"), unit("b.md", 0, "")]
UNITS_B = [unit("c.md", 0, "other")]


@pytest.fixture(params=["file", "memory"])
def store(request, tmp_path):
    return FileGenerationStore(tmp_path / "projects") if request.param == "file" else InMemoryGenerationStore()


def publish(store, pid: str, rev: str, units) -> object:
    staging = store.stage(pid)
    store.write_units(staging, units)
    return store.publish(pid, staging, rev)


def test_stage_gives_distinct_directories(store):
    first, second = store.stage("alpha"), store.stage("alpha")
    assert first != second
    assert first.parent == second.parent == store.generations_dir("alpha")


def test_publish_then_load_round_trips_units(store):
    directory = publish(store, "alpha", "rev1", UNITS_A)
    assert directory == store.generation_dir("alpha", "rev1")
    assert store.load_units(directory) == UNITS_A
    store.verify(directory)
    assert store.list_generations("alpha") == ["rev1"]


def test_staging_is_not_loadable(store):
    staging = store.stage("alpha")
    store.write_units(staging, UNITS_A)
    with pytest.raises(GenerationCorrupted):
        store.load_units(staging)


def test_unknown_directory_is_not_loadable(store):
    with pytest.raises(GenerationCorrupted):
        store.load_units(store.generation_dir("alpha", "never"))


def test_publishing_an_existing_revision_keeps_the_first(store):
    first = publish(store, "alpha", "rev1", UNITS_A)
    second = publish(store, "alpha", "rev1", UNITS_B)
    assert first == second
    assert store.load_units(first) == UNITS_A
    assert store.list_generations("alpha") == ["rev1"]


def test_publish_without_units_is_refused(store):
    staging = store.stage("alpha")
    with pytest.raises(GenerationCorrupted):
        store.publish("alpha", staging, "rev1")


def test_publish_of_a_discarded_staging_is_refused(store):
    staging = store.stage("alpha")
    store.write_units(staging, UNITS_A)
    store.discard(staging)
    store.discard(staging)
    with pytest.raises(GenerationCorrupted):
        store.publish("alpha", staging, "rev1")
    assert store.list_generations("alpha") == []


def test_publish_checks_the_staging_belongs_to_the_project(store):
    staging = store.stage("alpha")
    store.write_units(staging, UNITS_A)
    with pytest.raises(InvalidRequest):
        store.publish("beta", staging, "rev1")


@pytest.mark.parametrize("bad", ["../escape", ".hidden", "", "a/b"])
def test_invalid_index_revision_is_rejected(store, bad):
    staging = store.stage("alpha")
    store.write_units(staging, UNITS_A)
    with pytest.raises(InvalidRequest):
        store.publish("alpha", staging, bad)


def test_invalid_project_id_is_rejected(store):
    with pytest.raises(InvalidProjectName):
        store.stage("../Evil")


def test_discard_refuses_a_non_staging_directory(store):
    directory = publish(store, "alpha", "rev1", UNITS_A)
    with pytest.raises(InvalidRequest):
        store.discard(directory)
    assert store.load_units(directory) == UNITS_A


def test_prune_keeps_only_the_given_revisions(store):
    dirs = {rev: publish(store, "alpha", rev, UNITS_A) for rev in ["rev1", "rev2", "rev3"]}
    other = publish(store, "beta", "rev1", UNITS_B)
    store.prune("alpha", {"rev2", "rev3"})
    assert store.list_generations("alpha") == ["rev2", "rev3"]
    with pytest.raises(GenerationCorrupted):
        store.load_units(dirs["rev1"])
    assert store.load_units(dirs["rev3"]) == UNITS_A
    assert store.load_units(other) == UNITS_B
    store.prune("nothing-here", set())


def test_remove_project_drops_its_storage_only(store):
    gone = publish(store, "alpha", "rev1", UNITS_A)
    kept = publish(store, "beta", "rev1", UNITS_B)
    store.remove_project("alpha")
    store.remove_project("alpha")
    with pytest.raises(GenerationCorrupted):
        store.load_units(gone)
    assert store.list_generations("alpha") == []
    assert store.load_units(kept) == UNITS_B
    assert store.load_units(publish(store, "alpha", "rev1", UNITS_B)) == UNITS_B


_texts = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=40)
_units = st.lists(
    st.builds(
        lambda i, t, h: unit(f"doc{i}.md", i, t, tuple(h)), st.integers(0, 99), _texts, st.lists(_texts, max_size=3)
    ),
    max_size=6,
)
_revisions = itertools.count()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(units=_units)
def test_units_round_trip_exactly(store, units):
    directory = publish(store, "alpha", f"rev{next(_revisions)}", units)
    assert store.load_units(directory) == units


# -- FileGenerationStore only -----------------------------------------------------------------


@pytest.fixture
def fstore(tmp_path):
    return FileGenerationStore(tmp_path / "projects")


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_published_generation_is_owner_only_and_sealed(fstore):
    staging = fstore.stage("alpha")
    fstore.write_units(staging, UNITS_A)
    (staging / "lexical").mkdir()
    (staging / "lexical" / "segments_1").write_bytes(b"lucene")
    directory = fstore.publish("alpha", staging, "rev1")
    assert not staging.exists()
    assert mode(directory) == 0o700
    assert mode(directory / UNITS) == 0o600
    assert mode(directory / SEALED) == 0o600
    seal = json.loads((directory / SEALED).read_text())
    assert sorted(seal["files"]) == ["lexical/segments_1", UNITS]
    assert seal["index_revision"] == "rev1"


def test_verify_detects_a_changed_or_lost_index_file(fstore):
    staging = fstore.stage("alpha")
    fstore.write_units(staging, UNITS_A)
    (staging / "vectors.usearch").write_bytes(b"\x00\x01\x02\x03")
    directory = fstore.publish("alpha", staging, "rev1")
    fstore.verify(directory)
    (directory / "reader.lock").write_bytes(b"")  # files added after sealing are tolerated
    fstore.verify(directory)
    (directory / "vectors.usearch").write_bytes(b"\x00\x01\x02\x04")
    with pytest.raises(GenerationCorrupted, match="vectors.usearch"):
        fstore.verify(directory)
    (directory / "vectors.usearch").unlink()
    with pytest.raises(GenerationCorrupted, match="lost"):
        fstore.verify(directory)
    assert fstore.load_units(directory) == UNITS_A  # load_units checks units.jsonl only


def test_tampered_units_or_missing_seal_fail_to_load(fstore):
    directory = publish(fstore, "alpha", "rev1", UNITS_A)
    (directory / UNITS).write_bytes((directory / UNITS).read_bytes().replace(b"alpha", b"alpho"))
    with pytest.raises(GenerationCorrupted, match="seal"):
        fstore.load_units(directory)
    (directory / SEALED).unlink()
    with pytest.raises(GenerationCorrupted, match="not sealed"):
        fstore.load_units(directory)
    (directory / SEALED).write_text("{not json")
    with pytest.raises(GenerationCorrupted, match="unreadable"):
        fstore.load_units(directory)


def test_republishing_repairs_a_corrupted_generation(fstore):
    directory = publish(fstore, "alpha", "rev1", UNITS_A)
    (directory / UNITS).write_bytes(b"garbage\n")
    assert publish(fstore, "alpha", "rev1", UNITS_A) == directory
    assert fstore.load_units(directory) == UNITS_A
    assert [p.name for p in directory.parent.iterdir()] == ["rev1"]


def test_prune_removes_stale_staging_and_trash_but_not_fresh_staging(fstore):
    publish(fstore, "alpha", "rev1", UNITS_A)
    fresh = fstore.stage("alpha")
    stale = fstore.stage("alpha")
    old = time.time() - 2 * fstore.staging_ttl_s
    os.utime(stale, (old, old))
    trash = fstore.generations_dir("alpha") / f"{TRASH_PREFIX}leftover"
    (trash / "sub").mkdir(parents=True)
    fstore.prune("alpha", {"rev1"})
    assert sorted(p.name for p in fstore.generations_dir("alpha").iterdir()) == sorted(["rev1", fresh.name])


def test_remove_project_leaves_no_trace(fstore):
    publish(fstore, "alpha", "rev1", UNITS_A)
    fstore.stage("alpha")
    fstore.remove_project("alpha")
    assert list(fstore.root.iterdir()) == []
