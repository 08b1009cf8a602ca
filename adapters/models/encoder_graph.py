"""The ONNX graph of any BERT, RoBERTa, XLM-RoBERTa or MPNet encoder (issue 33), built with
``onnx.helper`` from its safetensors weights: no torch, no exported file to trust.

``onnx_graph.py`` builds all-MiniLM-L6-v2's graph, whose bytes decide the vectors stored indexes
hold; both build on ``onnx_nodes.GraphBuilder``. This builder is the same construction with the
shape read from ``config.json`` (any hidden size, layer and head count) and the family's differences:

- BERT: absolute positions 0..S-1; token types as the tokenizer gives them (a cross-encoder's
  second segment is type 1) when the model has more than one.
- RoBERTa / XLM-R: positions count the attended tokens from ``padding_idx + 1`` (fairseq's
  rule, as transformers computes them); the one token type's row is a constant.
- MPNet: positions as RoBERTa's with ``padding_idx`` 1; no token types; every layer adds the
  shared relative position bias (32 buckets, the bucket of each distance precomputed here
  exactly as transformers' ``relative_position_bucket`` computes it) to its attention scores.

Outputs: an embedding model returns ``embeddings`` (batch × hidden), pooled over the mask
(mean, the first token, or the last attended one) and optionally L2-normalised. A
``...ForSequenceClassification`` model returns ``logits`` (batch × labels): BERT's pooler (tanh
of a dense over the first token) and its ``classifier``; RoBERTa's, XLM-R's and MPNet's
classification head (dense, tanh, ``out_proj`` over the first token).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from memory_core.adapters.models.model_dir import safetensors_header
from memory_core.adapters.models.onnx_nodes import GraphBuilder, int64_input
from memory_core.domain.errors import ModelUnavailable

# Part of the cache key of every built file: a change to the graph below must rebuild them.
GRAPH_VERSION = "e1"
MPNET_BUCKETS = 32  # transformers' MPNetEncoder calls relative_position_bucket with its default 32
MPNET_MAX_DISTANCE = 128
_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu")


@attrs.frozen
class EncoderShape:
    """What the graph needs from ``config.json`` and the ``ModelSpec``."""

    family: str
    kind: str  # "embedding" | "reranker"
    hidden: int
    layers: int
    heads: int
    intermediate: int
    eps: float
    activation: str
    pad_id: int
    token_types: int  # rows of the token type table; > 1 (BERT only) makes token_type_ids an input
    positions: int
    pooling: str
    normalize: bool
    labels: int

    @property
    def takes_token_types(self) -> bool:
        return self.family == "bert" and self.token_types > 1


def encoder_shape(config: Mapping[str, Any], spec: Any) -> EncoderShape:
    """The shape of ``spec``'s model from its ``config.json``; ModelUnavailable for what the
    builder does not run (another activation, relative positions in a BERT)."""

    def number(key: str, default: Any = None) -> Any:
        value = config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ModelUnavailable(f"config.json lacks {key}", model_dir=spec.path, missing=key)
        return value

    hidden, heads = int(number("hidden_size")), int(number("num_attention_heads"))
    if hidden % heads:
        raise ModelUnavailable(f"hidden_size {hidden} is not a multiple of {heads} heads", model_dir=spec.path)
    activation = str(config.get("hidden_act", "gelu"))
    if activation not in _ACTIVATIONS:
        raise ModelUnavailable(
            f"activation {activation!r} is not supported ({', '.join(_ACTIVATIONS)})",
            model_dir=spec.path,
            problem="unsupported_activation",
        )
    position_type = config.get("position_embedding_type", "absolute")
    if spec.family != "mpnet" and position_type != "absolute":
        raise ModelUnavailable(
            f"position_embedding_type {position_type!r} is not supported (absolute)",
            model_dir=spec.path,
            problem="unsupported_positions",
        )
    pad = 1 if spec.family == "mpnet" else int(config.get("pad_token_id") or 0)
    return EncoderShape(
        family=spec.family,
        kind=spec.kind,
        hidden=hidden,
        layers=int(number("num_hidden_layers")),
        heads=heads,
        intermediate=int(number("intermediate_size")),
        eps=float(number("layer_norm_eps", 1e-12)),
        activation=activation,
        pad_id=pad,
        token_types=int(config.get("type_vocab_size") or 0),
        positions=int(number("max_position_embeddings")),
        pooling=spec.pooling,
        normalize=spec.normalize,
        labels=spec.labels,
    )


def load_weights(files: list[Path]) -> dict[str, np.ndarray]:
    """Every tensor of the safetensors ``files`` as float32 (float16 and bfloat16 widened), read
    through a memory map; old checkpoints' LayerNorm ``gamma``/``beta`` get today's names."""
    tensors: dict[str, np.ndarray] = {}
    for path in files:
        header = safetensors_header(path)
        data = np.memmap(path, dtype=np.uint8, mode="r")
        for name, (dtype, shape, start, end) in header.items():
            raw = data[start:end]
            if dtype == "F32":
                array = raw.view("<f4").astype(np.float32)
            elif dtype == "F16":
                array = raw.view("<f2").astype(np.float32)
            elif dtype == "BF16":
                array = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                continue  # int buffers (position_ids) the graph does not read
            if name.endswith("LayerNorm.gamma"):
                name = name[: -len("gamma")] + "weight"
            elif name.endswith("LayerNorm.beta"):
                name = name[: -len("beta")] + "bias"
            tensors[name] = array.reshape(shape)
        del data
    return tensors


def encoder_weights(weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights with the encoder's prefix (``bert.``, ``roberta.``, ``mpnet.``, ...) stripped;
    the head's (``classifier.*``) keep their names."""
    prefixes = [
        k[: -len("embeddings.word_embeddings.weight")]
        for k in weights
        if k.endswith("embeddings.word_embeddings.weight")
    ]
    if not prefixes:
        raise WeightsMissing("embeddings.word_embeddings.weight")
    prefix = min(prefixes, key=len)
    out = {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}
    out.update({k: v for k, v in weights.items() if k.startswith("classifier.")})
    return out


class WeightsMissing(ValueError):
    """A tensor the graph needs is absent or of another shape."""


def build_encoder(shape: EncoderShape, weights: Mapping[str, np.ndarray], name: str = "encoder") -> Any:
    """The ``onnx.ModelProto``; ``WeightsMissing`` naming a missing or misshapen tensor."""
    g = _Graph(weights, shape)
    ids, mask = "input_ids", "attention_mask"
    inputs = [int64_input(ids), int64_input(mask)]
    h = shape.hidden
    x = g.node("Gather", [g.weight("embeddings.word_embeddings.weight", (-1, h)), ids])
    x = g.node("Add", [x, _positions(g, shape, ids, mask)])
    if shape.takes_token_types:
        inputs.append(int64_input("token_type_ids"))
        table = g.weight("embeddings.token_type_embeddings.weight", (shape.token_types, h))
        x = g.node("Add", [x, g.node("Gather", [table, "token_type_ids"])])
    elif shape.family != "mpnet" and "embeddings.token_type_embeddings.weight" in weights:
        row = g.tensor("embeddings.token_type_embeddings.weight", (-1, h))[0]
        x = g.node("Add", [x, g.const("token_type_0", row)])
    x = g.layer_norm(x, "embeddings.LayerNorm")
    mask_f, bias = g.score_bias(mask)  # B × 1 × 1 × S
    if shape.family == "mpnet":
        bias = g.node("Add", [bias, _mpnet_position_bias(g, shape, ids)])  # B × heads × S × S
    for i in range(shape.layers):
        x = g.encoder_layer(x, bias, f"encoder.layer.{i}")
    if shape.kind == "reranker":
        _classifier(g, shape, x, "logits")
        return g.model(name, inputs, "logits", shape.labels)
    _pooled(g, shape, x, mask_f, "embeddings")
    return g.model(name, inputs, "embeddings", h)


def mpnet_buckets(positions: int) -> np.ndarray:
    """The bucket of each relative position ``-(positions-1) .. positions-1`` (index + positions-1),
    as transformers' ``MPNetEncoder.relative_position_bucket`` computes it in float32."""
    relative = np.arange(-(positions - 1), positions, dtype=np.int64)
    half = MPNET_BUCKETS // 2
    n = -relative
    out = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    max_exact = half // 2
    with np.errstate(divide="ignore"):
        scaled = np.log(n.astype(np.float32) / np.float32(max_exact)) / np.float32(
            math.log(MPNET_MAX_DISTANCE / max_exact)
        )
        large = max_exact + (scaled * np.float32(half - max_exact)).astype(np.float32)
    large_i = np.where(n < max_exact, 0, np.trunc(np.nan_to_num(large, neginf=0.0))).astype(np.int64)
    large_i = np.minimum(large_i, half - 1)
    return out + np.where(n < max_exact, n, large_i)


def _positions(g: _Graph, shape: EncoderShape, ids: str, mask: str) -> str:
    table = g.weight("embeddings.position_embeddings.weight", (shape.positions, shape.hidden))
    if shape.family == "bert":
        seq_len = g.node("Shape", [ids], start=1, end=2)
        zero = g.const("zero_1d", np.array([0], np.int64))
        return g.node("Slice", [table, zero, seq_len, zero])  # rows 0..S-1
    # fairseq's positions: the count of attended tokens so far, from padding_idx + 1; padding
    # gets padding_idx (its row is never attended).
    counted = g.node("CumSum", [mask, g.const("axis_1", np.array(1, np.int64))])
    position_ids = g.node("Add", [g.node("Mul", [counted, mask]), g.const("pad_id", np.array(shape.pad_id, np.int64))])
    return g.node("Gather", [table, position_ids])


def _mpnet_position_bias(g: _Graph, shape: EncoderShape, ids: str) -> str:
    """1 × heads × S × S: the bias of each (query, key) distance, shared by every layer."""
    table = g.weight("encoder.relative_attention_bias.weight", (-1, shape.heads))
    seq = g.node("Squeeze", [g.node("Shape", [ids], start=1, end=2)])
    steps = g.node("Range", [g.const("zero_i", np.array(0, np.int64)), seq, g.const("one_i", np.array(1, np.int64))])
    memory = g.node("Unsqueeze", [steps, g.const("axes_0", np.array([0], np.int64))])
    context = g.node("Unsqueeze", [steps, g.const("axes_1", np.array([1], np.int64))])
    relative = g.node("Sub", [memory, context])  # S × S: key - query
    offset = g.const("bucket_offset", np.array(shape.positions - 1, np.int64))
    bucket = g.node(
        "Gather", [g.const("mpnet_buckets", mpnet_buckets(shape.positions)), g.node("Add", [relative, offset])]
    )
    values = g.node("Gather", [table, bucket])  # S × S × heads
    values = g.node("Transpose", [values], perm=[2, 0, 1])
    return g.node("Unsqueeze", [values, g.const("axes_0", np.array([0], np.int64))])


def _first_token(g: _Graph, x: str) -> str:
    return g.node("Gather", [x, g.const("index_0", np.array(0, np.int64))], axis=1)  # B × H


def _pooled(g: _Graph, shape: EncoderShape, x: str, mask_f: str, output: str) -> None:
    axes_1 = g.const("axes_1", np.array([1], np.int64))
    if shape.pooling == "cls":
        pooled = _first_token(g, x)
    else:
        if shape.pooling == "mean":
            weight = mask_f
        else:  # last: the attended token whose right neighbour is padding (right padding)
            padded = g.node("Pad", [mask_f, g.const("pad_right_1", np.array([0, 0, 0, 1], np.int64))])
            after = g.node(
                "Slice",
                [
                    padded,
                    g.const("one_1d", np.array([1], np.int64)),
                    g.const("big_1d", np.array([1 << 62], np.int64)),
                    axes_1,
                ],
            )
            weight = g.node("Mul", [mask_f, g.node("Sub", [g.const("one_f", np.array(1.0, np.float32)), after])])
        w = g.node("Unsqueeze", [weight, g.const("axes_2", np.array([2], np.int64))])
        pooled = g.node("ReduceSum", [g.node("Mul", [x, w]), axes_1], keepdims=0)
        if shape.pooling == "mean":
            count = g.node(
                "Max", [g.node("ReduceSum", [w, axes_1], keepdims=0), g.const("eps_9", np.array(1e-9, np.float32))]
            )
            pooled = g.node("Div", [pooled, count])
    if shape.normalize:
        g.normalized(pooled, axes_1, output)
    else:
        g.node("Identity", [pooled], output=output)


def _classifier(g: _Graph, shape: EncoderShape, x: str, output: str) -> None:
    first = _first_token(g, x)
    h = shape.hidden
    if shape.family == "bert":
        pooled = g.node("Tanh", [g.linear(first, "pooler.dense", h, h)])
        logits = g.linear(pooled, "classifier", shape.labels, h)
    else:
        dense = g.node("Tanh", [g.linear(first, "classifier.dense", h, h)])
        logits = g.linear(dense, "classifier.out_proj", shape.labels, h)
    g.node("Identity", [logits], output=output)


class _Graph(GraphBuilder):
    """Weights keep their (prefix-stripped) safetensors names; the shape and family from ``config.json``."""

    missing = WeightsMissing

    def __init__(self, weights: Mapping[str, np.ndarray], shape: EncoderShape) -> None:
        super().__init__(weights, shape.hidden, shape.heads, shape.intermediate, shape.eps)
        self._shape = shape

    def misfit(self, name: str, array: np.ndarray, shape: tuple[int, ...]) -> str | None:
        problem = super().misfit(name, array, shape)
        return None if problem is None else problem + " (config.json disagrees)"

    def activation(self, x: str) -> str:
        kind = self._shape.activation
        if kind == "relu":
            return self.node("Relu", [x])
        half = self.node("Mul", [x, self.const("half", np.array(0.5, np.float32))])
        one = self.const("one_f", np.array(1.0, np.float32))
        if kind == "gelu":  # the erf form: 0.5 · x · (1 + erf(x / √2))
            inner = self.node("Erf", [self.node("Div", [x, self.const("sqrt2", np.array(math.sqrt(2.0), np.float32))])])
        else:  # the tanh form: 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))
            cube = self.node("Mul", [self.node("Mul", [x, x]), x])
            cubic = self.node(
                "Add", [x, self.node("Mul", [cube, self.const("gelu_c", np.array(0.044715, np.float32))])]
            )
            k = self.const("gelu_k", np.array(math.sqrt(2.0 / math.pi), np.float32))
            inner = self.node("Tanh", [self.node("Mul", [cubic, k])])
        return self.node("Mul", [half, self.node("Add", [inner, one])])

    def attention_names(self, prefix: str) -> tuple[dict[str, str], str, str]:
        if self._shape.family != "mpnet":
            return super().attention_names(prefix)
        names = {n: f"{prefix}.attention.attn.{n[0]}" for n in ("query", "key", "value")}
        return names, f"{prefix}.attention.attn.o", f"{prefix}.attention.LayerNorm"
