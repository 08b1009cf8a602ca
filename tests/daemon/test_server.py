"""The real daemon: a subprocess on a real Unix socket, with the real adapters.

One home per daemon, all under tmp_path. Checks: socket 0600 in a 0700 directory, one daemon per
home (the second names the first's pid), typed client round trips, JSON logs, a client that
disconnects mid-request, SIGTERM letting an in-flight request finish, and a restart serving the
same project again.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from memory_core.domain.errors import InvalidRequest, ProjectExists, ProjectNotFound
from memory_core.domain.model import Layer, Source
from memory_core.entrypoints.daemon import api, paths
from memory_core.entrypoints.daemon.client import DaemonClient
from memory_core.entrypoints.daemon.sockets import DaemonLock, bind_socket
from tests.daemon.process import DaemonProcess

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60


class Daemon(DaemonProcess):
    def __init__(
        self, home: Path, log: Path, *args: str, env: dict[str, str] | None = None, wrapper: Sequence[str] = ()
    ) -> None:
        self.home = home
        self.log = log
        self.socket = paths.default_socket_path(home)
        environ = {k: v for k, v in os.environ.items() if k not in ("MEMORY_CORE_HOME", "MEMORY_CORE_CRASH_POINT")}
        tmp = home.parent / "tmp"
        tmp.mkdir(exist_ok=True)
        environ.update(TMPDIR=str(tmp), PYTHONUNBUFFERED="1", **(env or {}))
        self._stderr = log.open("ab")
        self.proc = subprocess.Popen(
            [*wrapper, sys.executable, "-m", "memory_core.entrypoints.daemon", "--home", str(home), *args],
            cwd=ROOT, env=environ, stdout=subprocess.DEVNULL, stderr=self._stderr,
        )
        self.client = DaemonClient(self.socket, timeout=120)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{log.read_text()}")
            try:
                self.client.runtime_status()
                return
            except api.DaemonUnavailable:
                if time.monotonic() > deadline:
                    raise AssertionError(f"daemon did not answer:\n{log.read_text()}") from None
                time.sleep(0.05)

    def log_records(self) -> list[dict[str, Any]]:
        # The JVM itself announces JAVA_TOOL_OPTIONS on stderr; everything else is JSON.
        lines = self.log.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip() and not line.startswith("Picked up JAVA_")]


def memory_folder(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "runbooks").mkdir(exist_ok=True)
    (root / "runbooks" / "deploy.md").write_text(
        "# Deploy runbook\n\nDeploy the ledger with helm upgrade --atomic.\n\n"
        "## Rollback\n\nRoll back with helm rollback ledger, then replay the outbox.\n",
        encoding="utf-8",
    )
    (root / "decisions.md").write_text(
        "# ADR-0004: Advisory locks\n\nUse Postgres advisory locks for idempotency keys.\n", encoding="utf-8"
    )
    (root / "notes.txt").write_text("Coffee is on the second floor.\n\nThe printer is broken.\n", encoding="utf-8")
    return root


def running_daemon(
    tmp_path_factory: pytest.TempPathFactory, name: str, *args: str, indexed_project: str | None = None
) -> Iterator[Daemon]:
    """A daemon (started with ``args``) in a fresh home for one module's tests (a fixture
    ``yield from``s it), with ``indexed_project`` over ``memory_folder`` added and indexed when
    named; it must exit cleanly once they are done."""
    base = tmp_path_factory.mktemp(name)
    running = Daemon(base / "home", base / "daemon.log", *args)
    if indexed_project is not None:
        running.client.add_project(indexed_project, [Source(str(memory_folder(base / "memory")))])
        running.client.index_project(indexed_project)
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from running_daemon(tmp_path_factory, "daemon")


def raw_http(path: Path, request: bytes) -> bytes:
    """What ``curl --unix-socket`` does: HTTP/1.1 over the socket, no client library."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(os.fspath(path))
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_socket_is_private_and_the_lock_names_the_daemon(daemon: Daemon) -> None:
    assert daemon.socket == daemon.home / "run" / "memcore.sock"
    assert stat.S_ISSOCK(os.stat(daemon.socket).st_mode)
    assert stat.S_IMODE(os.stat(daemon.socket).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(daemon.socket.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(paths.lock_path(daemon.home)).st_mode) == 0o600
    info = paths.read_info(daemon.home)
    assert info is not None and info.pid == daemon.proc.pid and info.socket == str(daemon.socket)


def test_a_second_daemon_refuses_and_names_the_running_pid(daemon: Daemon) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "memory_core.entrypoints.daemon", "--home", str(daemon.home)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert second.returncode == 1
    assert "already running" in second.stderr and f"pid {daemon.proc.pid}" in second.stderr
    assert daemon.client.runtime_status().pid == daemon.proc.pid  # the first one is unharmed


def test_plain_http_on_the_socket_answers_runtime_status(daemon: Daemon) -> None:
    reply = raw_http(daemon.socket, b"GET /v1/runtime_status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    status = json.loads(body)
    assert status["pid"] == daemon.proc.pid and status["home"] == str(daemon.home)


def test_client_round_trip(daemon: Daemon, tmp_path: Path) -> None:
    source = memory_folder(tmp_path / "memory")
    client = daemon.client
    added = client.add_project("notes", [Source(str(source), Layer.LOCAL)])
    assert added.project.project_id == "notes" and added.generation is None
    assert added.project.sources == (Source(str(source), Layer.LOCAL),)
    assert [i.project.project_id for i in client.list_projects()] == ["notes"]
    assert client.show_project("notes") == added
    with pytest.raises(ProjectExists):
        client.add_project("notes", [Source(str(source))])
    with pytest.raises(ProjectNotFound) as missing:
        client.show_project("nope")
    assert missing.value.details == {"project": "nope", "known_projects": ["notes"]}
    with pytest.raises(InvalidRequest, match="absolute"):
        client.add_project("relative", [Source("memory")])
    client.remove_project("notes")
    assert client.list_projects() == []


def test_a_client_that_disconnects_mid_request_does_not_hurt(daemon: Daemon) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(os.fspath(daemon.socket))
        s.sendall(b"POST /v1/add_project HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"project_id\": \"half")
    assert daemon.client.list_projects() == []
    assert daemon.client.runtime_status().pid == daemon.proc.pid


def test_logs_are_json_lines(daemon: Daemon) -> None:
    daemon.client.runtime_status()
    records = daemon.log_records()
    assert any(r["message"] == "serving" and r["socket"] == str(daemon.socket) for r in records)
    requests = [r for r in records if r["message"] == "request"]
    assert requests and {"method", "status", "code", "ms", "ts", "level"} <= set(requests[-1])


@pytest.mark.slow
def test_sigterm_finishes_the_in_flight_request_and_a_restart_serves_again(tmp_path: Path) -> None:
    home, log = tmp_path / "home", tmp_path / "daemon.log"
    source = memory_folder(tmp_path / "memory")
    first = Daemon(home, log)
    first.client.add_project("ledger", [Source(str(source))])
    outcome: dict[str, Any] = {}

    def index() -> None:
        try:
            outcome["report"] = first.client.index_project("ledger")
        except Exception as exc:  # reported by the assertion below
            outcome["error"] = exc

    worker = threading.Thread(target=index)
    worker.start()
    time.sleep(1.0)  # the first index loads the tokenizer, MiniLM and the JVM: seconds
    assert worker.is_alive(), "indexing finished before SIGTERM; the test proves nothing"
    assert first.stop() == 0
    worker.join(timeout=10)
    assert "error" not in outcome, outcome
    assert outcome["report"].status == "built" and outcome["report"].resources == 3
    assert not first.socket.exists()
    assert paths.read_info(home) is None  # the lock file is emptied on a clean stop
    assert any(r["message"] == "stopped" for r in first.log_records())

    second = Daemon(home, log)
    try:
        (info,) = second.client.list_projects()
        assert info.generation is not None and info.generation.index_revision == outcome["report"].index_revision
        answer = second.client.activate_memory("ledger", "how do I roll back a deploy?")
        assert answer.fragments and all(f.delta_action == "add" and f.text for f in answer.fragments)
        assert answer.fragments[0].resource_id == "runbooks/deploy.md"
        again = second.client.activate_memory("ledger", "how do I roll back a deploy?",
                                               activation_state=answer.activation_state)
        assert [f.delta_action for f in again.fragments] == ["reuse"] * len(again.fragments)
        assert again.state_fingerprint == answer.activation_state.fingerprint
    finally:
        assert second.stop() == 0


# -- the pieces, in process -------------------------------------------------------------------
def test_a_long_home_gets_a_short_socket_path(tmp_path: Path) -> None:
    short = tmp_path / "h"
    assert paths.default_socket_path(short, fallback_root=tmp_path) == short / "run" / "memcore.sock"
    long_home = tmp_path / ("deep" * 30)
    chosen = paths.default_socket_path(long_home, fallback_root=tmp_path)
    assert chosen.parent == tmp_path / f"memcore-{os.getuid()}"
    assert len(os.fsencode(chosen)) < paths.MAX_SOCKET_PATH_BYTES
    assert chosen == paths.default_socket_path(long_home, fallback_root=tmp_path)  # stable per home
    assert chosen != paths.default_socket_path(tmp_path / ("other" * 30), fallback_root=tmp_path)
    sock = bind_socket(chosen, private_parent=True)
    sock.close()
    assert stat.S_IMODE(os.stat(chosen.parent).st_mode) == 0o700


def test_bind_socket_replaces_a_stale_socket_but_not_a_live_one(tmp_path: Path) -> None:
    path = tmp_path / "run" / "d.sock"
    live = bind_socket(path, private_parent=True)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(api.DaemonAlreadyRunning):
        bind_socket(path, private_parent=True)
    live.close()  # the file stays behind, as after a crash
    assert path.exists()
    again = bind_socket(path, private_parent=True)
    again.close()
    path.unlink()
    path.write_text("not a socket")
    with pytest.raises(Exception, match="not a socket"):
        bind_socket(path, private_parent=True)


def test_a_private_dir_must_be_ours_and_real(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    os.chmod(real, 0o755)
    assert paths.ensure_private_dir(real) == real and stat.S_IMODE(os.stat(real).st_mode) == 0o700
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(Exception, match="not a directory owned by this user"):
        paths.ensure_private_dir(link)


def test_the_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = DaemonLock(home)
    first.acquire(home)
    first.record(paths.DaemonInfo(4242, "/x.sock", "now"))
    with pytest.raises(api.DaemonAlreadyRunning, match="pid 4242") as refused:
        DaemonLock(home).acquire(home)
    assert refused.value.details["pid"] == 4242
    first.release()
    assert paths.read_info(home) is None
    later = DaemonLock(home)
    later.acquire(home)
    later.release()
