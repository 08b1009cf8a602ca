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
(``_background_indexer``), so activations keep serving the current generation meanwhile; the
engine's live Effective Memory is the watcher's cache (``WatchedMemory``). ``watch=False``
(``memcore serve --no-watch``) leaves sources unwatched; indexing still runs on that worker.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import logging
import os
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from memory_core.domain.errors import InvalidRequest, MemoryCoreError, StorageUnavailable
from memory_core.entrypoints.daemon import api, paths
from memory_core.entrypoints.daemon.cli import add_serve_arguments, serve_options
from memory_core.entrypoints.daemon.dispatch import Context
from memory_core.services.engine import Engine

log = logging.getLogger("memory_core.daemon")
BACKLOG = 128
UI_HOST = "127.0.0.1"  # loopback only: never another interface
DRAIN_TIMEOUT_S = 30.0
DEFAULT_IDLE_EXIT_S = 600.0  # an on-demand daemon's idle time before it stops (10 minutes)


# -- logs -------------------------------------------------------------------------------------
class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, the record's ``fields``, exception."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


# -- one daemon per home ----------------------------------------------------------------------
class DaemonLock:
    """An exclusive ``flock`` on ``<home>/run/daemon.lock``, released when the process ends
    (even on SIGKILL), so a stale file never blocks a new daemon."""

    def __init__(self, home: Path) -> None:
        self.path = paths.lock_path(home)
        self._fd: int | None = None

    def acquire(self, home: Path) -> None:
        paths.ensure_private_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            info = paths.read_info(home)
            pid = info.pid if info else None
            where = f" on {info.socket}" if info else ""
            raise api.DaemonAlreadyRunning(
                f"a memcore daemon is already running for home {str(home)!r} (pid {pid}){where}",
                pid=pid,
                socket=info.socket if info else None,
            ) from None
        self._fd = fd

    def record(self, info: paths.DaemonInfo) -> None:
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, info.to_json().encode(), 0)
        os.fsync(self._fd)

    def release(self) -> None:
        if self._fd is None:
            return
        # Emptied, not removed: unlinking a lock file races with a daemon opening it.
        os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = None


# -- the socket -------------------------------------------------------------------------------
def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(os.fspath(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def bind_socket(path: Path, *, private_parent: bool) -> socket.socket:
    """A listening socket at ``path``, mode 0600; a stale socket file is replaced, a live one
    (another home's daemon on a shared ``--socket``) is not."""
    if private_parent:
        paths.ensure_private_dir(path.parent)
    elif stat.S_IMODE(os.stat(path.parent).st_mode) & 0o077:
        # An existing directory the user chose: not ours to chmod; the socket itself is 0600.
        log.warning("socket directory is open to other users", extra={"fields": {"dir": str(path.parent)}})
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise StorageUnavailable(f"{str(path)!r} exists and is not a socket", path=str(path))
        if _answers(path):
            raise api.DaemonAlreadyRunning(f"another daemon already answers on {str(path)!r}", socket=str(path))
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket is born 0600: no window where others may connect
    try:
        sock.bind(os.fspath(path))
    except OSError as exc:
        sock.close()
        raise StorageUnavailable(f"cannot bind {str(path)!r}: {exc.strerror or exc}", path=str(path)) from exc
    finally:
        os.umask(old)
    os.chmod(path, paths.SOCKET_MODE)
    sock.listen(BACKLOG)
    return sock


def bind_ui_socket(port: int) -> socket.socket:
    """A listening TCP socket on 127.0.0.1:``port`` (0: a free port)."""
    if not 0 <= port <= 65535:
        raise InvalidRequest(f"the UI port must be 0-65535, got {port}", port=port)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
    try:
        sock.bind((UI_HOST, port))
    except OSError as exc:
        sock.close()
        raise InvalidRequest(
            f"cannot listen on {UI_HOST}:{port} for the UI: {exc.strerror or exc}; "
            "choose another --ui-port (0 picks a free one)",
            port=port,
        ) from exc
    sock.listen(BACKLOG)
    return sock


def _remove_socket(path: Path, inode: int) -> None:
    try:
        if os.lstat(path).st_ino == inode:  # never remove a socket another daemon bound since
            os.unlink(path)
    except FileNotFoundError:
        pass


def _warm(context: Context) -> None:
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


def _background_indexer(engine: Engine, root: Path) -> tuple[Any, Callable[[], None]]:
    """The engine's indexer with its own catalog, hash cache and embedding-cache connections, for
    the watcher's worker thread (an apsw connection refuses two threads at once), and a closer.

    Models, blob store, generation store and Run store are shared: each is safe across threads.
    An engine of other parts (``engine_factory``) is indexed under the engine lock instead."""
    from memory_core.adapters.files.filesystem_sources import FileSystemScanner
    from memory_core.adapters.sqlite.catalog import SqliteCatalog
    from memory_core.adapters.sqlite.database import open_database
    from memory_core.adapters.sqlite.embedding_cache import SqliteEmbeddingCache
    from memory_core.adapters.system.home import HomeLayout

    indexer = engine.indexer
    if not isinstance(indexer.catalog, SqliteCatalog) or not isinstance(indexer.scanner, FileSystemScanner):
        return None, lambda: None
    catalog = SqliteCatalog(open_database(HomeLayout.at(root).db_path))
    parts: dict[str, Any] = {
        "catalog": catalog,
        "manifests": catalog,
        "scanner": FileSystemScanner(hash_cache=catalog, max_bytes=indexer.scanner.max_bytes),
    }
    cache = indexer.embedding_cache
    if isinstance(cache, SqliteEmbeddingCache):
        parts["embedding_cache"] = SqliteEmbeddingCache(cache.path)

    def close() -> None:
        catalog.close()
        if "embedding_cache" in parts:
            parts["embedding_cache"].close()

    return attrs.evolve(indexer, **parts), close


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
    engine; wire its cache in as the engine's live memory. Returns the function that stops it."""
    from memory_core.adapters.files.watcher import WatchedMemory, Watcher

    engine = context.engine
    indexer, close_indexer = _background_indexer(engine, root)
    watcher = Watcher(indexer if indexer is not None else _LockedIndexer(context), watch=watch)
    if watch and engine.live_memory is not None:
        engine.live_memory = WatchedMemory(watcher, engine.live_memory)
    context.watcher = watcher
    watcher.start()

    def stop() -> None:
        watcher.close()
        close_indexer()

    return stop


def recover_interrupted_runs(engine: Engine) -> int:
    """Fail the Runs a process that is gone left ``running`` (a crash, SIGKILL, power loss)."""
    if engine.history is None:
        return 0
    recovered = engine.history.recover_interrupted()
    log.info("recovered interrupted runs", extra={"fields": {"failed": recovered}})
    return recovered


def _drain(context: Context, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
    """Wait for the engine call in flight, if any, before the engine closes under it.

    uvicorn normally waits for every request; after a second signal it stops at once, while a
    worker thread may still be inside an activation: letting it finish records its Run."""
    if context.engine_lock.acquire(timeout=timeout_s):
        context.engine_lock.release()
    else:
        log.warning("an engine call is still running at shutdown", extra={"fields": {"waited_s": timeout_s}})


# -- stopping when idle -----------------------------------------------------------------------
class IdleClock:
    """How long the daemon has had nothing to do, and the stop once that reaches ``limit_s``.

    Activity: an HTTP request in flight or begun (counted at the ASGI layer, so every method and
    the UI's pages count, whatever they do), an engine call, and the watcher's work (a change
    seen, a re-index queued, running or finished). ``limit_s`` None: never stop."""

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

    def wrap(self, app: Any) -> Any:
        """``app`` with every HTTP request counted from its start to its last byte."""

        async def counted(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
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
        health = context.watcher.health()
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

    from memory_core.adapters.system.home import prepare_home, resolve_home
    from memory_core.entrypoints.daemon.app import create_app
    from memory_core.entrypoints.ui import launch as ui_launch

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
        context = Context(engine=engine, home=str(root), socket=str(path), started_at=started_at, idle=clock)
        lock.record(paths.DaemonInfo(os.getpid(), str(path), started_at))
        stop_watcher = start_watcher(context, root, watch=watch)
        if warm:
            threading.Thread(target=_warm, args=(context,), name="warm-up", daemon=True).start()
        app: Any = create_app(context)
        listeners = [sock]
        http: Any = "auto"
        if ui_sock is not None:
            from memory_core.entrypoints.ui.connections import bounded_h11

            app = _with_ui(root, context, app, ui_sock, started_at)
            listeners.append(ui_sock)
            http = bounded_h11()  # the UI port's heads have a deadline, its peers a bound
        config = uvicorn.Config(
            clock.wrap(app),  # outside the listener split: a request to either port is activity
            http=http,
            lifespan="off",
            proxy_headers=False,  # nothing proxies us: X-Forwarded-* from a local page is a lie
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=None,  # SIGTERM lets every in-flight request finish
            server_header=False,
        )
        server = uvicorn.Server(config)
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
        clock.close()
        if idle_thread is not None:
            idle_thread.join(timeout=5)
        if ui_sock is not None:
            ui_sock.close()
            ui_launch.remove_ui_info(root, os.getpid())
        if stop_watcher is not None:
            stop_watcher()  # a re-index in flight is discarded at its next step, or finishes
        if context is not None:
            _drain(context)
        if engine is not None:
            engine.close()
        if sock is not None:
            sock.close()
        if inode is not None:
            _remove_socket(path, inode)
        lock.release()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        log.info("stopped", extra={"fields": {"socket": str(path)}})


def _with_ui(root: Path, context: Context, daemon_app: Any, ui_sock: socket.socket, started_at: str) -> Any:
    """The one app both listeners share, and ``<home>/run/ui.json`` for ``memcore ui``."""
    from memory_core.entrypoints.ui import launch as ui_launch
    from memory_core.entrypoints.ui.app import by_listener, create_ui_app
    from memory_core.entrypoints.ui.security import Secrets

    port = ui_sock.getsockname()[1]
    ui = Secrets.fresh(port)
    info = ui_launch.UiInfo(url=ui.launch_url, base_url=ui.base_url, port=port, token=ui.token,
                            pid=os.getpid(), started_at=started_at)
    ui_launch.write_ui_info(root, info)
    log.info("ui", extra={"fields": {"url": ui.base_url, "info": str(ui_launch.ui_file(root))}})
    return by_listener(daemon_app, create_ui_app(context, daemon_app, ui), port)


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
