"""A local model directory read into a ``ModelSpec`` (issue 33), checked, nothing changed.

What is read, in a model cache's layout:

- ``config.json``: ``architectures[0]`` and ``model_type`` decide the kind and the family.
  ``...Model``, ``...ForMaskedLM`` and ``...ForPreTraining`` encoders give an embedding model (the
  encoder's last hidden states, pooled), ``...ForSequenceClassification`` a reranker (a
  cross-encoder). Families: BERT, RoBERTa, XLM-RoBERTa, MPNet (``FAMILIES``).
- ``tokenizer.json`` (the Rust ``tokenizers`` format; a directory with only ``vocab.txt`` or a
  sentencepiece file is refused, naming the file it lacks).
- safetensors weights: ``model.safetensors``, or the shards ``model.safetensors.index.json``
  names. Headers are checked against the file sizes here (a truncated download is refused before
  anything is built); ``.bin`` pickles are never read (unpickling runs code).
- sentence-transformers files where present: ``modules.json`` (a ``Normalize`` module means
  normalised vectors; a ``Dense`` or other module memory-core does not run is refused rather than
  ignored, since the vectors would differ from the model's), the pooling module's
  ``config.json``, ``sentence_bert_config.json`` (``max_seq_length``) and
  ``config_sentence_transformers.json`` (``prompts``: query and document prefixes).

Defaults where the model says nothing: mean pooling, normalised, at most 512 tokens (fewer if
its position table is shorter), no prefixes. ``ModelOverrides`` replace any of them.

The revision (``revision_of``): SHA-256 over the canonical JSON of each file's SHA-256
(``config.json``, ``tokenizer.json``, every weights file by name) and the settings that change
an output (kind, pooling, normalisation, maximum length, prefixes). The sentence-transformers
files count through the settings they give, so a README edit changes nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from memory_core.adapters.models.minilm import file_sha256
from memory_core.domain.canonical import hash_json
from memory_core.domain.errors import InvalidRequest, ModelUnavailable
from memory_core.domain.models import FAMILIES, POOLINGS, ModelOverrides, ModelSpec

CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
# config.json's model_type -> family; the graph builder (encoder_graph.py) knows each family.
MODEL_TYPES = {"bert": "bert", "roberta": "roberta", "xlm-roberta": "xlm-roberta", "mpnet": "mpnet"}
EMBEDDING_HEADS = ("Model", "ForMaskedLM", "ForPreTraining")
RERANKER_HEAD = "ForSequenceClassification"
DEFAULT_MAX_TOKENS = 512
# RoBERTa-style position ids start at padding_idx + 1, so that many rows of the table are unused.
POSITION_OFFSET_FAMILIES = ("roberta", "xlm-roberta", "mpnet")
# The sentence-transformers pooling flags memory-core runs, by the pooling they name.
_POOLING_FLAGS = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_lasttoken": "last"}
_UNSUPPORTED_POOLING_FLAGS = (
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
)
_ST_MODULES_RUN = ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling")
_ST_NORMALIZE = "sentence_transformers.models.Normalize"
_SAFETENSORS_DTYPES = {"F32": 4, "F16": 2, "BF16": 2}
_MAX_HEADER = 100 << 20
REVISION_FORMAT = 1


def read_model_dir(path: Path | str, overrides: ModelOverrides | None = None) -> ModelSpec:
    """The checked ``ModelSpec`` of a model directory; ``ModelUnavailable`` naming what is wrong
    (``details["missing"]`` or ``details["problem"]``), ``InvalidRequest`` for an override the
    model cannot honour. Reads every weights file once (to hash it); writes nothing."""
    directory = Path(path).expanduser()
    try:
        directory = directory.resolve(strict=True)
    except OSError as e:
        raise ModelUnavailable(f"model directory {directory} does not exist", model_dir=str(directory)) from e
    if not directory.is_dir():
        raise ModelUnavailable(f"{directory} is not a directory", model_dir=str(directory))
    config = read_config(directory)
    family, kind, architecture = _family_and_kind(config, directory)
    weights = weight_files(directory)
    tensors = check_weights(weights)
    vocab_rows = _word_rows(tensors, directory)
    tokenizer_size = _tokenizer_size(directory)
    if tokenizer_size > vocab_rows:
        raise _unavailable(
            f"the tokenizer's vocabulary ({tokenizer_size}) is larger than the model's embedding table "
            f"({vocab_rows} rows): tokenizer.json belongs to another model",
            directory,
            problem="tokenizer_mismatch",
        )
    settings = _declared_settings(directory, config, family, kind)
    settings = _overridden(settings, overrides or ModelOverrides(), _position_limit(config, family), kind)
    hidden = _positive_int(config, "hidden_size", directory)
    labels = _labels(config) if kind == "reranker" else 0
    spec = ModelSpec(
        path=str(directory),
        kind=kind,
        family=family,
        architecture=architecture,
        pooling=settings["pooling"],
        normalize=settings["normalize"],
        max_tokens=settings["max_tokens"],
        query_prefix=settings["query_prefix"],
        document_prefix=settings["document_prefix"],
        dimensions=hidden if kind == "embedding" else 0,
        labels=labels,
        revision="",
    )
    return attrs.evolve(spec, revision=revision_of(spec, weights))


def revision_of(spec: ModelSpec, weights: list[Path] | None = None) -> str:
    """The revision rule (module doc) over the directory's files as they are now."""
    directory = Path(spec.path)
    files = weights if weights is not None else weight_files(directory)
    try:
        digests = {
            "config": file_sha256(directory / CONFIG_FILE),
            "tokenizer": file_sha256(directory / TOKENIZER_FILE),
            "weights": {p.name: file_sha256(p) for p in files},
        }
    except OSError as e:
        raise _unavailable(f"cannot read the model's files: {e}", directory, problem="unreadable") from e
    settings = {
        "kind": spec.kind,
        "pooling": spec.pooling,
        "normalize": spec.normalize,
        "max_tokens": spec.max_tokens,
        "query_prefix": spec.query_prefix,
        "document_prefix": spec.document_prefix,
    }
    return hash_json({"format": REVISION_FORMAT, "files": digests, "settings": settings})


def read_config(directory: Path) -> dict[str, Any]:
    config = _read_json(directory / CONFIG_FILE, directory, required=True)
    if not isinstance(config, dict):
        raise _unavailable("config.json is not a JSON object", directory, problem="bad_config")
    return config


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files holding the weights: the shards the index names, else the one file."""
    index = directory / WEIGHTS_INDEX
    if index.is_file():
        data = _read_json(index, directory, required=True)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise _unavailable(f"{WEIGHTS_INDEX} has no weight_map", directory, problem="bad_weights_index")
        names = sorted({str(v) for v in weight_map.values()})
        if any("/" in n or "\\" in n or n.startswith(".") for n in names):
            raise _unavailable(
                f"{WEIGHTS_INDEX} names a file outside the directory", directory, problem="bad_weights_index"
            )
        missing = [n for n in names if not (directory / n).is_file()]
        if missing:
            raise _unavailable(f"weight shards missing: {', '.join(missing)}", directory, missing=missing[0])
        return [directory / n for n in names]
    single = directory / WEIGHTS_FILE
    if single.is_file():
        return [single]
    others = sorted(p.name for p in directory.glob("*.bin")) + sorted(p.name for p in directory.glob("*.safetensors"))
    hint = f" (found {', '.join(others)}: only {WEIGHTS_FILE} or sharded safetensors are read)" if others else ""
    raise _unavailable(f"no safetensors weights in {directory}{hint}", directory, missing=WEIGHTS_FILE)


def check_weights(files: list[Path]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every tensor's (dtype, shape) by name, after checking each file's header against its size
    (a truncated or corrupt file is refused here, before anything is built)."""
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    for path in files:
        for name, (dtype, shape, _start, _end) in safetensors_header(path).items():
            tensors[name] = (dtype, shape)
    return tensors


def safetensors_header(path: Path) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """name -> (dtype, shape, start, end) of a safetensors file, offsets into the whole file;
    ``ModelUnavailable`` (problem ``corrupt_weights``) if the header or the sizes disagree."""
    directory = path.parent
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise _corrupt(path, "too short for a safetensors file")
            header_len = int.from_bytes(head, "little")
            if header_len > min(_MAX_HEADER, size - 8):
                raise _corrupt(path, f"header length {header_len} past the file's end (truncated?)")
            raw = f.read(header_len)
    except OSError as e:
        raise _unavailable(f"cannot read {path.name}: {e}", directory, problem="unreadable", file=path.name) from e
    try:
        header = json.loads(raw)
    except ValueError as e:
        raise _corrupt(path, f"header is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise _corrupt(path, "header is not a JSON object")
    base = 8 + header_len
    out: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
    end_of_data = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = str(entry["dtype"])
            shape = tuple(int(n) for n in entry["shape"])
            start, end = (int(n) for n in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise _corrupt(path, f"tensor {name!r} has a bad entry: {e!r}") from e
        width = _SAFETENSORS_DTYPES.get(dtype)
        if width is not None and end - start != width * math.prod(shape):
            raise _corrupt(path, f"tensor {name!r} has the wrong size for {dtype} {shape}")
        if not 0 <= start <= end:
            raise _corrupt(path, f"tensor {name!r} has bad offsets")
        end_of_data = max(end_of_data, end)
        out[name] = (dtype, shape, base + start, base + end)
    if base + end_of_data > size:
        raise _corrupt(path, f"the file ends at byte {size}, its tensors at {base + end_of_data} (truncated)")
    return out


def _corrupt(path: Path, why: str) -> ModelUnavailable:
    return _unavailable(f"{path.name}: {why}", path.parent, problem="corrupt_weights", file=path.name)


def _unavailable(message: str, directory: Path, **details: Any) -> ModelUnavailable:
    return ModelUnavailable(message, model_dir=str(directory), **details)


def _read_json(path: Path, directory: Path, required: bool = False) -> Any:
    if not path.is_file():
        if required:
            raise _unavailable(f"{path.name} is missing from {directory}", directory, missing=path.name)
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise _unavailable(
            f"{path.name} is not readable JSON: {e}", directory, problem="bad_json", file=path.name
        ) from e


def _family_and_kind(config: Mapping[str, Any], directory: Path) -> tuple[str, str, str]:
    model_type = config.get("model_type")
    architectures = config.get("architectures")
    architecture = str(architectures[0]) if isinstance(architectures, list) and architectures else ""
    family = MODEL_TYPES.get(str(model_type))
    if family is None:
        raise _unavailable(
            f"unknown architecture: model_type {model_type!r} ({architecture or 'no architectures'}); "
            f"memory-core runs {', '.join(FAMILIES)} encoders",
            directory,
            problem="unknown_architecture",
            model_type=model_type,
            architecture=architecture,
        )
    if architecture.endswith(RERANKER_HEAD):
        return family, "reranker", architecture
    # BertLMHeadModel and is_decoder configs attend causally: not a sentence encoder.
    causal = architecture.endswith("LMHeadModel") or bool(config.get("is_decoder"))
    if not causal and (not architecture or architecture.endswith(EMBEDDING_HEADS)):
        return family, "embedding", architecture or f"{family}-encoder"
    raise _unavailable(
        f"unknown architecture {architecture!r}: an embedding model is a ...Model or ...ForMaskedLM encoder, "
        f"a cross-encoder a ...{RERANKER_HEAD}",
        directory,
        problem="unknown_architecture",
        architecture=architecture,
    )


def _word_rows(tensors: Mapping[str, tuple[str, tuple[int, ...]]], directory: Path) -> int:
    for name, (dtype, shape) in tensors.items():
        if name.endswith("embeddings.word_embeddings.weight") and len(shape) == 2:
            if dtype not in _SAFETENSORS_DTYPES:
                raise _unavailable(
                    f"weights of dtype {dtype} are not supported (float32, float16, bfloat16)",
                    directory,
                    problem="unsupported_dtype",
                )
            return shape[0]
    raise _unavailable(
        "the weights hold no encoder (no embeddings.word_embeddings.weight tensor)",
        directory,
        missing="embeddings.word_embeddings.weight",
    )


def _tokenizer_size(directory: Path) -> int:
    path = directory / TOKENIZER_FILE
    if not path.is_file():
        found = [
            n
            for n in ("vocab.txt", "sentencepiece.bpe.model", "spiece.model", "vocab.json")
            if (directory / n).is_file()
        ]
        hint = (
            f" (found {', '.join(found)}; memory-core reads tokenizer.json, which transformers writes)" if found else ""
        )
        raise _unavailable(f"no tokenizer: {TOKENIZER_FILE} is missing{hint}", directory, missing=TOKENIZER_FILE)
    try:
        from tokenizers import Tokenizer

        return int(Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True))
    except Exception as e:  # the Rust parser raises a bare Exception on a bad file
        raise _unavailable(
            f"{TOKENIZER_FILE} cannot be loaded: {type(e).__name__}: {e}", directory, problem="bad_tokenizer"
        ) from e


def _positive_int(config: Mapping[str, Any], key: str, directory: Path) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _unavailable(f"config.json lacks a positive {key}", directory, missing=key)
    return value


def _position_limit(config: Mapping[str, Any], family: str) -> int:
    """How many tokens the position table can place (RoBERTa's first padding_idx + 1 rows are unused)."""
    positions = config.get("max_position_embeddings")
    if not isinstance(positions, int) or positions < 2:
        return DEFAULT_MAX_TOKENS
    if family in POSITION_OFFSET_FAMILIES:
        pad = config.get("pad_token_id")
        positions -= (pad if isinstance(pad, int) and family != "mpnet" else 1) + 1
    return positions


def _labels(config: Mapping[str, Any]) -> int:
    id2label = config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return len(id2label)
    num = config.get("num_labels")
    return num if isinstance(num, int) and num > 0 else 2


def _declared_settings(directory: Path, config: Mapping[str, Any], family: str, kind: str) -> dict[str, Any]:
    """What the model's own files declare, else the defaults (module doc)."""
    settings: dict[str, Any] = {
        "pooling": "mean" if kind == "embedding" else "cls",
        "normalize": kind == "embedding",
        "max_tokens": None,
        "query_prefix": "",
        "document_prefix": "",
    }
    if kind == "reranker":
        return settings
    modules = _read_json(directory / "modules.json", directory)
    if modules is not None:
        if not isinstance(modules, list):
            raise _unavailable("modules.json is not a list", directory, problem="bad_json", file="modules.json")
        settings["normalize"] = False
        for module in modules:
            kind_name = str(module.get("type", "")) if isinstance(module, dict) else ""
            if kind_name == _ST_NORMALIZE:
                settings["normalize"] = True
            elif kind_name == "sentence_transformers.models.Pooling":
                settings["pooling"] = _pooling_of(directory, str(module.get("path", "1_Pooling")))
            elif kind_name not in _ST_MODULES_RUN:
                raise _unavailable(
                    f"modules.json has a {kind_name or 'nameless'} module memory-core does not run "
                    "(it runs a Transformer, a Pooling and a Normalize module)",
                    directory,
                    problem="unsupported_module",
                    module=kind_name,
                )
    st_config = _read_json(directory / "sentence_bert_config.json", directory)
    if isinstance(st_config, dict) and isinstance(st_config.get("max_seq_length"), int):
        settings["max_tokens"] = st_config["max_seq_length"]
    prompts_file = _read_json(directory / "config_sentence_transformers.json", directory)
    prompts = prompts_file.get("prompts") if isinstance(prompts_file, dict) else None
    if isinstance(prompts, dict):
        settings["query_prefix"] = str(prompts.get("query") or "")
        for name in ("document", "passage", "corpus", "text"):
            if prompts.get(name):
                settings["document_prefix"] = str(prompts[name])
                break
    return settings


def _pooling_of(directory: Path, module_path: str) -> str:
    if "/" in module_path.strip("/") or module_path.startswith(".."):
        raise _unavailable(
            f"modules.json names a pooling folder outside the model: {module_path}", directory, problem="bad_json"
        )
    config = _read_json(directory / module_path / "config.json", directory)
    if not isinstance(config, dict):
        return "mean"  # sentence-transformers' own default
    chosen = [pooling for flag, pooling in _POOLING_FLAGS.items() if config.get(flag)]
    unsupported = [flag for flag in _UNSUPPORTED_POOLING_FLAGS if config.get(flag)]
    if unsupported or len(chosen) != 1:
        raise _unavailable(
            f"the model pools with {', '.join(unsupported + [f'{c} pooling' for c in chosen]) or 'nothing'}; "
            f"memory-core runs exactly one of {', '.join(POOLINGS)} (override pooling to choose one)",
            directory,
            problem="unsupported_pooling",
        )
    return chosen[0]


def _overridden(settings: dict[str, Any], overrides: ModelOverrides, limit: int, kind: str) -> dict[str, Any]:
    out = dict(settings)
    for field in attrs.fields(ModelOverrides):
        value = getattr(overrides, field.name)
        if value is not None:
            out[field.name] = value
    if kind == "reranker" and (overrides.pooling or overrides.query_prefix or overrides.document_prefix):
        raise InvalidRequest("a cross-encoder's pooling and prefixes are its head's: only max_tokens may be set")
    if kind == "reranker":
        out["pooling"], out["normalize"] = "cls", False
    if out["max_tokens"] is None:
        out["max_tokens"] = min(DEFAULT_MAX_TOKENS, limit)
    if out["max_tokens"] > limit:
        if overrides.max_tokens is not None:
            raise InvalidRequest(
                f"max_tokens {out['max_tokens']} is past the model's {limit} positions", max_tokens=out["max_tokens"]
            )
        out["max_tokens"] = limit
    return out
