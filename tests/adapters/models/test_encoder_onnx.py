"""Brought models on ONNX Runtime (issue 33 items 1 and 3): the graph built from a BERT,
RoBERTa, XLM-R or MPNet directory gives transformers' outputs (pooled, normalised, classified),
the packaged MiniLM keeps its graph and revision, a changed directory is refused."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from memory_core.adapters.models.encoder_graph import mpnet_buckets
from memory_core.adapters.models.encoder_onnx import (
    OnnxCrossEncoder,
    OnnxEncoderEmbedder,
    open_cross_encoder,
    open_embedder,
)
from memory_core.adapters.models.inference import chosen_inference, minilm_embedder
from memory_core.adapters.models.minilm import default_model_dir
from memory_core.adapters.models.model_dir import read_model_dir
from memory_core.adapters.models.onnx_minilm import OnnxMiniLMEmbedder
from memory_core.domain.errors import InvalidRequest, ModelUnavailable
from memory_core.domain.models import ModelOverrides
from tests.adapters.models.tiny_models import TEXTS, build, torch_outputs
from tests.units import text_candidate

pytestmark = pytest.mark.slow  # builds models with transformers, compares with torch

QUERY = "how do i roll back a deploy"
# float32 through two different graphs: rounding only (observed <= 1e-6)
TOLERANCE = 2e-5


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("brought")


@pytest.fixture(scope="module")
def cache(root: Path) -> Path:
    return root / "cache"


EMBEDDERS: dict[str, dict[str, Any]] = {
    "bert mean normalised": {"family": "bert", "pooling": "mean", "normalize": True},
    "bert cls": {"family": "bert", "pooling": "cls", "normalize": False},
    "roberta cls": {"family": "roberta", "pooling": "cls", "normalize": True},
    "xlm-roberta last token": {"family": "xlm-roberta", "pooling": "last", "normalize": False},
    "mpnet mean normalised": {"family": "mpnet", "pooling": "mean", "normalize": True},
    "mpnet last": {"family": "mpnet", "pooling": "last", "normalize": True},
    # another hidden size, head count, depth and the tanh GELU
    "bert 48 wide, 3 heads, gelu_new": {
        "family": "bert",
        "sizes": {"hidden_size": 48, "num_attention_heads": 3, "num_hidden_layers": 3, "hidden_act": "gelu_new"},
    },
    "roberta 64 wide, 8 heads, relu": {
        "family": "roberta",
        "sizes": {"hidden_size": 64, "num_attention_heads": 8, "intermediate_size": 96, "hidden_act": "relu"},
        "pooling": "mean",
    },
}


@pytest.mark.parametrize("case", list(EMBEDDERS))
def test_embeddings_match_transformers(root: Path, cache: Path, case: str) -> None:
    args = dict(EMBEDDERS[case])
    directory = build(root / case.replace(" ", "-").replace(",", ""), args.pop("family"), **args)
    spec = read_model_dir(directory)
    embedder = open_embedder(spec, cache)
    assert isinstance(embedder, OnnxEncoderEmbedder) and embedder.dimensions == spec.dimensions
    got = np.stack(embedder.embed_documents(TEXTS))
    want = torch_outputs(spec, TEXTS)
    assert got.shape == want.shape == (len(TEXTS), spec.dimensions)
    np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0)
    if spec.normalize:
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(embedder.embed_query(TEXTS[2])), want[2], atol=TOLERANCE, rtol=0)


def test_sharded_weights_give_the_single_files_outputs(root: Path, cache: Path) -> None:
    single = read_model_dir(build(root / "one-file", "bert", seed=3))
    sharded = read_model_dir(build(root / "shards", "bert", seed=3, max_shard_size="20KB"))
    a = np.stack(open_embedder(single, cache).embed_documents(TEXTS))
    b = np.stack(open_embedder(sharded, cache).embed_documents(TEXTS))
    np.testing.assert_array_equal(a, b)


def test_prefixes_go_before_queries_and_documents(root: Path, cache: Path) -> None:
    prompts = {"query": "query: ", "passage": "passage: "}
    spec = read_model_dir(build(root / "e5-like", "bert", pooling="mean", normalize=True, prompts=prompts))
    embedder = open_embedder(spec, cache)
    want = torch_outputs(spec, ["query: " + QUERY, "passage: " + QUERY])
    np.testing.assert_allclose(np.asarray(embedder.embed_query(QUERY)), want[0], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(np.asarray(embedder.embed_documents([QUERY])[0]), want[1], atol=TOLERANCE, rtol=0)
    assert np.abs(want[0] - want[1]).max() > 1e-3  # the prefixes do change the vectors


CROSS_ENCODERS = {
    "bert, one logit": ("bert", 1),
    "roberta, two logits": ("roberta", 2),
    "xlm-roberta, one logit": ("xlm-roberta", 1),
    "mpnet, three logits": ("mpnet", 3),
}


@pytest.mark.parametrize("case", list(CROSS_ENCODERS))
def test_cross_encoder_scores_match_transformers(root: Path, cache: Path, case: str) -> None:
    family, labels = CROSS_ENCODERS[case]
    spec = read_model_dir(build(root / f"ce-{family}-{labels}", family, head="classifier", num_labels=labels))
    reranker = open_cross_encoder(spec, cache, batch=3)
    scores = reranker.rerank(QUERY, [text_candidate(t) for t in TEXTS])
    want = torch_outputs(spec, [(QUERY, t) for t in TEXTS])
    np.testing.assert_allclose(scores, want, atol=TOLERANCE, rtol=0)
    assert reranker.scored_pairs == len(TEXTS) and reranker.seconds > 0
    assert reranker.rerank(QUERY, []) == []


def test_a_cross_encoder_scores_only_its_depth_and_keeps_the_rest_in_order(root: Path, cache: Path) -> None:
    spec = read_model_dir(build(root / "ce-depth", "bert", head="classifier", num_labels=1, seed=5))
    full = open_cross_encoder(spec, cache).rerank(QUERY, [text_candidate(t) for t in TEXTS])
    shallow = open_cross_encoder(spec, cache, depth=3)
    scores = shallow.rerank(QUERY, [text_candidate(t) for t in TEXTS])
    np.testing.assert_allclose(scores[:3], full[:3], atol=TOLERANCE, rtol=0)
    assert len(set(scores[3:])) == 1 and scores[3] < min(scores[:3])  # tied: apply_rerank keeps RRF order
    assert shallow.scored_pairs == 3
    assert shallow.revision != open_cross_encoder(spec, cache).revision  # another window, other scores
    shorter = open_cross_encoder(spec, cache, max_tokens=16)
    assert shorter.revision != open_cross_encoder(spec, cache).revision
    long_text = [text_candidate(TEXTS[3])]
    want = torch_outputs(attrs.evolve(spec, max_tokens=16), [(QUERY, TEXTS[3])])
    np.testing.assert_allclose(shorter.rerank(QUERY, long_text), want, atol=TOLERANCE, rtol=0)
    with pytest.raises(InvalidRequest):
        open_cross_encoder(spec, cache, max_tokens=spec.max_tokens + 1)
    with pytest.raises(InvalidRequest, match="not a cross-encoder"):
        open_cross_encoder(read_model_dir(build(root / "an-embedder", "bert", seed=6)), cache)
    with pytest.raises(InvalidRequest, match="not an embedding model"):
        open_embedder(spec, cache)


def test_the_built_file_is_cached_by_revision(root: Path, tmp_path: Path) -> None:
    spec = read_model_dir(build(root / "cached", "roberta", seed=7))
    first = OnnxEncoderEmbedder(spec, tmp_path)
    vectors = first.embed_documents(TEXTS)
    built = first.model_file
    assert spec.revision[:16] in built.name and built.stat().st_mode & 0o777 == 0o600
    stamp = built.stat().st_mtime_ns
    again = OnnxEncoderEmbedder(spec, tmp_path)
    np.testing.assert_array_equal(np.stack(again.embed_documents(TEXTS)), np.stack(vectors))
    assert again.model_file == built and built.stat().st_mtime_ns == stamp  # read, not rebuilt
    built.write_bytes(built.read_bytes()[:1000])  # damaged: rebuilt on the next open
    healed = OnnxEncoderEmbedder(spec, tmp_path)
    np.testing.assert_array_equal(np.stack(healed.embed_documents(TEXTS)), np.stack(vectors))
    other = read_model_dir(root / "cached", ModelOverrides(pooling="cls"))
    assert OnnxEncoderEmbedder(other, tmp_path).model_file != built
    assert OnnxEncoderEmbedder(other, tmp_path).revision != first.revision


def test_int8_is_its_own_revision_and_close_to_fp32(root: Path, cache: Path) -> None:
    spec = read_model_dir(build(root / "int8", "bert", pooling="mean", normalize=True, seed=8))
    fp32 = open_embedder(spec, cache)
    int8 = open_embedder(spec, cache, inference="int8")
    assert int8.revision != fp32.revision and int8.revision.endswith("+onnx-int8-per-channel")
    a, b = np.stack(fp32.embed_documents(TEXTS)), np.stack(int8.embed_documents(TEXTS))
    assert float(np.min(np.sum(a * b, axis=1))) > 0.95  # both unit length: cosine
    with pytest.raises(InvalidRequest):
        open_embedder(spec, cache, inference="int4")


def test_a_directory_changed_after_reading_is_refused(root: Path, tmp_path: Path) -> None:
    directory = Path(shutil.copytree(build(root / "to-change", "bert", seed=9), tmp_path / "model"))
    spec = read_model_dir(directory)
    shutil.copy(root / "cached" / "model.safetensors", directory / "model.safetensors")  # other weights
    cache = tmp_path / "cache"
    with pytest.raises(ModelUnavailable, match="changed since it was added") as info:
        open_embedder(spec, cache).embed_documents(["x"])
    assert info.value.details["problem"] == "changed"
    assert not cache.exists() or not any(cache.iterdir())  # nothing built under the old revision's name


def test_the_packaged_minilm_opens_as_the_default_embedder(tmp_path: Path) -> None:
    spec = read_model_dir(default_model_dir())
    embedder = open_embedder(spec, tmp_path)
    default = minilm_embedder(chosen_inference(None), tmp_path)
    assert isinstance(embedder, OnnxMiniLMEmbedder) and embedder.revision == default.revision
    fp32 = open_embedder(spec, tmp_path, inference="fp32")
    assert fp32.revision == OnnxMiniLMEmbedder(cache_dir=tmp_path).revision
    if chosen_inference(None) != "onnx-fp32":
        assert embedder.revision != fp32.revision  # the product's default path, not fp32's
    # Another setting is another model: the generic graph, its own revision.
    prefixed = read_model_dir(default_model_dir(), ModelOverrides(query_prefix="query: "))
    assert isinstance(open_embedder(prefixed, tmp_path), OnnxEncoderEmbedder)


def test_the_generic_graph_gives_minilms_vectors(tmp_path: Path) -> None:
    spec = read_model_dir(default_model_dir())
    texts = [*TEXTS, "the wing in a slipstream " * 80]  # ~400 tokens: truncated at 256
    generic = np.stack(OnnxEncoderEmbedder(spec, tmp_path).embed_documents(texts))
    shipped = np.stack(OnnxMiniLMEmbedder(cache_dir=tmp_path, inference="fp32").embed_documents(texts))
    np.testing.assert_allclose(generic, shipped, atol=1e-5, rtol=0)


def test_mpnet_buckets_are_transformers() -> None:
    import torch
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    positions = 514
    relative = torch.arange(-(positions - 1), positions)
    want = MPNetEncoder.relative_position_bucket(relative).numpy()
    np.testing.assert_array_equal(mpnet_buckets(positions), want)


def test_a_cross_encoder_is_the_reranker_port(root: Path, cache: Path) -> None:
    from memory_core.ports import Reranker

    spec = read_model_dir(build(root / "ce-port", "bert", head="classifier", seed=11))
    reranker: Reranker = open_cross_encoder(spec, cache)
    assert isinstance(reranker, OnnxCrossEncoder) and reranker.revision.startswith("cross-encoder:")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_weights_are_widened_to_float32(root: Path, cache: Path, dtype: str) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    directory = build(root / f"half-{dtype}", "bert", seed=12)
    path = directory / "model.safetensors"
    save_file({k: v.to(getattr(torch, dtype)) for k, v in load_file(str(path)).items()}, str(path))
    from memory_core.adapters.models.model_dir import safetensors_header

    assert {entry[0] for entry in safetensors_header(path).values()} == {"F16" if dtype == "float16" else "BF16"}
    spec = read_model_dir(directory)
    got = np.stack(open_embedder(spec, cache).embed_documents(TEXTS))
    # transformers reads the half weights into a float32 model (config.json's dtype says float32): the same values
    np.testing.assert_allclose(got, torch_outputs(spec, TEXTS), atol=TOLERANCE, rtol=0)
