"""What the two ONNX graph builders share: ``onnx_graph`` (the packaged all-MiniLM-L6-v2) and
``encoder_graph`` (any BERT, RoBERTa, XLM-R or MPNet encoder). One ``GraphBuilder`` keeps the
nodes and initializers, and builds a Linear, a LayerNorm, an encoder layer's attention and
feed-forward, the attention mask as a score bias, the L2 normalisation and the model around them.

A node's name is its operator and its place in the graph, and initializers are stored in the order
they are first named: the same calls in the same order give the same bytes. What each builder
does its own way stays in its subclass (how a tensor is checked, how a constant is laid out, the
activation's node order), so the packaged MiniLM's graph, and with it every stored index's
revision, is byte for byte what ``onnx_graph`` built before this class existed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

OPSET = 17  # LayerNormalization is an ONNX operator from 17 on
MASK_BIAS = -10000.0  # added to padding's attention scores: exp() of it is 0 in float32, as HF's finfo.min is


class GraphBuilder:
    """Nodes and initializers over ``weights`` (by their safetensors names) for an encoder of
    ``hidden`` width, ``heads`` attention heads, an ``intermediate`` feed-forward and LayerNorm ``eps``."""

    missing: type[ValueError] = ValueError  # what a missing or misshapen tensor raises

    def __init__(
        self, weights: Mapping[str, np.ndarray], hidden: int, heads: int, intermediate: int, eps: float
    ) -> None:
        from onnx import numpy_helper

        self._weights = weights
        self._from_array = numpy_helper.from_array
        self.hidden, self.heads, self.intermediate, self.eps = hidden, heads, intermediate, eps
        self._names: set[str] = set()
        self._count = 0
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []

    def misfit(self, name: str, array: np.ndarray, shape: tuple[int, ...]) -> str | None:
        """Why ``array`` cannot be tensor ``name`` of ``shape`` (-1: any length), or None."""
        if array.ndim != len(shape) or any(want not in (-1, got) for want, got in zip(shape, array.shape, strict=True)):
            return f"tensor {name!r} is {array.shape}, expected {shape}"
        return None

    def tensor(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        array = self._weights.get(name)
        if array is None:
            raise self.missing(f"the weights lack tensor {name!r}")
        problem = self.misfit(name, array, shape)
        if problem is not None:
            raise self.missing(problem)
        return array

    def stored(self, array: np.ndarray) -> np.ndarray:
        """``array`` laid out C-contiguous for ``numpy_helper.from_array``."""
        return array if array.flags.c_contiguous else array.copy(order="C")

    def const(self, name: str, array: np.ndarray) -> str:
        if name not in self._names:
            self._names.add(name)
            self.initializers.append(self._from_array(self.stored(array), name))
        return name

    def weight(self, name: str, shape: tuple[int, ...]) -> str:
        return self.const(name, self.tensor(name, shape))

    def node(self, op: str, inputs: list[str], output: str | None = None, **attributes: Any) -> str:
        from onnx import helper

        self._count += 1
        out = output or f"{op.lower()}_{self._count}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{self._count}", **attributes))
        return out

    def linear(self, x: str, prefix: str, rows: int, cols: int) -> str:
        """x @ Wᵀ + b, the Linear's weight (out × in) stored transposed as ``<prefix>.weight.T``."""
        transposed = self.const(prefix + ".weight.T", self.tensor(prefix + ".weight", (rows, cols)).T)
        product = self.node("MatMul", [x, transposed])
        return self.node("Add", [product, self.weight(prefix + ".bias", (rows,))])

    def layer_norm(self, x: str, prefix: str) -> str:
        scale, bias = self.weight(prefix + ".weight", (self.hidden,)), self.weight(prefix + ".bias", (self.hidden,))
        return self.node("LayerNormalization", [x, scale, bias], axis=-1, epsilon=self.eps)

    def score_bias(self, mask: str) -> tuple[str, str]:
        """The mask as float, and as a score bias (batch × 1 × 1 × S): 0 where attended, MASK_BIAS on padding."""
        from onnx import TensorProto

        mask_f = self.node("Cast", [mask], to=TensorProto.FLOAT)
        keep = self.node("Sub", [self.const("one_f", np.array(1.0, np.float32)), mask_f])
        bias = self.node("Mul", [keep, self.const("mask_bias", np.array(MASK_BIAS, np.float32))])
        return mask_f, self.node("Unsqueeze", [bias, self.const("axes_1_2", np.array([1, 2], np.int64))])

    def activation(self, x: str) -> str:
        raise NotImplementedError

    def attention_names(self, prefix: str) -> tuple[dict[str, str], str, str]:
        """BERT's names: the query/key/value projections, the output projection, its LayerNorm."""
        names = {n: f"{prefix}.attention.self.{n}" for n in ("query", "key", "value")}
        return names, f"{prefix}.attention.output.dense", f"{prefix}.attention.output.LayerNorm"

    def encoder_layer(self, x: str, bias: str, prefix: str) -> str:
        """Self-attention with ``bias`` added to its scores, then the feed-forward, each with its
        residual and LayerNorm (post-norm, as BERT)."""
        hidden, heads = self.hidden, self.heads
        head = hidden // heads
        split = self.const("shape_heads", np.array([0, 0, heads, head], np.int64))  # 0: keep that dim
        merge = self.const("shape_hidden", np.array([0, 0, hidden], np.int64))
        names, out_proj, attn_norm = self.attention_names(prefix)

        def project(name: str, perm: list[int]) -> str:
            projected = self.linear(x, names[name], hidden, hidden)
            return self.node("Transpose", [self.node("Reshape", [projected, split])], perm=perm)

        q = project("query", [0, 2, 1, 3])  # B × heads × S × head
        k = project("key", [0, 2, 3, 1])  # B × heads × head × S
        v = project("value", [0, 2, 1, 3])
        scores = self.node("MatMul", [q, k])
        scores = self.node("Mul", [scores, self.const("attn_scale", np.array(1.0 / math.sqrt(head), np.float32))])
        probs = self.node("Softmax", [self.node("Add", [scores, bias])], axis=-1)
        context = self.node("Transpose", [self.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = self.node("Reshape", [context, merge])
        attended = self.linear(context, out_proj, hidden, hidden)
        x = self.layer_norm(self.node("Add", [attended, x]), attn_norm)
        inner = self.activation(self.linear(x, f"{prefix}.intermediate.dense", self.intermediate, hidden))
        out = self.linear(inner, f"{prefix}.output.dense", hidden, self.intermediate)
        return self.layer_norm(self.node("Add", [out, x]), f"{prefix}.output.LayerNorm")

    def normalized(self, x: str, axes_1: str, output: str) -> None:
        """``output`` = x / max(‖x‖, 1e-12) over axis 1 (F.normalize's eps)."""
        squares = self.node("ReduceSum", [self.node("Mul", [x, x]), axes_1], keepdims=1)
        length = self.node("Max", [self.node("Sqrt", [squares]), self.const("eps_12", np.array(1e-12, np.float32))])
        self.node("Div", [x, length], output=output)

    def model(self, name: str, inputs: list[Any], output: str, width: int) -> Any:
        """The checked ``onnx.ModelProto`` of the nodes, returning ``output`` (float32, batch × width)."""
        import onnx
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes,
            name,
            inputs,
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", width])],
            initializer=self.initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="memory-core")
        model.ir_version = 8  # what every ONNX Runtime since 1.10 reads (opset 17 needs IR >= 8)
        onnx.checker.check_model(model)
        return model


def int64_input(name: str) -> Any:
    """A batch × sequence int64 graph input (input_ids, attention_mask, token_type_ids)."""
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
