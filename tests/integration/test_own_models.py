"""Your own models through the real components (issue 33, items 1 and 2): tiny models built here
(random weights, MiniLM's tokenizer), the real directory reader and ONNX builder, the real apsw
database and embedding cache, Lucene and the vector index. A project's model changes its
revision, re-embeds every unit into a new generation while the current one serves, never mixes
vectors of two models in one index, comes back from the cache, and a broken directory is
``model_unavailable`` naming what is missing and changes nothing."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.domain.errors import ModelUnavailable
from memory_core.domain.model import Source
from memory_core.domain.model_registry_errors import ModelInUse
from memory_core.entrypoints.bootstrap import bootstrap
from memory_core.entrypoints.cli.main import main
from memory_core.services.engine import Engine
from tests.integration.own_models import tiny_bert

NOTES = {
    "wing.md": "# Wing\n\nThe wing flap adds lift at low speed during landing.\n",
    "engine.md": "# Engine\n\nThe turbine engine burns kerosene and drives the compressor.\n",
    "tail.md": "# Tail\n\nThe rudder on the tail keeps the aircraft straight in a crosswind.\n",
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("models")
    return {
        "small": tiny_bert(base / "small", hidden=32, pooling="cls", seed=1),
        "wide": tiny_bert(base / "wide", hidden=48, pooling="mean", seed=2),
        "ce": tiny_bert(base / "ce", hidden=32, classifier=True, seed=3),
    }


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in NOTES.items():
        (notes / name).write_text(text)
    engine = bootstrap(tmp_path / "home")
    engine.add_project("notes", [Source(str(notes))])
    yield engine
    engine.close()


def index_vectors(engine: Engine) -> tuple[str, dict[str, np.ndarray]]:
    """The current generation's embedding revision and its vector index's rows, by unit id."""
    current = engine.catalog.current_generation("notes")
    assert current is not None
    directory = Path(current.directory) / "vectors"
    ids = json.loads((directory / "unit_ids.json").read_text())
    matrix = np.load(directory / "vectors.npy")
    return current.revisions.embedding_model, dict(zip(ids, matrix, strict=True))


def cached(engine: Engine, revision: str, unit_hashes: set[str]) -> dict[str, Any]:
    return dict(engine.indexer.embedding_cache.get_many(revision, unit_hashes))


def test_a_new_model_reembeds_into_its_own_generation_and_nothing_mixes(
    engine: Engine, models: dict[str, Path]
) -> None:
    engine.add_model("small", str(models["small"]))
    engine.add_model("wide", str(models["wide"]))
    first = engine.index("notes")
    builtin, builtin_rows = index_vectors(engine)
    assert {len(r) for r in builtin_rows.values()} == {384}

    engine.set_project_models("notes", embedding="small")
    serving = engine.project_models("notes")
    assert serving.reembedding and serving.dimensions == 32 and serving.serving_revision == builtin
    # The current generation keeps serving, its queries read by its own model.
    assert engine.activate("notes", "wing lift").response.revisions["embedding_model"] == builtin

    report = engine.index("notes")
    assert report.status == "built" and report.index_revision != first.index_revision
    assert report.embedded == report.units  # every unit embedded again by the new model
    small, rows = index_vectors(engine)
    assert small != builtin and small == engine.project_models("notes").embedding_revision
    assert not engine.project_models("notes").reembedding
    # Nothing mixes: every row of the new index is the new model's vector of that unit (the
    # cache under the new revision), 32-dimensional; none is the old model's.
    current = engine.catalog.current_generation("notes")
    assert current is not None
    units = {u.unit_id: u.unit_hash for u in engine.generations.load_units(Path(current.directory))}
    vectors = cached(engine, small, set(units.values()))
    for unit_id, row in rows.items():
        expected = np.asarray(vectors[units[unit_id]], dtype=np.float32)
        assert row.shape == (32,)
        np.testing.assert_allclose(row, expected / np.linalg.norm(expected), rtol=1e-5, atol=1e-6)
    answer = engine.activate("notes", "wing lift").response
    assert answer.revisions["embedding_model"] == small and answer.fragments

    engine.set_project_models("notes", embedding="wide")
    assert engine.index("notes").embedded == report.units
    assert {r.shape for r in index_vectors(engine)[1].values()} == {(48,)}  # dimensions from the model
    # Switching back is instant: the cache keys on the revision, so nothing is embedded again.
    engine.set_project_models("notes", embedding="small")
    back = engine.index("notes")
    assert back.status == "built" and back.embedded == 0 and back.reused_embeddings == back.units
    assert index_vectors(engine)[0] == small
    engine.set_project_models("notes", embedding="minilm")
    assert engine.index("notes").embedded == 0
    assert index_vectors(engine)[0] == builtin


def broken_copies(source: Path, base: Path) -> dict[str, tuple[Path, str]]:
    """Directories each broken one way, with the word its error must name."""
    no_weights = base / "no-weights"
    shutil.copytree(source, no_weights)
    (no_weights / "model.safetensors").unlink()
    unknown = base / "unknown-architecture"
    shutil.copytree(source, unknown)
    config = json.loads((unknown / "config.json").read_text())
    (unknown / "config.json").write_text(json.dumps({**config, "architectures": ["GPT2LMHeadModel"],
                                                     "model_type": "gpt2"}))  # fmt: skip
    truncated = base / "truncated"
    shutil.copytree(source, truncated)
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return {"weights": (no_weights, "safetensors"), "architecture": (unknown, "GPT2"),
            "truncated": (truncated, "model.safetensors")}  # fmt: skip


def test_a_broken_directory_is_model_unavailable_and_changes_nothing(
    engine: Engine, models: dict[str, Path], tmp_path: Path
) -> None:
    engine.add_model("small", str(models["small"]))
    engine.set_project_models("notes", embedding="small")
    before = ([m.name for m in engine.list_models()], engine.project_models("notes"))
    for what, (directory, named) in broken_copies(models["small"], tmp_path / "broken").items():
        with pytest.raises(ModelUnavailable) as caught:
            engine.add_model(f"broken-{what}", str(directory))
        assert named in caught.value.message, (what, caught.value.message)
    assert ([m.name for m in engine.list_models()], engine.project_models("notes")) == before
    with pytest.raises(ModelInUse):
        engine.remove_model("small")


def test_the_cli_adds_lists_chooses_and_removes(tmp_path: Path, models: dict[str, Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    home, notes = tmp_path / "home", tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nThe wing flap adds lift.\n")

    def memcore(*args: str) -> tuple[int, Any]:
        capsys.readouterr()
        code = main(["--home", str(home), *args, "--json"])
        out = capsys.readouterr().out
        return code, json.loads(out) if out.strip() else None

    assert memcore("project", "add", "notes", "--source", str(notes))[0] == 0
    code, added = memcore("model", "add", "e5ish", str(models["small"]), "--query-prefix", "query: ",
                          "--document-prefix", "passage: ", "--pooling", "mean")  # fmt: skip
    assert code == 0 and added["query_prefix"] == "query: " and added["pooling"] == "mean"
    assert memcore("model", "add", "ce", str(models["ce"]))[1]["kind"] == "reranker"
    code, listed = memcore("model", "list")
    assert [(m["name"], m["builtin"]) for m in listed] == [("minilm", True), ("ce", False), ("e5ish", False)]
    code, error = memcore("model", "add", "bad", str(notes))
    assert code == 1 and error["error"]["code"] == "model_unavailable" and "config.json" in error["error"]["message"]
    code, chosen = memcore("project", "set", "notes", "--embedding", "e5ish", "--reranker", "ce")
    assert code == 0 and (chosen["embedding"], chosen["reranker"], chosen["dimensions"]) == ("e5ish", "ce", 32)
    code, error = memcore("project", "set", "notes", "--embedding", "ce")
    assert code == 2 and error["error"]["code"] == "invalid_request"
    assert memcore("index", "notes")[0] == 0
    code, shown = memcore("project", "show", "notes")
    assert shown["models"]["embedding"] == "e5ish" and not shown["models"]["reembedding"]
    code, answer = memcore("activate", "notes", "wing lift")
    revisions = answer["response"]["revisions"]
    assert revisions["embedding_model"] == shown["models"]["embedding_revision"]
    assert revisions["reranker_model"].startswith("cross-encoder:")
    assert any(c["rerank_score"] is not None for c in answer["candidates"])
    code, error = memcore("model", "remove", "e5ish")
    assert code == 1 and error["error"]["code"] == "model_in_use"
    assert memcore("project", "set", "--default", "--embedding", "e5ish")[0] == 0
    assert memcore("project", "set", "notes", "--embedding", "minilm", "--reranker", "none")[0] == 0
    code, error = memcore("model", "remove", "e5ish")
    assert code == 1 and "the home default" in error["error"]["message"]
    assert memcore("project", "set", "--default", "--embedding", "minilm")[0] == 0
    assert memcore("model", "remove", "e5ish")[0] == 0
    assert [m["name"] for m in memcore("model", "list")[1]] == ["minilm", "ce"]


def test_models_are_compared_on_the_projects_cases_through_the_real_index(
    engine: Engine, models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine.add_model("small", str(models["small"]))
    engine.add_model("ce", str(models["ce"]))
    engine.index("notes")
    service = engine.evaluations()
    for query, resource in (("wing lift", "wing.md"), ("turbine fuel", "engine.md"), ("rudder crosswind", "tail.md")):
        case = service.create_case(engine.activate("notes", query).response.run_id)
        service.replace_judgments(case.case_id, 0, [{"resource_id": resource, "relevance": 3}])
        service.mark_reviewed(case.case_id, 1)
    projects = [p.project.project_id for p in engine.list_projects()]
    engine.close()  # the CLI opens the home itself

    capsys.readouterr()
    code = main(["--home", str(tmp_path / "home"), "model", "compare", "notes", "--embedding", "small",
                 "--reranker", "ce", "--json"])  # fmt: skip
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["compared"] == 3
    current, small, ce = result["variants"]
    assert (current["embedding"], current["reranker"], current["diff"]) == ("minilm", "none", None)
    assert current["mean_ndcg_at_10"] > 0.9  # MiniLM and BM25 find these three
    assert small["embedding"] == "small" and small["embedding_revision"].startswith("BertModel@")
    assert small["embedding_revision"] != current["embedding_revision"]  # the corpus was re-embedded
    assert (ce["embedding"], ce["reranker"]) == ("minilm", "ce")
    assert ce["embedding_revision"] == current["embedding_revision"]
    for variant in (small, ce):
        assert variant["diff_low"] <= variant["diff"] <= variant["diff_high"] and 0 < variant["p_value"] <= 1
        assert variant["diff"] == pytest.approx(variant["mean_ndcg_at_10"] - current["mean_ndcg_at_10"])
    again = bootstrap(tmp_path / "home")
    try:
        assert [p.project.project_id for p in again.list_projects()] == projects  # scratch projects removed
    finally:
        again.close()
