"""The watcher's side of the CLI: a project's health in ``memcore project show``,
``memcore index NAME --watch`` (keep a project current in the foreground) and the progress of
``memcore index`` through a daemon (read from its health while the request waits or builds).

With a daemon running, health is the daemon's (``runtime_status``) and ``index --watch`` follows
it: the daemon already re-indexes, a second watcher would only race it. Without one,
``index --watch`` runs the same watcher in this process until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.markup import escape

from memory_core.domain.errors import MemoryCoreError
from memory_core.domain.progress import Progress
from memory_core.entrypoints.bootstrap import DEBOUNCE_MS, STEP_MS, ProjectHealth, ReindexRecord, parse_progress
from memory_core.entrypoints.cli import render, wire
from memory_core.entrypoints.daemon.client import DaemonClient
from memory_core.operations.executor import InProcess
from memory_core.services.engine import Engine

FOLLOW_POLL_S = 1.0
WATCH_START_S = 10.0
PROGRESS_POLL_S = 0.25
QUEUED_STAGE = "waiting for other re-indexes"  # the bar of an index request queued behind others


def daemon_of(ops: Any) -> DaemonClient | None:
    """The daemon's client the operations go to, or None (in process, or not operations at all)."""
    executor = getattr(ops, "executor", None)
    return executor if isinstance(executor, DaemonClient) else None


def engine_of(ops: Any) -> Engine | None:
    """The engine the operations run on in this process, or None (through a daemon)."""
    executor = getattr(ops, "executor", None)
    if isinstance(executor, InProcess):
        return executor.engine
    return ops if isinstance(ops, Engine) else None


def daemon_health(engine: Any, name: str) -> tuple[bool, ProjectHealth | None]:
    """(a daemon answers, its health record of ``name``); an embedded engine has neither."""
    client = daemon_of(engine)
    if client is None:
        return False, None
    status = client.runtime_status()
    return True, next((h for h in status.projects if h.project_id == name), None)


def _when(record: ReindexRecord) -> str:
    how = f"{record.status} in {record.seconds:.2f} s"
    if record.status == "built":
        how += f", {record.embedded} unit(s) embedded of {record.units}"
    if record.error_code:
        how += f" ({record.error_code})"
    return f"{record.finished_at}: {how}, after a {record.trigger} trigger"


def health_lines(health: ProjectHealth | None, *, daemon: bool, index_behind: bool | None = None) -> list[str]:
    """What ``project show`` prints under the project's table."""
    if not daemon:
        lines = ["watching: no (no daemon runs: `memcore serve` follows the sources, or "
                 "`memcore index NAME --watch` in the foreground)"]
        if index_behind is not None:
            lines.append("sources: changed since the index was built" if index_behind
                         else "sources: as the index has them")
        return lines
    if health is None:
        return ["watching: no (the daemon does not follow this project yet)"]
    mode = {"watching": "yes", "polling": "yes, by polling"}.get(health.state, f"no ({health.state})")
    lines = [f"watching: {mode}" + ("" if health.healthy else "  [red]unhealthy[/]")]
    if health.last_change_at:
        paths = escape(", ".join(health.last_change_paths) or "-")
        lines.append(f"last change seen: {health.last_change_at} ({paths})")
    else:
        lines.append("last change seen: none since the daemon started")
    last = _when(health.last_reindex) if health.last_reindex else "none since the daemon started"
    lines.append(f"last re-index: {last}")
    pending = f"{health.pending_changes} changed path(s)"
    if health.indexing:
        pending += f", re-indexing now ({health.progress or 'starting'})"
    elif health.next_retry_at is not None:
        pending += f", re-index failed {health.failed_attempts} time(s) in a row: retried at {health.next_retry_at}"
    elif health.reindex_pending:
        pending += ", re-index queued"
    elif health.state == "source_unavailable" and health.pending_changes:
        pending += ", re-indexed when the source is back"
    elif not health.indexed:
        pending += " (not indexed yet: the first `memcore index` is yours to run)"
    if health.queue_position is not None:
        pending += f"; an index request waits behind {health.queue_position} re-index(es)"
    lines.append(f"pending: {pending}")
    if health.error is not None:
        lines.append(escape(f"error: [{health.error.code}] {health.error.message} (since {health.error.at})"))
    if health.last_error is not None and health.last_error != health.error:
        last_error = health.last_error
        lines.append(escape(f"last error: [{last_error.code}] {last_error.message} ({last_error.at})"))
    return lines


def show_health(engine: Any, info: Any, as_json: bool) -> dict[str, Any] | None:
    """Print (or return, for ``--json``) the project's health."""
    name = info.project.project_id
    daemon, health = daemon_health(engine, name)
    index_behind: bool | None = None
    local = engine_of(engine)
    live = local.live_memory if local is not None else None
    if not daemon and live is not None and info.generation is not None:
        try:
            index_behind = live.effective_memory(info.project).hash != info.generation.effective_memory_hash
        except Exception:  # a missing source: `memcore index` says why
            index_behind = None
    if as_json:
        return {"daemon": daemon, "health": wire.to_json(health) if health is not None else None,
                "index_behind": index_behind}
    out = render.console()
    for line in health_lines(health, daemon=daemon, index_behind=index_behind):
        out.print(line)
    return None


# -- memcore index through a daemon ----------------------------------------------------------
@contextlib.contextmanager
def daemon_progress(client: Any, name: str, progress: Progress) -> Iterator[None]:
    """While ``client`` waits for the daemon to index ``name``: draw where the request is from the
    daemon's health, polled on another connection: how many re-indexes (other projects' or
    the watcher's) are still ahead of it, then its own build's stages."""

    def follow(stop: threading.Event) -> None:
        ahead_most = 0  # the most re-indexes seen ahead: the waiting bar's total
        while not stop.wait(PROGRESS_POLL_S):
            try:
                status = client.runtime_status()
            except MemoryCoreError:
                break  # only the drawing stops: the index call says what went wrong
            health = next((h for h in status.projects if h.project_id == name), None)
            if health is None:
                continue
            if health.queue_position is not None:
                ahead_most = max(ahead_most, health.queue_position)
                if ahead_most:
                    progress(QUEUED_STAGE, ahead_most - health.queue_position, ahead_most)
                continue
            if ahead_most:  # started: nothing is ahead any more
                progress(QUEUED_STAGE, ahead_most, ahead_most)
            if health.indexing and (stage := parse_progress(health.progress)) is not None:
                progress(*stage)
        if ahead_most:  # done (or its build too quick to see): the wait is over
            progress(QUEUED_STAGE, ahead_most, ahead_most)

    with polling(follow, "index-progress", PROGRESS_POLL_S):
        yield


@contextlib.contextmanager
def polling(follow: Callable[[threading.Event], None], name: str, poll_s: float) -> Iterator[None]:
    """Run ``follow(stop)`` on a thread of its own while the body runs (a progress bar polling the
    daemon on another connection); ``stop`` is set when the body ends, and the thread is given
    eight polls to finish drawing, never more: a hung poll must not hold the command."""
    stop = threading.Event()
    follower = threading.Thread(target=follow, args=(stop,), name=name, daemon=True)
    follower.start()
    try:
        yield
    finally:
        stop.set()
        follower.join(poll_s * 8)


# -- memcore index NAME --watch ---------------------------------------------------------------
def _line(as_json: bool, name: str, record: ReindexRecord) -> None:
    if record.trigger == "start" and record.status == "unchanged":
        return  # the start-up check right after our own first index: nothing to say
    if as_json:
        sys.stdout.write(json.dumps({"project": name, **wire.to_json(record)}) + "\n")
    else:
        render.console().print(escape(f"{name}: re-indexed {_when(record)}"))
    sys.stdout.flush()


def _say_error(name: str, health: ProjectHealth | None, said: Any, as_json: bool) -> Any:
    """Print the project's current problem once, when it appears; returns what was said."""
    error = health.error if health is not None else None
    if error is not None and error != said:
        if as_json:
            sys.stdout.write(json.dumps({"project": name, "error": wire.to_json(error)}) + "\n")
            sys.stdout.flush()
        else:
            render.console().print(f"[red]{escape(f'{name}: {error.message}')}[/]")
    return error


def index_watch(engine: Any, args: argparse.Namespace) -> int:
    """After the first index: follow the sources until Ctrl-C (then exit 0)."""
    name = args.name
    out = render.console()
    sys.stdout.flush()  # the first index's report, before a long wait
    try:
        if daemon_of(engine) is not None:
            return _follow_daemon(engine, name, args.json)
        from memory_core.entrypoints.bootstrap import Watcher

        local = engine_of(engine)
        assert local is not None  # no daemon: the operations run on an engine here
        watcher = Watcher(local, only={name}, on_reindex=lambda pid, rec: _line(args.json, pid, rec))
        watcher.start()
        deadline = time.monotonic() + WATCH_START_S
        while time.monotonic() < deadline and not any(h.watching or h.error for h in watcher.health(name)):
            time.sleep(0.05)  # say "watching" once the watch is up, not before
        if not args.json:
            out.print(f"watching {name}: a change re-indexes after {STEP_MS} ms without another (changes are "
                      f"grouped for at most {DEBOUNCE_MS} ms); Ctrl-C to stop")
        said: Any = None
        try:
            while True:
                time.sleep(FOLLOW_POLL_S)
                said = _say_error(name, next(iter(watcher.health(name)), None), said, args.json)
        finally:
            watcher.close()
    except KeyboardInterrupt:
        if not args.json:
            out.print("stopped watching")
        return 0


def _follow_daemon(engine: Any, name: str, as_json: bool) -> int:
    """The daemon watches already (a second watcher would race it): print its re-indexes of ``name``."""
    pid = daemon_of(engine).runtime_status().pid  # type: ignore[union-attr]
    if not as_json:
        render.console().print(f"the daemon (pid {pid}) watches {name}; following its re-indexes, Ctrl-C to stop")
    _, health = daemon_health(engine, name)
    seen = health.last_reindex if health is not None else None
    said: Any = None
    while True:
        time.sleep(FOLLOW_POLL_S)
        _, health = daemon_health(engine, name)
        if health is not None and health.last_reindex is not None and health.last_reindex != seen:
            seen = health.last_reindex
            _line(as_json, name, seen)
        said = _say_error(name, health, said, as_json)
