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

import contextlib
import copy
import json
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import attrs

from memory_core.activation_state import ActivationState
from memory_core.canonical import is_utf8_text
from memory_core.engine import ActivationResponse
from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.daemon.openapi import REF, SchemaBuilder
from memory_core.entrypoints.wire_input import decode_json, encodable, pruned
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

    def __init__(self, home: Path, *, start_timeout_s: float, idle_exit_s: float | None = None,
                 on_connect: Any = None) -> None:
        import jsonschema

        self.home = home
        self.start_timeout_s = start_timeout_s
        self.idle_exit_s = idle_exit_s  # for a daemon this server starts
        self.on_connect = on_connect  # called once connected (the heartbeat looks at the new daemon)
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
                self._client = ensure_daemon(self.home, timeout_s=self.start_timeout_s, idle_exit_s=self.idle_exit_s)
                if self.on_connect is not None:
                    self.on_connect()
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
def _error_body(exc: MemoryCoreError) -> dict[str, Any]:
    """The daemon's error envelope, every string encodable (a message may echo what was sent)."""
    return encodable({"error": {"code": exc.code, "message": exc.message, "details": exc.details}})  # type: ignore[no-any-return]


def _error_result(exc: MemoryCoreError) -> Any:
    import mcp_types as types

    body = _error_body(exc)
    text = f"error[{body['error']['code']}]: {body['error']['message']}"
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=body, is_error=True)


# -- stdin: every line through the boundary decoder, every request answered -------------------
# The SDK's stdin reader parses each line itself and, when that fails (not JSON, a lone
# surrogate, nesting past its parser's limit), hands the server an exception that the server
# only logs: the request is never answered and the agent waits forever. So the transport reads
# its lines from DecodingStdin, which decodes each line with the decoder the daemon and the CLI
# use, and answer_refused answers each line the SDK could not turn into a message.
MAX_LINE_BYTES = 8 << 20  # a message larger than this is refused unread (the daemon's limit is 1 MiB)


@attrs.frozen
class Verdict:
    """What the boundary decoder made of one stdin line (the SDK yields one item per line)."""

    request_id: int | str | None = None  # None: no id could be read (or a notification)
    method: str | None = None
    error: MemoryCoreError | None = None  # None: the decoder accepted the line
    blank: bool = False  # an empty line between messages: nothing to answer


def _envelope_of(value: Any) -> tuple[int | str | None, str | None]:
    if not isinstance(value, dict):
        return None, None
    rid, method = value.get("id"), value.get("method")
    if isinstance(rid, bool) or not isinstance(rid, int | str) or (isinstance(rid, str) and not is_utf8_text(rid)):
        rid = None  # an id we could not send back as it came
    return rid, method if isinstance(method, str) and is_utf8_text(method) else None


def _lenient_int(text: str) -> int | None:
    return int(text) if len(text) <= 20 else None  # an id is never longer; int() refuses 4,300 digits


def judge_line(raw: bytes) -> tuple[Verdict, str]:
    """The verdict on one line and the line the SDK gets: the line itself when the decoder
    accepts it, else an empty line (which the SDK refuses in turn, keeping the two in step)."""
    if not raw.strip():
        return Verdict(blank=True), "\n"
    if len(raw) > MAX_LINE_BYTES:
        error = api.RequestTooLarge(f"message is larger than {MAX_LINE_BYTES} bytes", limit=MAX_LINE_BYTES)
        return Verdict(error=error), "\n"
    try:
        value = decode_json(raw, what="message")
    except InvalidRequest as exc:
        try:  # the envelope's id and method, leniently, from the line with its deep parts cut off
            envelope = json.loads(pruned(raw.decode("utf-8", "replace")), parse_int=_lenient_int, parse_constant=str)
        except ValueError:
            envelope = None
        return Verdict(*_envelope_of(envelope), error=exc), "\n"
    return Verdict(*_envelope_of(value)), raw.decode("utf-8")


class DecodingStdin:
    """``stdio_server(stdin=...)``: the protocol's lines from a binary stream, judged one by one
    (``verdicts`` holds one entry per line handed on, in order)."""

    def __init__(self, binary: BinaryIO) -> None:
        self._binary = binary
        self.verdicts: deque[Verdict] = deque()

    def _readline(self) -> bytes:
        line = self._binary.readline(MAX_LINE_BYTES + 1)
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while (rest := self._binary.readline(1 << 20)) and not rest.endswith(b"\n"):
                pass  # drop the rest of an oversized line, unread
        return line

    def __aiter__(self) -> DecodingStdin:
        return self

    async def __anext__(self) -> str:
        import anyio.to_thread

        raw = await anyio.to_thread.run_sync(self._readline, abandon_on_cancel=True)
        if not raw:
            raise StopAsyncIteration
        verdict, line = judge_line(raw)
        self.verdicts.append(verdict)
        return line


def reply_to(verdict: Verdict, refused: Exception) -> Any:
    """The JSON-RPC message answering a line the SDK refused (None: nothing to answer). A
    tools/call gets the tool error any other bad argument gets; anything else a JSON-RPC error:
    -32700 for text that is not JSON, -32600 for JSON that is refused or is not a message."""
    import mcp_types as types

    if verdict.blank:
        return None
    exc = verdict.error
    if exc is not None and verdict.request_id is not None and verdict.method == "tools/call":
        result = _error_result(exc).model_dump(by_alias=True, mode="json", exclude_none=True)
        return types.JSONRPCResponse(jsonrpc="2.0", id=verdict.request_id, result=result)
    if exc is not None and verdict.request_id is None and verdict.method is not None:
        return None  # a notification: JSON-RPC never answers one (the log says it was refused)
    if exc is None:
        message = f"not a JSON-RPC 2.0 message: {type(refused).__name__}"
        exc = InvalidRequest(message, reason="not_a_message")
    code = types.PARSE_ERROR if exc.code == "invalid_json" else types.INVALID_REQUEST
    body = _error_body(exc)
    error = types.ErrorData(code=code, message=body["error"]["message"], data=body)
    return types.JSONRPCError(jsonrpc="2.0", id=verdict.request_id, error=error)


@contextlib.asynccontextmanager
async def answer_refused(read_stream: Any, write_stream: Any, verdicts: deque[Verdict]) -> AsyncIterator[Any]:
    """The server's read stream, relayed from the transport's: each exception the transport
    yields for a line is answered on ``write_stream`` (the transport's one writer) instead."""
    import anyio
    from mcp.shared.message import SessionMessage

    send, receive = anyio.create_memory_object_stream[Any](0)

    async def relay() -> None:
        async with send:
            async for item in read_stream:
                verdict = verdicts.popleft() if verdicts else Verdict()
                if not isinstance(item, Exception):
                    await send.send(item)
                    continue
                reply = reply_to(verdict, item)
                if verdict.blank:
                    continue
                code = verdict.error.code if verdict.error else "not_a_message"
                log.warning("refused a line", extra={"fields": {"code": code, "id": verdict.request_id,
                                                                "method": verdict.method, "answered": bool(reply)}})
                if reply is not None:
                    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                        await write_stream.send(SessionMessage(reply))

    async with anyio.create_task_group() as tg:
        tg.start_soon(relay)
        yield receive


@contextlib.contextmanager
def claimed_stdin() -> Iterator[BinaryIO]:
    """fd 0 for the protocol alone, as the SDK claims it when it reads stdin itself: a private
    duplicate carries the wire while fd 0 reads /dev/null, so no child or library eats a line."""
    try:
        private = os.dup(0)
        null = os.open(os.devnull, os.O_RDONLY)
    except OSError:
        yield sys.stdin.buffer
        return
    os.dup2(null, 0)
    os.close(null)
    try:
        # Never closed: a worker thread may still block on it when serving ends.
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        os.dup2(private, 0)


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


def main(home: str | None = None, *, start_timeout_s: float = 60.0, log_level: str = "warning",
         idle_exit_s: float | None = None) -> int:
    """Serve MCP on stdin/stdout until the client closes stdin; meanwhile the home's daemon is
    kept from stopping idle (a daemon this starts stops ``idle_exit_s`` after the client left)."""
    import anyio
    from mcp.server.stdio import stdio_server

    from memory_core.adapters.home import prepare_home, resolve_home
    from memory_core.entrypoints.daemon.server import configure_logging

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
                answer_refused(read_stream, write_stream, stdin.verdicts) as inbound,
            ):
                await server.run(inbound, write_stream, server.create_initialization_options())

    log.info("mcp serving", extra={"fields": {"home": str(root)}})
    try:
        anyio.run(serve)
    finally:
        heartbeat.close()
        forwarder.close()
    return 0
