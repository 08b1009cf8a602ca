"""The ASGI app: ``POST /v1/<method>`` from the dispatch table and ``GET /v1/openapi.json``.

Every failure is the one envelope ``{"error": {"code", "message", "details"}}`` with the code's
fixed status. Engine calls block, so they run in worker threads; the event loop only parses and
writes JSON. A quick call takes one of anyio's default threads (40); a job (``Method.is_job``:
its thread waits for its process as long as it runs) takes one of ``Context.job_slots`` instead,
and an index one of ``INDEX_THREADS``, each waiting for one holding no thread: many long calls at
once never leave a quick call without a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.entrypoints.daemon import api, dispatch, jobs
from memory_core.entrypoints.wire_input import encodable

log = logging.getLogger("memory_core.daemon")
JSON = "application/json"
PARSE_INLINE_BYTES = 1 << 20
# The threads of the other long calls (``JOB``s that run no process: an index, which waits for the
# watcher's one worker): few, since the worker builds one at a time, and never a quick call's.
INDEX_THREADS = 4


def _dumps(value: Any) -> bytes:
    # default=str: error details may carry paths or other plain values.
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str).encode()


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_dumps(value), status_code=status, media_type=JSON, headers=headers)


def error_response(exc: MemoryCoreError) -> Response:
    """The envelope of ``exc``; messages and details may echo what the caller sent, so every
    string is made encodable here, the one place every error answer passes. A body refused busy
    may be left unread (``discard_body``): its connection is closed after the answer, not reused."""
    headers = {"Allow": "POST"} if exc.code == "method_not_allowed" else None
    headers = {"Connection": "close"} if exc.code == api.DaemonBusy.code else headers
    error = api.ErrorEnvelope.of(exc).error
    body = encodable({"error": {"code": error.code, "message": error.message, "details": error.details}})
    return json_response(body, api.status_for(exc.code), headers)


async def read_json(request: Request, limit: int) -> Any:
    """The body as JSON (no body at all is ``{}``; whitespace alone is not JSON), read no further
    than ``limit`` bytes."""
    body = await read_body(request, limit)
    if len(body) > PARSE_INLINE_BYTES:  # seconds of parsing, off the event loop
        return await anyio.to_thread.run_sync(api.decode_body, body)
    return api.decode_body(body)


def declared_length(request: Request, limit: int) -> int | None:
    """The body's Content-Length (None: none announced), refused at once over ``limit``."""
    declared = request.headers.get("content-length")
    if declared is None:
        return None
    if not declared.isdigit():
        raise InvalidRequest("Content-Length is not a number")
    if int(declared) > limit:
        raise api.RequestTooLarge(f"request body is larger than {limit} bytes", limit=limit)
    return int(declared)


async def read_body(request: Request, limit: int, grow: Callable[[int], None] | None = None,
                    deadline_s: float | None = None) -> bytes:  # fmt: skip
    """The body's bytes, read no further than ``limit``; ``grow`` hears its size as it arrives
    (a ``HeldBody``'s: past its bound it raises ``DaemonBusy``, raised here once the rest is
    discarded within what is left of the deadline, keeping nothing of it). ``deadline_s``: the
    whole body must arrive within it (a held body's: else ``invalid_request``, reason
    ``body_deadline``, and nothing is kept)."""
    declared_length(request, limit)
    body, chunks = bytearray(), request.stream()
    try:
        with anyio.fail_after(deadline_s) as cutoff:
            async for chunk in chunks:
                if len(body) + len(chunk) > limit:  # chunked bodies announce no length
                    raise api.RequestTooLarge(f"request body is larger than {limit} bytes", limit=limit)
                body += chunk
                if grow is not None:
                    grow(len(body))
    except api.DaemonBusy:
        received = len(body)
        body.clear()  # none of it kept
        await discard_body(chunks, limit - received, cutoff.deadline - anyio.current_time())
        raise
    except TimeoutError:
        raise InvalidRequest(f"the request body was not complete within {deadline_s:g} s ({len(body)} bytes "
                             "arrived): it was dropped, and its place among the bodies the daemon holds let go",
                             reason="body_deadline", received=len(body), deadline_s=deadline_s) from None  # fmt: skip
    except ClientDisconnect:
        # The client left, or the UI port's body deadline closed it: nobody reads the answer,
        # but the log says what happened (not an internal error).
        raise InvalidRequest("the connection closed before the request body was complete",
                             reason="body_incomplete") from None  # fmt: skip
    return bytes(body)


async def discard_body(chunks: AsyncIterator[bytes], limit: int, deadline_s: float) -> None:
    """Read a body's ``chunks`` through (up to ``limit`` bytes), keeping none: an HTTP/1.1 client
    sends its whole body before it reads the answer, so one refused unread would hear a reset,
    not why. No longer than ``deadline_s`` (a held body's): a client trickling bytes held the
    request for ever; what is left unread then goes with the connection (``error_response``)."""
    received = 0
    with anyio.move_on_after(deadline_s), contextlib.suppress(ClientDisconnect):
        async for chunk in chunks:
            received += len(chunk)
            if received > limit:
                return


async def held_body(request: Request, limit: int, bodies: dispatch.HeldBodies, name: str) -> dispatch.HeldBody:
    """Count an undecoded body (``Method.undecoded``) among those the daemon holds, before any of
    it is read: over their bound, ``DaemonBusy`` (the body read through, within the held bodies'
    deadline, and dropped)."""
    declared = declared_length(request, limit)  # too large (for ever) is said before busy (for now)
    try:
        return bodies.hold(name, declared or 0)
    except api.DaemonBusy:
        await discard_body(request.stream(), limit, bodies.deadline_s)
        raise


def create_app(context: dispatch.Context, *, max_body_bytes: int = api.MAX_BODY_BYTES) -> Starlette:
    """The daemon's app over an engine context (the caller owns and closes the engine).
    ``max_body_bytes`` limits request bodies, except for a method with its own limit."""
    converter = api.make_converter()
    contract: dict[str, bytes] = {}

    slots = anyio.CapacityLimiter(context.job_slots)
    index_threads = anyio.CapacityLimiter(INDEX_THREADS)

    def encode(method: dispatch.Method, typed: Any) -> bytes:
        return _dumps(api.unstructure(converter, context.call(method, typed)))

    def encode_queued(job: Any, method: dispatch.Method, typed: Any) -> bytes:
        token = jobs.QUEUED_RECORD.set(job)  # the job's call takes over the record it waited as
        try:
            return encode(method, typed)
        finally:
            jobs.QUEUED_RECORD.reset(token)

    async def job_call(method: dispatch.Method, typed: Any) -> bytes:
        """A job's answer, once it had a slot: listed meanwhile, waiting (``JobBoard.waiting``),
        and ended at once by ``cancel_job`` or the daemon's stop, which cancel the wait."""
        loop = asyncio.get_running_loop()
        project_id = getattr(typed, "project_id", None)  # an import's body is bytes: none
        with anyio.CancelScope() as wait:

            def wake() -> None:  # called from another thread, or the stop signal's handler
                with contextlib.suppress(RuntimeError):  # the loop has closed: nothing waits now
                    loop.call_soon_threadsafe(wait.cancel)

            with context.board.waiting(method.name, project_id, wake) as job:
                return await anyio.to_thread.run_sync(partial(encode_queued, job, method, typed), limiter=slots)
        raise job.interrupted()  # its wait was cancelled: it never started

    async def call(request: Request) -> Response:
        started = time.perf_counter()
        name = request.path_params["method"]
        code = "ok"
        held: dispatch.HeldBody | None = None
        try:
            method = dispatch.lookup(name)
            limit = method.max_body_bytes or max_body_bytes
            if request.method == "GET" and method.allow_get:
                typed = api.structure(converter, {}, method.request)
            elif request.method == "POST" and method.undecoded:
                held = await held_body(request, limit, context.bodies, name)  # released once answered
                # Decoded where it runs (a fixture: in its job); cut off past its deadline, so a
                # stalled upload holds its place for a while, not for ever.
                typed = await read_body(request, limit, held.grow, context.bodies.deadline_s)
                held.arrived()
            elif request.method == "POST":
                typed = api.structure(converter, await read_json(request, limit), method.request)
            else:
                raise api.MethodNotAllowed(f"{request.method} is not allowed; use POST", method=request.method)
            # Encoding runs in the worker too: an exported fixture is megabytes of JSON.
            if method.is_job:
                body = await job_call(method, typed)
            elif dispatch.JOB in method.traits:
                body = await anyio.to_thread.run_sync(partial(encode, method, typed), limiter=index_threads)
            else:
                body = await anyio.to_thread.run_sync(partial(encode, method, typed))
            response = Response(body, media_type=JSON)
        except MemoryCoreError as exc:
            code = exc.code
            response = error_response(exc)
        except Exception:
            log.exception("internal error in %s", name)
            code = "internal_error"
            response = error_response(MemoryCoreError("internal error; see the daemon log", method=name))
        finally:
            if held is not None:
                held.release()
        log.info(
            "request",
            extra={"fields": {"method": name, "status": response.status_code, "code": code,
                              "ms": round((time.perf_counter() - started) * 1000, 3)}},
        )
        return response

    async def openapi(_: Request) -> Response:
        if "doc" not in contract:
            from memory_core.entrypoints.daemon.openapi import build_document, render

            contract["doc"] = render(build_document()).encode()
        return Response(contract["doc"], media_type=JSON)

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            return error_response(api.MethodNotAllowed("method not allowed"))
        return error_response(api.NotFound("no such path; call POST /v1/<method>"))

    return Starlette(
        routes=[
            Route("/v1/openapi.json", openapi, methods=["GET"]),
            Route("/v1/{method}", call, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
        ],
        exception_handlers={HTTPException: http_error},
    )
