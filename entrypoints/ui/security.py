"""Who may use the UI port. A loopback port is open to every local user and to every web page
the user visits, so every request proves three things:

- **Host** is ``127.0.0.1:<port>`` or ``localhost:<port>``: a DNS-rebinding page reaches the
  port under its own name and is refused; so is any request carrying a foreign ``Origin``.
- **This start's secret**: the ``memcore_ui_<port>`` cookie (HttpOnly, SameSite=Strict), which
  the launch address's ``?token=`` is exchanged for, or ``Authorization: Bearer <token>``.
  The cookie is named by port because cookies ignore ports: two homes' daemons must not
  overwrite each other's.
- A request that may change state (anything but GET and HEAD) also comes **from our origin**
  (``Origin`` is ``http://<Host>``) and carries a value a cross-site page cannot know: the
  ``X-Memcore-CSRF`` value embedded in the page, or the bearer token (scripts send no Origin).
"""

from __future__ import annotations

import hmac
import html
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

import attrs
from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import cookie_parser

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK = "127.0.0.1"
TOKEN_PARAM = "token"
CSRF_HEADER = "x-memcore-csrf"
SAFE_METHODS = frozenset({"GET", "HEAD"})
API_PREFIXES = ("/v1/", "/ui/api/")

# No inline script or style anywhere: the pages are files under static/.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",  # the launch address carries the token
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "cache-control": "no-store",
}


@attrs.frozen
class Secrets:
    """One daemon start's UI secrets: the launch token and the page's CSRF value."""

    port: int
    token: str = attrs.field(repr=False)
    csrf: str = attrs.field(repr=False)

    @classmethod
    def fresh(cls, port: int) -> Secrets:
        return cls(port, secrets.token_urlsafe(32), secrets.token_urlsafe(32))

    @property
    def cookie_name(self) -> str:
        return f"memcore_ui_{self.port}"

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset({f"{LOOPBACK}:{self.port}", f"localhost:{self.port}"})

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/"

    @property
    def launch_url(self) -> str:
        return f"{self.base_url}?{urlencode({TOKEN_PARAM: self.token})}"

    def is_token(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.token.encode())

    def is_csrf(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.csrf.encode())

    def cookie(self) -> str:
        # A session cookie (no Max-Age): it dies with the browser; the token dies with the daemon.
        return f"{self.cookie_name}={self.token}; Path=/; HttpOnly; SameSite=Strict"


@attrs.frozen
class Refusal:
    status: int
    code: str
    message: str


HOST_REFUSED = Refusal(403, "ui_host_not_allowed", "this address is served only as 127.0.0.1 or localhost")
ORIGIN_REFUSED = Refusal(403, "ui_origin_not_allowed", "requests from other origins are refused")
ORIGIN_REQUIRED = Refusal(403, "ui_origin_required", "a browser request that changes state must carry its Origin")
CSRF_REQUIRED = Refusal(403, "ui_csrf_required", "a request that changes state needs the page's X-Memcore-CSRF value")
UNAUTHORIZED = Refusal(401, "ui_unauthorized", "open the address `memcore ui` prints (it carries this start's token)")
BAD_TOKEN = Refusal(
    401, "ui_token_invalid", "this address's token is not the running daemon's (it restarted?): run `memcore ui` again"
)
NOT_HTTP = Refusal(403, "ui_not_http", "only HTTP requests are served")


def _bearer(headers: Headers) -> str | None:
    value = headers.get("authorization", "")
    scheme, _, credential = value.partition(" ")
    return credential.strip() if scheme.lower() == "bearer" and credential.strip() else None


def _is_api(path: str) -> bool:
    return path.startswith(API_PREFIXES) or path == "/v1"


async def _respond(send: Send, status: int, body: bytes, content_type: str, extra: dict[str, str]) -> None:
    headers = {**SECURITY_HEADERS, "content-type": content_type, "content-length": str(len(body)), **extra}
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def refuse(scope: Scope, send: Send, refusal: Refusal) -> None:
    """The daemon's error envelope for API paths, a short page for everything else."""
    if _is_api(scope.get("path", "")):
        envelope = {"error": {"code": refusal.code, "message": refusal.message, "details": {}}}
        body = json.dumps(envelope, separators=(",", ":")).encode()
        await _respond(send, refusal.status, body, "application/json", {})
        return
    page = (
        "<!doctype html><html lang=en><head><meta charset=utf-8><link rel=icon href=\"data:,\">"
        f"<title>memory-core Diagnostics</title></head><body><h1>memory-core Diagnostics</h1>"
        f"<p>{html.escape(refusal.message)}</p><p><code>{refusal.code}</code></p></body></html>"
    )
    await _respond(send, refusal.status, page.encode(), "text/html; charset=utf-8", {})


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
        refusal, redirect = self.check(scope)
        if redirect is not None:
            await _respond(send, 303, b"", "text/plain", {"location": redirect, "set-cookie": self.ui.cookie()})
            return
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

    def check(self, scope: Scope) -> tuple[Refusal | None, str | None]:
        """(refusal, redirect): at most one is set; neither means the request may go on."""
        headers = Headers(scope=scope)
        host = headers.get("host")
        if host not in self.ui.hosts:
            return HOST_REFUSED, None
        origin = headers.get("origin")
        if origin is not None and origin != f"http://{host}":
            return ORIGIN_REFUSED, None
        path: str = scope.get("path", "/")
        safe = scope["method"] in SAFE_METHODS
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        offered = [value for key, value in query if key == TOKEN_PARAM]
        if offered and safe and not _is_api(path):
            if not self.ui.is_token(offered[0]):
                return BAD_TOKEN, None
            rest = [(k, v) for k, v in query if k != TOKEN_PARAM]
            return None, path + (f"?{urlencode(rest)}" if rest else "")
        by_bearer = self.ui.is_token(_bearer(headers))
        cookies = cookie_parser(headers.get("cookie", ""))
        if not (by_bearer or self.ui.is_token(cookies.get(self.ui.cookie_name))):
            return UNAUTHORIZED, None
        if not safe and not by_bearer:
            if origin is None:
                return ORIGIN_REQUIRED, None
            if not self.ui.is_csrf(headers.get(CSRF_HEADER)):
                return CSRF_REQUIRED, None
        return None, None
