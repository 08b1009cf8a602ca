"""What runs beside the daemon's requests: the warm-up, the source watcher and its re-index
worker (built by the composition root, ``bootstrap.background_watcher``, with their own database
connections), start-up recovery of interrupted Runs, and the drain of the engine call in flight
at shutdown."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memory_core.entrypoints.bootstrap import background_indexer as background_indexer  # benchmarks use it here
from memory_core.entrypoints.bootstrap import background_watcher
from memory_core.entrypoints.daemon.dispatch import Context
from memory_core.services.engine import Engine

log = logging.getLogger("memory_core.daemon")
DRAIN_TIMEOUT_S = 30.0


def warm_up(context: Context) -> None:
    """Load the embedding model before the first query when some project can be queried."""
    engine = context.engine
    try:
        with context.engine_lock:  # the catalog is used from one thread at a time
            queryable = any(info.generation is not None for info in engine.list_projects())
        if queryable:
            engine.embedder.embed_query("warm-up")  # the embedder has its own load lock
            log.info("warm", extra={"fields": {"embedder": engine.embedder.revision}})
    except Exception:
        log.exception("warm-up failed; the first query will load the model")


class _LockedIndexer:
    """An engine indexed under the daemon's engine lock (an engine of unknown parts)."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.catalog = _LockedCatalog(context)

    def index(self, project_id: str, **kwargs: Any) -> Any:
        with self.context.engine_lock:
            return self.context.engine.index(project_id, **kwargs)


class _LockedCatalog:
    def __init__(self, context: Context) -> None:
        self.context = context

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.context.engine.catalog, name)

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self.context.engine_lock:
                return method(*args, **kwargs)

        return locked


def start_watcher(context: Context, root: Path, *, watch: bool = True) -> Callable[[], None]:
    """Start the re-index worker (and, with ``watch``, the source watches) for the context's
    engine, as the composition root builds them (``bootstrap.background_watcher``). Returns the
    function that stops it."""
    watcher, stop = background_watcher(context.engine, root, watch=watch, locked_indexer=_LockedIndexer(context))
    context.watcher = watcher
    watcher.start()
    return stop


def recover_interrupted_runs(engine: Engine) -> int:
    """Fail the Runs a process that is gone left ``running`` (a crash, SIGKILL, power loss)."""
    if engine.history is None:
        return 0
    recovered = engine.history.recover_interrupted()
    log.info("recovered interrupted runs", extra={"fields": {"failed": recovered}})
    return recovered


def drain(context: Context, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
    """Wait for the engine call in flight, if any, before the engine closes under it.

    uvicorn normally waits for every request; after a second signal it stops at once, while a
    worker thread may still be inside an activation: letting it finish records its Run."""
    if context.engine_lock.acquire(timeout=timeout_s):
        context.engine_lock.release()
    else:
        log.warning("an engine call is still running at shutdown", extra={"fields": {"waited_s": timeout_s}})
