"""Project Local Storage management and ``project remove --purge`` with the real adapters:
apsw ``local.db``, the sealed generation store, Lucene, usearch, MiniLM (brief §6).

Moving or clearing a project's Local Storage must keep every Run, Case and blob; a failed move
leaves the old location serving; ``--purge`` removes exactly the project's cases and Runs.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.adapters.files.generation_store import FileGenerationStore
from memory_core.adapters.sqlite import SqliteCatalog, open_database
from memory_core.adapters.system.home import HomeLayout
from memory_core.domain.errors import (
    GenerationCorrupted,
    InvalidStorageLocation,
    ProjectNotFound,
    ProjectNotIndexed,
    StorageUnavailable,
)
from memory_core.domain.model import Layer, Project, Source
from memory_core.entrypoints.bootstrap import bootstrap
from memory_core.runs.records import RunFilter
from memory_core.services.engine import Engine

pytestmark = pytest.mark.slow
QUERY = "how do I roll back a deploy?"


def write_notes(root: Path, extra: str) -> Path:
    (root / "runbooks").mkdir(parents=True, exist_ok=True)
    (root / "runbooks" / "deploy.md").write_text(
        "# Deploy runbook\n\nDeploy with helm upgrade --atomic.\n\n## Rollback\n\nRoll back with helm rollback.\n"
    )
    (root / f"{extra}.md").write_text(f"# {extra}\n\nOnly the {extra} project knows this.\n")
    return root


def blob_files(home: Path) -> dict[str, bytes]:
    blobs = HomeLayout.at(home).blobs_dir
    return {p.name: p.read_bytes() for p in blobs.rglob("*") if p.is_file()}


def history(engine: Engine, project: str | None = None) -> dict[str, tuple[str, bool]]:
    page = engine.list_runs(RunFilter(project_id=project), limit=500)
    return {r.run_id: (r.status, r.pinned) for r in page.runs}


def age_blobs(home: Path) -> None:
    """Older than the GC grace period, so Clear History may collect what nothing references."""
    past = time.time() - 7200
    for p in HomeLayout.at(home).blobs_dir.rglob("*"):
        if p.is_file():
            os.utime(p, (past, past))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Engine]]:
    base = tmp_path_factory.mktemp("storage")
    engine = bootstrap(base / "home")
    for name in ("alpha", "beta"):
        engine.add_project(name, [Source(str(write_notes(base / name, name)), Layer.PROJECT)])
        engine.index(name)
    yield base, engine
    engine.close()


def snapshot(engine: Engine, home: Path) -> tuple[object, ...]:
    cases = engine.evaluations().list_cases()
    return (
        history(engine),
        [(c.case_id, c.corpus_id, c.trace_hash, c.judgment_version) for c in cases],
        blob_files(home),
        [engine.get_run(run_id) for run_id in sorted(history(engine))],
    )


def test_move_keeps_runs_cases_and_blobs_and_serves_from_the_new_place(
    home: tuple[Path, Engine], tmp_path: Path
) -> None:
    base, engine = home
    case = engine.create_evaluation_case(engine.activate("alpha", QUERY).response.run_id or "")
    (base / "alpha" / "glossary.md").write_text("# Glossary\n\nA ledger is a book of accounts.\n")
    assert engine.index("alpha").status == "built"  # a previous generation too, which moves along
    first = engine.activate("alpha", QUERY).response
    before = snapshot(engine, base / "home")
    old = Path(engine.project_storage("alpha").location)
    assert old == HomeLayout.at(base / "home").projects_dir / "alpha"

    dest = tmp_path / "elsewhere" / "alpha-store"
    moved = engine.move_project_storage("alpha", dest)

    assert moved.location == str(dest.resolve()) and not moved.default_location
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    assert {g.role for g in moved.generations} == {"current", "previous"}
    assert all(Path(g.directory).is_relative_to(dest.resolve()) for g in moved.generations)
    assert not old.exists()  # the old copy is gone once the catalog points at the new one
    current = engine.catalog.current_generation("alpha")
    assert current is not None and Path(current.directory).is_relative_to(dest.resolve())
    assert snapshot(engine, base / "home") == before  # Runs, Cases, blobs: untouched
    again = engine.activate("alpha", QUERY).response
    assert [f.unit_id for f in again.fragments] == [f.unit_id for f in first.fragments]
    assert engine.evaluation_report("alpha").cases >= 1
    assert engine.evaluations().get_case(case.case_id) == case

    # A new index publishes at the new place; another process (a new engine) finds it there.
    engine.index("alpha", force=True)
    fresh = bootstrap(base / "home")
    try:
        assert fresh.project_storage("alpha").location == str(dest.resolve())
        assert fresh.activate("alpha", QUERY).response.fragments
    finally:
        fresh.close()

    # And back to the default place.
    back = engine.move_project_storage("alpha", old)
    assert back.default_location and back.location == str(old)
    assert not dest.exists()
    assert engine.activate("alpha", QUERY).response.fragments


def test_a_failed_move_leaves_the_old_location_serving(
    home: tuple[Path, Engine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, engine = home
    engine.activate("beta", QUERY)
    before = engine.project_storage("beta")
    dest = tmp_path / "new"

    def fail(*_: object, **__: object) -> None:
        raise StorageUnavailable("disk full on purpose")

    monkeypatch.setattr(engine.catalog, "set_storage_location", fail)
    with pytest.raises(StorageUnavailable):
        engine.move_project_storage("beta", dest)
    monkeypatch.undo()
    assert engine.project_storage("beta") == before
    assert not dest.exists()  # the copies made for the move, and the folder it made, are removed
    assert engine.activate("beta", QUERY).response.fragments

    # A damaged generation is not carried along: the move refuses, the old place still answers
    # (and says it is damaged, as before the move).
    current = engine.catalog.current_generation("beta")
    assert current is not None
    units = Path(current.directory) / "units.jsonl"
    good = units.read_bytes()
    units.write_bytes(good + b"\n")
    try:
        with pytest.raises(GenerationCorrupted):
            engine.move_project_storage("beta", dest)
        assert engine.project_storage("beta").location == before.location
        assert not (dest / "generations").exists()
    finally:
        units.write_bytes(good)


def test_move_refuses_unusable_destinations(home: tuple[Path, Engine], tmp_path: Path) -> None:
    base, engine = home
    projects = HomeLayout.at(base / "home").projects_dir
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    cases = {
        "not_empty": full,
        "not_a_directory": a_file,
        "overlaps": projects / "beta" / "inside",  # inside another project's storage
        "same_location": projects / "beta",
        "overlaps ": base / "alpha" / "index",  # inside a memory source
        # mkdir under /sys is refused even to root: a directory nobody may write.
        "not_writable": Path("/sys/memcore-storage-test"),
    }
    for reason, dest in cases.items():
        with pytest.raises(InvalidStorageLocation) as caught:
            engine.move_project_storage("beta", dest)
        assert caught.value.details["reason"] == reason.strip(), (reason, caught.value.message)
    assert (full / "keep.txt").read_text() == "mine" and sorted(os.listdir(full)) == ["keep.txt"]
    assert engine.project_storage("beta").default_location
    with pytest.raises(ProjectNotFound):
        engine.move_project_storage("nope", tmp_path / "x")


def test_clear_keeps_runs_cases_and_blobs_and_the_next_index_rebuilds(home: tuple[Path, Engine]) -> None:
    base, engine = home
    run = engine.activate("beta", QUERY).response
    engine.create_evaluation_case(run.run_id or "")
    before = snapshot(engine, base / "home")

    cleared = engine.clear_project_storage("beta")

    assert cleared.generations == () and cleared.size_bytes == 0
    assert engine.catalog.current_generation("beta") is None
    assert snapshot(engine, base / "home") == before
    # Meanwhile: project_not_indexed, recorded as a failed Run (as for a project never indexed).
    with pytest.raises(ProjectNotIndexed) as caught:
        engine.activate("beta", QUERY)
    failed = engine.get_run(caught.value.details["run_id"]).summary
    assert (failed.status, failed.error_code) == ("failed", "project_not_indexed")
    report = engine.index("beta")
    assert report.status == "built" and report.embedded == 0  # every vector from the cache
    assert [f.unit_id for f in engine.activate("beta", QUERY).response.fragments] == [
        f.unit_id for f in run.fragments
    ]
    assert engine.project_storage("beta").generations[0].role == "current"


def test_remove_keeps_cases_and_purge_removes_exactly_the_projects(home: tuple[Path, Engine]) -> None:
    base, engine = home
    for name in ("gamma", "delta"):
        engine.add_project(name, [Source(str(write_notes(base / name, name)), Layer.PROJECT)])
        engine.index(name)
        for query in (QUERY, f"what does {name} know?"):
            engine.activate(name, query)
        engine.create_evaluation_case(engine.activate(name, QUERY).response.run_id or "")
    gamma_cases = [c.case_id for c in engine.evaluations().list_cases("gamma")]
    others = {k: v for k, v in history(engine).items() if k not in history(engine, "gamma")}
    other_cases = [c for c in engine.evaluations().list_cases() if c.project_id != "gamma"]
    other_blobs = {d for c in other_cases for d in engine.evaluations().get_corpus(c.corpus_id).digests()}
    age_blobs(base / "home")

    removal = engine.remove_project("gamma", purge=True)

    assert (removal.purged, removal.deleted_cases, removal.kept_pinned) == (True, len(gamma_cases), 0)
    assert removal.deleted_runs == 3 and removal.deleted_blobs >= 1
    assert history(engine, "gamma") == {}
    assert engine.evaluations().list_cases("gamma") == []
    assert history(engine) == others  # nothing of other projects
    assert engine.evaluations().list_cases() == other_cases
    left = blob_files(base / "home")
    assert other_blobs <= set(left)
    assert not any("gamma project knows" in body.decode("utf-8", "replace") for body in left.values())
    assert not (HomeLayout.at(base / "home").projects_dir / "gamma").exists()
    with pytest.raises(ProjectNotFound):
        engine.show_project("gamma")

    # Without --purge: unpinned Runs and Local Storage go, the case and its pinned Run stay.
    delta_case = engine.evaluations().list_cases("delta")[0]
    kept = engine.remove_project("delta")
    assert (kept.purged, kept.deleted_runs, kept.kept_pinned, kept.deleted_cases) == (False, 2, 1, 0)
    assert history(engine, "delta") == {delta_case.source_run_id: ("succeeded", True)}
    assert engine.evaluations().get_case(delta_case.case_id) == delta_case
    assert engine.evaluation_report(case_ids=[delta_case.case_id]).cases == 1


def test_migration_adds_the_storage_column_without_losing_projects(tmp_path: Path) -> None:
    path = tmp_path / "local.db"
    conn = open_database(path, target_version=4)
    catalog = SqliteCatalog(conn)
    catalog.add_project(Project("old", (Source("/src", Layer.PROJECT),), "2025-01-01T00:00:00.000Z"))
    conn.close()
    catalog = SqliteCatalog(open_database(path))
    try:
        assert catalog.get_project("old").sources == (Source("/src", Layer.PROJECT),)
        assert catalog.storage_location("old") is None
        store = FileGenerationStore(tmp_path / "projects", locate=catalog.storage_location)
        assert store.location("old") == tmp_path / "projects" / "old"
        catalog.set_storage_location("old", str(tmp_path / "moved"), {})
        assert store.location("old") == tmp_path / "moved"
        assert store.generations_dir("old") == tmp_path / "moved" / "generations"
    finally:
        catalog.close()
