"""Connection limits for the UI port: uvicorn's h11 protocol with a deadline for each request
head and a bound on the connections one peer holds open.

uvicorn times out only an idle kept-alive connection (``timeout_keep_alive``, armed after a
response) and ``limit_concurrency`` acts once a request's head has arrived; nothing times out a
head that never completes, so a connection that sends part of its headers (or nothing) is held
for ever, and any local user or web page could hold hundreds without a token. Here, for a TCP
peer (the UI port; the owner-only Unix socket is left as uvicorn serves it):

- a connection must complete each request head within ``head_timeout_s`` of its opening (the
  first request) or of the first byte after a response (the next ones); trickling bytes does
  not extend it. Otherwise it is closed without an answer.
- a peer address may hold ``per_peer`` connections; one more is closed at once. On loopback
  every peer is 127.0.0.1, so this bounds the port's connections in total; a browser opens at
  most 6 per host.
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("memory_core.ui")

HEAD_TIMEOUT_S = 5.0
MAX_CONNECTIONS_PER_PEER = 32


def bounded_h11(head_timeout_s: float = HEAD_TIMEOUT_S, per_peer: int = MAX_CONNECTIONS_PER_PEER) -> type[H11Protocol]:
    """A protocol class for ``uvicorn.Config(http=...)``, with its own per-peer counts (one per
    server: every connection of a server runs on its one event loop, so no lock is needed)."""
    open_by_peer: dict[str, int] = {}

    class BoundedH11Protocol(H11Protocol):
        _head_deadline: asyncio.TimerHandle | None = None
        _peer: str | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if self.client is None:  # a Unix socket peer
                return
            peer = self.client[0]
            self._peer = peer
            count = open_by_peer.get(peer, 0) + 1
            open_by_peer[peer] = count
            if count > per_peer:
                if count == per_peer + 1:  # once per crowd, not once per connection
                    log.warning("ui connection refused", extra={"fields": {"peer": peer, "open": per_peer}})
                transport.close()
                return
            self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_deadline()
            if self._peer is not None:
                left = open_by_peer.get(self._peer, 1) - 1
                if left > 0:
                    open_by_peer[self._peer] = left
                else:
                    open_by_peer.pop(self._peer, None)
                self._peer = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._peer is None:
                return
            if self.conn.their_state is h11.IDLE:
                # A head still incomplete: the first bytes of a next request start its clock.
                if self._head_deadline is None and not self.transport.is_closing():
                    self._arm_head_deadline()
            else:
                self._disarm_head_deadline()  # the head is in: the app has the request now

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # Idle now: uvicorn's keep-alive timer owns the connection until the next byte.
            if self._peer is not None and self.conn.their_state is h11.IDLE:
                self._disarm_head_deadline()

        def _arm_head_deadline(self) -> None:
            self._disarm_head_deadline()
            self._head_deadline = self.loop.call_later(head_timeout_s, self._head_timed_out)

        def _disarm_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _head_timed_out(self) -> None:
            self._head_deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return BoundedH11Protocol

