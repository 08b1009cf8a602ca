"""What runs beside the daemon's requests: the warm-up, the source watcher and its re-index
worker (built by the composition root, ``bootstrap.background_watcher``, with their own database
connections), start-up recovery of interrupted Runs, and the drain of the engine call in flight
at shutdown."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memory_core.entrypoints.bootstrap import background_indexer as background_indexer  # benchmarks use it here
from memory_core.entrypoints.bootstrap import background_watcher
from memory_core.entrypoints.daemon.dispatch import Context
from memory_core.services.engine import Engine
from memory_core.services.open_generations import warm_lexical

log = logging.getLogger("memory_core.daemon")
DRAIN_TIMEOUT_S = 30.0
# The warm-up's searches (all projects together) and its time: about what the JVM needs to compile
# Lucene's search path (docs/performance.md: a cold daemon's p50 ratio to the peer 0.56 after 20
# queries, 0.49 after 600), bounded so a large home's start costs at most a few seconds of a core.
WARM_SEARCHES = 400
WARM_SECONDS = 4.0


def warm_up(context: Context) -> None:
    """Load the embedding model and let the JVM compile Lucene's search path (``warm_lexical``)
    before the first query, when some project can be queried."""
    engine = context.engine
    try:
        with context.engine_lock:  # the catalog is used from one thread at a time
            current = [info.generation for info in engine.list_projects() if info.generation is not None]
        if not current:
            return
        engine.embedder.embed_query("warm-up")  # the embedder has its own load lock
        started = time.monotonic()
        searches = 0
        # The projects share the budget (the JVM's code is one), smallest first: its units load
        # quickest, and Lucene's search path compiles the same whatever the index's size.
        for generation in sorted(current, key=lambda g: g.unit_count):
            try:
                searches += warm_lexical(
                    generation, engine.generations, engine.lexical, searches=WARM_SEARCHES - searches,
                    depth=engine.profile.lexical_depth, deadline=started + WARM_SECONDS,
                )  # fmt: skip
            except Exception as exc:  # moved or re-indexed meanwhile, say: the first queries warm it
                log.warning("warm-up searches of %s failed: %s", generation.project_id, exc)
        log.info("warm", extra={"fields": {"embedder": engine.embedder.revision, "searches": searches,
                                           "ms": round((time.monotonic() - started) * 1000)}})  # fmt: skip
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
