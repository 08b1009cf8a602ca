"""The daemon client's HTTP on a Unix socket (``daemon/transport.py``), against a real HTTP/1.1
server on a real socket: kept-alive connections, one the server closed is not reused, callers on
several threads, and no server at all is ``DaemonUnavailable``."""

from __future__ import annotations

import itertools
import json
import socketserver
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.daemon.client import DaemonClient
from memory_core.entrypoints.daemon.transport import _Connection


class Echo(BaseHTTPRequestHandler):
    """Answers ``{"echo": <body>, "connection": n}``; keeps the connection unless the body says close."""

    protocol_version = "HTTP/1.1"
    server: EchoServer

    def setup(self) -> None:
        super().setup()
        self.connection_number = self.server.next_connection()  # one handler per accepted connection

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.bodies.append(body)
        answer = json.dumps({"echo": body, "connection": self.connection_number}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
        self.wfile.flush()
        if body.get("hang_up"):  # as uvicorn does to a connection idle too long: no notice
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


class EchoServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str) -> None:
        super().__init__(path, Echo)
        # Numbered as accepted, not by id(handler): a closed connection's handler is freed and a
        # new one may get its id, which made a new connection look like the closed one.
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self.bodies: list[dict[str, object]] = []  # every request body read, in order

    def next_connection(self) -> int:
        with self._lock:
            return next(self._numbers)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[EchoServer, Path]]:
    path = tmp_path / "echo.sock"
    srv = EchoServer(str(path))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv, path
    srv.shutdown()
    srv.server_close()


def test_calls_share_a_kept_alive_connection(server: tuple[EchoServer, Path]) -> None:
    _, path = server
    with DaemonClient(path, timeout=10) as client:
        first = client.call_json("runtime_status", {"n": 1})
        second = client.call_json("runtime_status", {"n": 2})
    assert (first["echo"], second["echo"]) == ({"n": 1}, {"n": 2})
    assert first["connection"] == second["connection"]


def test_a_connection_the_server_closed_is_not_reused(server: tuple[EchoServer, Path]) -> None:
    _, path = server
    with DaemonClient(path, timeout=10) as client:
        first = client.call_json("runtime_status", {"hang_up": True})
        threading.Event().wait(0.2)  # the server's close reaches the idle connection
        second = client.call_json("runtime_status", {"n": 2})
    assert second["echo"] == {"n": 2}
    assert second["connection"] != first["connection"]


def test_a_connection_closed_after_its_look_sends_the_request_once_on_a_new_one(
    server: tuple[EchoServer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemon's keep-alive timer can close an idle connection just after the client looked at
    # it (a caller idle for exactly that long): here the look always says open. The request's
    # bytes are refused (a broken pipe), the daemon read none of them, so it goes once more on a
    # new connection, and the daemon reads it once.
    srv, path = server
    monkeypatch.setattr(_Connection, "stale", lambda self: False)
    with DaemonClient(path, timeout=10) as client:
        first = client.call_json("runtime_status", {"hang_up": True})
        threading.Event().wait(0.2)  # the server has closed the idle connection
        second = client.call_json("runtime_status", {"n": 2})
    assert second["echo"] == {"n": 2} and second["connection"] != first["connection"]
    assert srv.bodies == [{"hang_up": True}, {"n": 2}]


def test_callers_on_several_threads_each_get_their_own_answer(server: tuple[EchoServer, Path]) -> None:
    _, path = server
    with DaemonClient(path, timeout=10) as client, ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: client.call_json("runtime_status", {"i": i})["echo"], range(64)))
    assert answers == [{"i": i} for i in range(64)]


def test_no_server_is_daemon_unavailable(tmp_path: Path) -> None:
    with DaemonClient(tmp_path / "nobody.sock", timeout=10) as client, pytest.raises(api.DaemonUnavailable):
        client.call_json("runtime_status", {})
