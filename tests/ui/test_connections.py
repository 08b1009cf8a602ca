"""Connections the UI port does not hold for ever: a request head has a deadline and a peer has
a bound (``entrypoints/ui/connections.py``). Real sockets on loopback against the real daemon's
UI port, and against uvicorn serving the same protocol class in this process (to choose the
limits); every loop is bounded and every wait has a generous limit, so nothing here flakes.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memory_core.entrypoints.ui.connections import bounded_h11

from .conftest import UiDaemon

CLOSE_BOUND_S = 60.0  # far above HEAD_TIMEOUT_S: a loaded machine is slow, never early
HALF_A_HEAD = b"GET /static/app.css HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def head(port: int, path: str = "/static/app.css", *, close: bool = True) -> bytes:
    connection = b"Connection: close\r\n" if close else b""
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode() + connection + b"\r\n"


def closed_by_server(sock: socket.socket, deadline: float) -> bool:
    """Whether the server closes ``sock`` before ``deadline`` (monotonic); bytes it sends first
    (an answer) are read and dropped."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            if sock.recv(65536) == b"":
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


def answer(sock: socket.socket, timeout_s: float = CLOSE_BOUND_S) -> bytes:
    """Everything the server sends until it closes (the requests here ask it to close)."""
    sock.settimeout(timeout_s)
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=CLOSE_BOUND_S)


def test_half_sent_requests_on_the_daemons_ui_port_are_closed(ui_daemon: UiDaemon) -> None:
    """Issue 14's reproduction: 200 connections that sent part of their headers (and some that
    sent nothing), no token; every one is closed, and the port still answers."""
    port = ui_daemon.info.port
    with contextlib.ExitStack() as holding:
        socks: list[socket.socket] = []
        for i in range(200):
            sock = holding.enter_context(connect(port))
            socks.append(sock)
            if i % 10:  # every tenth says nothing at all
                with contextlib.suppress(ConnectionResetError, BrokenPipeError):  # the bound may close it already
                    sock.sendall(HALF_A_HEAD)
        deadline = time.monotonic() + CLOSE_BOUND_S
        still_open = [i for i, sock in enumerate(socks) if not closed_by_server(sock, deadline)]
        assert still_open == [], f"{len(still_open)} of 200 connections still open after {CLOSE_BOUND_S} s"
    with connect(port) as sock:
        sock.sendall(head(port))
        assert answer(sock).startswith(b"HTTP/1.1 200 ")


@contextlib.contextmanager
def served(protocol: type[Any], tmp_path: Path) -> Iterator[tuple[int, str]]:
    """uvicorn with ``protocol`` on a loopback TCP port and a Unix socket, as the daemon runs it;
    the app answers 200 ``ok`` to anything."""
    import uvicorn

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(128)
    path = str(tmp_path / "s.sock")
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(path)
    unix.listen(16)
    config = uvicorn.Config(app, http=protocol, lifespan="off", log_config=None, access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [tcp, unix]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        yield tcp.getsockname()[1], path
    finally:
        server.should_exit = True
        thread.join(30)
        tcp.close()
        unix.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def test_a_peer_may_hold_only_so_many_connections(tmp_path: Path) -> None:
    limit = 4
    with served(bounded_h11(head_timeout_s=600, per_peer=limit), tmp_path) as (port, _):
        with contextlib.ExitStack() as holding:
            held = [holding.enter_context(connect(port)) for _ in range(limit)]
            for sock in held:
                sock.sendall(HALF_A_HEAD)
            with connect(port) as extra:
                assert closed_by_server(extra, time.monotonic() + CLOSE_BOUND_S)  # one more: closed at once
            # The ones held are served once they finish their heads, and leave room when they go.
            for sock in held:
                sock.sendall(b"1\r\nConnection: close\r\n\r\n")
                assert answer(sock).startswith(b"HTTP/1.1 200 ")
        # Their slots are free again (a bounded wait for the server to see them closed).
        deadline = time.monotonic() + CLOSE_BOUND_S
        while True:
            with connect(port) as sock:
                sock.sendall(head(port))
                if answer(sock).startswith(b"HTTP/1.1 200 "):
                    break
            assert time.monotonic() < deadline, "a closed connection still counts against its peer"
            time.sleep(0.1)


def test_each_request_head_of_a_kept_alive_connection_has_the_deadline(tmp_path: Path) -> None:
    with served(bounded_h11(head_timeout_s=0.5, per_peer=8), tmp_path) as (port, _), connect(port) as sock:
        sock.sendall(head(port, close=False))
        sock.settimeout(CLOSE_BOUND_S)
        first = b""
        while not first.endswith(b"\r\n\r\nok"):  # the whole answer; the connection stays open
            chunk = sock.recv(65536)
            assert chunk, f"closed after {first!r}"
            first += chunk
        assert first.startswith(b"HTTP/1.1 200 ")
        sock.sendall(HALF_A_HEAD)  # the next request stalls in its head: closed, unanswered
        assert closed_by_server(sock, time.monotonic() + CLOSE_BOUND_S)


def test_a_slow_but_complete_head_within_the_deadline_is_served(tmp_path: Path) -> None:
    with served(bounded_h11(head_timeout_s=30, per_peer=8), tmp_path) as (port, _), connect(port) as sock:
        for piece in (b"GET / HTTP/1.1\r\n", f"Host: 127.0.0.1:{port}\r\n".encode(), b"Connection: close\r\n\r\n"):
            sock.sendall(piece)
            time.sleep(0.05)
        assert answer(sock).startswith(b"HTTP/1.1 200 ")


def test_the_unix_socket_is_left_as_uvicorn_serves_it(tmp_path: Path) -> None:
    """The owner's Unix socket has neither limit: a head sent in parts long after the UI port's
    deadline is still answered."""
    with served(bounded_h11(head_timeout_s=0.2, per_peer=1), tmp_path) as (_, path), contextlib.ExitStack() as holding:
        socks = []
        for _ in range(3):  # more than per_peer
            sock = holding.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            sock.settimeout(CLOSE_BOUND_S)
            sock.connect(path)
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            socks.append(sock)
        time.sleep(1.0)  # five deadlines: a late check, never an early one
        for sock in socks:
            sock.sendall(b"Connection: close\r\n\r\n")
            assert answer(sock).startswith(b"HTTP/1.1 200 ")
