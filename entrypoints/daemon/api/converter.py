"""The daemon's private cattrs converter: strict (wrong JSON types are rejected, never coerced;
unknown fields are errors), and every decoding failure an ``InvalidRequest`` naming its paths."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory, mapping_structure_factory
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from memory_core.domain.canonical import plain
from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.domain.evaluation_errors import InvalidJudgments
from memory_core.entrypoints.daemon.api.shapes import COMPUTED, DOCUMENT_SCHEMAS
from memory_core.entrypoints.wire_input import decode_json
from memory_core.evaluation.cases import parse_judgments
from memory_core.operations.evaluation import JudgmentInput
from memory_core.retrieval.activation_state import ActivationState


def _strict(kind: type | tuple[type, ...], label: str, cast: Callable[[Any], Any] | None = None) -> Any:
    def hook(value: Any, _: Any) -> Any:
        # bool is an int in Python, never in JSON.
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise TypeError(f"expected {label}, got a boolean")
        if not isinstance(value, kind):
            raise TypeError(f"expected {label}, got {_json_type(value)}")
        return cast(value) if cast else value

    return hook


def _json_type(value: Any) -> str:
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                       (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def _origin_is(*origins: Any) -> Callable[[Any], bool]:
    return lambda t: typing.get_origin(t) in origins


def make_converter() -> cattrs.Converter:
    """The daemon's private converter; use :func:`structure` and :func:`unstructure`."""
    import collections.abc as cabc

    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook(str, _strict(str, "a string"))
    conv.register_structure_hook(int, _strict(int, "an integer"))
    conv.register_structure_hook(float, _strict((int, float), "a number", float))
    conv.register_structure_hook(bool, _strict(bool, "a boolean"))

    def sequences(t: Any) -> Any:
        inner = (homogenous_tuple_structure_factory if typing.get_origin(t) is tuple else list_structure_factory)(
            t, conv
        )
        check = _strict(list, "an array")
        return lambda value, tp: inner(check(value, tp), tp)

    def mappings(t: Any) -> Any:
        inner = mapping_structure_factory(t, conv)
        check = _strict(dict, "an object")
        return lambda value, tp: inner(check(value, tp), tp)

    def classes(cls: Any) -> Any:
        inner = make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True)
        check = _strict(dict, "an object")
        return lambda value, tp: inner(check(value, tp), tp)

    conv.register_structure_hook_factory(lambda t: attrs.has(t) and t is not ActivationState, classes)
    conv.register_structure_hook_factory(_origin_is(tuple, list, cabc.Sequence), sequences)
    conv.register_structure_hook_factory(_origin_is(dict, cabc.Mapping), mappings)
    # The activation state validates itself and raises its own typed error.
    conv.register_structure_hook(ActivationState, lambda value, _: ActivationState.from_json(value))
    conv.register_unstructure_hook(ActivationState, plain)
    conv.register_unstructure_hook(tuple, lambda t: [conv.unstructure(x) for x in t])
    for cls, computed in COMPUTED.items():
        _register_computed(conv, cls, computed, classes(cls))
    # Judgments are checked as the engine checks a judgment file, so every problem of a set is
    # one invalid_judgments error listing {index, field, reason}, whatever the problem.
    conv.register_structure_hook_func(lambda t: t == tuple[JudgmentInput, ...], _structure_judgments)
    conv.register_unstructure_hook(
        JudgmentInput, lambda j: {k: v for k, v in attrs.asdict(j).items() if v is not None}
    )
    for cls in DOCUMENT_SCHEMAS:
        conv.register_structure_hook(cls, _document_hook(cls))
        conv.register_unstructure_hook(cls, lambda d: d.document)
    return conv


def _register_computed(
    conv: cattrs.Converter, cls: type, computed: dict[str, tuple[type, str]], structure_fields: Any
) -> None:
    unstructure_fields: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(cls, conv)

    def unstructure(value: Any) -> dict[str, Any]:
        return {**unstructure_fields(value), **{name: getattr(value, name) for name in computed}}

    def structure(raw: Any, tp: Any) -> Any:
        raw = _strict(dict, "an object")(raw, tp)
        given: dict[str, Any] = {
            name: conv.structure(raw[name], kind) for name, (kind, _) in computed.items() if name in raw
        }
        missing = sorted(set(computed) - set(given))
        if missing:
            raise ValueError(f"missing read-only field(s) {', '.join(missing)} of {cls.__name__}")
        value = structure_fields({k: v for k, v in raw.items() if k not in computed}, tp)
        for name, said in given.items():
            if getattr(value, name) != said:
                raise ValueError(f"{cls.__name__}.{name} is {said!r} but its fields say {getattr(value, name)!r}")
        return value

    conv.register_unstructure_hook(cls, unstructure)
    conv.register_structure_hook(cls, structure)


def _structure_judgments(raw: Any, _: Any) -> tuple[JudgmentInput, ...]:
    if not isinstance(raw, list):
        raise InvalidJudgments(
            "judgments must be a list", problems=[{"index": None, "field": "judgments", "reason": "not a list"}]
        )
    return tuple(JudgmentInput.of(j) for j in parse_judgments(raw))


def _document_hook(cls: type) -> Callable[[Any, Any], Any]:
    check = _strict(dict, "an object")
    return lambda raw, tp: cls(check(raw, tp))


def _domain_error(exc: BaseException) -> MemoryCoreError | None:
    """The first typed error a hook raised, from inside cattrs' exception groups."""
    if isinstance(exc, MemoryCoreError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _domain_error(inner)
        if found is not None:
            return found
    return None


def _describe(exc: BaseException, type_: Any) -> str:
    # Our hooks' messages ("expected a string, got an integer") and enum errors are clearer.
    if isinstance(exc, TypeError | ValueError) and not isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return str(exc)
    return cattrs.v.format_exception(exc, type_)


def structure(conv: cattrs.Converter, raw: Any, cls: type[Any]) -> Any:
    """Decode a JSON value into ``cls``; any mismatch is an InvalidRequest naming the paths."""
    if not isinstance(raw, dict):
        raise InvalidRequest(f"expected a JSON object for {cls.__name__}, got {_json_type(raw)}")
    try:
        return conv.structure(raw, cls)
    except Exception as exc:
        domain = _domain_error(exc)
        if domain is not None:
            raise domain from None
        problems = cattrs.transform_error(exc, path="$", format_exception=_describe)
        raise InvalidRequest(
            f"invalid {cls.__name__}: " + "; ".join(problems[:5]), errors=problems[:50]
        ) from None


def decode_body(body: bytes) -> Any:
    """A request body as JSON: no body at all is ``{}`` (whitespace alone is not JSON)."""
    return decode_json(body) if body else {}  # the boundary decoder every transport shares


def structure_body(conv: cattrs.Converter, body: bytes, cls: type[Any]) -> Any:
    """A request body decoded and checked into ``cls``: where a job decodes its own request
    (``jobs.FROM_BODY``), the same errors as the app's, in the same order."""
    return structure(conv, decode_body(body), cls)


def unstructure(conv: cattrs.Converter, value: Any) -> Any:
    return conv.unstructure(value)
