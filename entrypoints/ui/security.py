"""Who may use the UI port. A loopback port is open to every local user and to every web page
the user visits, so every request proves:

- **Host** is ``127.0.0.1:<port>`` or ``localhost:<port>``: a DNS-rebinding page reaches the
  port under its own name and is refused; so is any request carrying a foreign ``Origin``.
- **This start's secret**, on every API call (``/v1/...``, ``/ui/api/...``), as
  ``Authorization: Bearer <token>``, never as a cookie. Browsers send a cookie to every port of
  127.0.0.1, so a cookie holding the token would reach any other local server the browser is
  led to. The launch address carries the token in its fragment (``#token=``, which no browser
  sends to any server); the page keeps it in its own origin's sessionStorage, which other
  ports cannot read, drops it from the address bar and sends it as that header. A cross-site
  page can neither read the token nor add the header without a CORS preflight, which is
  refused, so the header is also the proof against request forgery.

The pages and the static assets carry no secret and are served on the Host check alone.
"""

from __future__ import annotations

import hmac
import html
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlencode

import attrs
from starlette.datastructures import Headers, MutableHeaders

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK = "127.0.0.1"
TOKEN_PARAM = "token"
API_PREFIXES = ("/v1/", "/ui/api/")

# No inline script or style anywhere: the pages are files under static/.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "cache-control": "no-store",
}


@attrs.frozen
class Secrets:
    """One daemon start's UI secret: the launch token."""

    port: int
    token: str = attrs.field(repr=False)

    @classmethod
    def fresh(cls, port: int) -> Secrets:
        return cls(port, secrets.token_urlsafe(32))

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset({f"{LOOPBACK}:{self.port}", f"localhost:{self.port}"})

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/"

    @property
    def launch_url(self) -> str:
        # The fragment never leaves the browser: not in the request line, logs or a Referer.
        return f"{self.base_url}#{urlencode({TOKEN_PARAM: self.token})}"

    def is_token(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.token.encode())

    def authorizes(self, scope: Scope) -> bool:
        """Whether the request carries this start's token (as the Guard reads it): only such a
        request proves its connection and counts as the daemon's activity."""
        return self.is_token(_bearer(Headers(scope=scope)))


@attrs.frozen
class Refusal:
    status: int
    code: str
    message: str


HOST_REFUSED = Refusal(403, "ui_host_not_allowed", "this address is served only as 127.0.0.1 or localhost")
ORIGIN_REFUSED = Refusal(403, "ui_origin_not_allowed", "requests from other origins are refused")
UNAUTHORIZED = Refusal(
    401, "ui_unauthorized",
    "open the address `memcore ui` prints (it carries this start's token); scripts send Authorization: Bearer <token>",
)
BAD_TOKEN = Refusal(
    401, "ui_token_invalid", "this token is not the running daemon's (it restarted?): run `memcore ui` again"
)
METHOD_REFUSED = Refusal(
    403, "ui_method_not_allowed",
    "the UI port serves only the methods the Diagnostics page uses; call this one on the daemon's Unix socket "
    "(the memcore CLI)",
)


def _bearer(headers: Headers) -> str | None:
    value = headers.get("authorization", "")
    scheme, _, credential = value.partition(" ")
    return credential.strip() if scheme.lower() == "bearer" and credential.strip() else None


def is_api(path: str) -> bool:
    return path.startswith(API_PREFIXES) or path in ("/v1", "/ui/api")


async def _respond(send: Send, status: int, body: bytes, content_type: str) -> None:
    headers = {**SECURITY_HEADERS, "content-type": content_type, "content-length": str(len(body))}
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def refuse(scope: Scope, send: Send, refusal: Refusal) -> None:
    """The daemon's error envelope for API paths, a short page for everything else."""
    if is_api(scope.get("path", "")):
        envelope = {"error": {"code": refusal.code, "message": refusal.message, "details": {}}}
        body = json.dumps(envelope, separators=(",", ":")).encode()
        await _respond(send, refusal.status, body, "application/json")
        return
    page = (
        "<!doctype html><html lang=en><head><meta charset=utf-8><link rel=icon href=\"data:,\">"
        f"<title>memory-core Diagnostics</title></head><body><h1>memory-core Diagnostics</h1>"
        f"<p>{html.escape(refusal.message)}</p><p><code>{refusal.code}</code></p></body></html>"
    )
    await _respond(send, refusal.status, page.encode(), "text/html; charset=utf-8")


class Guard:
    """ASGI middleware in front of every UI route (pages, assets, ``/ui/api`` and ``/v1``)."""

    def __init__(self, app: ASGIApp, ui: Secrets) -> None:
        self.app = app
        self.ui = ui

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        refusal = self.check(scope)
        if refusal is not None:
            await refuse(scope, send, refusal)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, secured)

    def check(self, scope: Scope) -> Refusal | None:
        """Why the request is refused, or None when it may go on."""
        headers = Headers(scope=scope)
        host = headers.get("host")
        if host not in self.ui.hosts:
            return HOST_REFUSED
        origin = headers.get("origin")
        if origin is not None and origin != f"http://{host}":
            return ORIGIN_REFUSED
        if not is_api(scope.get("path", "/")):
            return None  # a page or an asset: no secret in it
        # The header only: a cookie (any cookie) or a query string never authorizes.
        offered = _bearer(headers)
        if offered is None:
            return UNAUTHORIZED
        if not self.ui.is_token(offered):
            return BAD_TOKEN
        return None
