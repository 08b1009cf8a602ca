"""The model registry and each project's models (issue 33, items 1 and 2), over the in-memory
fakes: a model is registered by path, chosen per project or as the home default, indexes the
project's next generation while the current one serves, and vectors of two models never meet in
one index. Fast: the fake loader's models are salted hashing embedders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memory_core.adapters.in_memory.models import InMemoryModelLoader, SpecEmbedder
from memory_core.domain.errors import InvalidRequest, ModelUnavailable, ProjectNotFound
from memory_core.domain.model import Layer, Source
from memory_core.domain.model_registry_errors import ModelExists, ModelInUse, ModelNotFound
from memory_core.domain.models import ModelOverrides, ModelSpec
from memory_core.entrypoints.bootstrap import bootstrap_in_memory
from memory_core.services.engine import Engine


def spec(path: str, *, kind: str = "embedding", dims: int = 32, revision: str = "a" * 64) -> ModelSpec:
    return ModelSpec(path=path, kind=kind, family="bert", architecture="BertModel", pooling="mean", normalize=True,
                     max_tokens=128, query_prefix="", document_prefix="", dimensions=dims if kind == "embedding" else 0,
                     labels=0 if kind == "embedding" else 1, revision=revision)  # fmt: skip


def loader(engine: Engine) -> InMemoryModelLoader:
    assert engine.models is not None
    assert isinstance(engine.models.loader, InMemoryModelLoader)
    return engine.models.loader


@pytest.fixture
def engine() -> Engine:
    engine = bootstrap_in_memory()
    scanner: Any = engine.indexer.scanner  # the in-memory scanner: files are written into it
    for i in range(12):
        scanner.write("/notes", f"note-{i:02}.md", f"# Note {i}\n\nwing flap number {i} and lift {i * 7}\n".encode())
    engine.add_project("notes", [Source("/notes", Layer.PROJECT)])
    models = loader(engine)
    models.put(spec("/models/small", dims=32, revision="b" * 64))
    models.put(spec("/models/wide", dims=48, revision="c" * 64))
    models.put(spec("/models/ce", kind="reranker", revision="d" * 64))
    return engine


def generation_vectors(engine: Engine, project: str) -> tuple[str, dict[str, tuple[float, ...]]]:
    """The current generation's embedding revision and the vectors its index holds, by unit."""
    current = engine.catalog.current_generation(project)
    assert current is not None
    searcher = engine.vectors.open(Path(current.directory) / "vectors")
    return current.revisions.embedding_model, dict(zip(searcher._unit_ids, searcher._vectors, strict=True))  # type: ignore[attr-defined]


def test_the_builtin_is_listed_and_the_default_and_a_model_is_added_shown_and_removed(engine: Engine) -> None:
    names = [m.name for m in engine.list_models()]
    assert names == ["minilm"]
    view = engine.add_model("small", "/models/small", ModelOverrides(query_prefix="query: "))
    assert (view.kind, view.dimensions, view.query_prefix, view.builtin) == ("embedding", 32, "query: ", False)
    assert [m.name for m in engine.list_models()] == ["minilm", "small"]
    assert engine.show_model("small").revision == "b" * 64
    assert engine.project_models("notes").embedding == "minilm"
    with pytest.raises(ModelExists):
        engine.add_model("small", "/models/wide")
    engine.remove_model("small")
    with pytest.raises(ModelNotFound, match="registered: none yet"):
        engine.show_model("small")


def test_a_broken_directory_or_a_bad_name_stores_nothing(engine: Engine) -> None:
    with pytest.raises(ModelUnavailable, match="config.json"):
        engine.add_model("broken", "/models/nothing-here")
    with pytest.raises(InvalidRequest):
        engine.add_model("minilm", "/models/small")  # reserved
    with pytest.raises(InvalidRequest):
        engine.add_model("Has Spaces", "/models/small")
    assert [m.name for m in engine.list_models()] == ["minilm"]


def test_choices_check_the_kind_the_project_and_the_name(engine: Engine) -> None:
    engine.add_model("small", "/models/small")
    engine.add_model("ce", "/models/ce")
    with pytest.raises(InvalidRequest, match="reranker model"):
        engine.set_project_models("notes", embedding="ce")
    with pytest.raises(InvalidRequest, match="embedding model"):
        engine.set_project_models("notes", reranker="small")
    with pytest.raises(ModelNotFound):
        engine.set_project_models("notes", embedding="nope")
    with pytest.raises(ProjectNotFound):
        engine.set_project_models("nope", embedding="small")
    assert engine.project_models("notes").embedding == "minilm"  # nothing changed
    # The home default applies to a project that chose nothing; the project's own choice wins.
    engine.set_project_models(None, embedding="small")
    assert engine.project_models("notes").embedding == "small"
    engine.set_project_models("notes", embedding="minilm", reranker="none")
    shown = engine.project_models("notes")
    assert (shown.embedding, shown.reranker, shown.chosen.embedding) == ("minilm", "none", "minilm")


def test_replacing_a_chosen_model_reembeds_its_users_and_keeps_its_kind(engine: Engine) -> None:
    engine.add_model("small", "/models/small")
    engine.set_project_models("notes", embedding="small")
    engine.index("notes")
    changed: list[list[str] | None] = []
    assert engine.models is not None
    engine.models.on_change.append(changed.append)
    with pytest.raises(ModelNotFound):
        engine.add_model("other", "/models/wide", replace=True)
    with pytest.raises(InvalidRequest, match="embedding model"):
        engine.add_model("small", "/models/ce", replace=True)  # chosen as an embedding model
    assert changed == [] and engine.show_model("small").revision == "b" * 64
    engine.add_model("small", "/models/wide", replace=True)  # new files under the same name
    assert changed == [["notes"]] and engine.show_model("small").dimensions == 48
    assert engine.project_models("notes").reembedding
    assert engine.index("notes").embedded > 0
    assert {len(r) for r in generation_vectors(engine, "notes")[1].values()} == {48}


def test_a_model_in_use_cannot_be_removed(engine: Engine) -> None:
    engine.add_model("small", "/models/small")
    engine.set_project_models("notes", embedding="small")
    with pytest.raises(ModelInUse, match="project 'notes'"):
        engine.remove_model("small")
    engine.set_project_models(None, embedding="small")
    engine.set_project_models("notes", embedding="minilm")
    with pytest.raises(ModelInUse, match="the home default"):
        engine.remove_model("small")
    engine.set_project_models(None, embedding="minilm")
    engine.remove_model("small")


def test_changing_the_model_reembeds_into_a_new_generation_while_the_current_one_serves(engine: Engine) -> None:
    engine.add_model("small", "/models/small")
    engine.add_model("wide", "/models/wide")
    engine.index("notes")
    builtin = engine.embedder.revision
    assert generation_vectors(engine, "notes")[0] == builtin
    changed: list[list[str] | None] = []
    assert engine.models is not None
    engine.models.on_change.append(changed.append)

    engine.set_project_models("notes", embedding="small")
    assert changed == [["notes"]]  # the daemon's watcher re-embeds on this
    shown = engine.project_models("notes")
    assert shown.reembedding and shown.serving_revision == builtin and shown.dimensions == 32
    # Until the new generation is built, the current one serves, with its own model's queries.
    before = engine.activate("notes", "wing lift")
    assert before.response.revisions["embedding_model"] == builtin and before.response.fragments

    report = engine.index("notes")
    assert report.status == "built" and report.embedded == report.units  # every unit re-embedded
    revision, vectors = generation_vectors(engine, "notes")
    small = SpecEmbedder(spec("/models/small", dims=32, revision="b" * 64))
    assert revision == small.revision and not engine.project_models("notes").reembedding
    # Nothing mixes: every vector of the new index is the new model's (32 dimensions, its values).
    current = engine.catalog.current_generation("notes")
    assert current is not None
    units = {u.unit_id: u for u in engine.generations.load_units(Path(current.directory))}
    for unit_id, row in vectors.items():
        assert len(row) == 32
        assert row == pytest.approx(small.embed_documents([units[unit_id].search_text])[0])
    after = engine.activate("notes", "wing lift")
    assert after.response.revisions["embedding_model"] == small.revision and after.response.fragments

    # Another width: the dimensions come from the model.
    engine.set_project_models("notes", embedding="wide")
    engine.index("notes")
    assert {len(r) for r in generation_vectors(engine, "notes")[1].values()} == {48}
    # Switching back is instant: every vector comes from the cache (keyed by the revision).
    engine.set_project_models("notes", embedding="small")
    back = engine.index("notes")
    assert back.status == "built" and back.embedded == 0 and back.reused_embeddings == back.units
    assert generation_vectors(engine, "notes")[0] == small.revision


def test_a_build_that_fails_midway_leaves_the_current_generation_serving_unmixed(engine: Engine) -> None:
    engine.add_model("small", "/models/small")
    engine.index("notes")
    before = generation_vectors(engine, "notes")
    assert engine.models is not None
    failing = engine.models.embedder_for("notes")  # minilm: None
    assert failing is None
    engine.set_project_models("notes", embedding="small")
    opened = engine.models.embedder_for("notes")
    assert opened is not None

    def broken(texts: object) -> list[list[float]]:
        raise ModelUnavailable("the model's file went away", missing="model.safetensors")

    opened.embed_documents = broken  # type: ignore[method-assign]
    with pytest.raises(ModelUnavailable):
        engine.index("notes")
    assert generation_vectors(engine, "notes") == before  # the builtin's generation, untouched
    assert engine.activate("notes", "wing").response.revisions["embedding_model"] == before[0]


def judged(engine: Engine, queries: tuple[str, ...]) -> None:
    service = engine.evaluations()
    for query in queries:
        response = engine.activate("notes", query).response
        case = service.create_case(response.run_id)
        judgment = {"relevance": 2, "resource_id": response.fragments[0].resource_id}
        service.replace_judgments(case.case_id, case.judgment_version, [judgment])
        service.mark_reviewed(case.case_id, service.get_case(case.case_id).judgment_version)


def test_models_are_compared_on_the_projects_own_cases_with_paired_intervals(engine: Engine) -> None:
    from memory_core.ports.models import ModelChoice
    from memory_core.services.beir_import import EngineWorkspace
    from memory_core.services.model_comparison import compare_models

    engine.add_model("small", "/models/small")
    engine.index("notes")
    judged(engine, ("wing flap number 3", "lift 21", "note 7 wing", "flap number 11", "lift 35 wing"))
    scanner: Any = engine.indexer.scanner

    def write_source(project_id: str, files: Any) -> Source:
        for rel, data in files.items():
            scanner.write(f"/scratch/{project_id}", rel, data)
        return Source(f"/scratch/{project_id}")

    projects = [p.project.project_id for p in engine.list_projects()]
    result = compare_models(engine, EngineWorkspace(engine, write_source), "notes",
                            [ModelChoice("small", None), ModelChoice("minilm", "none")])  # fmt: skip
    current, small, same = result.variants
    assert (result.compared, result.excluded, len(result.case_ids)) == (5, 0, 5)
    assert current.name == "current" and current.embedding == "minilm" and current.diff is None
    assert current.embedding_revision == engine.embedder.revision
    # The small model re-embedded the frozen corpus: its scratch index is of its revision.
    assert small.embedding == "small" and small.embedding_revision.startswith("fake:bbbb")
    assert small.diff is not None and small.diff_low is not None and small.diff_high is not None
    assert small.diff_low <= small.diff <= small.diff_high and small.p_value is not None
    assert small.mean_ndcg_at_10 is not None and current.mean_ndcg_at_10 is not None
    assert small.diff == pytest.approx(small.mean_ndcg_at_10 - current.mean_ndcg_at_10)
    # The current models named again replay exactly as the current ones: no difference at all.
    assert same.per_case == current.per_case and same.diff == 0.0 and same.p_value == 1.0 and not same.significant
    assert [p.project.project_id for p in engine.list_projects()] == projects  # scratch projects removed
    with pytest.raises(InvalidRequest, match="reranker model"):
        compare_models(engine, EngineWorkspace(engine, write_source), "notes", [ModelChoice("minilm", "small")])
