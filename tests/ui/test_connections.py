"""Connections the UI port does not hold for ever: a request head and a request body have
deadlines, and a peer's connections without the token have a bound that gives way to a newcomer
(``entrypoints/ui/connections.py``). Real sockets on loopback against the real daemon's UI port
(``test_ui_crowds.py`` has more), and against uvicorn serving the same protocol class in this
process (to choose the limits); every loop is bounded and every wait has a generous limit, so
nothing here flakes.
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

import pytest

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


TOKEN_HEADER = (b"authorization", b"Bearer t0ken")


def with_token(scope: Any) -> bool:
    return TOKEN_HEADER in scope["headers"]


@contextlib.contextmanager
def served(protocol: type[Any], tmp_path: Path, *, read_body: bool = False) -> Iterator[tuple[int, str]]:
    """uvicorn with ``protocol`` on a loopback TCP port and a Unix socket, as the daemon runs it;
    the app answers 200 ``ok`` to anything, at once or (``read_body``) once the body is in."""
    import uvicorn

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while read_body and (await receive()).get("more_body"):
            pass
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


def test_a_crowd_without_the_token_gives_way_to_a_newcomer(tmp_path: Path) -> None:
    """A peer holds ``per_peer`` connections without the token; one more closes the oldest, not
    itself, so a crowd cannot keep the next request (the token holder's) out."""
    limit = 4
    protocol = bounded_h11(head_timeout_s=600, per_peer=limit)
    with served(protocol, tmp_path) as (port, _), contextlib.ExitStack() as holding:
        held = [holding.enter_context(connect(port)) for _ in range(limit)]
        for sock in held:
            sock.sendall(HALF_A_HEAD)
        with connect(port) as newcomer:
            newcomer.sendall(head(port))
            assert answer(newcomer).startswith(b"HTTP/1.1 200 ")
        assert closed_by_server(held[0], time.monotonic() + CLOSE_BOUND_S)  # the oldest gave way
        # The others are served once they finish their heads.
        for sock in held[1:]:
            sock.sendall(b"1\r\nConnection: close\r\n\r\n")
            assert answer(sock).startswith(b"HTTP/1.1 200 ")


def keep_alive_request(sock: socket.socket, port: int, extra: bytes = b"") -> bytes:
    """One request on a kept-alive connection and its whole answer (the app's two bytes)."""
    sock.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode() + extra + b"\r\n")
    return whole_answer(sock)


def whole_answer(sock: socket.socket) -> bytes:
    """Everything the server sends up to the app's two-byte body, failing if it closes first."""
    sock.settimeout(CLOSE_BOUND_S)
    reply = b""
    while not reply.endswith(b"\r\n\r\nok"):
        chunk = sock.recv(65536)
        assert chunk, f"closed after {reply!r}"
        reply += chunk
    return reply


def test_a_connection_that_proved_the_token_is_never_closed_for_a_crowd(tmp_path: Path) -> None:
    limit = 4
    protocol = bounded_h11(head_timeout_s=600, per_peer=limit, authorized=with_token)
    with served(protocol, tmp_path) as (port, _), contextlib.ExitStack() as holding:
        holder = holding.enter_context(connect(port))
        token = b"%s: %s\r\n" % TOKEN_HEADER
        assert keep_alive_request(holder, port, token).startswith(b"HTTP/1.1 200 ")
        crowd = [holding.enter_context(connect(port)) for _ in range(3 * limit)]
        for sock in crowd:
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):  # an old one may be closed already
                sock.sendall(HALF_A_HEAD)
        # The holder's connection, the oldest of all, still serves (even a request without the token).
        assert keep_alive_request(holder, port).startswith(b"HTTP/1.1 200 ")
        # Of the crowd, the newest ``limit`` are left: every older one gave way.
        deadline = time.monotonic() + CLOSE_BOUND_S
        assert all(closed_by_server(sock, deadline) for sock in crowd[:-limit])
        for sock in crowd[-limit:]:
            sock.sendall(b"1\r\nConnection: close\r\n\r\n")
            assert answer(sock).startswith(b"HTTP/1.1 200 ")


POST_HEAD = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"


def trickled_until_closed(sock: socket.socket, most_bytes: int, period_s: float) -> bool:
    """Send a byte every ``period_s`` (at most ``most_bytes``); whether the server closed the
    connection meanwhile (anything it answered first is read and dropped)."""
    for _ in range(most_bytes):
        try:
            sock.sendall(b" ")
        except (ConnectionResetError, BrokenPipeError):
            return True
        if closed_by_server(sock, time.monotonic() + period_s):
            return True
    return False


@pytest.mark.parametrize("read_body", [True, False], ids=["app-waits-for-the-body", "answered-before-the-body"])
def test_a_trickled_body_is_closed_at_its_deadline(tmp_path: Path, read_body: bool) -> None:
    """A byte every 0.1 s never ends the body of 1,000: past the 0.5 s deadline the connection is
    closed, whether the app waits for the body or answered first (as a refusal does)."""
    protocol = bounded_h11(head_timeout_s=600, per_peer=8, body_timeout_s=0.5)
    with served(protocol, tmp_path, read_body=read_body) as (port, _), connect(port) as sock:
        sock.sendall(POST_HEAD + b"{")
        assert trickled_until_closed(sock, most_bytes=600, period_s=0.1)  # 60 s at most


def test_a_body_complete_within_its_deadline_is_served_and_the_connection_kept(tmp_path: Path) -> None:
    protocol = bounded_h11(head_timeout_s=600, per_peer=8, body_timeout_s=30)
    with served(protocol, tmp_path, read_body=True) as (port, _), connect(port) as sock:
        body = b"[" + b" " * 998 + b"]"
        sock.sendall(POST_HEAD)
        for piece in (body[:300], body[300:700], body[700:]):
            time.sleep(0.05)
            sock.sendall(piece)
        assert whole_answer(sock).startswith(b"HTTP/1.1 200 ")
        assert keep_alive_request(sock, port).startswith(b"HTTP/1.1 200 ")  # the next request too


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
