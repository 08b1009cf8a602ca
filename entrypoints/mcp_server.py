"""``memcore mcp``: the ``activate_memory`` MCP tool over stdio (the official ``mcp`` SDK's
low-level ``Server``), forwarding every call to the home's daemon and starting it when none runs.

The tool's structured output is the daemon's ``ActivationResponse`` as is, so what an agent gets
is exactly what the Run recorded. Its input and output JSON Schemas are generated from the same
attrs types as ``contracts/openapi.json`` and committed as
``contracts/mcp-activate_memory.schema.json`` (a test fails when it drifts).

Stdout carries the MCP protocol and nothing else: logs are JSON lines on stderr, the SDK points
fd 1 at stderr while serving, and the daemon runs detached with its own log file.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from memory_core.activation_state import ActivationState
from memory_core.engine import ActivationResponse
from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.daemon.openapi import REF, SchemaBuilder
from memory_core.errors import InvalidRequest, MemoryCoreError

log = logging.getLogger("memory_core.mcp")

TOOL_NAME = "activate_memory"
TOOL_TITLE = "Activate project memory"
TOOL_DESCRIPTION = (
    "Retrieve the fragments of a project's memory (decisions, runbooks, conventions, notes) that "
    "matter for a task, within a token budget. Each fragment carries a delta_action against what "
    "you already hold: 'add' (new, with text), 'replace' (a newer version of a fragment you hold, "
    "with text) or 'reuse' (you already hold it: no text is sent). Send back the activation_state "
    "of the previous answer to get only what changed. Every call is recorded as a Retrieval Run "
    "(run_id) that a person can inspect and evaluate. 'freshness' says whether the index lags the "
    "project's files: index_behind true means files changed since it was built (changed_resources "
    "of them; reindex_pending: a re-index is under way, ask again shortly); stale_resources were "
    "edited since, so their fragments' text may be out of date, and missing_resources were deleted: "
    "prefer reading those files directly. live false: freshness is unknown (error says why)."
)
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DEFS = "#/$defs/"


# -- the tool's schemas (generated) -----------------------------------------------------------
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


def tool_schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    """(input schema, output schema) of ``activate_memory``, self-contained (``$defs``)."""
    builder = SchemaBuilder()
    builder.ref(api.ActivateMemoryRequest)
    builder.ref(ActivationResponse)
    components = builder.components

    request = copy.deepcopy(components["ActivateMemoryRequest"])
    # Agents name the project ``project``; the daemon's field is ``project_id``.
    properties = {("project" if k == "project_id" else k): v for k, v in request["properties"].items()}
    properties["project"] = {**properties["project"], "description": "the project's id (see `memcore project list`)"}
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
    return input_schema, output_schema


def schema_document() -> dict[str, Any]:
    """The committed contract: the tool's name, description and both schemas."""
    input_schema, output_schema = tool_schemas()
    return {
        "$schema": SCHEMA_DIALECT,
        "title": f"memory-core MCP tool {TOOL_NAME}",
        "description": "Generated by `memcore contracts generate`; do not edit.",
        "name": TOOL_NAME,
        "toolTitle": TOOL_TITLE,
        "toolDescription": TOOL_DESCRIPTION,
        "inputSchema": input_schema,
        "outputSchema": output_schema,
    }


def render_schema() -> str:
    return json.dumps(schema_document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def default_schema_path() -> Path:
    return Path(__file__).resolve().parents[1] / "contracts" / f"mcp-{TOOL_NAME}.schema.json"


def write_schema(path: Path | None = None) -> Path:
    target = path or default_schema_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_schema(), encoding="utf-8")
    return target


def schema_is_current(path: Path | None = None) -> bool:
    try:
        return (path or default_schema_path()).read_text(encoding="utf-8") == render_schema()
    except OSError:
        return False


# -- forwarding to the daemon -----------------------------------------------------------------
class Forwarder:
    """Turns tool arguments into daemon calls; connects (and starts the daemon) on first use."""

    def __init__(self, home: Path, *, start_timeout_s: float) -> None:
        import jsonschema

        self.home = home
        self.start_timeout_s = start_timeout_s
        self.input_schema, self.output_schema = tool_schemas()
        self._validator = jsonschema.Draft202012Validator(self.input_schema)
        self._converter = api.make_converter()
        self._client: Any = None
        self._lock = threading.Lock()

    def _connect(self, *, fresh: bool = False) -> Any:
        from memory_core.entrypoints.daemon.launcher import ensure_daemon

        with self._lock:
            if fresh and self._client is not None:
                self._client.close()
                self._client = None
            if self._client is None:
                self._client = ensure_daemon(self.home, timeout_s=self.start_timeout_s)
            return self._client

    def arguments(self, raw: dict[str, Any] | None) -> dict[str, Any]:
        """Validated arguments; an invalid call is an ``InvalidRequest`` naming each problem."""
        raw = raw or {}
        problems = sorted(self._validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
        if problems:
            said = [f"{e.message} @ $" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}"
                                                for p in e.absolute_path) for e in problems[:10]]
            raise InvalidRequest("invalid activate_memory arguments: " + "; ".join(said), errors=said)
        return raw

    def activate(self, raw: dict[str, Any] | None) -> dict[str, Any]:
        """Forward one call; returns the structured result (the daemon's ActivationResponse)."""
        import httpx

        args = self.arguments(raw)
        state = args.get("activation_state")
        held = ActivationState.from_json(state) if state is not None else None

        def call(client: Any) -> ActivationResponse:
            return client.activate_memory(  # type: ignore[no-any-return]
                args["project"], args["query"], budget=args.get("budget"), activation_state=held
            )

        try:
            response = call(self._connect())
        except api.DaemonUnavailable as exc:
            # The daemon went away since we connected (stopped, crashed): the request was never
            # sent, so start one and send it again. Anything else is not retried.
            if not isinstance(exc.__cause__, httpx.ConnectError):
                raise
            log.warning("daemon gone; starting it again", extra={"fields": {"home": str(self.home)}})
            response = call(self._connect(fresh=True))
        return api.unstructure(self._converter, response)  # type: ignore[no-any-return]

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


# -- the MCP server ---------------------------------------------------------------------------
def _error_result(exc: MemoryCoreError) -> Any:
    import mcp_types as types

    error = {"code": exc.code, "message": exc.message, "details": exc.details}
    text = f"error[{exc.code}]: {exc.message}"
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content={"error": json.loads(json.dumps(error, default=str))},
        is_error=True,
    )


def build_server(forwarder: Forwarder, version: str = "") -> Any:
    """The low-level MCP server with the one tool."""
    import anyio.to_thread
    import mcp_types as types
    from mcp.server import Server

    tool = types.Tool(
        name=TOOL_NAME,
        title=TOOL_TITLE,
        description=TOOL_DESCRIPTION,
        input_schema=forwarder.input_schema,
        output_schema=forwarder.output_schema,
        annotations=types.ToolAnnotations(
            title=TOOL_TITLE, read_only_hint=True, destructive_hint=False, idempotent_hint=False,
            open_world_hint=False,
        ),
    )

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        started = time.perf_counter()
        code = "ok"
        try:
            if params.name != TOOL_NAME:
                raise InvalidRequest(f"unknown tool {params.name!r}; the only tool is {TOOL_NAME}", tool=params.name)
            # The client blocks on the socket: off the event loop.
            structured = await anyio.to_thread.run_sync(forwarder.activate, params.arguments)
            result = types.CallToolResult(
                content=[types.TextContent(text=json.dumps(structured, ensure_ascii=False))],
                structured_content=structured,
            )
        except MemoryCoreError as exc:
            code = exc.code
            result = _error_result(exc)
        except Exception:
            log.exception("activate_memory failed")
            code = "internal_error"
            result = _error_result(MemoryCoreError("internal error in the MCP server; see its log"))
        log.info("call", extra={"fields": {"tool": params.name, "code": code,
                                           "ms": round((time.perf_counter() - started) * 1000, 3)}})
        return result

    return Server(
        "memory-core",
        version=version,
        title="memory-core",
        instructions="Call activate_memory before working on a project; pass back activation_state.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memory-core")
    except PackageNotFoundError:
        return "0+unknown"


def main(home: str | None = None, *, start_timeout_s: float = 60.0, log_level: str = "warning") -> int:
    """Serve MCP on stdin/stdout until the client closes stdin."""
    import anyio
    from mcp.server.stdio import stdio_server

    from memory_core.adapters.home import prepare_home, resolve_home
    from memory_core.entrypoints.daemon.server import configure_logging

    configure_logging(log_level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request: the "call" line says it
    root = prepare_home(resolve_home(home))
    forwarder = Forwarder(root, start_timeout_s=start_timeout_s)
    server = build_server(forwarder, _package_version())

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    log.info("mcp serving", extra={"fields": {"home": str(root)}})
    try:
        anyio.run(serve)
    finally:
        forwarder.close()
    return 0
