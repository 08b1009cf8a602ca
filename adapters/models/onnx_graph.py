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

# Part of the cache key: a change to the graph below must rebuild every cached file.
GRAPH_VERSION = "1"
OPSET = 17  # LayerNormalization is an ONNX operator from 17 on
HIDDEN = 384
HEADS = 12
LAYERS = 6
LAYER_NORM_EPS = 1e-12
# Added to the attention scores of padding: exp() of it is 0 in float32, as HF's finfo.min is.
MASK_BIAS = -10000.0

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
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = _Graph(weights, numpy_helper)
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
    # Attention mask as a score bias, batch × 1 × 1 × S: 0 where attended, MASK_BIAS on padding.
    mask_f = g.node("Cast", [mask], to=TensorProto.FLOAT)
    keep = g.node("Sub", [g.const("one_f", np.array(1.0, np.float32)), mask_f])
    bias = g.node("Mul", [keep, g.const("mask_bias", np.array(MASK_BIAS, np.float32))])
    bias = g.node("Unsqueeze", [bias, g.const("axes_1_2", np.array([1, 2], np.int64))])
    for i in range(LAYERS):
        x = g.encoder_layer(x, bias, f"encoder.layer.{i}")
    # Mean over the attended tokens, then L2 norm (F.normalize's eps 1e-12).
    m = g.node("Unsqueeze", [mask_f, g.const("axes_2", np.array([2], np.int64))])
    axes_1 = g.const("axes_1", np.array([1], np.int64))
    summed = g.node("ReduceSum", [g.node("Mul", [x, m]), axes_1], keepdims=0)
    count = g.node("Max", [g.node("ReduceSum", [m, axes_1], keepdims=0), g.const("eps_9", np.array(1e-9, np.float32))])
    mean = g.node("Div", [summed, count])
    squares = g.node("ReduceSum", [g.node("Mul", [mean, mean]), axes_1], keepdims=1)
    length = g.node("Max", [g.node("Sqrt", [squares]), g.const("eps_12", np.array(1e-12, np.float32))])
    g.node("Div", [mean, length], output="embeddings")

    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info(mask, TensorProto.INT64, ["batch", "sequence"]),
        ],
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", HIDDEN])],
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="memory-core")
    model.ir_version = 8  # what every ONNX Runtime since 1.10 reads (opset 17 needs IR >= 8)
    onnx.checker.check_model(model)
    return model


class _Graph:
    """Accumulates nodes and initializers; names are generated, weights keep their safetensors names."""

    def __init__(self, weights: dict[str, np.ndarray], numpy_helper: Any) -> None:
        self._weights = weights
        self._numpy_helper = numpy_helper
        self._names: set[str] = set()
        self._count = 0
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []

    def tensor(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        array = self._weights.get(name)
        if array is None:
            raise WeightsError(f"the weights lack tensor {name!r}")
        if (
            array.dtype != np.float32
            or array.ndim != len(shape)
            or any(want not in (-1, got) for want, got in zip(shape, array.shape, strict=True))
        ):
            raise WeightsError(f"tensor {name!r} is {array.dtype} {array.shape}, expected float32 {shape}")
        return array

    def const(self, name: str, array: np.ndarray) -> str:
        if name not in self._names:
            self._names.add(name)
            self.initializers.append(self._numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weight(self, name: str, shape: tuple[int, ...]) -> str:
        return self.const(name, self.tensor(name, shape))

    def linear_weight(self, name: str, rows: int, cols: int) -> str:
        """A Linear's weight (out × in) stored transposed, so that MatMul(x, W) is x @ Wᵀ."""
        return self.const(name + ".T", self.tensor(name, (rows, cols)).T)

    def node(self, op: str, inputs: list[str], output: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        self._count += 1
        out = output or f"{op.lower()}_{self._count}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{self._count}", **attrs))
        return out

    def linear(self, x: str, prefix: str, rows: int, cols: int) -> str:
        product = self.node("MatMul", [x, self.linear_weight(prefix + ".weight", rows, cols)])
        return self.node("Add", [product, self.weight(prefix + ".bias", (rows,))])

    def layer_norm(self, x: str, prefix: str) -> str:
        scale, bias = self.weight(prefix + ".weight", (HIDDEN,)), self.weight(prefix + ".bias", (HIDDEN,))
        return self.node("LayerNormalization", [x, scale, bias], axis=-1, epsilon=LAYER_NORM_EPS)

    def encoder_layer(self, x: str, mask_bias: str, prefix: str) -> str:
        head = HIDDEN // HEADS
        split = self.const("shape_heads", np.array([0, 0, HEADS, head], np.int64))  # 0: keep that dim
        merge = self.const("shape_hidden", np.array([0, 0, HIDDEN], np.int64))

        def heads(name: str, perm: list[int]) -> str:
            projected = self.linear(x, f"{prefix}.attention.self.{name}", HIDDEN, HIDDEN)
            return self.node("Transpose", [self.node("Reshape", [projected, split])], perm=perm)

        q = heads("query", [0, 2, 1, 3])  # B × heads × S × head
        k = heads("key", [0, 2, 3, 1])  # B × heads × head × S
        v = heads("value", [0, 2, 1, 3])
        scores = self.node("MatMul", [q, k])
        scores = self.node("Mul", [scores, self.const("attn_scale", np.array(1.0 / math.sqrt(head), np.float32))])
        probs = self.node("Softmax", [self.node("Add", [scores, mask_bias])], axis=-1)
        context = self.node("Transpose", [self.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = self.node("Reshape", [context, merge])
        attended = self.linear(context, f"{prefix}.attention.output.dense", HIDDEN, HIDDEN)
        x = self.layer_norm(self.node("Add", [attended, x]), f"{prefix}.attention.output.LayerNorm")
        inner = self.linear(x, f"{prefix}.intermediate.dense", 4 * HIDDEN, HIDDEN)
        # GELU, the erf form BERT uses: 0.5 · x · (1 + erf(x / √2)).
        erf = self.node("Erf", [self.node("Div", [inner, self.const("sqrt2", np.array(math.sqrt(2.0), np.float32))])])
        gelu = self.node(
            "Mul",
            [
                self.node("Mul", [inner, self.const("half", np.array(0.5, np.float32))]),
                self.node("Add", [erf, self.const("one_f", np.array(1.0, np.float32))]),
            ],
        )
        out = self.linear(gelu, f"{prefix}.output.dense", HIDDEN, 4 * HIDDEN)
        return self.layer_norm(self.node("Add", [out, x]), f"{prefix}.output.LayerNorm")
