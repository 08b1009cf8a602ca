"""The UI's ASGI app: the pages and assets, ``GET /ui/api/runtime`` and ``/ui/api/export``, and
the daemon's own dispatch app at ``/v1`` (the very instance the Unix socket serves) for the
methods in :data:`UI_METHODS`, all behind :class:`Guard`.

The pages are one HTML shell; ``static/app.js`` routes on the path, so every page has an
address of its own (``/runtime``, ``/retrieval/runs/<id>``, ``/evaluation/cases/<id>`` …).
"""

from __future__ import annotations

import datetime as dt
import json
from functools import partial
from pathlib import Path
from urllib.parse import quote

import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from memory_core.domain.errors import MemoryCoreError
from memory_core.domain.model import validate_project_id
from memory_core.entrypoints.daemon import api, dispatch
from memory_core.entrypoints.daemon.app import error_response
from memory_core.entrypoints.daemon.dispatch import Context
from memory_core.entrypoints.ui.runtime import runtime_facts
from memory_core.entrypoints.ui.security import METHOD_REFUSED, ASGIApp, Guard, Receive, Scope, Secrets, Send, refuse
from memory_core.evaluation.metric_registry import described

STATIC = Path(__file__).with_name("static")
PAGES = ("/", "/runtime", "/retrieval", "/retrieval/runs/{run_id}", "/evaluation", "/evaluation/cases/{case_id}")

# The dispatch methods the page calls (static/*.js; a test holds the two equal), and no others:
# the operations marked ``UI`` in the table. The UI port is reachable by every local user and by
# pages in the user's browser, so what adds or removes sources, indexes or activates (reading
# files on the user's behalf) stays on the owner-only Unix socket. Reading Runs, judging cases,
# importing a fixture and a project's ranking profile and its tuning (from stored cases and
# traces: no file is read) need none.
UI_METHODS = dispatch.names(dispatch.UI)


def content_disposition(filename: str) -> str:
    """``attachment`` per RFC 6266: an ASCII fallback with no quote, backslash or control
    character, and the exact name as RFC 5987 ``filename*``, so no name can add a parameter."""
    fallback = "".join(c if " " <= c < "\x7f" and c not in '"\\%' else "_" for c in filename)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


def page_shell() -> bytes:
    """index.html with the metric registry in it as data (static/metrics.js reads it), so the
    page's tables list what ``evaluation/metric_registry.py`` declares. No secret in it: the page's
    token is its own."""
    # "<" escaped: no text in a definition can close the script element.
    data = json.dumps(described(), ensure_ascii=False).replace("<", "\\u003c")
    tag = f'<script type="application/json" id="metric-registry">{data}</script>\n'
    return (STATIC / "index.html").read_text(encoding="utf-8").replace("</head>", tag + "</head>", 1).encode()


def create_ui_app(context: Context, daemon_app: ASGIApp, ui: Secrets) -> ASGIApp:
    """The app for the UI port: ``daemon_app`` answers ``/v1/<one of UI_METHODS>``; the rest is the UI."""
    shell = page_shell()

    async def page(_: Request) -> Response:
        return Response(shell, media_type="text/html; charset=utf-8")

    async def runtime(_: Request) -> Response:
        facts = await anyio.to_thread.run_sync(partial(runtime_facts, context))
        return JSONResponse(facts)

    converter = api.make_converter()

    async def export(request: Request) -> Response:
        """The fixture file ``memcore eval export`` writes (canonical JSON), as a download: the
        dispatch table's ``export_evaluation_set``, byte-exact (a JavaScript JSON round trip
        would turn ``1.0`` into ``1`` and break the trace hashes)."""
        project_id = request.query_params.get("project_id") or None
        try:
            if project_id is not None:
                validate_project_id(project_id)  # it goes into a header and a file name
            method = dispatch.lookup("export_evaluation_set")
            typed = api.structure(converter, {"project_id": project_id} if project_id else {}, method.request)
            fixture = await anyio.to_thread.run_sync(partial(context.call, method, typed))
        except MemoryCoreError as exc:
            return error_response(exc)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        name = f"evaluation-set{'-' + project_id if project_id else ''}-{stamp}.json"
        return Response(
            fixture.to_bytes(),
            media_type="application/json",
            headers={"content-disposition": content_disposition(name)},
        )

    pages = Starlette(
        routes=[
            *(Route(path, page, methods=["GET"]) for path in PAGES),
            Route("/ui/api/runtime", runtime, methods=["GET"]),
            Route("/ui/api/export", export, methods=["GET"]),
            Mount("/static", StaticFiles(directory=STATIC, follow_symlink=False), name="static"),
        ],
    )

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if path == "/v1" or path.startswith("/v1/"):
            if path.removeprefix("/v1/") not in UI_METHODS:
                await refuse(scope, send, METHOD_REFUSED)
                return
            await daemon_app(scope, receive, send)
        else:
            await pages(scope, receive, send)

    return Guard(route, ui)


def by_listener(daemon_app: ASGIApp, ui_app: ASGIApp, ui_port: int) -> ASGIApp:
    """One uvicorn server, two listeners: the Unix socket gets the daemon app, the UI port the
    guarded UI app; a request from any other listener fails (there is none)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        # Lifespan (off in the daemon) and the Unix socket, which uvicorn reports as (path, None).
        if scope["type"] == "lifespan" or server is None or server[1] is None:
            await daemon_app(scope, receive, send)
        elif tuple(server) == ("127.0.0.1", ui_port):
            await ui_app(scope, receive, send)
        else:
            raise RuntimeError(f"request on an unexpected listener {server!r}")

    return app
