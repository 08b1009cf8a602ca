"""MiniLM through ONNX Runtime (issue 17 item 2, issue 19 item 5): the graph built from the shipped
weights gives torch's vectors, int8 stays close, the cached file heals, failures are typed."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.adapters.models.minilm import (
    WEIGHTS_FILE,
    MiniLMEmbedder,
    ModelUnavailable,
    default_model_dir,
    file_sha256,
)
from memory_core.adapters.models.onnx_minilm import OnnxMiniLMEmbedder
from memory_core.domain.errors import InvalidRequest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _texts() -> list[str]:
    with (ROOT / "data" / "cranfield" / "queries.jsonl").open(encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line in f][:24]
    with (ROOT / "data" / "cranfield" / "corpus.jsonl").open(encoding="utf-8") as f:
        documents = [json.loads(line)["text"] for line in f][:4]
    return (
        queries
        + documents  # whole abstracts: some past 256 tokens, all padded against the short ones
        + ["the wing in a slipstream " * 80]  # ~400 tokens: truncated at 256
        + ["", " ", "\n\t", ".", "a"]  # empty-ish: [CLS] [SEP] and little else
        + ["ünïcödé  text\twith\nbreaks", "日本語のテキストと数式 ∂u/∂t = αΔu", "Привет, мир", "emoji 🚀 rocket"]
    )


TEXTS = _texts()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def torch_fp32() -> np.ndarray:
    return np.stack(MiniLMEmbedder().embed_documents(TEXTS))


@pytest.fixture(scope="module")
def fp32(cache_dir: Path) -> OnnxMiniLMEmbedder:
    embedder = OnnxMiniLMEmbedder(cache_dir=cache_dir)
    embedder.load()
    return embedder


@pytest.fixture(scope="module")
def int8(cache_dir: Path) -> OnnxMiniLMEmbedder:
    embedder = OnnxMiniLMEmbedder(cache_dir=cache_dir, inference="int8")
    embedder.load()
    return embedder


@pytest.fixture(scope="module")
def blockwise(cache_dir: Path) -> OnnxMiniLMEmbedder:
    embedder = OnnxMiniLMEmbedder(cache_dir=cache_dir, inference="int8-blockwise")
    embedder.load()
    return embedder


def test_texts_cover_truncation() -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    lengths = [len(tokenizer.encode(t).ids) for t in TEXTS]
    assert max(lengths) > 256 and min(lengths) == 2 and len(TEXTS) >= 36


def test_fp32_vectors_equal_torch_fp32(fp32: OnnxMiniLMEmbedder, torch_fp32: np.ndarray) -> None:
    batch = np.stack(fp32.embed_documents(TEXTS))  # padded batches, longest first
    assert batch.dtype == np.float32 and batch.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    assert float((batch * torch_fp32).sum(axis=1).min()) >= 0.99999
    queries = np.stack([fp32.embed_query(t) for t in TEXTS])
    assert float((queries * torch_fp32).sum(axis=1).min()) >= 0.99999


def test_int8_is_close_to_fp32_yet_its_own_revision(
    fp32: OnnxMiniLMEmbedder, int8: OnnxMiniLMEmbedder, torch_fp32: np.ndarray
) -> None:
    vectors = np.stack(int8.embed_documents(TEXTS))
    cosine = (vectors * torch_fp32).sum(axis=1)
    # The quantizer's choices move with ONNX Runtime's version (onnxruntime 1.32: min 0.979 on
    # these texts, median 0.99), so the bound leaves room; per-tensor int8 falls to about 0.94.
    assert float(cosine.min()) >= 0.97, dict(zip(TEXTS, cosine.round(4).tolist(), strict=True))
    assert float(np.median(cosine)) >= 0.985
    assert float(cosine.max()) < 0.9999  # not fp32's vectors: never to be mixed with them
    revisions = {
        fp32.revision,
        int8.revision,
        MiniLMEmbedder().revision,
        MiniLMEmbedder(inference="int8").revision,
    }
    assert len(revisions) == 4
    assert fp32.revision == MiniLMEmbedder().revision + "+onnx-fp32"
    assert int8.revision == MiniLMEmbedder().revision + "+onnx-int8-per-channel"
    assert int8.model_file.stat().st_size < fp32.model_file.stat().st_size / 3


def test_int8_blockwise_is_nearly_fp32_yet_its_own_revision(
    fp32: OnnxMiniLMEmbedder, blockwise: OnnxMiniLMEmbedder, int8: OnnxMiniLMEmbedder, torch_fp32: np.ndarray
) -> None:
    vectors = np.stack(blockwise.embed_documents(TEXTS))
    cosine = (vectors * torch_fp32).sum(axis=1)
    # onnxruntime 1.32: min 0.9993 on these texts; per-tensor int8 (the int8 path) falls to 0.979.
    assert float(cosine.min()) >= 0.998, dict(zip(TEXTS, cosine.round(5).tolist(), strict=True))
    assert float(cosine.max()) < 0.99999  # not fp32's vectors: never to be mixed with them
    queries = np.stack([blockwise.embed_query(t) for t in TEXTS])
    assert np.abs(queries - vectors).max() <= 1e-5  # a query and a document embed alike
    assert blockwise.revision == MiniLMEmbedder().revision + "+onnx-int8-block32"
    assert len({fp32.revision, int8.revision, blockwise.revision}) == 3
    # The MatMuls' weights shrink to a quarter; the token embedding table (47 of fp32's 90 MB) is
    # only gathered from, and stays fp32.
    assert blockwise.model_file.stat().st_size < fp32.model_file.stat().st_size * 0.7


@pytest.mark.parametrize("path", ["fp32", "int8", "int8-blockwise"])
def test_a_batch_gives_the_vectors_of_one_at_a_time(
    path: str, fp32: OnnxMiniLMEmbedder, int8: OnnxMiniLMEmbedder, blockwise: OnnxMiniLMEmbedder
) -> None:
    embedder = {"fp32": fp32, "int8": int8, "int8-blockwise": blockwise}[path]
    together = np.stack(embedder.embed_documents(TEXTS))
    alone = np.stack([embedder.embed_documents([t])[0] for t in TEXTS])
    reversed_ = np.stack(embedder.embed_documents(TEXTS[::-1])[::-1])
    tolerance = 0.0 if path == "int8" else 1e-5  # int8 embeds each text alone: exactly equal
    assert np.abs(together - alone).max() <= tolerance
    assert np.abs(together - reversed_).max() <= tolerance


def test_query_cache_keys_on_normalized_text_and_is_bounded(cache_dir: Path) -> None:
    embedder = OnnxMiniLMEmbedder(cache_dir=cache_dir, query_cache_size=2)
    calls = []
    encode = embedder._encode

    def counting(texts: list[str], threads: int) -> Any:
        calls.append(texts)
        return encode(texts, threads)

    embedder._encode = counting  # type: ignore[method-assign]
    first = embedder.embed_query("roll back  a deploy")
    again = embedder.embed_query("  roll back a\tdeploy\n")
    assert len(calls) == 1 and np.array_equal(first, again)
    again[:] = 0.0  # a copy: the cache is unchanged
    assert np.array_equal(embedder.embed_query("roll back a deploy"), first)
    embedder.embed_query("beta")
    embedder.embed_query("gamma")  # evicts the least recent ("roll back a deploy")
    assert embedder.cached_queries == 2 and len(calls) == 3
    embedder.embed_query("roll back a deploy")
    assert len(calls) == 4
    with pytest.raises(InvalidRequest):
        OnnxMiniLMEmbedder(cache_dir=cache_dir, inference="fp16")
    with pytest.raises(InvalidRequest, match="fp32, int8, int8-blockwise"):
        OnnxMiniLMEmbedder(cache_dir=cache_dir, inference="bf16")  # a torch path, not ONNX's
    with pytest.raises(InvalidRequest):
        OnnxMiniLMEmbedder(cache_dir=cache_dir, query_cache_size=-1)


def test_the_cached_file_is_owner_only_keyed_by_the_weights_and_rebuilt_when_missing_or_corrupt(
    tmp_path: Path, fp32: OnnxMiniLMEmbedder
) -> None:
    cache = tmp_path / "models"
    expected = np.stack(fp32.embed_documents(TEXTS[:3]))
    built = OnnxMiniLMEmbedder(cache_dir=cache)
    path = built.model_file
    assert file_sha256(default_model_dir() / WEIGHTS_FILE)[:16] in path.name
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in cache.iterdir()) == [path.name, path.name + ".json"]  # no temporary left
    assert np.array_equal(np.stack(built.embed_documents(TEXTS[:3])), expected)

    def rebuilt() -> np.ndarray:
        embedder = OnnxMiniLMEmbedder(cache_dir=cache)
        assert embedder.model_file == path
        return np.stack(embedder.embed_documents(TEXTS[:3]))

    # Reused as it is: not rewritten.
    mtime = path.stat().st_mtime_ns
    assert np.array_equal(rebuilt(), expected) and path.stat().st_mtime_ns == mtime
    path.unlink()
    assert np.array_equal(rebuilt(), expected)
    # A flipped byte in the middle of the weights: caught by the recorded checksum.
    with path.open("r+b") as f:
        f.seek(path.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert np.array_equal(rebuilt(), expected)
    # A file whose record matches but ONNX Runtime refuses (as another version might write).
    path.write_bytes(b"not an onnx model")
    stamp = path.with_name(path.name + ".json")
    record = json.loads(stamp.read_text())
    stamp.write_text(json.dumps({**record, "sha256": file_sha256(path)}))
    assert np.array_equal(rebuilt(), expected)
    stamp.write_text("{ not json")
    assert np.array_equal(rebuilt(), expected)
    assert json.loads(stamp.read_text())["sha256"] == file_sha256(path)


def test_missing_or_broken_weights_are_model_unavailable(tmp_path: Path) -> None:
    missing = OnnxMiniLMEmbedder(tmp_path / "no-such-model", cache_dir=tmp_path / "cache")
    with pytest.raises(ModelUnavailable):
        _ = missing.revision
    with pytest.raises(ModelUnavailable):
        missing.embed_documents(["text"])
    with pytest.raises(ModelUnavailable):
        missing.embed_query("text")

    broken = tmp_path / "model"
    shutil.copytree(default_model_dir(), broken)
    weights = broken / WEIGHTS_FILE
    weights.write_bytes(weights.read_bytes()[: 1 << 20])  # truncated: tensors past the end
    with pytest.raises(ModelUnavailable, match="cannot build the ONNX model"):
        OnnxMiniLMEmbedder(broken, cache_dir=tmp_path / "cache").load()
    weights.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\": 1}")  # a header, not of this model
    with pytest.raises(ModelUnavailable):
        OnnxMiniLMEmbedder(broken, cache_dir=tmp_path / "cache").embed_query("text")
    assert not list((tmp_path / "cache").glob("*.onnx"))  # nothing half-built is left to load

    shutil.copy(default_model_dir() / WEIGHTS_FILE, weights)
    (broken / "tokenizer.json").write_text("{ not json")
    with pytest.raises(ModelUnavailable, match="tokenizer"):
        OnnxMiniLMEmbedder(broken, cache_dir=tmp_path / "cache").load()


def test_an_inference_failure_is_model_unavailable(cache_dir: Path) -> None:
    embedder = OnnxMiniLMEmbedder(cache_dir=cache_dir)
    embedder.load()

    class Failing:
        def run(self, *args: Any) -> Any:
            raise onnxruntime_fail()

    embedder._sessions[embedder.query_threads] = Failing()
    with pytest.raises(ModelUnavailable, match="inference failed"):
        embedder.embed_query("rollback")


def test_an_inference_failure_on_an_indexing_worker_is_model_unavailable(cache_dir: Path) -> None:
    """int8 embeds a batch on worker threads (``_embed_alone``): a failure there reaches the
    caller as the same typed error, not a pool's exception or a partial result."""
    embedder = OnnxMiniLMEmbedder(cache_dir=cache_dir, inference="int8", batch_threads=2)
    embedder.load()
    calls: list[str] = []

    class Failing:
        def run(self, *args: Any) -> Any:
            import threading

            calls.append(threading.current_thread().name)
            raise onnxruntime_fail()

    embedder._sessions[1] = Failing()
    with pytest.raises(ModelUnavailable, match="inference failed"):
        embedder.embed_documents(TEXTS[:6])
    assert calls and all(name.startswith("embed") for name in calls)  # ran on the pool's workers


def onnxruntime_fail() -> Exception:
    import onnxruntime

    return onnxruntime.capi.onnxruntime_pybind11_state.Fail("[ONNXRuntimeError] : 1 : FAIL : out of memory")


def test_neither_torch_nor_transformers_is_imported(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from memory_core.adapters.models.onnx_minilm import OnnxMiniLMEmbedder\n"
        f"e = OnnxMiniLMEmbedder(cache_dir={str(tmp_path)!r}, inference='int8')\n"
        "assert e.embed_query('hello world').shape == (384,)\n"
        "assert len(e.embed_documents(['a', 'b c'])) == 2\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
