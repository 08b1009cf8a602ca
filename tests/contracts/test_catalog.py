"""Catalog contract: SqliteCatalog and InMemoryCatalog behave the same."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.adapters.files.filesystem_sources import FileStamp
from memory_core.adapters.in_memory.storage import InMemoryCatalog
from memory_core.adapters.sqlite import SqliteCatalog, open_database
from memory_core.domain.errors import InvalidProjectName, InvalidRequest, ProjectExists, ProjectNotFound
from memory_core.domain.model import (
    EffectiveMemory,
    Generation,
    IndexRevisions,
    Layer,
    ManifestEntry,
    Project,
    Source,
)

REVISIONS = IndexRevisions(parser="p1", chunker="c1", embedding_model="e1", lexical="l1", vector="v1")
H = "ab" * 32


def project(pid: str = "alpha", n_sources: int = 2) -> Project:
    layers = [Layer.ORGANIZATION, Layer.PROJECT, Layer.LOCAL]
    sources = tuple(Source(f"/src/{pid}/{i}", layers[i % 3]) for i in range(n_sources))
    return Project(pid, sources, "2025-01-01T00:00:00.000Z")


def generation(pid: str, rev: str, units: int = 3) -> Generation:
    return Generation(
        project_id=pid,
        index_revision=rev,
        effective_memory_hash=H,
        unit_count=units,
        resource_count=1,
        revisions=REVISIONS,
        created_at="2025-01-02T00:00:00.000Z",
        directory=f"/home/projects/{pid}/generations/{rev}",
    )


def make_sqlite(tmp_path=None) -> SqliteCatalog:
    return SqliteCatalog(open_database(":memory:" if tmp_path is None else tmp_path / "local.db"))


@pytest.fixture(params=["sqlite", "memory"])
def catalog(request, tmp_path) -> Iterator[SqliteCatalog | InMemoryCatalog]:
    cat = make_sqlite(tmp_path) if request.param == "sqlite" else InMemoryCatalog()
    yield cat
    cat.close()


FACTORIES: dict[str, Callable[[], SqliteCatalog | InMemoryCatalog]] = {
    "sqlite": make_sqlite,
    "memory": InMemoryCatalog,
}


def test_add_then_get_round_trips_sources_in_order(catalog):
    p = project(n_sources=3)
    catalog.add_project(p)
    assert catalog.get_project("alpha") == p
    assert [s.layer for s in catalog.get_project("alpha").sources] == [
        Layer.ORGANIZATION,
        Layer.PROJECT,
        Layer.LOCAL,
    ]


def test_project_without_sources(catalog):
    catalog.add_project(project(n_sources=0))
    assert catalog.get_project("alpha").sources == ()


def test_list_projects_is_sorted_by_id(catalog):
    for pid in ["zeta", "alpha", "mid"]:
        catalog.add_project(project(pid))
    assert [p.project_id for p in catalog.list_projects()] == ["alpha", "mid", "zeta"]
    assert catalog.list_projects()[0] == project("alpha")


def test_duplicate_project_is_rejected_and_original_kept(catalog):
    catalog.add_project(project(n_sources=1))
    with pytest.raises(ProjectExists):
        catalog.add_project(project(n_sources=3))
    assert catalog.get_project("alpha") == project(n_sources=1)


def test_invalid_project_id_is_rejected(catalog):
    with pytest.raises(InvalidProjectName):
        catalog.add_project(project("../Evil"))
    assert catalog.list_projects() == []


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.get_project("nope"),
        lambda c: c.remove_project("nope"),
        lambda c: c.current_generation("nope"),
        lambda c: c.previous_generation("nope"),
        lambda c: c.set_current_generation(generation("nope", "r1")),
    ],
    ids=["get", "remove", "current", "previous", "set_current"],
)
def test_unknown_project_raises_project_not_found(catalog, call):
    with pytest.raises(ProjectNotFound) as info:
        call(catalog)
    assert info.value.code == "project_not_found"
    assert info.value.details["known_projects"] == [] and "no project exists yet" in info.value.message


@pytest.mark.parametrize(
    "call", [lambda c: c.get_project("nope"), lambda c: c.current_generation("nope")], ids=["get", "current"]
)
def test_project_not_found_names_the_known_projects(catalog, call):
    """So an agent that guessed the id can correct it (issue 19)."""
    for pid in ("beta", "alpha"):
        catalog.add_project(project(pid))
    with pytest.raises(ProjectNotFound) as info:
        call(catalog)
    assert info.value.details == {"project": "nope", "known_projects": ["alpha", "beta"]}
    assert info.value.message == "unknown project 'nope'; known projects: alpha, beta"


def test_new_project_has_no_generation(catalog):
    catalog.add_project(project())
    assert catalog.current_generation("alpha") is None
    assert catalog.previous_generation("alpha") is None


def test_set_current_moves_old_current_to_previous(catalog):
    catalog.add_project(project())
    catalog.set_current_generation(generation("alpha", "r1"))
    assert catalog.current_generation("alpha") == generation("alpha", "r1")
    assert catalog.previous_generation("alpha") is None
    catalog.set_current_generation(generation("alpha", "r2"))
    assert catalog.current_generation("alpha") == generation("alpha", "r2")
    assert catalog.previous_generation("alpha") == generation("alpha", "r1")
    catalog.set_current_generation(generation("alpha", "r3"))
    assert catalog.current_generation("alpha").index_revision == "r3"
    assert catalog.previous_generation("alpha").index_revision == "r2"


def test_setting_the_same_generation_again_keeps_previous(catalog):
    catalog.add_project(project())
    catalog.set_current_generation(generation("alpha", "r1"))
    catalog.set_current_generation(generation("alpha", "r2"))
    catalog.set_current_generation(generation("alpha", "r2", units=9))
    assert catalog.current_generation("alpha") == generation("alpha", "r2", units=9)
    assert catalog.previous_generation("alpha").index_revision == "r1"


def test_rolling_back_to_previous_swaps_them(catalog):
    catalog.add_project(project())
    catalog.set_current_generation(generation("alpha", "r1"))
    catalog.set_current_generation(generation("alpha", "r2"))
    catalog.set_current_generation(generation("alpha", "r1"))
    assert catalog.current_generation("alpha").index_revision == "r1"
    assert catalog.previous_generation("alpha").index_revision == "r2"


def test_projects_have_independent_pointers(catalog):
    catalog.add_project(project("alpha"))
    catalog.add_project(project("beta"))
    catalog.set_current_generation(generation("alpha", "r1"))
    catalog.set_current_generation(generation("beta", "r1", units=7))
    assert catalog.current_generation("alpha").unit_count == 3
    assert catalog.current_generation("beta").unit_count == 7


def test_remove_project_forgets_sources_and_generations(catalog):
    catalog.add_project(project("alpha"))
    catalog.add_project(project("beta"))
    catalog.set_current_generation(generation("alpha", "r1"))
    catalog.remove_project("alpha")
    with pytest.raises(ProjectNotFound):
        catalog.get_project("alpha")
    assert [p.project_id for p in catalog.list_projects()] == ["beta"]
    catalog.add_project(project("alpha", n_sources=1))
    assert catalog.current_generation("alpha") is None
    assert catalog.get_project("alpha").sources == project("alpha", n_sources=1).sources


def _memory(n: int) -> EffectiveMemory:
    entries = [
        ManifestEntry(i, f"doc{i}.md", Layer.PROJECT, f"file:///s/doc{i}.md", H, 10 + i, "text/markdown")
        for i in range(n)
    ]
    return EffectiveMemory.from_entries("alpha", entries)


def test_manifest_is_stored_once_under_its_hash(catalog):
    memory = _memory(3)
    assert catalog.put_manifest(memory) == memory.hash
    assert catalog.put_manifest(memory) == memory.hash
    assert catalog.get_manifest(memory.hash) == memory.entries
    assert catalog.get_manifest("00" * 32) is None


def test_manifest_with_a_wrong_hash_is_rejected(catalog):
    memory = _memory(2)
    forged = EffectiveMemory("alpha", memory.entries, "00" * 32)
    with pytest.raises(InvalidRequest):
        catalog.put_manifest(forged)
    assert catalog.get_manifest("00" * 32) is None


def test_file_hash_cache_hits_only_on_the_whole_stamp(catalog):
    stamp = FileStamp(size=10, mtime_ns=111, ctime_ns=121, inode=7)
    assert catalog.get_file_hash("/a.md", stamp) is None
    catalog.put_file_hashes([("/a.md", stamp, H), ("/b.md", FileStamp(5, 222, 232, 8), "cd" * 32)])
    assert catalog.get_file_hash("/a.md", stamp) == H
    # Each part of the stamp alone makes a miss: size, mtime, ctime (any content write), inode.
    for changed in (stamp._replace(size=11), stamp._replace(mtime_ns=112), stamp._replace(ctime_ns=122),
                    stamp._replace(inode=9)):  # fmt: skip
        assert catalog.get_file_hash("/a.md", changed) is None
    newer = FileStamp(11, 113, 123, 7)
    catalog.put_file_hashes([("/a.md", newer, "ef" * 32)])
    assert catalog.get_file_hash("/a.md", newer) == "ef" * 32
    assert catalog.get_file_hash("/a.md", stamp) is None
    catalog.put_file_hashes([])


@pytest.mark.parametrize("kind", FACTORIES)
@settings(max_examples=40, deadline=None)
@given(revs=st.lists(st.sampled_from(["r1", "r2", "r3", "r4"]), min_size=1, max_size=12))
def test_pointer_follows_a_simple_model(kind, revs):
    catalog = FACTORIES[kind]()
    catalog.add_project(project())
    current: str | None = None
    previous: str | None = None
    for rev in revs:
        catalog.set_current_generation(generation("alpha", rev))
        if rev != current:
            previous, current = current, rev
        assert catalog.current_generation("alpha").index_revision == current
        got_previous = catalog.previous_generation("alpha")
        assert (got_previous.index_revision if got_previous else None) == previous
    catalog.close()


# -- SqliteCatalog only ----------------------------------------------------------------------


def test_sqlite_catalog_persists_across_reopen(tmp_path):
    cat = make_sqlite(tmp_path)
    cat.add_project(project())
    cat.set_current_generation(generation("alpha", "r1"))
    cat.close()
    cat = make_sqlite(tmp_path)
    assert cat.get_project("alpha") == project()
    assert cat.current_generation("alpha") == generation("alpha", "r1")
    cat.close()


def test_set_current_generation_is_one_transaction(tmp_path):
    cat = make_sqlite(tmp_path)
    cat.add_project(project())
    cat.set_current_generation(generation("alpha", "r1"))
    # Make the pointer move fail after the generation row has been written.
    cat.connection.execute(
        "CREATE TRIGGER no_pointer BEFORE UPDATE ON project_generation_pointers "
        "BEGIN SELECT RAISE(ABORT, 'pointer move refused'); END;"
        "CREATE TRIGGER no_pointer_insert BEFORE INSERT ON project_generation_pointers "
        "BEGIN SELECT RAISE(ABORT, 'pointer move refused'); END;"
    )
    with pytest.raises(apsw.ConstraintError):
        cat.set_current_generation(generation("alpha", "r2"))
    assert cat.current_generation("alpha").index_revision == "r1"
    rows = cat.connection.execute("SELECT index_revision FROM generations").fetchall()
    assert rows == [("r1",)]
    cat.close()


def test_generations_neither_current_nor_previous_are_dropped(tmp_path):
    cat = make_sqlite(tmp_path)
    cat.add_project(project())
    for rev in ["r1", "r2", "r3"]:
        cat.set_current_generation(generation("alpha", rev))
    rows = cat.connection.execute(
        "SELECT index_revision, manifest_hash FROM generations ORDER BY index_revision"
    ).fetchall()
    assert rows == [("r2", H), ("r3", H)]
    cat.close()


def test_remove_project_cascades_in_sqlite(tmp_path):
    cat = make_sqlite(tmp_path)
    cat.add_project(project())
    cat.set_current_generation(generation("alpha", "r1"))
    cat.remove_project("alpha")
    for table in ["project_sources", "generations", "project_generation_pointers"]:
        assert cat.connection.execute(f"SELECT count(*) FROM {table}").fetchall() == [(0,)]
    cat.close()
