"""Security (issue 8 item 7): every path the product creates is owner-only, and no code reaches
the network (the guard in ``network_guard``, autouse in this folder, tested here).

The permission walk runs the whole product in processes started with a permissive umask (022, a
common shell default) so that a mode only right by accident of the test runner's umask fails.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memory_core.entrypoints.daemon import api, paths
from memory_core.entrypoints.daemon.client import DaemonClient
from tests.daemon.process import DaemonProcess

from .harness import ROOT, child_env, write_memory
from .network_guard import Guard, NetworkAccessRefused, is_local_host

START_TIMEOUT_S = 90


def _umask_022() -> None:
    os.umask(0o022)


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=child_env(), preexec_fn=_umask_022,
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def _beir(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "Locks", "text": "Use advisory locks for idempotency keys."}\n'
        '{"_id": "d2", "title": "Deploy", "text": "Deploy the ledger with helm upgrade."}\n'
    )
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "advisory locks"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\n")
    return folder


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def loose_paths(home: Path) -> list[str]:
    """Every path under ``home`` whose mode is not owner-only (dirs 0700, files and sockets 0600)."""
    loose = []
    for dirpath, dirnames, filenames in os.walk(home):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            st = os.lstat(path)
            expected = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
            if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) != expected:
                loose.append(f"{path.relative_to(home)} {oct(stat.S_IMODE(st.st_mode))}")
    if mode(home) != 0o700:
        loose.append(f". {oct(mode(home))}")
    return loose


class Daemon(DaemonProcess):
    def __init__(self, home: Path, log: Path) -> None:
        self._stderr = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memory_core.entrypoints.daemon", "--home", str(home), "--no-warm"],
            cwd=ROOT, env=child_env(), preexec_fn=_umask_022, stdout=subprocess.DEVNULL, stderr=self._stderr,
        )  # fmt: skip
        self.socket = paths.default_socket_path(home)
        self.client = DaemonClient(self.socket, timeout=120)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert self.proc.poll() is None, f"the daemon exited with {self.proc.returncode}: {log.read_text()}"
            try:
                self.client.runtime_status()
                return
            except api.DaemonUnavailable:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)


@pytest.fixture(scope="module")
def walked_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A home after the whole product ran in it (library, CLI, daemon), with umask 022; and the
    folder the CLI exported fixtures to."""
    base = tmp_path_factory.mktemp("security")
    home, out = base / "home", base / "out"
    out.mkdir()
    source = write_memory(base / "memory", 0)
    _run("-m", "tests.reliability.workflow", str(home), str(source), str(_beir(base / "beir")))
    _run("-m", "memory_core", "--home", str(home), "eval", "export", "--out", str(out / "embedded.json"))
    daemon = Daemon(home, base / "daemon.log")
    try:
        assert stat.S_ISSOCK(os.lstat(daemon.socket).st_mode) and mode(daemon.socket) == 0o600
        assert daemon.socket.is_relative_to(home)  # not the /tmp fallback
        assert loose_paths(home) == []  # while it runs: socket, lock, run directory
        _run("-m", "memory_core", "--home", str(home), "runs", "list")
        _run("-m", "memory_core", "--home", str(home), "eval", "export", "--out", str(out / "via-daemon.json"))
    finally:
        assert daemon.stop() == 0
    return home, out


@pytest.mark.slow
def test_every_path_the_product_creates_in_its_home_is_owner_only(walked_home: tuple[Path, Path]) -> None:
    home, _ = walked_home
    created = sum(len(d) + len(f) for _, d, f in os.walk(home))
    assert created > 30  # the walk saw the database, blobs, generations, sources, run directory
    assert loose_paths(home) == []


@pytest.mark.slow
def test_an_exported_fixture_is_owner_only_without_a_daemon(walked_home: tuple[Path, Path]) -> None:
    _, out = walked_home
    assert mode(out / "embedded.json") == 0o600  # it holds the memory's bodies


@pytest.mark.slow
def test_an_exported_fixture_is_owner_only_through_the_daemon(walked_home: tuple[Path, Path]) -> None:
    _, out = walked_home
    assert mode(out / "via-daemon.json") == 0o600


# -- the network guard ------------------------------------------------------------------------------


def test_the_guard_refuses_and_records_a_non_loopback_connection(no_network: Guard) -> None:
    for attempt in (
        lambda: socket.create_connection(("192.0.2.1", 80), timeout=0.1),  # TEST-NET-1: never routed
        lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(("192.0.2.1", 80)),
        lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM).connect_ex(("2001:db8::1", 80, 0, 0)),
        lambda: socket.getaddrinfo("example.com", 443),
    ):
        with pytest.raises(NetworkAccessRefused):
            attempt()
    assert len(no_network.violations) == 4
    no_network.violations.clear()  # expected here: do not fail this test at teardown


def test_the_guard_lets_loopback_and_unix_sockets_through(tmp_path: Path, no_network: Guard) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    accepted = threading.Thread(target=lambda: server.accept()[0].close())
    accepted.start()
    with socket.create_connection(server.getsockname(), timeout=5):
        pass
    accepted.join(5)
    server.close()
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(tmp_path / "s.sock"))
    unix.listen(1)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(tmp_path / "s.sock"))
    unix.close()
    assert socket.getaddrinfo("localhost", 80)
    assert no_network.violations == []


@pytest.mark.parametrize(
    ("host", "local"),
    [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True), ("localhost", True),
     (None, True), ("10.0.0.1", False), ("0.0.0.0", False), ("example.com", False), ("169.254.169.254", False)],
)  # fmt: skip
def test_what_counts_as_local(host: object, local: bool) -> None:
    assert is_local_host(host) is local


def test_the_daemon_client_talks_over_its_unix_socket_only(tmp_path: Path, no_network: Guard) -> None:
    with pytest.raises(api.DaemonUnavailable):
        DaemonClient(tmp_path / "absent.sock", timeout=1).runtime_status()
    assert no_network.violations == []
