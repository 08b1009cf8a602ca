"""``serve(home, socket_path)``: one daemon per home, on a Unix socket, with the engine warm.

Start-up: prepare the home, take ``<home>/run/daemon.lock`` (a second daemon refuses, naming the
first one's pid), bind the socket ourselves (0600, in a 0700 directory: uvicorn would chmod its
own socket 0666), build the engine once, fail the Runs that a process now gone left ``running``
(start-up recovery) and serve until SIGTERM or SIGINT. Shutdown stops accepting, lets in-flight
requests finish (so their Runs complete), waits for the engine call in flight, closes the engine
and removes the socket. The JVM runs with ``-Xrs``: these signals are Python's. Logs are JSON
lines on stderr.

The Diagnostics UI (``memory_core.entrypoints.ui``) is a second listener of the same server, on
127.0.0.1 only (a chosen port or a free one); its address and this start's token go to
``<home>/run/ui.json`` (0600), which ``memcore ui`` reads.

The source watcher (``memory_core.adapters.files.watcher``) follows every project's sources and
re-indexes changed ones on its own worker, with its own database connections
(``background.background_indexer``), so activations keep serving the current generation meanwhile; the
engine's live Effective Memory is the watcher's cache (``WatchedMemory``). ``watch=False``
(``memcore serve --no-watch``) leaves sources unwatched; indexing still runs on that worker.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.entrypoints.daemon import paths
from memory_core.entrypoints.daemon.background import drain, recover_interrupted_runs, start_watcher, warm_up
from memory_core.entrypoints.daemon.dispatch import Context, HeldBodies, job_slots_from_env
from memory_core.entrypoints.daemon.idle import DEFAULT_IDLE_EXIT_S, IdleClock
from memory_core.entrypoints.daemon.jobs import JobRunner
from memory_core.entrypoints.daemon.logs import JsonFormatter as JsonFormatter  # read here by tests and tools
from memory_core.entrypoints.daemon.logs import configure_logging
from memory_core.entrypoints.daemon.options import add_serve_arguments, serve_options
from memory_core.entrypoints.daemon.sockets import DaemonLock, bind_socket, bind_ui_socket, remove_socket
from memory_core.services.engine import Engine

log = logging.getLogger("memory_core.daemon")


# -- serve ------------------------------------------------------------------------------------
def serve(
    home: str | os.PathLike[str] | None = None,
    socket_path: str | os.PathLike[str] | None = None,
    *,
    engine_factory: Callable[[Path], Engine] | None = None,
    warm: bool = True,
    ui_port: int | None = 0,
    sync_history: bool = False,
    watch: bool = True,
    idle_exit_s: float | None = None,
    on_demand: bool = False,
) -> int:
    """Run the daemon for ``home`` until SIGTERM/SIGINT; returns the exit status (0).

    ``ui_port``: the Diagnostics UI's port on 127.0.0.1 (0: a free one; None: no UI).
    ``sync_history``: commit each Run's trace before answering (see ``bootstrap``).
    ``watch``: follow every project's sources and re-index changed ones in the background.
    ``idle_exit_s``: stop after that long without activity (None: never; with ``on_demand``,
    started by a client, the default is ``DEFAULT_IDLE_EXIT_S``; 0 also means never)."""
    import uvicorn

    from memory_core.entrypoints.bootstrap import prepare_home, resolve_home
    from memory_core.entrypoints.daemon.app import create_app
    from memory_core.entrypoints.ui import launch as ui_launch

    bodies, job_slots = HeldBodies.from_env(), job_slots_from_env()  # a malformed one fails before anything opens
    root = prepare_home(resolve_home(home))
    lock = DaemonLock(root)
    lock.acquire(root)
    sock: socket.socket | None = None
    ui_sock: socket.socket | None = None
    inode: int | None = None
    engine: Engine | None = None
    context: Context | None = None
    handlers: dict[signal.Signals, Any] = {}
    stop_watcher: Callable[[], None] | None = None
    jobs: JobRunner | None = None
    if idle_exit_s is None and on_demand:
        idle_exit_s = DEFAULT_IDLE_EXIT_S
    if idle_exit_s is not None and idle_exit_s < 0:
        raise InvalidRequest(f"--idle-exit is seconds, 0 or more, not {idle_exit_s:g}", idle_exit=idle_exit_s)
    clock = IdleClock(idle_exit_s or None, on_demand=on_demand)
    idle_thread: threading.Thread | None = None
    path = Path(socket_path).absolute() if socket_path else paths.default_socket_path(root)
    try:
        sock = bind_socket(path, private_parent=socket_path is None or not path.parent.exists())
        inode = os.lstat(path).st_ino
        if ui_port is not None:
            ui_sock = bind_ui_socket(ui_port)  # before the engine: a taken port fails fast
        if engine_factory is None:
            from memory_core.entrypoints.bootstrap import bootstrap

            engine = bootstrap(root, recover=False, sync_history=sync_history)  # recovered below, with a log line
        else:
            engine = engine_factory(root)
        recover_interrupted_runs(engine)
        started_at = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        context = Context(engine=engine, home=str(root), socket=str(path), started_at=started_at, idle=clock,
                          bodies=bodies, job_slots=job_slots)
        if engine_factory is None:  # a job's process builds the same engine over the home
            context.jobs = jobs = JobRunner(root, board=context.board)
        lock.record(paths.DaemonInfo(os.getpid(), str(path), started_at))
        stop_watcher = start_watcher(context, root, watch=watch)
        if warm:
            threading.Thread(target=warm_up, args=(context,), name="warm-up", daemon=True).start()
        app: Any = create_app(context)
        listeners = [sock]
        http: Any = "auto"
        if ui_sock is not None:
            app, http = _with_ui(root, context, app, ui_sock, started_at, clock)
            listeners.append(ui_sock)
        else:
            app = clock.wrap(app)  # every request on the owner's socket is activity
        config = uvicorn.Config(
            app,
            http=http,
            lifespan="off",
            proxy_headers=False,  # nothing proxies us: X-Forwarded-* from a local page is a lie
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=None,  # SIGTERM lets every in-flight request finish
            server_header=False,
        )
        server = _server(config, jobs)
        idle_thread = threading.Thread(
            target=clock.run, args=(context, lambda: setattr(server, "should_exit", True)), name="idle-exit",
            daemon=True,
        )  # should_exit: uvicorn's own graceful stop, as on SIGTERM (requests in flight finish)
        idle_thread.start()
        # uvicorn re-raises the signal it caught once it has shut down; with a default handler
        # that would kill us before the engine closes, so the outer handlers only note it.
        for sig in (signal.SIGTERM, signal.SIGINT):
            handlers[sig] = signal.signal(sig, lambda *_: None)
        log.info("serving", extra={"fields": {"home": str(root), "socket": str(path), "pid": os.getpid(),
                                              "on_demand": on_demand, "idle_exit_s": clock.limit_s}})
        server.run(sockets=listeners)
        return 0
    finally:
        if jobs is not None:
            jobs.close()  # before the drain: a job's request then ends at once
        clock.close()
        if idle_thread is not None:
            idle_thread.join(timeout=5)
        if ui_sock is not None:
            ui_sock.close()
            ui_launch.remove_ui_info(root, os.getpid())
        if stop_watcher is not None:
            stop_watcher()  # a re-index in flight is discarded at its next step, or finishes
        if context is not None:
            drain(context)
        if engine is not None:
            engine.close()
        if sock is not None:
            sock.close()
        if inode is not None:
            remove_socket(path, inode)
        lock.release()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        log.info("stopped", extra={"fields": {"socket": str(path)}})


def _server(config: Any, jobs: JobRunner | None) -> Any:
    """uvicorn's server, whose stop signal also cancels the running jobs: uvicorn waits for every
    request in flight, and a job's request would otherwise hold the stop as long as the job runs.
    (uvicorn is imported here, lazily, as in ``serve``.)"""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if jobs is not None:
                jobs.cancel_all()
            super().handle_exit(sig, frame)

    return Server(config)


def _with_ui(root: Path, context: Context, daemon_app: Any, ui_sock: socket.socket, started_at: str,
             clock: IdleClock) -> tuple[Any, Any]:
    """The one app both listeners share, counted by the idle clock, and the protocol both serve
    (on the UI port heads and bodies have deadlines and no crowd without the token holds it);
    writes ``<home>/run/ui.json`` for ``memcore ui``."""
    from memory_core.entrypoints.ui import launch as ui_launch
    from memory_core.entrypoints.ui.app import by_listener, create_ui_app
    from memory_core.entrypoints.ui.connections import bounded_h11
    from memory_core.entrypoints.ui.security import Secrets

    port = ui_sock.getsockname()[1]
    ui = Secrets.fresh(port)
    info = ui_launch.UiInfo(url=ui.launch_url, base_url=ui.base_url, port=port, token=ui.token,
                            pid=os.getpid(), started_at=started_at)
    ui_launch.write_ui_info(root, info)
    log.info("ui", extra={"fields": {"url": ui.base_url, "info": str(ui_launch.ui_file(root))}})
    # The owner's socket: every request is activity; the UI port, open to every local user: only
    # a request with the token, so a page or a refusal keeps no on-demand daemon alive.
    ui_app = clock.wrap(create_ui_app(context, daemon_app, ui), counts=ui.authorizes)
    app = by_listener(clock.wrap(daemon_app), ui_app, port)
    return app, bounded_h11(authorized=ui.authorizes)


# -- command line -----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memcore-daemon", description="Run the memory-core daemon.")
    parser.add_argument("--home", help="data directory (default: $MEMORY_CORE_HOME or the user data dir)")
    add_serve_arguments(parser)  # the same options as `memcore serve`
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        return serve(args.home, args.socket, **serve_options(args))
    except MemoryCoreError as exc:
        # A record of the JSON log like every other line on stderr (the text keeps the CLI's form).
        log.error(f"error[{exc.code}]: {exc.message}", extra={"fields": {"code": exc.code, "details": exc.details}})
        return 1
