"""Start the home's daemon on demand: a detached ``memcore --home H serve`` and a bounded wait
for its socket. Used by ``memcore mcp``; any client that wants a daemon may use it.

The daemon runs in its own session (so an MCP client that kills its server's process group does
not take the shared daemon with it), reads nothing, and appends its JSON logs to
``<home>/run/daemon.log`` (0600). When two starters race, the lock lets one daemon win; the loser
exits at once and both starters connect to the winner.

A daemon started here is ``--on-demand``: it stops after ``idle_exit_s`` (default 600 s) with no
request, no re-index and no client keeping it (``Heartbeat``: ``memcore mcp`` holds one for as
long as its MCP client is connected). One started by ``memcore serve`` runs until stopped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from memory_core.entrypoints.daemon import api, paths
from memory_core.entrypoints.daemon.client import DaemonClient

START_TIMEOUT_S = 60.0
LOG_NAME = "daemon.log"
_POLL_S = 0.05
_TAIL_BYTES = 4000


def log_path(home: Path) -> Path:
    return paths.run_dir(home) / LOG_NAME


def spawn(home: Path, extra_args: Sequence[str] = (), *, idle_exit_s: float | None = None) -> subprocess.Popen[bytes]:
    """Start ``memcore --home H serve --on-demand`` detached from this process's session and stdio;
    it stops after ``idle_exit_s`` idle (None: the daemon's default for on-demand, 600 s; 0: never)."""
    paths.ensure_private_dir(paths.run_dir(home))
    idle = ["--idle-exit", f"{idle_exit_s:g}"] if idle_exit_s is not None else []
    log = os.open(log_path(home), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memory_core", "--home", str(home), "serve", "--on-demand", *idle, *extra_args],
            stdin=subprocess.DEVNULL,
            stdout=log,  # nothing of the daemon's may reach an MCP client's stdout
            stderr=log,
            cwd=home,  # not the caller's directory: `-m memory_core` must find the installed package
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(log)
    # Reap it when it exits, so a stopped daemon never lingers as a zombie of this process.
    threading.Thread(target=proc.wait, name="daemon-reaper", daemon=True).start()
    return proc


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - _TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def ensure_daemon(
    home: Path,
    *,
    timeout_s: float = START_TIMEOUT_S,
    extra_args: Sequence[str] = (),
    client_timeout: float | None = None,
    idle_exit_s: float | None = None,
) -> DaemonClient:
    """A client for the daemon serving ``home``, starting one first when none answers (one that
    stops after ``idle_exit_s`` idle; see :func:`spawn`)."""
    client = DaemonClient.running(home, timeout=client_timeout)
    if client is not None:
        return client
    proc = spawn(home, extra_args, idle_exit_s=idle_exit_s)
    deadline = time.monotonic() + timeout_s
    while True:
        client = DaemonClient.running(home, timeout=client_timeout)
        if client is not None:
            return client
        code = proc.poll()
        # Exiting because another daemon holds the lock is a race lost: that one will answer.
        if code is not None and code != 0 and "daemon_already_running" not in _tail(log_path(home)):
            raise api.DaemonUnavailable(
                f"the daemon for {str(home)!r} exited with status {code}; see {log_path(home)}",
                status=code, log=str(log_path(home)), log_tail=_tail(log_path(home))[-1000:],
            )
        if time.monotonic() > deadline:
            raise api.DaemonUnavailable(
                f"the daemon for {str(home)!r} did not answer within {timeout_s:g}s; see {log_path(home)}",
                log=str(log_path(home)),
            )
        time.sleep(_POLL_S)


class Heartbeat:
    """Keeps the home's daemon from stopping idle while this process is its client: a
    ``runtime_status`` call a few times per the daemon's idle limit (at most a minute apart).
    It never starts a daemon; :meth:`wake` after starting one makes it look at once."""

    MAX_PERIOD_S = 60.0

    def __init__(self, home: Path) -> None:
        self.home = home
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="daemon-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def wake(self) -> None:
        self._wake.set()

    def beat(self) -> float:
        """One call; returns how long to wait before the next."""
        try:
            client = DaemonClient.running(self.home, timeout=5.0)  # the probe is the beat
        except Exception:  # a heartbeat never takes its process down
            return self.MAX_PERIOD_S
        if client is None:
            return self.MAX_PERIOD_S
        with client:
            try:
                limit = client.runtime_status().idle_exit_seconds
            except Exception:
                return self.MAX_PERIOD_S
        # Three beats per idle limit: one late beat (a busy machine) still keeps it.
        return self.MAX_PERIOD_S if limit is None else max(0.2, min(self.MAX_PERIOD_S, limit / 3))

    def _run(self) -> None:
        while not self._stopped:
            period = self.beat()
            self._wake.wait(period)
            self._wake.clear()

    def close(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=10)
