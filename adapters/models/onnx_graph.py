"""The ONNX graph of all-MiniLM-L6-v2 (a 6-layer BERT), built with ``onnx.helper`` from the
shipped ``model.safetensors``: no torch to build it, no download, no exported file to trust.

The graph takes ``input_ids`` and ``attention_mask`` (int64, batch × sequence) and returns
``embeddings`` (float32, batch × 384): the mean of the last hidden states over the mask,
L2-normalised, as sentence-transformers pools this model. Token types are all 0 (one segment),
so their embedding is a constant row. The operators are the plain ones (MatMul, Softmax,
LayerNormalization, Erf); ONNX Runtime's optimizer fuses them into its attention, GELU and
skip-LayerNorm kernels when the session loads, and the int8 path quantizes the MatMuls.

The weights are read with numpy from the safetensors layout (an 8-byte little-endian header
length, a JSON header of dtype/shape/offsets, then raw little-endian data), so neither torch nor
the ``safetensors`` package is needed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from memory_core.adapters.models.onnx_nodes import GraphBuilder, int64_input

# Part of the cache key: a change to the graph below must rebuild every cached file.
GRAPH_VERSION = "1"
HIDDEN = 384
HEADS = 12
LAYERS = 6
LAYER_NORM_EPS = 1e-12

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}
_MAX_HEADER = 100 << 20


class WeightsError(ValueError):
    """The weights file is not a safetensors file holding this model's tensors."""


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as a numpy array (copies: the file is closed after)."""
    data = path.read_bytes()
    if len(data) < 8:
        raise WeightsError(f"{path.name}: too short for a safetensors file")
    header_len = int.from_bytes(data[:8], "little")
    if header_len > min(_MAX_HEADER, len(data) - 8):
        raise WeightsError(f"{path.name}: header length {header_len} past the file's end")
    try:
        header = json.loads(data[8 : 8 + header_len])
    except ValueError as e:
        raise WeightsError(f"{path.name}: header is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise WeightsError(f"{path.name}: header is not a JSON object")
    body = memoryview(data)[8 + header_len :]
    tensors: dict[str, np.ndarray] = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = np.dtype(_DTYPES[spec["dtype"]]).newbyteorder("<")
            shape = tuple(int(n) for n in spec["shape"])
            start, end = (int(n) for n in spec["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise WeightsError(f"{path.name}: tensor {name!r} has a bad entry: {e!r}") from e
        if not 0 <= start <= end <= len(body) or end - start != dtype.itemsize * math.prod(shape):
            raise WeightsError(f"{path.name}: tensor {name!r} lies outside the file or has the wrong size")
        tensors[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
    return tensors


def build_model(weights: dict[str, np.ndarray]) -> Any:
    """The ``onnx.ModelProto`` of the sentence embedder; ``WeightsError`` if a tensor is missing
    or of the wrong shape."""
    g = _Graph(weights)
    ids, mask = "input_ids", "attention_mask"
    # Embeddings: word + position (0..S-1) + token type 0, then LayerNorm.
    word = g.node("Gather", [g.weight("embeddings.word_embeddings.weight", (-1, HIDDEN)), ids])
    seq_len = g.node("Shape", [ids], start=1, end=2)  # [S], 1-d as Slice wants
    zero = g.const("zero_1d", np.array([0], np.int64))
    position_table = g.weight("embeddings.position_embeddings.weight", (-1, HIDDEN))
    position = g.node("Slice", [position_table, zero, seq_len, zero])  # rows 0..S-1
    token_type = g.const("token_type_0", g.tensor("embeddings.token_type_embeddings.weight", (-1, HIDDEN))[0])
    x = g.node("Add", [g.node("Add", [word, position]), token_type])
    x = g.layer_norm(x, "embeddings.LayerNorm")
    mask_f, bias = g.score_bias(mask)
    for i in range(LAYERS):
        x = g.encoder_layer(x, bias, f"encoder.layer.{i}")
    # Mean over the attended tokens, then L2 norm.
    m = g.node("Unsqueeze", [mask_f, g.const("axes_2", np.array([2], np.int64))])
    axes_1 = g.const("axes_1", np.array([1], np.int64))
    summed = g.node("ReduceSum", [g.node("Mul", [x, m]), axes_1], keepdims=0)
    count = g.node("Max", [g.node("ReduceSum", [m, axes_1], keepdims=0), g.const("eps_9", np.array(1e-9, np.float32))])
    g.normalized(g.node("Div", [summed, count]), axes_1, "embeddings")
    return g.model("all-MiniLM-L6-v2", [int64_input(ids), int64_input(mask)], "embeddings", HIDDEN)


class _Graph(GraphBuilder):
    """all-MiniLM-L6-v2's shape; its own tensor check, constant layout and GELU node order, which
    its graph's bytes (and so the stored vectors' revision) depend on."""

    missing = WeightsError

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        super().__init__(weights, HIDDEN, HEADS, 4 * HIDDEN, LAYER_NORM_EPS)

    def misfit(self, name: str, array: np.ndarray, shape: tuple[int, ...]) -> str | None:
        if array.dtype != np.float32 or super().misfit(name, array, shape) is not None:
            return f"tensor {name!r} is {array.dtype} {array.shape}, expected float32 {shape}"
        return None

    def stored(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array)  # makes a 0-d constant 1-d, as this graph always stored them

    def activation(self, x: str) -> str:
        # GELU, the erf form BERT uses: 0.5 · x · (1 + erf(x / √2)).
        erf = self.node("Erf", [self.node("Div", [x, self.const("sqrt2", np.array(math.sqrt(2.0), np.float32))])])
        return self.node(
            "Mul",
            [
                self.node("Mul", [x, self.const("half", np.array(0.5, np.float32))]),
                self.node("Add", [erf, self.const("one_f", np.array(1.0, np.float32))]),
            ],
        )
