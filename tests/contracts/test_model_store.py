"""ModelStore contract (issue 33): SqliteModelStore (real apsw, migration 010) and
InMemoryModelStore behave the same; and migration 010 keeps a populated database's rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.adapters.in_memory.models import InMemoryModelStore
from memory_core.adapters.sqlite import SCHEMA_VERSION, SqliteCatalog, open_database, schema_version
from memory_core.adapters.sqlite.migrations import MIGRATIONS, m010_models, migration_number
from memory_core.adapters.sqlite.models import SqliteModelStore
from memory_core.domain.errors import ProjectNotFound
from memory_core.domain.model import Project
from memory_core.domain.model_registry_errors import ModelExists, ModelInUse, ModelNotFound
from memory_core.domain.models import ModelOverrides, ModelSpec
from memory_core.ports.models import ModelChoice, RegisteredModel
from tests.contracts.store_world import World, store_world


@pytest.fixture(params=["sqlite", "memory"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    yield from store_world(request.param, tmp_path, SqliteModelStore, InMemoryModelStore, ("alpha", "beta"))


def registered(name: str, kind: str = "embedding", revision: str = "e" * 64) -> RegisteredModel:
    spec = ModelSpec(path=f"/models/{name}", kind=kind, family="bert", architecture="BertModel", pooling="cls",
                     normalize=False, max_tokens=512, query_prefix="query: ", document_prefix="passage: ",
                     dimensions=384 if kind == "embedding" else 0, labels=0 if kind == "embedding" else 1,
                     revision=revision)  # fmt: skip
    return RegisteredModel(name, spec, ModelOverrides(pooling="cls", query_prefix="query: "), "2026-01-02T00:00:00Z")


def test_a_model_reads_back_exactly_as_added(world: World) -> None:
    model = registered("e5")
    world.store.add_model(model)
    assert world.store.get_model("e5") == model
    world.store.add_model(registered("ce", "reranker"))
    assert [m.name for m in world.store.list_models()] == ["ce", "e5"]
    with pytest.raises(ModelExists):
        world.store.add_model(registered("e5", revision="f" * 64))
    with pytest.raises(ModelExists):
        world.store.add_model(registered("minilm"))  # reserved
    assert world.store.get_model("e5") == model  # the refused add changed nothing
    with pytest.raises(ModelNotFound, match="registered: ce, e5"):
        world.store.get_model("bge")


def test_choices_default_to_nothing_and_name_only_known_models(world: World) -> None:
    assert world.store.model_choice("alpha") == ModelChoice() == world.store.model_choice(None)
    world.store.add_model(registered("e5"))
    world.store.set_model_choice("alpha", ModelChoice("e5", "none"))
    world.store.set_model_choice(None, ModelChoice("minilm", None))
    assert world.store.model_choice("alpha") == ModelChoice("e5", "none")
    assert world.store.model_choice(None) == ModelChoice("minilm", None)
    assert world.store.model_choice("beta") == ModelChoice()
    with pytest.raises(ModelNotFound):
        world.store.set_model_choice("beta", ModelChoice("bge", None))
    with pytest.raises(ProjectNotFound):
        world.store.set_model_choice("gamma", ModelChoice("e5", None))
    assert world.store.model_choice("beta") == ModelChoice()


def test_a_chosen_model_is_not_removed_and_a_removed_project_frees_it(world: World) -> None:
    world.store.add_model(registered("e5"))
    world.store.add_model(registered("ce", "reranker"))
    world.store.set_model_choice("alpha", ModelChoice("e5", "ce"))
    world.store.set_model_choice(None, ModelChoice(None, "ce"))
    assert world.store.model_users("ce") == ["", "alpha"]
    with pytest.raises(ModelInUse, match="project 'alpha'"):
        world.store.remove_model("e5")
    with pytest.raises(ModelInUse, match="the home default, project 'alpha'"):
        world.store.remove_model("ce")
    world.catalog.remove_project("alpha")
    world.store.remove_model("e5")
    assert [m.name for m in world.store.list_models()] == ["ce"]
    with pytest.raises(ModelNotFound):
        world.store.remove_model("e5")


def test_migration_010_keeps_a_populated_database(tmp_path: Path) -> None:
    """From schema 9 (a project with a profile, as version 9 wrote them) to 10: no row lost."""
    assert MIGRATIONS.index(m010_models) + 1 == migration_number(m010_models) == 10
    path = tmp_path / "local.db"
    conn = open_database(path, target_version=9)
    SqliteCatalog(conn).add_project(Project("alpha", (), "2026-01-01T00:00:00.000Z"))
    with conn:
        conn.execute("INSERT INTO project_profiles VALUES ('alpha', 1, '{}', 'file', '2026-01-01T00:00:01Z')")
    conn.close()
    conn = open_database(path)
    assert schema_version(conn) == SCHEMA_VERSION >= 10
    assert conn.execute("SELECT project_id FROM projects").fetchall() == [("alpha",)]
    assert conn.execute("SELECT count(*) FROM project_profiles").fetchall() == [(1,)]
    store = SqliteModelStore(conn)
    store.add_model(registered("e5"))
    store.set_model_choice("alpha", ModelChoice("e5", None))
    assert store.model_users("e5") == ["alpha"]
    store.close()
