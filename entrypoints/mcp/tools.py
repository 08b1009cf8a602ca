"""The MCP tools' definitions: names, descriptions, and input and output JSON Schemas generated
from the same attrs types as ``contracts/openapi.json``, with nullable types spelled as ``anyOf``
branches (the Inspector's portability rule: single-``type`` dialects such as Gemini's reject type
arrays), committed as ``contracts/mcp-<tool>.schema.json`` (a test fails when they drift)."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import attrs

from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.daemon.openapi import REF, SchemaBuilder
from memory_core.services.activation import ActivationResponse

TOOL_NAME = "activate_memory"
TOOL_TITLE = "Activate project memory"
TOOL_DESCRIPTION = (
    "Retrieve the fragments of a project's memory (decisions, runbooks, conventions, notes) that "
    "matter for a task, within a token budget (list_projects gives the project ids). Each "
    "fragment carries a delta_action against what you already hold: 'add' (new, with text), "
    "'replace' (a newer version of a fragment you hold, with text) or 'reuse' (you already hold "
    "it: no text is sent). Send back the activation_state of the previous answer to get only what"
    " changed. Every call is recorded as a Retrieval Run (run_id) that a person can inspect and "
    "evaluate. 'freshness' says whether the index lags the project's files: index_behind true "
    "means files changed since it was built (changed_resources of them; reindex_pending: a "
    "re-index is under way, ask again shortly); stale_resources were edited since, so their "
    "fragments' text may be out of date, and missing_resources were deleted: prefer reading those"
    " files directly. live false: freshness is unknown (error says why). 'notices' says why an "
    "answer is empty when the project's ranking profile emptied it (a person changes the profile;"
    " asking again will not help)."
)
LIST_TOOL_NAME = "list_projects"
LIST_TOOL_TITLE = "List memory projects"
LIST_TOOL_DESCRIPTION = (
    "The projects whose memory activate_memory can search, with whether each is indexed yet "
    "(a project that is not cannot answer until a person runs `memcore index <project>`)."
)
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DEFS = "#/$defs/"


def _relink(value: Any) -> Any:
    """OpenAPI component references become references into the schema's own ``$defs``."""
    if isinstance(value, dict):
        return {k: (DEFS + v.removeprefix(REF) if k == "$ref" and isinstance(v, str) else _relink(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_relink(v) for v in value]
    return value


def _closure(root: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """The components ``root`` refers to, directly or not, as ``$defs``."""
    found: dict[str, Any] = {}
    todo = [root]
    while todo:
        text = json.dumps(todo.pop())
        for name in components:
            if f'"{REF}{name}"' in text and name not in found:
                found[name] = components[name]
                todo.append(components[name])
    return {name: _relink(found[name]) for name in sorted(found)}


_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
                          "$comment"})
_SCHEMA_MAPS = frozenset({"properties", "$defs", "patternProperties", "dependentSchemas"})  # name -> schema
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SCHEMAS = frozenset({"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
                      "unevaluatedItems", "unevaluatedProperties"})  # fmt: skip


def portable(schema: Any) -> Any:
    """``schema`` with every type array (``{"type": ["integer", "null"], "minimum": 1}``) spelled
    as ``anyOf`` single-type branches, each with the keywords that constrain it; annotations stay
    on the wrapper. The same instances are valid; no client has to map a type array."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: portable(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [portable(sub) for sub in value]
        else:
            out[key] = portable(value) if key in _SCHEMAS else value
    types = out.get("type")
    if not isinstance(types, list):
        return out
    constraints = {k: v for k, v in out.items() if k not in _ANNOTATIONS and k != "type"}
    branches = [{"type": t, **(constraints if t != "null" else {})} for t in types]
    return {**{k: v for k, v in out.items() if k in _ANNOTATIONS}, "anyOf": branches}


def tool_schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    """(input schema, output schema) of ``activate_memory``, self-contained (``$defs``)."""
    builder = SchemaBuilder()
    builder.ref(api.ActivateMemoryRequest)
    builder.ref(ActivationResponse)
    components = builder.components

    request = copy.deepcopy(components["ActivateMemoryRequest"])
    # Agents name the project ``project``; the daemon's field is ``project_id``.
    properties = {("project" if k == "project_id" else k): v for k, v in request["properties"].items()}
    properties["project"] = {**properties["project"], "description": "the project's id (list_projects lists them)"}
    properties["query"] = {**properties["query"], "description": "what the agent needs to know, in plain words"}
    input_schema: dict[str, Any] = {
        "type": "object",
        "title": "activate_memory arguments",
        "properties": _relink(properties),
        "required": ["project" if k == "project_id" else k for k in request["required"]],
        "additionalProperties": False,
    }
    defs = _closure(request, components)
    if defs:
        input_schema["$defs"] = defs

    response = components["ActivationResponse"]
    output_schema: dict[str, Any] = {**_relink(response), "title": "activate_memory result"}
    output_schema["$defs"] = _closure(response, components)
    return portable(input_schema), portable(output_schema)


@attrs.frozen
class ProjectEntry:
    """One project of this home."""

    project_id: str = attrs.field(metadata={"schema": {"description": "what activate_memory takes as project"}})
    indexed: bool = attrs.field(metadata={"schema": {"description": "it has an index: activate_memory can answer"}})
    resource_count: int | None = attrs.field(metadata={"schema": {"description": "files in its index; null: none"}})
    unit_count: int | None = attrs.field(metadata={"schema": {"description": "fragments in its index; null: none"}})
    indexed_at: str | None = attrs.field(metadata={"schema": {"description": "when its index was built (UTC)"}})


@attrs.frozen
class ProjectListing:
    """The projects of this home, by id."""

    projects: tuple[ProjectEntry, ...]


def list_tool_schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    """(input schema, output schema) of ``list_projects``: no arguments, the listing."""
    builder = SchemaBuilder()
    builder.ref(ProjectListing)
    listing = builder.components["ProjectListing"]
    input_schema = {"type": "object", "title": "list_projects arguments", "properties": {},
                    "additionalProperties": False}  # fmt: skip
    output_schema = {**_relink(listing), "title": "list_projects result",
                     "$defs": _closure(listing, builder.components)}  # fmt: skip
    return portable(input_schema), portable(output_schema)


def tool_definitions() -> dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """Each tool's (title, description, input schema, output schema), by name."""
    return {TOOL_NAME: (TOOL_TITLE, TOOL_DESCRIPTION, *tool_schemas()),
            LIST_TOOL_NAME: (LIST_TOOL_TITLE, LIST_TOOL_DESCRIPTION, *list_tool_schemas())}  # fmt: skip


def schema_document(name: str = TOOL_NAME) -> dict[str, Any]:
    """The committed contract of one tool: its name, description and both schemas."""
    title, description, input_schema, output_schema = tool_definitions()[name]
    return {
        "$schema": SCHEMA_DIALECT,
        "title": f"memory-core MCP tool {name}",
        "description": "Generated by `memcore contracts generate`; do not edit.",
        "name": name,
        "toolTitle": title,
        "toolDescription": description,
        "inputSchema": input_schema,
        "outputSchema": output_schema,
    }


def render_schema(name: str = TOOL_NAME) -> str:
    return json.dumps(schema_document(name), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def default_schema_path(name: str = TOOL_NAME) -> Path:
    return Path(__file__).resolve().parents[2] / "contracts" / f"mcp-{name}.schema.json"


def write_schema(path: Path | None = None, name: str = TOOL_NAME) -> Path:
    target = path or default_schema_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_schema(name), encoding="utf-8")
    return target


def schema_is_current(path: Path | None = None, name: str = TOOL_NAME) -> bool:
    try:
        return (path or default_schema_path(name)).read_text(encoding="utf-8") == render_schema(name)
    except OSError:
        return False


def schema_targets() -> list[tuple[Path, Any, Any]]:
    """(path, is it current, write it) of each tool's committed contract, for ``contracts generate``."""
    return [(default_schema_path(name), functools.partial(schema_is_current, name=name),
             functools.partial(write_schema, name=name)) for name in tool_definitions()]  # fmt: skip
