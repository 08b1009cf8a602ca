"""stdin for ``memcore mcp``: every line through the boundary decoder, every request answered,
also those still in flight when stdin ends."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Any, BinaryIO

import attrs

from memory_core.domain.canonical import is_utf8_text
from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.mcp.replies import error_body, error_result
from memory_core.entrypoints.wire_input import decode_json, pruned

log = logging.getLogger("memory_core.mcp")

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
    id_given: bool = False  # the line has an ``id`` member, even one we cannot send back: not a notification


def _valid_id(rid: Any) -> bool:
    """MCP's request id: an integer or a string (never null, a fraction, an array or an object)."""
    return not isinstance(rid, bool) and isinstance(rid, int | str)


def _envelope_of(value: Any) -> tuple[int | str | None, str | None, bool]:
    if not isinstance(value, dict):
        return None, None, False
    rid, method = value.get("id"), value.get("method")
    if not _valid_id(rid) or (isinstance(rid, str) and not is_utf8_text(rid)):
        rid = None  # an id we could not send back as it came
    return rid, method if isinstance(method, str) and is_utf8_text(method) else None, "id" in value


_JSON_KINDS = {type(None): "null", bool: "a boolean", list: "an array", dict: "an object"}


def _invalid_id(value: Any) -> MemoryCoreError | None:
    """A request whose id is not an integer or a string: the SDK's message types take it for a
    notification (which carries no id) and drop it unanswered, so it is refused here instead."""
    if isinstance(value, dict) and "method" in value and "id" in value and not _valid_id(value["id"]):
        kind = _JSON_KINDS.get(type(value["id"]), "a number with a fraction")
        return InvalidRequest(f"a request id must be an integer or a string, not {kind}", reason="invalid_id")
    return None


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
            envelope = json.loads(pruned(raw.decode("utf-8", "replace")), parse_int=_lenient_int, parse_constant=float)
        except ValueError:
            envelope = None
        rid, method, id_given = _envelope_of(envelope)
        return Verdict(rid, method, error=exc, id_given=id_given), "\n"
    rid, method, id_given = _envelope_of(value)
    if (refused := _invalid_id(value)) is not None:
        return Verdict(rid, method, error=refused, id_given=id_given), "\n"
    return Verdict(rid, method, id_given=id_given), raw.decode("utf-8")


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
    -32700 for text that is not JSON, -32600 for JSON that is refused or is not a message; the
    id is null where the line's id could not be read or is not a valid id."""
    import mcp_types as types

    if verdict.blank:
        return None
    exc = verdict.error
    if exc is not None and verdict.request_id is not None and verdict.method == "tools/call":
        result = error_result(exc).model_dump(by_alias=True, mode="json", exclude_none=True)
        return types.JSONRPCResponse(jsonrpc="2.0", id=verdict.request_id, result=result)
    if exc is not None and not verdict.id_given and verdict.method is not None:
        return None  # a notification: JSON-RPC never answers one (the log says it was refused)
    if exc is None:
        message = f"not a JSON-RPC 2.0 message: {type(refused).__name__}"
        exc = InvalidRequest(message, reason="not_a_message")
    code = types.PARSE_ERROR if exc.code == "invalid_json" else types.INVALID_REQUEST
    body = error_body(exc)
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
                reason = verdict.error.details.get("reason") if verdict.error else "not_a_message"
                fields = {"code": code, "reason": reason, "id": verdict.request_id, "method": verdict.method,
                          "answered": bool(reply)}  # fmt: skip
                log.warning("refused a line", extra={"fields": fields})
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
