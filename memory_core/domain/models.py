"""Local models a user brings (issue 33): what a model directory declares, as values.

A model directory is what a model cache holds: ``config.json``, ``tokenizer.json``, safetensors
weights (one file or shards with ``model.safetensors.index.json``) and, where present, the
sentence-transformers files (``modules.json``, ``1_Pooling/config.json``,
``sentence_bert_config.json``, ``config_sentence_transformers.json``) that declare pooling,
normalisation, maximum length and prompts.

The adapter entry points (``memory_core.adapters.models``), all raising ``ModelUnavailable``
(``memory_core.domain.errors``, code ``model_unavailable``) naming what is wrong:

- ``model_dir.read_model_dir(path, overrides=None) -> ModelSpec``: reads and checks a directory,
  changes nothing.
- ``encoder_onnx.open_embedder(spec, cache_dir, inference=None, ...) -> Embedder`` (the
  ``memory_core.ports.Embedder`` port): the graph is built from the weights once with onnx, cached
  in ``cache_dir`` and run on ONNX Runtime (no torch). ``inference``: "fp32" or "int8"; None is
  fp32 for a brought model. The packaged all-MiniLM-L6-v2 with its own settings opens as the
  default embedder (None: the product's chosen path), with the revision stored data carries.
- ``encoder_onnx.open_cross_encoder(spec, cache_dir, depth=None, batch=16, max_tokens=None)``
  -> ``OnnxCrossEncoder`` (the ``memory_core.ports.Reranker`` port): the pipeline hands it the
  top ``rerank_depth``; ``depth`` bounds how many of those it scores.
- ``encoder_onnx.is_packaged_minilm(spec)``: whether a spec is the built-in default model.

docs/models.md is the user's side of all this.

The revision rule: ``ModelSpec.revision`` is the SHA-256 over the weights, the tokenizer, the
config and the settings that change a vector or a score (pooling, normalisation, maximum
length, prefixes). An embedder's revision names it, so vectors of two revisions never meet.
"""

from __future__ import annotations

import attrs

from memory_core.domain.errors import InvalidRequest

KINDS = ("embedding", "reranker")
FAMILIES = ("bert", "roberta", "xlm-roberta", "mpnet")
POOLINGS = ("mean", "cls", "last")
MAX_PREFIX_CHARS = 500


def _check_pooling(_: object, __: object, value: str | None) -> None:
    if value is not None and value not in POOLINGS:
        raise InvalidRequest(f"pooling must be one of {', '.join(POOLINGS)}", pooling=value)


def _check_max_tokens(_: object, __: object, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= 8192):
        raise InvalidRequest("max_tokens must be an integer from 2 to 8192", max_tokens=value)


def _check_prefix(_: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or len(value) > MAX_PREFIX_CHARS):
        raise InvalidRequest(f"{attribute.name} must be text of at most {MAX_PREFIX_CHARS} characters")


@attrs.frozen
class ModelOverrides:
    """What a user sets over the model's own declarations; None keeps the model's."""

    pooling: str | None = attrs.field(default=None, validator=_check_pooling)
    normalize: bool | None = None
    max_tokens: int | None = attrs.field(default=None, validator=_check_max_tokens)
    query_prefix: str | None = attrs.field(default=None, validator=_check_prefix)
    document_prefix: str | None = attrs.field(default=None, validator=_check_prefix)


@attrs.frozen
class ModelSpec:
    """A checked model directory and the settings it runs with.

    ``dimensions``: an embedding's vector length (the hidden size); a reranker's is 0.
    ``labels``: a reranker's classifier outputs (1: its logit is the score; 2: logit 1 - logit 0;
    more: the last one's logit); an embedding's is 0. ``max_tokens`` counts special tokens.
    Prefixes are prepended to the text before tokenizing (e5's ``"query: "``/``"passage: "``,
    bge's query instruction); a reranker's are empty. ``revision``: 64 hex digits (module doc).
    """

    path: str
    kind: str
    family: str
    architecture: str  # config.json's architectures[0], e.g. "BertModel", "XLMRobertaForSequenceClassification"
    pooling: str
    normalize: bool
    max_tokens: int
    query_prefix: str
    document_prefix: str
    dimensions: int
    labels: int
    revision: str

    @property
    def short_revision(self) -> str:
        return self.revision[:16]
