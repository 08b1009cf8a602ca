"""ProfileStore contract: SqliteProfileStore and InMemoryProfileStore behave the same."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from memory_core.adapters.in_memory.profiles import InMemoryProfileStore
from memory_core.adapters.sqlite import SqliteCatalog, open_database
from memory_core.adapters.sqlite.profiles import SqliteProfileStore
from memory_core.domain.errors import ProjectNotFound
from memory_core.domain.evaluation_errors import TuningNotFound
from memory_core.domain.model import Project
from memory_core.evaluation.tuning import TuneMetrics, TuneResult
from tests.contracts.store_world import World, store_world


@pytest.fixture(params=["sqlite", "memory"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    clock = iter(f"2026-01-01T00:00:{s:02d}.000Z" for s in range(60)).__next__
    yield from store_world(
        request.param,
        tmp_path,
        lambda connection: SqliteProfileStore(connection, now=clock),
        lambda get_project: InMemoryProfileStore(get_project, now=clock),
        ("alpha",),
    )


def tuning(tune_id: str, created_at: str, project_id: str = "alpha") -> TuneResult:
    metrics = TuneMetrics(0.5, 0.6, 0.7)
    setting = {"rrf_k": 30, "rerank_depth": 20, "normalisation": "max", "cosine_floor": 0.1, "alpha": 0.4,
               "exact_bonus": 1.0}  # fmt: skip
    return TuneResult(
        tune_id=tune_id, project_id=project_id, created_at=created_at, level="resource", folds=5, cases=30,
        excluded_cases=2, grid_size=9, current={**setting, "alpha": 0.35}, current_metrics=metrics, best=setting,
        cross_validated=TuneMetrics(0.55, 0.6, 0.72), gain=0.05, gain_low=0.01, gain_high=0.09, p_value=0.02,
        proposed=True, proposal=setting, verdict="proposed: ...", estimated_similarities=3,
        left_out=("rerank_depth 50: deeper than the smallest recorded window (30)",), seconds=1.5,
    )  # fmt: skip


def test_no_profile_means_the_defaults(world: World) -> None:
    assert world.store.latest_profile("alpha") is None and world.store.profile_history("alpha") == []


def test_versions_append_and_the_highest_is_in_use(world: World) -> None:
    first = world.store.add_profile("alpha", {"rrf_k": 30, "name": "mine"}, "file")
    second = world.store.add_profile("alpha", {}, "restore:0")
    assert (first.version, second.version) == (1, 2)
    assert first.settings == {"rrf_k": 30, "name": "mine"} and first.source == "file"
    assert world.store.latest_profile("alpha") == second
    assert world.store.profile_history("alpha") == [first, second]
    assert first.created_at < second.created_at


def test_a_profile_or_tuning_of_an_unknown_project_is_refused_and_nothing_kept(world: World) -> None:
    with pytest.raises(ProjectNotFound):
        world.store.add_profile("nope", {"rrf_k": 30}, "file")
    with pytest.raises(ProjectNotFound):
        world.store.put_tuning(tuning("T1", "2026-01-01T00:00:01.000Z", project_id="nope"))
    assert world.store.profile_history("nope") == [] and world.store.tunings("nope") == []


def test_a_tuning_round_trips_whole_and_they_list_newest_first(world: World) -> None:
    old, new = tuning("T1", "2026-01-01T00:00:01.000Z"), tuning("T2", "2026-01-01T00:00:02.000Z")
    world.store.put_tuning(old)
    world.store.put_tuning(new)
    assert world.store.get_tuning("T1") == old
    assert world.store.tunings("alpha") == [new, old]
    with pytest.raises(TuningNotFound):
        world.store.get_tuning("T3")


def test_removing_the_project_removes_its_profiles_and_tunings(tmp_path: Path) -> None:
    catalog = SqliteCatalog(open_database(tmp_path / "local.db"))
    store = SqliteProfileStore(open_database(tmp_path / "local.db"))
    catalog.add_project(Project("alpha", (), "2026-01-01T00:00:00.000Z"))
    store.add_profile("alpha", {"rrf_k": 30}, "file")
    store.put_tuning(tuning("T1", "2026-01-01T00:00:01.000Z"))
    catalog.remove_project("alpha")
    assert store.profile_history("alpha") == [] and store.tunings("alpha") == []
    with pytest.raises(TuningNotFound):
        store.get_tuning("T1")


def test_a_learning_and_its_model_are_kept_the_model_once_by_its_digest(world: World) -> None:
    from memory_core.domain.evaluation_errors import LearningNotFound
    from memory_core.evaluation.learning import LearnResult

    digest = "ab" * 32
    first = LearnResult(learn_id="L1", project_id="alpha", created_at="2026-01-01T00:00:01.000Z", level="resource",
                        folds=5, cases=30, excluded_cases=0, groups=30, current="convex", verdict="no proposal",
                        model_digest=digest, current_metrics=TuneMetrics(0.5, 0.6, 0.7), gain=0.01, gain_low=-0.01,
                        gain_high=0.03, p_value=0.4)  # fmt: skip
    world.store.put_learning(first, b"model bytes")
    second = attrs.evolve(first, learn_id="L2", created_at="2026-01-01T00:00:02.000Z")
    world.store.put_learning(second, b"other bytes")  # the same digest: the first bytes stay
    assert world.store.get_learning("L1") == first and world.store.learnings("alpha") == [second, first]
    assert world.store.learned_model("alpha", digest) == b"model bytes"
    assert world.store.learned_model("beta", digest) is None and world.store.learned_model("alpha", "cd" * 32) is None
    with pytest.raises(LearningNotFound):
        world.store.get_learning("L3")
    with pytest.raises(ProjectNotFound):
        world.store.put_learning(attrs.evolve(first, learn_id="L4", project_id="beta"), b"x")
