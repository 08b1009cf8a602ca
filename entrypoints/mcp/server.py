"""``memcore mcp``: the ``activate_memory`` and ``list_projects`` MCP tools over stdio (the
official ``mcp`` SDK's low-level ``Server``), forwarding every call to the home's daemon and
starting it when none runs.

``activate_memory``'s structured output is the daemon's ``ActivationResponse`` as is, so what an
agent gets is exactly what the Run recorded; its text content is what a model reads: each
fragment's text under its id, and the activation_state to send back (not the JSON again, which
is nearly twice as long). A tool error is ``isError`` with a text that says how to recover and
no structured content (it would not match the output schema, and the spec and the Inspector
validate what is there); the daemon's error envelope rides in ``_meta["memory-core/error"]``.
The input and output JSON Schemas are generated from the same attrs types as
``contracts/openapi.json``, with nullable types spelled as ``anyOf`` branches (the Inspector's
portability rule: single-``type`` dialects such as Gemini's reject type arrays), and committed
as ``contracts/mcp-<tool>.schema.json`` (a test fails when they drift).

Stdout carries the MCP protocol and nothing else: logs are JSON lines on stderr, the SDK points
fd 1 at stderr while serving, and the daemon runs detached with its own log file.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import logging
import os
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import attrs

from memory_core.domain.canonical import is_utf8_text
from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.daemon.openapi import REF, SchemaBuilder
from memory_core.entrypoints.wire_input import decode_json, encodable, pruned
from memory_core.retrieval.activation_state import ActivationState
from memory_core.services.engine import ActivationResponse

log = logging.getLogger("memory_core.mcp")

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
    " files directly. live false: freshness is unknown (error says why)."
)
LIST_TOOL_NAME = "list_projects"
LIST_TOOL_TITLE = "List memory projects"
LIST_TOOL_DESCRIPTION = (
    "The projects whose memory activate_memory can search, with whether each is indexed yet "
    "(a project that is not cannot answer until a person runs `memcore index <project>`)."
)
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DEFS = "#/$defs/"
META_ERROR = "memory-core/error"  # the _meta key of a tool error's envelope (the spec's prefix/name form)


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
        """Forward one call; returns the structured result (the daemon's ActivationResponse)."""
        args = self.arguments(raw)
        state = args.get("activation_state")
        held = ActivationState.from_json(state) if state is not None else None
        response = self._with_daemon(lambda client: client.activate_memory(
            args["project"], args["query"], budget=args.get("budget"), activation_state=held,
            wait_for_index_ms=args.get("wait_for_index_ms", 0),
        ))  # fmt: skip
        return api.unstructure(self._converter, response)  # type: ignore[no-any-return]

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
def _error_body(exc: MemoryCoreError) -> dict[str, Any]:
    """The daemon's error envelope, every string encodable (a message may echo what was sent)."""
    return encodable({"error": {"code": exc.code, "message": exc.message, "details": exc.details}})  # type: ignore[no-any-return]


# What the model can do next, by error code (the message says what went wrong).
_RETRY_ARGUMENTS = "correct the arguments (the tool's inputSchema) and call again"
_UNAVAILABLE = "project memory is unavailable right now: go on without it (the MCP server's log says why)"
RECOVERY = {
    "project_not_found": "call list_projects for the ids, then call again with one of them",
    "project_not_indexed": "a person has to index it first; until then read the project's files directly",
    "invalid_activation_state": "send the previous answer's activation_state unchanged, or none",
    **dict.fromkeys(("invalid_request", "invalid_query", "invalid_budget", "invalid_json", "request_too_large"),
                    _RETRY_ARGUMENTS),
    **dict.fromkeys(("daemon_unavailable", "storage_unavailable", "internal_error", "retrieval_failed",
                     "generation_corrupted", "blob_corrupted", "blob_not_found"), _UNAVAILABLE),
}  # fmt: skip


def _error_result(exc: MemoryCoreError) -> Any:
    """A tool error any client accepts: ``isError`` with text only. Structured content would have
    to match the tool's outputSchema (MCP 2025-06-18), which an error cannot; the envelope (code,
    message, details such as a failed Run's run_id) is in ``_meta`` for programs."""
    import mcp_types as types

    error = _error_body(exc)["error"]
    lines = [f"error[{error['code']}]: {error['message']}"]
    if error["details"].get("run_id"):
        lines.append(f"recorded as failed Run {error['details']['run_id']}")
    if error["code"] in RECOVERY:
        lines.append(f"next: {RECOVERY[error['code']]}")
    return types.CallToolResult(content=[types.TextContent(text="\n".join(lines))], is_error=True,
                                _meta={META_ERROR: error})  # fmt: skip


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _freshness_lines(freshness: dict[str, Any] | None) -> list[str]:
    if not freshness:
        return []
    if not freshness.get("live"):
        return [f"freshness unknown: {freshness.get('error') or 'the live memory could not be read'}"]
    lines = []
    if freshness.get("index_behind"):
        pending = "; a re-index is under way: ask again shortly" if freshness.get("reindex_pending") else ""
        lines.append(f"the index is behind the project's files ({freshness.get('changed_resources')} changed){pending}")
    if freshness.get("stale_resources"):
        lines.append("edited since indexed, read the file instead: " + ", ".join(freshness["stale_resources"]))
    if freshness.get("missing_resources"):
        lines.append("deleted since indexed, do not rely on: " + ", ".join(freshness["missing_resources"]))
    return lines


def activation_text(result: dict[str, Any]) -> str:
    """What a model reads of an answer: a summary line, how fresh it is, each fragment's text
    under its id (whose prefix is the file's resource id) and headings, and the activation_state
    to send back. Uris, scores, revisions and latencies stay in the structured content."""
    fragments, totals = result["fragments"], result["totals"]
    actions = Counter(f["delta_action"] for f in fragments)
    said = ", ".join(f"{actions[a]} {a}" for a in ("add", "replace", "reuse") if actions[a]) or "none"
    run = f"run {result['run_id']}" if result.get("run_id") else "not recorded"
    lines = [f"{len(fragments)} fragments of project {result['project_id']} ({said}; "
             f"{totals['tokens']} of {totals['budget']} tokens; {run})"]  # fmt: skip
    lines += _freshness_lines(result.get("freshness"))
    for f in fragments:
        where = " > ".join(f["heading_path"])
        head = f"--- [{f['delta_action']}] {f['unit_id']}" + (f" · {where}" if where else "")
        lines += ["", head, f["text"] if f["text"] is not None else "(you hold it: no text sent)"]
    lines += ["", "activation_state (send it back unchanged next call): " + _compact(result["activation_state"])]
    return "\n".join(lines)


def projects_text(listing: dict[str, Any]) -> str:
    projects = listing["projects"]
    if not projects:
        return "no project yet: a person adds one with `memcore project add NAME --source PATH`"
    lines = [f"{len(projects)} projects (the id is activate_memory's project):"]
    for p in projects:
        state = (f"indexed: {p['resource_count']} files, {p['unit_count']} fragments, at {p['indexed_at']}"
                 if p["indexed"] else f"not indexed: a person runs `memcore index {p['project_id']}`")  # fmt: skip
        lines.append(f"- {p['project_id']} ({state})")
    return "\n".join(lines)


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


# The SDK cancels the requests still in flight when stdin ends; a client that writes its last
# requests and closes stdin (as a pipe does) would get no answer. So the end of stdin reaches
# the server only once every request it was handed is answered, or after this long.
DRAIN_TIMEOUT_S = 120.0


@contextlib.asynccontextmanager
async def answer_refused(read_stream: Any, write_stream: Any, verdicts: deque[Verdict],
                         drain_timeout_s: float = DRAIN_TIMEOUT_S) -> AsyncIterator[tuple[Any, Any]]:
    """The server's streams, relayed from the transport's: each exception the transport yields
    for a line is answered on ``write_stream`` (the transport's one writer) instead, and the end
    of input is passed on once the requests in flight are answered."""
    import anyio
    import mcp_types as types
    from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
    from mcp.shared.message import SessionMessage

    send, receive = anyio.create_memory_object_stream[Any](0)
    out_send, out_receive = anyio.create_memory_object_stream[Any](0)
    in_flight: set[Any] = set()
    answered = [anyio.Event()]  # set while nothing is in flight; a fresh one per busy spell

    def begin(request_id: Any) -> None:
        if not in_flight:
            answered[0] = anyio.Event()
        in_flight.add(request_id)

    def settle(request_id: Any) -> None:
        in_flight.discard(request_id)
        if not in_flight:
            answered[0].set()

    async def relay_in() -> None:
        async with send:
            async for item in read_stream:
                verdict = verdicts.popleft() if verdicts else Verdict()
                if not isinstance(item, Exception):
                    message = item.message
                    if isinstance(message, types.JSONRPCRequest):
                        begin(message.id)
                    elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
                        settle(cancelled_request_id_from_params(message.params))  # a cancelled one gets no answer
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
            if in_flight:
                with anyio.move_on_after(drain_timeout_s):
                    await answered[0].wait()
                if in_flight:
                    unanswered = sorted(map(str, in_flight))
                    log.warning("stdin ended with requests unanswered", extra={"fields": {"ids": unanswered}})

    async def relay_out() -> None:
        async with write_stream, out_receive:
            async for item in out_receive:
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    await write_stream.send(item)
                if isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
                    settle(item.message.id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(relay_in)
        tg.start_soon(relay_out)
        yield receive, out_send


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
            result = _error_result(exc)
        except Exception:
            log.exception("tool call failed", extra={"fields": {"tool": params.name}})
            code = "internal_error"
            result = _error_result(MemoryCoreError("internal error in the MCP server; see its log"))
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

    from memory_core.adapters.system.home import prepare_home, resolve_home
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
