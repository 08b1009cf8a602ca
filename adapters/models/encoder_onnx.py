"""Any local encoder as an embedder or a cross-encoder on ONNX Runtime (issue 33): no torch.

``open_embedder(spec, cache_dir)`` gives the ``Embedder`` port, ``open_cross_encoder(spec,
cache_dir)`` the ``Reranker`` port, for a ``ModelSpec`` from ``model_dir.read_model_dir``.

- The graph (``encoder_graph.build_encoder``) is built from the weights the first time it is
  needed and cached in ``cache_dir`` as ``<architecture>-<revision[:16]>-g<GRAPH_VERSION>-<path>.onnx``
  with a sidecar recording its SHA-256 (onnx_minilm's scheme: a missing, damaged or refused file
  is rebuilt; a file is written whole or not at all).
- Before building or running, the directory's revision is computed again: a model whose files
  changed since its spec was read is ``ModelUnavailable`` (problem ``changed``), never run under
  the old revision's name.
- The packaged all-MiniLM-L6-v2 with its own settings opens as ``onnx_minilm.OnnxMiniLMEmbedder``
  (``inference.minilm_embedder``): the graph and the revision every stored index of the default
  model carries, unchanged.
- Inference paths: ``fp32`` (the default for a model brought by path) and ``int8`` (dynamic
  quantization, per-channel int8 weights, as the MiniLM default; each text runs alone since
  activations share one scale per tensor). int8 was measured on MiniLM only (cosine to fp32
  in benchmarks/models.py): a user's model gets fp32 unless int8 is asked for.
- Prefixes: ``query_prefix`` before a query, ``document_prefix`` before every indexed text.
- A cross-encoder scores (query, text) pairs, truncated longest-first to ``max_tokens``; a
  one-logit head's score is its logit, two logits give logit 1 - logit 0, more the last logit
  (cross_encoder.py's rule, so the torch and ONNX paths rank alike). ``depth`` bounds how many of
  the window it scores (a latency budget): the rest keep the fused order below them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import numpy as np

from memory_core.adapters.models.minilm import QUERY_CACHE_SIZE, QueryCache, available_cores
from memory_core.adapters.models.model_dir import TOKENIZER_FILE, read_config, revision_of, weight_files
from memory_core.adapters.models.onnx_sessions import CachedOnnxSessions, load_tokenizer
from memory_core.domain.errors import InvalidRequest, ModelUnavailable
from memory_core.domain.model import Vector
from memory_core.domain.models import ModelSpec
from memory_core.ports import Embedder
from memory_core.retrieval.pipeline import RerankInput

INFERENCE = ("fp32", "int8")
_REVISION_SUFFIX = {"fp32": "+onnx-fp32", "int8": "+onnx-int8-per-channel"}


def open_embedder(
    spec: ModelSpec,
    cache_dir: Path | str,
    inference: str | None = None,
    batch_size: int = 32,
    batch_threads: int | None = None,
    query_threads: int = 1,
    query_cache_size: int = QUERY_CACHE_SIZE,
) -> Embedder:
    """The Embedder of an embedding ``spec``. ``inference`` None: the packaged MiniLM's chosen
    path (``inference.chosen_inference``), fp32 for any other model. Nothing loads until the
    first embed (or ``load()``)."""
    if spec.kind != "embedding":
        raise InvalidRequest(f"{spec.architecture} is a {spec.kind}, not an embedding model", model_dir=spec.path)
    if is_packaged_minilm(spec):
        from memory_core.adapters.models.inference import chosen_inference, minilm_embedder

        choice = None if inference is None else f"onnx-{inference}"
        return minilm_embedder(chosen_inference(choice), Path(cache_dir), query_cache_size)
    return OnnxEncoderEmbedder(
        spec, cache_dir, inference or "fp32", batch_size, batch_threads, query_threads, query_cache_size
    )


def is_packaged_minilm(spec: ModelSpec) -> bool:
    """Whether ``spec`` is the shipped all-MiniLM-L6-v2 with the settings the default embedder
    runs it with (same files, mean pooling, normalised, 256 tokens, no prefixes)."""
    try:
        from memory_core.adapters.models.minilm import default_model_dir
        from memory_core.adapters.models.model_dir import read_model_dir

        return spec.revision == _packaged_revision(read_model_dir, default_model_dir())
    except ModelUnavailable:
        return False  # the package is not installed: no spec can be it


_packaged: dict[str, str] = {}


def _packaged_revision(read: Any, directory: Path) -> str:
    key = str(directory)
    if key not in _packaged:
        _packaged[key] = read(directory).revision
    return _packaged[key]


class _OnnxModel(CachedOnnxSessions):
    """What both ports share: the spec, its cached graph, sessions by thread count, the tokenizer."""

    def __init__(self, spec: ModelSpec, cache_dir: Path | str, inference: str) -> None:
        if inference not in INFERENCE:
            raise InvalidRequest(f"inference must be one of {', '.join(INFERENCE)}", inference=inference)
        self.spec = spec
        self.cache_dir = Path(cache_dir)
        self.inference = inference
        self._model_file: Path | None = None
        self._sessions: dict[int, Any] = {}
        self._tokenizer: Any = None
        self._load_lock = threading.Lock()

    @property
    def model_file(self) -> Path:
        self._session(1)
        assert self._model_file is not None
        return self._model_file

    def _prepare(self) -> None:
        self._check_revision()
        pad = read_config(Path(self.spec.path)).get("pad_token_id")
        self._pad_id = 1 if self.spec.family == "mpnet" else (pad if isinstance(pad, int) else 0)
        super()._prepare()

    def _check_revision(self) -> None:
        now = revision_of(self.spec)
        if now != self.spec.revision:
            raise ModelUnavailable(
                f"the model in {self.spec.path} changed since it was added (revision {self.spec.short_revision}, "
                f"now {now[:16]}): add it again to use the new files",
                model_dir=self.spec.path,
                problem="changed",
            )

    def _load_tokenizer(self) -> Any:
        directory = Path(self.spec.path)
        return load_tokenizer(directory, self.spec.max_tokens, model_dir=self.spec.path, missing=TOKENIZER_FILE)

    def _open_session(self, threads: int) -> Any:
        session = super()._open_session(threads)
        self._takes_token_types = any(i.name == "token_type_ids" for i in session.get_inputs())
        return session

    def _cache_entry(self, inference: str) -> tuple[Path, dict[str, Any]]:
        from memory_core.adapters.models.encoder_graph import GRAPH_VERSION

        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.spec.architecture)[:60]
        path = self.cache_dir / f"{name}-{self.spec.short_revision}-g{GRAPH_VERSION}-{inference}.onnx"
        return path, {"revision": self.spec.revision, "graph_version": GRAPH_VERSION, "inference": inference}

    def _build_details(self) -> dict[str, Any]:
        return {"model_dir": self.spec.path, "cache_dir": str(self.cache_dir), "problem": "build_failed"}

    def _build_fp32(self, target: Path) -> None:
        import onnx

        from memory_core.adapters.models.encoder_graph import (
            build_encoder,
            encoder_shape,
            encoder_weights,
            load_weights,
        )

        directory = Path(self.spec.path)
        config = read_config(directory)
        shape = encoder_shape(config, self.spec)
        weights = encoder_weights(load_weights(weight_files(directory)))
        onnx.save_model(build_encoder(shape, weights, name=self.spec.architecture), str(target))


class OnnxEncoderEmbedder(_OnnxModel):
    """The Embedder port over a brought model (module doc); rows are float32 numpy arrays."""

    def __init__(
        self,
        spec: ModelSpec,
        cache_dir: Path | str,
        inference: str = "fp32",
        batch_size: int = 32,
        batch_threads: int | None = None,
        query_threads: int = 1,
        query_cache_size: int = QUERY_CACHE_SIZE,
    ) -> None:
        if batch_size < 1 or query_threads < 1 or (batch_threads is not None and batch_threads < 1):
            raise InvalidRequest("batch_size, query_threads and batch_threads must be >= 1")
        super().__init__(spec, cache_dir, inference)
        self.batch_size = batch_size
        self.batch_threads = batch_threads
        self.query_threads = query_threads
        self._queries = QueryCache(query_cache_size)

    @property
    def revision(self) -> str:
        return f"{self.spec.architecture}@{self.spec.short_revision}{_REVISION_SUFFIX[self.inference]}"

    @property
    def dimensions(self) -> int:
        return self.spec.dimensions

    @property
    def loaded(self) -> bool:
        return self.query_threads in self._sessions

    def load(self) -> None:
        self._session(self.query_threads)

    def embed_query(self, text: str) -> Vector:
        return self._queries.vector(
            self.revision, text, lambda t: self._encode([self.spec.query_prefix + t], self.query_threads)[0]
        )

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        prefixed = [self.spec.document_prefix + t for t in texts]
        if not prefixed:
            return []
        threads = self.batch_threads or available_cores()
        if self.inference == "int8":
            return cast(list[Vector], list(self._embed_alone(prefixed, threads)))
        session = self._session(threads)
        encodings = self._tokenizer.encode_batch(prefixed)
        order = sorted(range(len(prefixed)), key=lambda i: -len(encodings[i].ids))  # similar lengths batch together
        vectors: list[np.ndarray] = [np.empty(0, dtype=np.float32)] * len(prefixed)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            for i, row in zip(batch, self._run(session, "embeddings", [encodings[i] for i in batch]), strict=True):
                vectors[i] = row
        return cast(list[Vector], vectors)

    def _encode(self, texts: list[str], threads: int) -> np.ndarray:
        """One pass over already-prefixed ``texts`` (no query cache; what a benchmark times)."""
        if self.inference == "int8":
            return np.stack(self._embed_alone(texts, threads))
        session = self._session(threads)
        return self._run(session, "embeddings", self._tokenizer.encode_batch(texts))

    def _embed_alone(self, texts: list[str], threads: int) -> list[np.ndarray]:
        """int8 shares one activation scale per tensor across a batch: each text runs alone (as
        onnx_minilm's int8 path, which says why), on ``threads`` workers."""
        session = self._session(1)
        encodings = self._tokenizer.encode_batch(texts)
        if threads == 1 or len(texts) == 1:
            return [self._run(session, "embeddings", [e])[0] for e in encodings]
        with ThreadPoolExecutor(max_workers=min(threads, len(texts)), thread_name_prefix="embed") as pool:
            return list(pool.map(lambda e: self._run(session, "embeddings", [e])[0], encodings))


class OnnxCrossEncoder(_OnnxModel):
    """The Reranker port over a ``...ForSequenceClassification`` model (module doc).
    ``scored_pairs`` and ``seconds`` add up what it has done, for a benchmark or a report."""

    def __init__(
        self,
        spec: ModelSpec,
        cache_dir: Path | str,
        depth: int | None = None,
        batch: int = 16,
        max_tokens: int | None = None,
        threads: int | None = None,
    ) -> None:
        if spec.kind != "reranker":
            raise InvalidRequest(
                f"{spec.architecture} is an {spec.kind} model, not a cross-encoder", model_dir=spec.path
            )
        if batch < 1 or (depth is not None and depth < 0) or (threads is not None and threads < 1):
            raise InvalidRequest("batch and threads must be >= 1 and depth >= 0")
        if max_tokens is not None and not 8 <= max_tokens <= spec.max_tokens:
            raise InvalidRequest(f"max_tokens must be from 8 to the model's {spec.max_tokens}", max_tokens=max_tokens)
        super().__init__(spec, cache_dir, "fp32")
        self.depth = depth
        self.batch = batch
        self.max_tokens = max_tokens or spec.max_tokens
        self.threads = threads
        self.scored_pairs = 0
        self.seconds = 0.0

    @property
    def revision(self) -> str:
        length = "" if self.max_tokens == self.spec.max_tokens else f"+max{self.max_tokens}"
        window = "" if self.depth is None else f"+depth{self.depth}"
        return f"cross-encoder:{self.spec.architecture}@{self.spec.short_revision}+onnx-fp32{length}{window}"

    @property
    def loaded(self) -> bool:
        return bool(self._sessions)

    def load(self) -> None:
        self._session(self._threads())

    def _threads(self) -> int:
        return self.threads or available_cores()

    def _load_tokenizer(self) -> Any:
        tokenizer = super()._load_tokenizer()
        tokenizer.enable_truncation(max_length=self.max_tokens, strategy="longest_first")
        return tokenizer

    def rerank(self, query: str, candidates: Sequence[RerankInput]) -> list[float]:
        if not candidates:
            return []
        started = time.perf_counter()
        scored = list(candidates)[: self.depth] if self.depth is not None else list(candidates)
        scores: list[float] = []
        if scored:
            session = self._session(self._threads())
            encodings = self._tokenizer.encode_batch([(query, c.text) for c in scored])
            order = sorted(range(len(scored)), key=lambda i: -len(encodings[i].ids))
            values = np.zeros(len(scored), dtype=np.float64)
            for start in range(0, len(order), self.batch):
                batch = order[start : start + self.batch]
                logits = self._run(session, "logits", [encodings[i] for i in batch])
                values[batch] = _score(logits)
            scores = [float(v) for v in values]
        if len(scored) < len(candidates):
            # Past the depth: one score below every scored one, so the fused order stays.
            floor = (min(scores) - 1.0) if scores else 0.0
            scores += [floor] * (len(candidates) - len(scored))
        self.scored_pairs += len(scored)
        self.seconds += time.perf_counter() - started
        return scores


# The Reranker of a ``...ForSequenceClassification`` ``spec`` (another kind is refused); loads on first use.
open_cross_encoder = OnnxCrossEncoder


def _score(logits: np.ndarray) -> np.ndarray:
    wide = logits.astype(np.float64)
    column: np.ndarray = wide[:, 1] - wide[:, 0] if logits.shape[1] == 2 else wide[:, -1]
    return column
