"""The MiniLM inference paths by the names a user picks them with: ``bootstrap(inference=...)``,
else ``$MEMORY_CORE_INFERENCE``, else the default. Every process on a home should pick the same
one: a generation records its embedding revision, and an engine whose embedder has another
refuses to rank it (``project_not_indexed``) until ``memcore index`` re-embeds.

- ``onnx-int8`` (default since 5 December 2026): ONNX Runtime dynamic int8 (per-channel weights).
  Measured on the whole of Cranfield and CISI (docs/performance.md, *MiniLM inference paths*):
  about 2.5x fp32's indexing throughput and 0.4x its query CPU, with nDCG@10 within noise of
  fp32's, dense-only and as returned (B4), on both; cosine about 0.995 to fp32's vectors.
- ``onnx-fp32``: ONNX Runtime, torch fp32's vectors to cosine 0.99999 (the default until then).
- ``onnx-int8-blockwise``: ONNX Runtime, 8-bit weights in blocks of 32 (cosine 0.9995); faster
  queries than fp32, no faster batches.
- ``torch-fp32``, ``torch-int8``: the same two through torch (``memory-core[torch]``).
- ``torch-bf16``: torch with bfloat16 weights; about 2.25x fp32's indexing throughput on a CPU
  with AMX or AVX-512 BF16, correct but slow on one without (``memory-core[torch]``).
"""

from __future__ import annotations

import os
from pathlib import Path

from memory_core.adapters.models.minilm import QUERY_CACHE_SIZE
from memory_core.domain.errors import InvalidRequest
from memory_core.ports import Embedder

INFERENCE_ENV = "MEMORY_CORE_INFERENCE"
DEFAULT_INFERENCE = "onnx-int8"
# name -> (runtime, the embedder's inference path): a name is always "<runtime>-<path>".
CHOICES = {
    f"{runtime}-{path}": (runtime, path)
    for runtime, paths in (("onnx", ("int8", "fp32", "int8-blockwise")), ("torch", ("fp32", "int8", "bf16")))
    for path in paths
}


def chosen_inference(explicit: str | None = None) -> str:
    """``explicit``, else ``$MEMORY_CORE_INFERENCE``, else ``DEFAULT_INFERENCE``; one of
    ``CHOICES`` or InvalidRequest naming them."""
    choice = explicit or os.environ.get(INFERENCE_ENV) or DEFAULT_INFERENCE
    if choice not in CHOICES:
        source = "inference" if explicit else INFERENCE_ENV
        raise InvalidRequest(f"{source} must be one of {', '.join(CHOICES)}", inference=choice)
    return choice


def minilm_embedder(choice: str, models_dir: Path, query_cache_size: int = QUERY_CACHE_SIZE) -> Embedder:
    """The MiniLM embedder of an inference ``choice`` (``chosen_inference``); ONNX files are
    built into ``models_dir``. Nothing heavy is imported until it first embeds."""
    runtime, inference = CHOICES[chosen_inference(choice)]
    if runtime == "onnx":
        from memory_core.adapters.models.onnx_minilm import OnnxMiniLMEmbedder

        return OnnxMiniLMEmbedder(cache_dir=models_dir, inference=inference, query_cache_size=query_cache_size)
    from memory_core.adapters.models.minilm import MiniLMEmbedder

    return MiniLMEmbedder(inference=inference, query_cache_size=query_cache_size)
