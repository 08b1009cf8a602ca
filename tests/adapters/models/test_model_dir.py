"""read_model_dir (issue 33): a model directory's declarations, its revision, and every broken
directory refused as ``model_unavailable`` naming what is wrong, with nothing changed."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from memory_core.adapters.models.minilm import default_model_dir
from memory_core.adapters.models.model_dir import read_model_dir
from memory_core.domain.errors import InvalidRequest, ModelUnavailable
from memory_core.domain.models import ModelOverrides
from tests.adapters.models.tiny_models import build

pytestmark = pytest.mark.slow  # builds models with transformers


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    build(root / "bert", "bert")
    build(root / "bert-seed1", "bert", seed=1)
    build(
        root / "st",
        "bert",
        pooling="cls",
        normalize=True,
        max_seq_length=64,
        prompts={"query": "query: ", "passage": "passage: "},
    )
    build(root / "ce", "roberta", head="classifier", num_labels=2)
    build(root / "sharded", "bert", max_shard_size="20KB")
    return root


def test_the_packaged_minilm_reads_as_the_default_embedder_runs_it() -> None:
    spec = read_model_dir(default_model_dir())
    assert (spec.kind, spec.family, spec.architecture) == ("embedding", "bert", "BertModel")
    assert (spec.pooling, spec.normalize, spec.max_tokens, spec.dimensions) == ("mean", True, 256, 384)
    assert (spec.query_prefix, spec.document_prefix, spec.labels) == ("", "", 0)
    assert len(spec.revision) == 64 and read_model_dir(default_model_dir()).revision == spec.revision


def test_a_bare_encoder_gets_the_defaults(models: Path) -> None:
    spec = read_model_dir(models / "bert")
    assert (spec.kind, spec.family, spec.pooling, spec.normalize) == ("embedding", "bert", "mean", True)
    assert spec.max_tokens == 96 and spec.dimensions == 32  # the position table (96) is under 512


def test_sentence_transformers_files_declare_pooling_normalisation_length_and_prefixes(models: Path) -> None:
    spec = read_model_dir(models / "st")
    assert (spec.pooling, spec.normalize, spec.max_tokens) == ("cls", True, 64)
    assert (spec.query_prefix, spec.document_prefix) == ("query: ", "passage: ")


def test_overrides_replace_the_declarations_and_enter_the_revision(models: Path) -> None:
    declared = read_model_dir(models / "st")
    overrides = ModelOverrides(pooling="mean", normalize=False, max_tokens=32, query_prefix="q: ", document_prefix="")
    spec = read_model_dir(models / "st", overrides)
    assert (spec.pooling, spec.normalize, spec.max_tokens) == ("mean", False, 32)
    assert (spec.query_prefix, spec.document_prefix) == ("q: ", "")
    assert spec.revision != declared.revision
    for one in (ModelOverrides(pooling="last"), ModelOverrides(max_tokens=63), ModelOverrides(document_prefix="p: ")):
        assert read_model_dir(models / "st", one).revision not in (declared.revision, spec.revision)
    with pytest.raises(InvalidRequest, match="past the model's 96 positions"):
        read_model_dir(models / "st", ModelOverrides(max_tokens=200))
    with pytest.raises(InvalidRequest, match="pooling"):
        ModelOverrides(pooling="max")


def test_a_sequence_classifier_is_a_reranker(models: Path) -> None:
    spec = read_model_dir(models / "ce")
    assert (spec.kind, spec.family, spec.architecture) == ("reranker", "roberta", "RobertaForSequenceClassification")
    assert (spec.labels, spec.dimensions, spec.max_tokens) == (2, 0, 94)  # 96 rows less padding_idx + 1
    with pytest.raises(InvalidRequest, match="cross-encoder"):
        read_model_dir(models / "ce", ModelOverrides(pooling="mean"))


def test_sharded_weights_are_read(models: Path) -> None:
    assert len(list((models / "sharded").glob("model-*.safetensors"))) > 1
    spec = read_model_dir(models / "sharded")
    assert spec.dimensions == 32 and spec.revision != read_model_dir(models / "bert").revision


def test_the_revision_follows_weights_tokenizer_and_config_not_other_files(models: Path, tmp_path: Path) -> None:
    base = read_model_dir(models / "bert").revision
    assert read_model_dir(models / "bert-seed1").revision != base  # same config and tokenizer, other weights
    copy = Path(shutil.copytree(models / "bert", tmp_path / "copy"))
    assert read_model_dir(copy).revision == base  # where it lies does not matter
    (copy / "README.md").write_text("a model card")
    assert read_model_dir(copy).revision == base
    tokenizer = json.loads((copy / "tokenizer.json").read_text())
    tokenizer["normalizer"]["lowercase"] = False
    (copy / "tokenizer.json").write_text(json.dumps(tokenizer))
    changed_tokenizer = read_model_dir(copy).revision
    assert changed_tokenizer != base
    config = json.loads((copy / "config.json").read_text())
    config["layer_norm_eps"] = 1e-6
    (copy / "config.json").write_text(json.dumps(config))
    assert read_model_dir(copy).revision not in (base, changed_tokenizer)


def _no_weights(d: Path) -> None:
    (d / "model.safetensors").unlink()


def _bin_only(d: Path) -> None:
    (d / "model.safetensors").rename(d / "pytorch_model.bin")


def _unknown_architecture(d: Path) -> None:
    config = json.loads((d / "config.json").read_text())
    config.update(model_type="gpt2", architectures=["GPT2LMHeadModel"])
    (d / "config.json").write_text(json.dumps(config))


def _decoder_head(d: Path) -> None:
    config = json.loads((d / "config.json").read_text())
    config["architectures"] = ["BertLMHeadModel"]
    (d / "config.json").write_text(json.dumps(config))


def _truncated(d: Path) -> None:
    path = d / "model.safetensors"
    os.truncate(path, path.stat().st_size - 1000)


def _garbage_header(d: Path) -> None:
    (d / "model.safetensors").write_bytes((50).to_bytes(8, "little") + b"{not json" + b"\0" * 100)


def _no_tokenizer(d: Path) -> None:
    (d / "tokenizer.json").unlink()


def _broken_tokenizer(d: Path) -> None:
    (d / "tokenizer.json").write_text('{"model": {"type": "Nope"}}')


def _foreign_tokenizer(d: Path) -> None:
    shutil.copy(default_model_dir() / "tokenizer.json", d / "tokenizer.json")  # 30,522 tokens, 99 rows


def _no_config(d: Path) -> None:
    (d / "config.json").unlink()


def _dense_module(d: Path) -> None:
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
    ]
    (d / "modules.json").write_text(json.dumps(modules))


def _missing_shard(d: Path) -> None:
    index = {"weight_map": {"embeddings.word_embeddings.weight": "model-00002-of-00002.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))


BROKEN: dict[str, tuple[Callable[[Path], None], dict[str, str], str]] = {
    "no weights": (_no_weights, {"missing": "model.safetensors"}, "no safetensors weights"),
    "pickle weights only": (_bin_only, {"missing": "model.safetensors"}, "found pytorch_model.bin"),
    "unknown architecture": (_unknown_architecture, {"problem": "unknown_architecture"}, "unknown architecture"),
    "a decoder head": (_decoder_head, {"problem": "unknown_architecture"}, "BertLMHeadModel"),
    "truncated weights": (_truncated, {"problem": "corrupt_weights"}, "truncated"),
    "garbage weights header": (_garbage_header, {"problem": "corrupt_weights"}, "not JSON"),
    "no tokenizer": (_no_tokenizer, {"missing": "tokenizer.json"}, "no tokenizer"),
    "broken tokenizer": (_broken_tokenizer, {"problem": "bad_tokenizer"}, "cannot be loaded"),
    "another model's tokenizer": (_foreign_tokenizer, {"problem": "tokenizer_mismatch"}, "larger than"),
    "no config": (_no_config, {"missing": "config.json"}, "config.json is missing"),
    "a Dense module": (_dense_module, {"problem": "unsupported_module"}, "Dense"),
    "a missing shard": (_missing_shard, {"missing": "model-00002-of-00002.safetensors"}, "shards missing"),
}


def _snapshot(d: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.rglob("*"))}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_directory_is_model_unavailable_naming_the_problem(models: Path, tmp_path: Path, case: str) -> None:
    breaks, details, said = BROKEN[case]
    d = Path(shutil.copytree(models / "bert", tmp_path / "broken"))
    breaks(d)
    before = _snapshot(d)
    with pytest.raises(ModelUnavailable) as info:
        read_model_dir(d)
    assert info.value.code == "model_unavailable" and said in info.value.message
    assert {k: info.value.details.get(k) for k in details} == details
    assert info.value.details["model_dir"] == str(d.resolve())
    assert _snapshot(d) == before  # nothing written, nothing removed


def test_a_missing_directory_is_model_unavailable(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match="does not exist"):
        read_model_dir(tmp_path / "nowhere")


def test_a_model_cache_snapshot_of_links_reads_as_its_files(models: Path, tmp_path: Path) -> None:
    # The Hugging Face cache: snapshots/<commit>/ holds links into blobs/.
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "abc123"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    for i, source in enumerate(sorted(p for p in (models / "bert").iterdir() if p.is_file())):
        blob = blobs / f"blob{i}"
        shutil.copy(source, blob)
        (snapshot / source.name).symlink_to(Path("../..") / "blobs" / blob.name)
    spec = read_model_dir(snapshot)
    assert spec.revision == read_model_dir(models / "bert").revision and spec.path == str(snapshot)
