"""Start the home's daemon on demand: a detached ``memcore --home H serve`` and a bounded wait
for its socket. Used by ``memcore mcp``; any client that wants a daemon may use it.

The daemon runs in its own session (so an MCP client that kills its server's process group does
not take the shared daemon with it), reads nothing, and appends its JSON logs to
``<home>/run/daemon.log`` (0600). When two starters race, the lock lets one daemon win; the loser
exits at once and both starters connect to the winner.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from . import api, paths
from .client import DaemonClient

START_TIMEOUT_S = 60.0
LOG_NAME = "daemon.log"
_POLL_S = 0.05
_TAIL_BYTES = 4000


def log_path(home: Path) -> Path:
    return paths.run_dir(home) / LOG_NAME


def spawn(home: Path, extra_args: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """Start ``memcore --home H serve`` detached from this process's session and stdio."""
    paths.ensure_private_dir(paths.run_dir(home))
    log = os.open(log_path(home), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memory_core", "--home", str(home), "serve", *extra_args],
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
) -> DaemonClient:
    """A client for the daemon serving ``home``, starting one first when none answers."""
    client = DaemonClient.running(home, timeout=client_timeout)
    if client is not None:
        return client
    proc = spawn(home, extra_args)
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
