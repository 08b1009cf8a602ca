"""Connection limits for the UI port: uvicorn's h11 protocol with deadlines for each request's
head and body, and a bound on the connections one peer holds without the token.

uvicorn times out only an idle kept-alive connection (``timeout_keep_alive``, armed after a
response, and cancelled by any byte that arrives, even one it ignores) and ``limit_concurrency``
acts once a request's head has arrived; nothing times out a head or a body that never completes,
so a connection that sends part of a request is held for ever, and any local user or web page
could hold hundreds without a token. Here, for a TCP peer (the UI port; the owner-only Unix
socket is left as uvicorn serves it):

- a connection must complete each request head within ``head_timeout_s`` of its opening (the
  first request) or of the first byte after a response (the next ones), and each request body
  within ``body_timeout_s`` of its head; trickling bytes extends neither. Otherwise it is closed
  (a body whose request was already answered, a refusal say, is no exception).
- a peer address may hold ``per_peer`` connections that have not proven the token; a new one
  beyond that closes the peer's oldest such connection, never the new one, so no crowd without
  the token can keep the token's holder out: the holder's request arrives on a new connection
  (which is the youngest) or on one that has proven the token, which no crowd closes. On
  loopback every peer is 127.0.0.1, so this bounds the port's connections without the token in
  total; a browser opens at most 6 per host.

A connection proves the token once a request head on it carries it (``authorized``); it stays
proven while it lives.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("memory_core.ui")

HEAD_TIMEOUT_S = 5.0
BODY_TIMEOUT_S = 30.0  # the largest body (a 256 MiB fixture import) crosses loopback in seconds
MAX_CONNECTIONS_PER_PEER = 32  # without the token


def _nobody(_scope: Any) -> bool:
    return False


def bounded_h11(
    head_timeout_s: float = HEAD_TIMEOUT_S,
    per_peer: int = MAX_CONNECTIONS_PER_PEER,
    *,
    body_timeout_s: float = BODY_TIMEOUT_S,
    authorized: Callable[[Any], bool] = _nobody,
) -> type[H11Protocol]:
    """A protocol class for ``uvicorn.Config(http=...)``, with its own per-peer registry (one per
    server: every connection of a server runs on its one event loop, so no lock is needed).
    ``authorized(scope)``: whether a request carries the token (none does by default)."""
    # Each peer's connections that have not proven the token, oldest first (a dict keeps order).
    unproven_by_peer: dict[str, dict[Any, None]] = {}
    crowded: set[str] = set()  # peers whose last crowd was logged: one warning per crowd

    class BoundedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _awaiting: str | None = None  # what the armed deadline waits for: "head" or "body"
        _peer: str | None = None
        _judged: Any = None  # the last request's scope whose head was checked for the token

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if self.client is None:  # a Unix socket peer
                return
            peer = self.client[0]
            self._peer = peer
            unproven = unproven_by_peer.setdefault(peer, {})
            unproven[self] = None
            self._arm("head", head_timeout_s)
            if len(unproven) > per_peer:
                oldest = next(iter(unproven))
                if peer not in crowded:
                    crowded.add(peer)
                    log.warning("ui connections crowded: closing the oldest without the token",
                                extra={"fields": {"peer": peer, "open": per_peer}})  # fmt: skip
                oldest._forget()
                oldest.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._forget()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._peer is not None and not self.transport.is_closing():
                self._follow(after_response=False)

        def on_response_complete(self) -> None:
            super().on_response_complete()  # may start a pipelined request
            if self._peer is not None and not self.transport.is_closing():
                self._follow(after_response=True)

        def _follow(self, *, after_response: bool) -> None:
            """Note a new request's token, and arm the deadline for what the peer owes now."""
            if self.scope is not None and self.scope is not self._judged:
                self._judged = self.scope
                if authorized(self.scope):
                    self._forget()  # proven: no crowd closes it
            state = self.conn.their_state
            if state is h11.SEND_BODY:
                if self._awaiting != "body":  # the head is in: the body's clock starts
                    self._arm("body", body_timeout_s)
            elif state is h11.IDLE and not after_response:
                # The first bytes of a next request (or a body finished after its answer) start
                # the head's clock; more bytes do not restart it.
                if self._awaiting != "head":
                    self._arm("head", head_timeout_s)
            else:
                # The request is in and the app has it, or the answer is sent and uvicorn's
                # keep-alive timer owns the idle connection until its next byte.
                self._disarm()

        def _forget(self) -> None:
            """No longer one of its peer's connections without the token (proven, or gone)."""
            if self._peer is None:
                return
            unproven = unproven_by_peer.get(self._peer)
            if unproven is not None and self in unproven:
                del unproven[self]
                if len(unproven) < per_peer:
                    crowded.discard(self._peer)
                if not unproven:
                    del unproven_by_peer[self._peer]

        def _arm(self, awaiting: str, timeout_s: float) -> None:
            self._disarm()
            self._awaiting = awaiting
            self._deadline = self.loop.call_later(timeout_s, self._timed_out)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            self._awaiting = None

        def _timed_out(self) -> None:
            self._deadline = None
            self._awaiting = None
            if not self.transport.is_closing():
                self.transport.close()

    return BoundedH11Protocol
