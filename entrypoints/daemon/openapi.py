"""The OpenAPI 3.1 document, generated from the dispatch table and the attrs types.

A small attrs → JSON Schema (2020-12) mapping: attrs classes become components with
``additionalProperties: false`` (the converter rejects unknown fields); fields without a default
are required; ``X | None`` is nullable; field metadata ``{"schema": {...}}`` adds keywords.
``contracts/openapi.json`` is this document, committed; a test fails when it drifts.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from memory_core.entrypoints.daemon import api, dispatch
from memory_core.retrieval.activation_state import MAX_STATE_UNITS, MAX_UNIT_ID_CHARS, ActivationState

REF = "#/components/schemas/"
_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
# Always possible, whatever the method.
COMMON_ERRORS = ("invalid_request", "invalid_json", "request_too_large", "internal_error", "storage_unavailable")


def _activation_state_schemas() -> dict[str, Any]:
    # Validated by ActivationState.from_json, not by the converter; spelled out here.
    return {
        "ActivationState": {
            "type": "object",
            "title": "ActivationState",
            "description": "What the agent already holds; every response carries the next one.",
            "properties": {
                "units": {"type": "array", "maxItems": MAX_STATE_UNITS, "items": {"$ref": REF + "HeldUnit"}}
            },
            "additionalProperties": False,
        },
        "HeldUnit": {
            "type": "object",
            "title": "HeldUnit",
            "properties": {
                "unit_id": {"type": "string", "minLength": 1, "maxLength": MAX_UNIT_ID_CHARS},
                "unit_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            },
            "required": ["unit_id", "unit_hash"],
            "additionalProperties": False,
        },
    }


class SchemaBuilder:
    """Collects component schemas while mapping types to schemas."""

    def __init__(self) -> None:
        self.components: dict[str, Any] = {}
        self._owners: dict[str, Any] = {}

    def ref(self, cls: Any) -> dict[str, Any]:
        name = cls.__name__
        owner = self._owners.setdefault(name, cls)
        if owner is not cls:
            raise ValueError(f"two wire types are named {name}: {owner!r} and {cls!r}")
        if name not in self.components:
            self.components[name] = {}  # placeholder: recursive types terminate
            self.components[name] = self._component(cls)
        return {"$ref": REF + name}

    def _component(self, cls: Any) -> dict[str, Any]:
        if cls is ActivationState:
            extra = _activation_state_schemas()
            self.components["HeldUnit"] = extra["HeldUnit"]
            self._owners["HeldUnit"] = "HeldUnit"
            return dict(extra["ActivationState"])
        if isinstance(cls, type) and issubclass(cls, enum.Enum):
            return {"type": "string", "title": cls.__name__, "enum": [m.value for m in cls]}
        if cls in api.DOCUMENT_SCHEMAS:
            return self._document_component(cls)
        return self._attrs_component(cls)

    def _document_component(self, cls: Any) -> dict[str, Any]:
        out = json.loads(json.dumps(api.DOCUMENT_SCHEMAS[cls]))  # a copy: the builder edits components
        out["title"] = cls.__name__
        return dict(out)

    def _attrs_component(self, cls: Any) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for field in attrs.fields(cls):
            schema = self.schema(hints[field.name])
            schema.update(field.metadata.get("schema", {}))
            if field.default is attrs.NOTHING:
                required.append(field.name)
            elif not isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
                schema["default"] = field.default.value if isinstance(field.default, enum.Enum) else field.default
            properties[field.name] = schema
        extra = dict(api.SCHEMA_EXTRA.get(cls, {}))
        for name, keywords in extra.pop("properties", {}).items():
            properties[name].update(keywords)
        for schema in properties.values():
            # A field that is absent rather than null (JudgmentInput.unit_id) documents no null default.
            types = schema.get("type")
            nullable = types is None or types == "null" or (isinstance(types, list) and "null" in types)
            if "default" in schema and schema["default"] is None and not nullable:
                del schema["default"]
        for name, (kind, description) in api.COMPUTED.get(cls, {}).items():
            properties[name] = {**self.schema(kind), "description": description, "readOnly": True}
            required.append(name)
        out: dict[str, Any] = {"type": "object", "title": cls.__name__, "properties": properties}
        if required:
            out["required"] = required
        out["additionalProperties"] = False
        doc = (cls.__doc__ or "").strip()
        if doc:
            out["description"] = doc.splitlines()[0]
        out.update(extra)
        return out

    def schema(self, tp: Any) -> dict[str, Any]:
        if tp is Any:
            return {}
        if tp in _PRIMITIVES:
            return {"type": _PRIMITIVES[tp]}
        if tp is type(None):
            return {"type": "null"}
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin in (types.UnionType, typing.Union):
            options = [a for a in args if a is not type(None)]
            nullable = len(options) < len(args)
            if len(options) == 1 and options[0] in _PRIMITIVES:
                inner = self.schema(options[0])
                return {"type": [inner["type"], "null"]} if nullable else inner
            variants = [self.schema(a) for a in options] + ([{"type": "null"}] if nullable else [])
            return {"anyOf": variants}
        if origin is typing.Literal:
            return {"enum": list(args)}
        if origin in (tuple, list, Sequence):
            item = args[0] if args else Any
            if origin is tuple and (len(args) != 2 or args[1] is not Ellipsis):
                raise TypeError(f"only homogeneous tuples (tuple[X, ...]) are wire types, not {tp}")
            return {"type": "array", "items": self.schema(item)}
        if origin in (dict, Mapping):
            return {"type": "object", "additionalProperties": self.schema(args[1] if args else Any)}
        if tp is ActivationState or attrs.has(tp) or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
            return self.ref(tp)
        raise TypeError(f"no JSON Schema mapping for {tp!r}")


def _error_responses(method: dispatch.Method) -> dict[str, Any]:
    codes = list(COMMON_ERRORS) + [e.code for e in method.errors]
    if method.undecoded:  # its body is held until its job answers, within the daemon's bound
        codes.append(api.DaemonBusy.code)
    by_status: dict[int, list[str]] = {}
    for code in dict.fromkeys(codes):
        by_status.setdefault(api.status_for(code), []).append(code)
    return {
        str(status): {
            "description": "error codes: " + ", ".join(sorted(codes_)),
            "content": {"application/json": {"schema": {"$ref": REF + "ErrorEnvelope"}}},
        }
        for status, codes_ in sorted(by_status.items())
    }


def _operation(builder: SchemaBuilder, method: dispatch.Method) -> dict[str, Any]:
    request_ref = builder.ref(method.request)
    has_inputs = bool(builder.components[method.request.__name__].get("required"))
    return {
        "operationId": method.name,
        "summary": method.summary,
        "x-max-body-bytes": method.max_body_bytes or api.MAX_BODY_BYTES,
        "requestBody": {
            "required": has_inputs,
            "content": {"application/json": {"schema": request_ref}},
        },
        "responses": {
            "200": {
                "description": "success",
                "content": {"application/json": {"schema": builder.ref(method.response)}},
            },
            **_error_responses(method),
        },
    }


def _larger_limits(methods: Sequence[dispatch.Method]) -> str:
    larger = [f"{m.name}: {m.max_body_bytes} bytes" for m in methods if m.max_body_bytes]
    return "; ".join(larger) or "none does"


def build_document(methods: Sequence[dispatch.Method] = dispatch.METHODS) -> dict[str, Any]:
    builder = SchemaBuilder()
    builder.ref(api.ErrorEnvelope)
    paths: dict[str, Any] = {}
    for method in methods:
        item: dict[str, Any] = {"post": _operation(builder, method)}
        if method.allow_get:
            get = {k: v for k, v in item["post"].items() if k not in ("requestBody", "x-max-body-bytes")}
            item["get"] = {**get, "operationId": f"{method.name}_get"}
        paths[f"/v1/{method.name}"] = item
    paths["/v1/openapi.json"] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document.",
            "responses": {"200": {"description": "the OpenAPI document", "content": {"application/json": {}}}},
        }
    }
    error_body = builder.components["ErrorBody"]
    error_body["properties"]["code"]["enum"] = sorted(api.STATUS_BY_CODE)
    error_body["x-status-by-code"] = dict(sorted(api.STATUS_BY_CODE.items()))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "memory-core daemon API",
            "version": api.API_VERSION,
            "description": (
                "HTTP/1.1 + JSON on the daemon's Unix socket (default <home>/run/memcore.sock). "
                "Every method is POST /v1/<method> with a JSON object body; every error is "
                '{"error": {"code", "message", "details"}} with one fixed HTTP status per code. '
                f"Bodies are limited to {api.MAX_BODY_BYTES} bytes unless an operation's x-max-body-bytes "
                f"says more ({_larger_limits(methods)}); unknown fields are rejected."
            ),
        },
        "servers": [{"url": "http://localhost", "description": "over the Unix socket"}],
        "paths": paths,
        "components": {"schemas": dict(sorted(builder.components.items()))},
    }


def render(document: dict[str, Any]) -> str:
    """Deterministic text: the committed file is compared byte for byte."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def default_path() -> Path:
    """``contracts/openapi.json`` of the source checkout this module lives in."""
    return Path(__file__).resolve().parents[2] / "contracts" / "openapi.json"


def write(path: Path | None = None) -> Path:
    target = path or default_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(build_document()), encoding="utf-8")
    return target


def is_current(path: Path | None = None) -> bool:
    target = path or default_path()
    try:
        return target.read_text(encoding="utf-8") == render(build_document())
    except OSError:
        return False
