"""Daemons that go away (issue 19 item 2), with the real daemon on its real socket and short idle
limits (every wait bounded): one started on demand stops after its idle time and says so in
``memcore status``; a request in flight is not cut; a connected ``memcore mcp`` keeps it; one
started by ``memcore serve`` keeps running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memory_core.domain.model import Layer, Source
from memory_core.entrypoints.daemon import launcher, paths
from memory_core.entrypoints.daemon.idle import IdleClock
from tests.daemon.process import alive
from tests.daemon.test_server import Daemon, memory_folder

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 60.0  # the longest any wait here may take


def memcore(home: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_CORE_HOME"}
    return subprocess.run([sys.executable, "-m", "memory_core", "--home", str(home), *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600, **kwargs)


def status(home: Path) -> dict[str, Any]:
    result = memcore(home, "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def wait_until(condition: Callable[[], bool], what: str, bound_s: float = BOUND_S) -> float:
    """Seconds it took; fails after ``bound_s``."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < bound_s, f"{what}: not within {bound_s:g}s"
        time.sleep(0.1)
    return time.monotonic() - started


def daemon_log(home: Path) -> list[dict[str, Any]]:
    lines = launcher.log_path(home).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


@pytest.mark.slow
def test_an_on_demand_daemon_stops_after_its_idle_time_and_says_so(tmp_path: Path) -> None:
    home, limit = tmp_path / "home", 6  # longer than a `memcore status` subprocess takes to ask
    with launcher.ensure_daemon(home, idle_exit_s=limit, extra_args=["--no-warm", "--no-ui"]):
        pass
    first = status(home)
    assert first["running"] is True and first["on_demand"] is True and first["idle_exit_seconds"] == limit
    text = memcore(home, "status").stdout
    assert f"pid {first['pid']}" in text and "started on demand" in text and f"stops after {limit} s idle" in text
    took = wait_until(lambda: not alive(first["pid"]), "the idle daemon stopping")
    assert took >= limit - 2  # not before its time (the clock restarted when `status` asked)
    assert paths.read_info(home) is None  # it let the lock go, as on SIGTERM
    assert not paths.default_socket_path(home).exists()
    stopped = [r for r in daemon_log(home) if r.get("message") == "idle: stopping"]
    assert len(stopped) == 1 and stopped[0]["idle_exit_s"] == limit and stopped[0]["idle_s"] >= limit
    assert status(home) == {"running": False, "home": str(home)}
    assert "not running" in memcore(home, "status").stdout


@pytest.mark.slow
def test_a_request_in_flight_is_not_cut_by_the_idle_stop(tmp_path: Path) -> None:
    """The first index loads the model and the JVM: far longer than the 1 s idle limit. It
    finishes, its generation is published, and only then does the daemon stop."""
    home, memory = tmp_path / "home", memory_folder(tmp_path / "memory")
    with launcher.ensure_daemon(home, idle_exit_s=1, extra_args=["--no-warm", "--no-ui"], client_timeout=300) as c:
        pid = c.runtime_status().pid
        c.add_project("notes", [Source(str(memory), Layer.PROJECT)])
        started = time.monotonic()
        report = c.index_project("notes")
        took = time.monotonic() - started
    assert took > 1.0, f"the index took {took:.2f}s: not longer than the idle limit, so this proves nothing"
    assert report.status == "built" and report.units > 0
    wait_until(lambda: not alive(pid), "the daemon stopping once idle")
    # What it built survived the stop: the embedded CLI finds the generation and answers from it.
    answered = memcore(home, "activate", "notes", "how do I roll back a deploy?", "--json")
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout)["response"]["fragments"]


@pytest.mark.slow
def test_a_connected_mcp_server_keeps_the_daemon_and_its_leaving_lets_it_stop(tmp_path: Path) -> None:
    home, limit = tmp_path / "home", 2.0
    with launcher.ensure_daemon(home, idle_exit_s=limit, extra_args=["--no-warm", "--no-ui"],
                                client_timeout=10) as client:
        pid = client.runtime_status().pid
        env = {k: v for k, v in os.environ.items() if k != "MEMORY_CORE_HOME"}
        mcp = subprocess.Popen([sys.executable, "-m", "memory_core", "--home", str(home), "mcp"],
                               stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               cwd=ROOT, env=env)

        def heartbeat_seen() -> bool:
            client.list_projects()  # this test's own activity until the MCP server's first beat
            return any(r.get("method") == "runtime_status" for r in daemon_log(home)[seen:])

        seen = len(daemon_log(home))
        wait_until(heartbeat_seen, "the MCP server's first heartbeat")
    try:
        time.sleep(4 * limit)  # a client connected (it sends no tool call at all), nothing else
        assert alive(pid), "the daemon stopped while an MCP server was connected"
    finally:
        assert mcp.stdin is not None
        mcp.stdin.close()  # the MCP client leaves
        assert mcp.wait(timeout=BOUND_S) == 0
    wait_until(lambda: not alive(pid), "the daemon stopping after its client left")


@pytest.mark.slow
def test_a_daemon_started_by_serve_keeps_running(tmp_path: Path) -> None:
    home = tmp_path / "home"
    daemon = Daemon(home, tmp_path / "daemon.log", "--no-warm", "--no-ui")
    try:
        shown = status(home)
        assert shown["on_demand"] is False and shown["idle_exit_seconds"] is None
        assert "runs until stopped" in memcore(home, "status").stdout
        time.sleep(3)
        assert daemon.proc.poll() is None
    finally:
        assert daemon.stop() == 0
    # --idle-exit on serve stops it too, without being on demand.
    timed = Daemon(home, tmp_path / "daemon2.log", "--no-warm", "--no-ui", "--idle-exit", "1")
    try:
        shown_now = timed.client.runtime_status()  # at once: a status subprocess may outlast 1 s
        assert shown_now.on_demand is False and shown_now.idle_exit_seconds == 1
        wait_until(lambda: timed.proc.poll() is not None, "serve --idle-exit stopping")
        assert timed.proc.returncode == 0
    finally:
        timed.stop()


class _Health:
    def __init__(self, **fields: Any) -> None:
        self.project_id, self.last_change_at, self.last_reindex = "notes", None, None
        self.indexing = self.reindex_pending = False
        self.failed_attempts = 0
        self.__dict__.update(fields)


class _Watcher:
    def __init__(self) -> None:
        self.now = [_Health()]

    def health(self) -> list[_Health]:
        return self.now


class _Context:
    in_flight = 0

    def __init__(self) -> None:
        self.watcher = _Watcher()


def test_the_watchers_work_counts_as_activity() -> None:
    """A re-index queued or running keeps the clock at zero; a finished one restarts it."""
    clock = IdleClock(0.5, on_demand=True)
    context = _Context()
    stopped = threading.Event()
    context.watcher.now = [_Health(indexing=True)]
    runner = threading.Thread(target=clock.run, args=(context, stopped.set), daemon=True)
    runner.start()
    try:
        assert not stopped.wait(1.5), "stopped while the watcher was re-indexing"
        context.watcher.now = [_Health(last_reindex="finished just now")]
        started = time.monotonic()
        assert stopped.wait(BOUND_S)
        assert time.monotonic() - started >= 0.5  # the finished re-index was activity too
    finally:
        clock.close()
        runner.join(timeout=5)


def test_a_reindex_that_keeps_failing_does_not_keep_the_daemon_alive() -> None:
    """Issue 30: a project whose re-index fails (a full disk) retries on its backoff, each try a
    new record and a moment of indexing; none of it is anyone's work, so the clock runs out."""
    clock = IdleClock(0.5, on_demand=True)
    context = _Context()
    stopped = threading.Event()
    runner = threading.Thread(target=clock.run, args=(context, stopped.set), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + BOUND_S
        attempt = 0
        while not stopped.is_set() and time.monotonic() < deadline:
            attempt += 1
            context.watcher.now = [_Health(failed_attempts=attempt, reindex_pending=True, indexing=attempt % 2 == 0,
                                           last_reindex=f"failed try {attempt}")]  # fmt: skip
            stopped.wait(0.1)
        assert stopped.is_set(), "a failing re-index kept the daemon alive"
    finally:
        clock.close()
        runner.join(timeout=5)


def test_serve_refuses_a_negative_or_nan_idle_exit(tmp_path: Path) -> None:
    for bad in ("-1", "nan", "soon"):
        refused = memcore(tmp_path / "home", "serve", "--idle-exit", bad)
        assert refused.returncode == 2 and "--idle-exit" in refused.stderr
    assert not (tmp_path / "home" / "run" / "daemon.lock").exists() or paths.read_info(tmp_path / "home") is None

