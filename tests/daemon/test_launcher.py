"""Starting the daemon on demand (what ``memcore mcp`` does): detached, one per home even when two
starters race, and a daemon that cannot start is reported at once with its log."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from memory_core.entrypoints.daemon import api, launcher, paths
from memory_core.entrypoints.daemon.client import DaemonClient
from memory_core.entrypoints.daemon.sockets import DaemonLock

pytestmark = pytest.mark.slow
STOP_TIMEOUT_S = 60


def stop_daemon(home: Path) -> None:
    """SIGTERM the daemon named in the lock file; wait until it has let the lock go."""
    info = paths.read_info(home)
    assert info is not None, "no daemon is recorded for this home"
    os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while True:
        lock = DaemonLock(home)
        try:
            lock.acquire(home)
        except api.DaemonAlreadyRunning:
            assert time.monotonic() < deadline, "the daemon did not stop"
            time.sleep(0.05)
            continue
        lock.release()
        return


def test_two_starters_racing_get_the_same_single_daemon(tmp_path: Path) -> None:
    home = tmp_path / "home"
    clients: list[DaemonClient] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            clients.append(launcher.ensure_daemon(home, timeout_s=60, extra_args=["--no-warm"]))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    starters = [threading.Thread(target=start) for _ in range(2)]
    for t in starters:
        t.start()
    for t in starters:
        t.join(timeout=90)
    try:
        assert errors == [] and len(clients) == 2
        pids = {c.runtime_status().pid for c in clients}
        info = paths.read_info(home)
        assert info is not None and pids == {info.pid}
        assert info.pid != os.getpid() and os.getsid(info.pid) != os.getsid(0)  # detached: its own session
        log = launcher.log_path(home)
        assert oct(log.stat().st_mode & 0o777) == "0o600"
        # Already running: no new process.
        again = launcher.ensure_daemon(home, timeout_s=5)
        assert again.runtime_status().pid == info.pid
        again.close()
    finally:
        for c in clients:
            c.close()
        if paths.read_info(home) is not None:
            stop_daemon(home)
    assert DaemonClient.running(home) is None


def test_a_daemon_that_cannot_start_is_reported_at_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    started = time.monotonic()
    with pytest.raises(api.DaemonUnavailable, match="exited with status 2") as failed:
        launcher.ensure_daemon(home, timeout_s=60, extra_args=["--log-level", "loud"])
    assert time.monotonic() - started < 30  # not the whole timeout
    assert "invalid choice" in failed.value.details["log_tail"]
    assert failed.value.details["log"] == str(launcher.log_path(home))
