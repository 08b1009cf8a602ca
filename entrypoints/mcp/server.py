"""``memcore mcp``: the ``activate_memory`` and ``list_projects`` MCP tools over stdio (the
official ``mcp`` SDK's low-level ``Server``), forwarding every call to the home's daemon and
starting it when none runs.

``activate_memory``'s structured output is the daemon's ``ActivationResponse`` as is, so what an
agent gets is exactly what the Run recorded; its text content is what a model reads: each
fragment's text under its id, and the activation_state to send back (not the JSON again, which
is nearly twice as long). A tool error is ``isError`` with a text that says how to recover and
no structured content (it would not match the output schema, and the spec and the Inspector
validate what is there); the daemon's error envelope rides in ``_meta["memory-core/error"]``.
The tools' definitions and generated schemas are ``tools``, the texts and tool errors a model
reads ``replies``, the stdin reader that answers every line ``stdin``; this module forwards the
calls (``Forwarder``) and serves.

Stdout carries the MCP protocol and nothing else: logs are JSON lines on stderr, the SDK points
fd 1 at stderr while serving, and the daemon runs detached with its own log file.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import attrs

from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.mcp.replies import activation_text, error_result, projects_text
from memory_core.entrypoints.mcp.stdin import DecodingStdin, answer_refused, claimed_stdin
from memory_core.entrypoints.mcp.tools import (
    LIST_TOOL_NAME,
    TOOL_NAME,
    ProjectEntry,
    ProjectListing,
    tool_definitions,
)

log = logging.getLogger("memory_core.mcp")


# -- forwarding to the daemon -----------------------------------------------------------------
def _problem(error: Any) -> str:
    """One schema violation in words. A nullable value's ``anyOf`` failure says what its typed
    branch said ("0 is less than the minimum of 1"), not "is not valid under any of the given
    schemas"; a value of neither type names the types."""
    if error.validator != "anyOf" or not error.context:
        return str(error.message)
    closer = [e for e in error.context if e.validator != "type"]
    if closer:
        return _problem(closer[0])
    types = [repr(e.validator_value) for e in error.context]
    return f"{error.instance!r} is not of type {' or '.join(types)}"


class Forwarder:
    """Turns tool arguments into daemon calls; connects (and starts the daemon) on first use."""

    def __init__(self, home: Path, *, start_timeout_s: float, idle_exit_s: float | None = None,
                 on_connect: Any = None) -> None:
        import jsonschema

        self.home = home
        self.start_timeout_s = start_timeout_s
        self.idle_exit_s = idle_exit_s  # for a daemon this server starts
        self.on_connect = on_connect  # called once connected (the heartbeat looks at the new daemon)
        self._validators = {name: jsonschema.Draft202012Validator(schemas[2])
                            for name, schemas in tool_definitions().items()}  # fmt: skip
        self._client: Any = None
        self._lock = threading.Lock()

    def _connect(self, *, fresh: bool = False) -> Any:
        from memory_core.entrypoints.daemon.launcher import ensure_daemon

        with self._lock:
            if fresh and self._client is not None:
                self._client.close()
                self._client = None
            if self._client is None:
                self._client = ensure_daemon(self.home, timeout_s=self.start_timeout_s, idle_exit_s=self.idle_exit_s)
                if self.on_connect is not None:
                    self.on_connect()
            return self._client

    def arguments(self, raw: dict[str, Any] | None, tool: str = TOOL_NAME) -> dict[str, Any]:
        """Validated arguments; an invalid call is an ``InvalidRequest`` naming each problem."""
        raw = raw or {}
        problems = sorted(self._validators[tool].iter_errors(raw), key=lambda e: list(e.absolute_path))
        if problems:
            said = [f"{_problem(e)} @ $" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}"
                                                for p in e.absolute_path) for e in problems[:10]]
            raise InvalidRequest(f"invalid {tool} arguments: " + "; ".join(said), errors=said)
        return raw

    def _with_daemon(self, call: Any) -> Any:
        import httpx

        try:
            return call(self._connect())
        except api.DaemonUnavailable as exc:
            # The daemon went away since we connected (stopped, crashed): the request was never
            # sent, so start one and send it again. Anything else is not retried.
            if not isinstance(exc.__cause__, httpx.ConnectError):
                raise
            log.warning("daemon gone; starting it again", extra={"fields": {"home": str(self.home)}})
            return call(self._connect(fresh=True))

    def activate(self, raw: dict[str, Any] | None) -> dict[str, Any]:
        """Forward one call as it came (the daemon decodes and checks it once); returns the
        daemon's answer as it came (an ActivationResponse's JSON), never decoded here."""
        args = self.arguments(raw)
        # Agents name the project ``project``; the daemon's field is ``project_id``.
        body = {("project_id" if key == "project" else key): value for key, value in args.items()}
        return self._with_daemon(lambda client: client.call_json(TOOL_NAME, body))  # type: ignore[no-any-return]

    def list_projects(self, raw: dict[str, Any] | None) -> dict[str, Any]:
        """The home's projects (``ProjectListing``), each with its current index if any."""
        self.arguments(raw, LIST_TOOL_NAME)
        entries = []
        for info in self._with_daemon(lambda client: client.list_projects()):
            g = info.generation
            entries.append(ProjectEntry(info.project.project_id, g is not None, g and g.resource_count,
                                        g and g.unit_count, g and g.created_at))  # fmt: skip
        return attrs.asdict(ProjectListing(tuple(entries)))  # tuples become lists

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


# -- the MCP server ---------------------------------------------------------------------------
def build_server(forwarder: Forwarder, version: str = "") -> Any:
    """The low-level MCP server with the one tool."""
    import anyio.to_thread
    import mcp_types as types
    from mcp.server import Server

    # list_projects is idempotent; an activation is not (each is a new Run).
    tools = [
        types.Tool(
            name=name, title=title, description=description, input_schema=input_schema,
            output_schema=output_schema,
            annotations=types.ToolAnnotations(
                title=title, read_only_hint=True, destructive_hint=False, idempotent_hint=name == LIST_TOOL_NAME,
                open_world_hint=False,
            ),
        )
        for name, (title, description, input_schema, output_schema) in tool_definitions().items()
    ]  # fmt: skip
    # Each tool: (forward the arguments, the text a model reads of the structured result).
    handlers = {TOOL_NAME: (forwarder.activate, activation_text),
                LIST_TOOL_NAME: (forwarder.list_projects, projects_text)}  # fmt: skip

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        started = time.perf_counter()
        code = "ok"
        try:
            if params.name not in handlers:
                raise InvalidRequest(f"unknown tool {params.name!r}; the tools are {', '.join(handlers)}",
                                     tool=params.name)  # fmt: skip
            forward, render = handlers[params.name]
            # The client blocks on the socket: off the event loop.
            structured = await anyio.to_thread.run_sync(forward, params.arguments)
            result = types.CallToolResult(content=[types.TextContent(text=render(structured))],
                                          structured_content=structured)  # fmt: skip
        except MemoryCoreError as exc:
            code = exc.code
            result = error_result(exc)
        except Exception:
            log.exception("tool call failed", extra={"fields": {"tool": params.name}})
            code = "internal_error"
            result = error_result(MemoryCoreError("internal error in the MCP server; see its log"))
        log.info("call", extra={"fields": {"tool": params.name, "code": code,
                                           "ms": round((time.perf_counter() - started) * 1000, 3)}})
        return result

    return Server(
        "memory-core",
        version=version,
        title="memory-core",
        instructions=("Call activate_memory before working on a project (list_projects gives the ids); "
                      "pass back activation_state."),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _package_version() -> str:
    from memory_core.domain.version import package_version

    return package_version()


def main(home: str | None = None, *, start_timeout_s: float = 60.0, log_level: str = "warning",
         idle_exit_s: float | None = None) -> int:
    """Serve MCP on stdin/stdout until the client closes stdin; meanwhile the home's daemon is
    kept from stopping idle (a daemon this starts stops ``idle_exit_s`` after the client left)."""
    import anyio
    from mcp.server.stdio import stdio_server

    from memory_core.entrypoints.bootstrap import prepare_home, resolve_home
    from memory_core.entrypoints.daemon.logs import configure_logging

    configure_logging(log_level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request: the "call" line says it
    root = prepare_home(resolve_home(home))
    from memory_core.entrypoints.daemon.launcher import Heartbeat

    heartbeat = Heartbeat(root).start()
    forwarder = Forwarder(root, start_timeout_s=start_timeout_s, idle_exit_s=idle_exit_s, on_connect=heartbeat.wake)
    server = build_server(forwarder, _package_version())

    async def serve() -> None:
        with claimed_stdin() as binary:
            stdin = DecodingStdin(binary)
            async with (
                stdio_server(stdin=stdin) as (read_stream, write_stream),  # type: ignore[arg-type]
                answer_refused(read_stream, write_stream, stdin.verdicts) as (inbound, outbound),
            ):
                await server.run(inbound, outbound, server.create_initialization_options())

    log.info("mcp serving", extra={"fields": {"home": str(root)}})
    try:
        anyio.run(serve)
    finally:
        heartbeat.close()
        forwarder.close()
    return 0
