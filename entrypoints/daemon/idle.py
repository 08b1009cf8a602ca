"""Stopping when idle: an on-demand daemon (started by ``memcore mcp`` or ``memcore ui``) stops
once nothing has happened for its limit."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from memory_core.entrypoints.daemon.dispatch import Context

log = logging.getLogger("memory_core.daemon")
DEFAULT_IDLE_EXIT_S = 600.0  # an on-demand daemon's idle time before it stops (10 minutes)


class IdleClock:
    """How long the daemon has had nothing to do, and the stop once that reaches ``limit_s``.

    Activity: an HTTP request in flight or begun (counted at the ASGI layer, so every method
    counts, whatever it does; on the UI port only a request with the token, see ``wrap``), an
    engine call, and the watcher's work (a change seen, a re-index queued, running or finished).
    ``limit_s`` None: never stop."""

    def __init__(self, limit_s: float | None, *, on_demand: bool = False) -> None:
        self.limit_s = limit_s
        self.on_demand = on_demand
        self._lock = threading.Lock()
        self._active = 0
        self._last = time.monotonic()
        self._watcher_seen: Any = None
        self._stop = threading.Event()

    def touch(self) -> None:
        with self._lock:
            self._last = time.monotonic()

    def wrap(self, app: Any, counts: Callable[[Any], bool] | None = None) -> Any:
        """``app`` with every HTTP request counted from its start to its last byte, or only those
        for which ``counts(scope)`` holds: the UI port is open to every local user, and a request
        without the token must not keep an on-demand daemon alive."""

        async def counted(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http" or (counts is not None and not counts(scope)):
                await app(scope, receive, send)
                return
            with self._lock:
                self._active += 1
                self._last = time.monotonic()
            try:
                await app(scope, receive, send)
            finally:
                with self._lock:
                    self._active -= 1
                    self._last = time.monotonic()

        return counted

    def _watcher_busy(self, context: Context) -> bool:
        """The watcher works, or did something since the last look (a change, a finished re-index)."""
        if context.watcher is None:
            return False
        # A project whose re-index keeps failing (a full disk) retries on its own backoff for
        # as long as it takes: that is no one's work, and must not keep an idle daemon alive.
        health = [h for h in context.watcher.health() if not h.failed_attempts]
        seen = [(h.project_id, h.last_change_at, h.last_reindex) for h in health]
        changed, self._watcher_seen = seen != self._watcher_seen, seen
        return changed or any(h.indexing or h.reindex_pending for h in health)

    def run(self, context: Context, stop: Callable[[], None]) -> None:
        """Until :meth:`close`: call ``stop`` once idle for ``limit_s`` (checked a few times per limit)."""
        if self.limit_s is None:
            return
        period = min(1.0, self.limit_s / 10)
        while not self._stop.wait(period):
            if self._watcher_busy(context) or context.in_flight:
                self.touch()
            with self._lock:
                idle = 0.0 if self._active else time.monotonic() - self._last
                if idle < self.limit_s:
                    continue
            log.info("idle: stopping", extra={"fields": {"idle_s": round(idle, 3), "idle_exit_s": self.limit_s}})
            stop()
            return

    def close(self) -> None:
        self._stop.set()
