"""What anyone local can do to the UI port without the token (issue 30 item 7), against the real
daemon on its real loopback port: a crowd of kept-alive connections and trickled bodies never
keeps the token holder out, a trickled body ends at its deadline, and only requests with the
token keep an on-demand daemon from stopping idle. Every loop is bounded in count and time.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from memory_core.entrypoints.daemon import launcher
from memory_core.entrypoints.ui.connections import BODY_TIMEOUT_S, MAX_CONNECTIONS_PER_PEER
from memory_core.entrypoints.ui.launch import UiInfo, read_ui_info
from tests.daemon.process import alive

from .conftest import UiDaemon
from .test_connections import CLOSE_BOUND_S, closed_by_server, connect

CROWD = 40  # of each kind: more than MAX_CONNECTIONS_PER_PEER
BOUND_S = 60.0  # the longest any wait here may take


def request(port: int, method: str, path: str, *, token: str | None = None, body: bytes = b"",
            length: int | None = None, close: bool = False) -> bytes:
    """An HTTP/1.1 request as the port's clients send it (``length``: the Content-Length to
    announce, when more is to follow than ``body``)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    if method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {len(body) if length is None else length}"]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def response(sock: socket.socket) -> tuple[int, bytes]:
    """One whole answer on a kept-alive connection: its status and body (by Content-Length)."""
    sock.settimeout(CLOSE_BOUND_S)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
    length = int(fields[b"content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {head!r} and {len(body)} bytes of body"
        body += chunk
    return int(head.split(b" ")[1]), body


def list_projects(sock: socket.socket, port: int, token: str, *, close: bool = False) -> list[str]:
    sock.sendall(request(port, "POST", "/v1/list_projects", token=token, body=b"{}", close=close))
    status, body = response(sock)
    assert status == 200, body
    return [p["project"]["project_id"] for p in json.loads(body)["projects"]]


def trickle_until_closed(socks: list[socket.socket], rounds: int, period_s: float) -> list[int]:
    """A byte to every connection each ``period_s``, for at most ``rounds`` rounds; the indexes
    of those the server has not closed by then (what it answered first is read and dropped)."""
    open_ = set(range(len(socks)))
    for _ in range(rounds):
        started = time.monotonic()
        for i in sorted(open_):
            try:
                socks[i].sendall(b" ")
            except (ConnectionResetError, BrokenPipeError):
                open_.discard(i)
                continue
            if closed_by_server(socks[i], time.monotonic() + 0.01):
                open_.discard(i)
        if not open_:
            break
        time.sleep(max(0.0, started + period_s - time.monotonic()))
    return sorted(open_)


def test_a_crowd_without_the_token_never_keeps_the_token_holder_out(ui_daemon: UiDaemon) -> None:
    """40 kept-alive connections that fetched an asset and 40 requests trickling their bodies (a
    byte a second), no token: the holder's open connection and a new one are both served; then
    every trickled body ends (its deadline, or a newer connection took its place), the holder's
    own slow body too."""
    port, token = ui_daemon.info.port, ui_daemon.info.token
    assert CROWD > MAX_CONNECTIONS_PER_PEER
    logged_before = ui_daemon.log.stat().st_size
    with contextlib.ExitStack() as holding:
        holder = holding.enter_context(connect(port))
        projects = list_projects(holder, port, token)  # the page, open before the crowd came
        kept, trickling = [], []
        for _ in range(CROWD):
            sock = holding.enter_context(connect(port))
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):  # a newer one may close it already
                sock.sendall(request(port, "GET", "/static/app.css"))
            kept.append(sock)
        for _ in range(CROWD):
            sock = holding.enter_context(connect(port))
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                sock.sendall(request(port, "POST", "/v1/list_projects", body=b"{", length=1000))
            trickling.append(sock)
        assert list_projects(holder, port, token) == projects
        with connect(port) as newcomer:
            assert list_projects(newcomer, port, token, close=True) == projects
        # The holder's own slow client: the body the app waits for has the deadline too.
        slow = holding.enter_context(connect(port))
        slow.sendall(request(port, "POST", "/v1/list_projects", token=token, body=b"{", length=1000))
        left = trickle_until_closed([*trickling, slow], rounds=int(2 * BODY_TIMEOUT_S), period_s=1.0)
        assert left == [], f"{len(left)} trickled bodies still open after {2 * BODY_TIMEOUT_S:g} s"
    with connect(port) as later:  # and the port still serves (the holder's idle connection has timed out)
        assert list_projects(later, port, token, close=True) == projects
    with ui_daemon.log.open("rb") as log:
        log.seek(logged_before)
        records = [json.loads(line) for line in log.read().decode().splitlines() if line.startswith("{")]
    assert not [r for r in records if "exception" in r or r.get("code") == "internal_error"], records
    # The holder's slow body: refused as incomplete (an answer nobody reads), not an internal error.
    assert any(r.get("method") == "list_projects" and r.get("code") == "invalid_request" for r in records), records


def _ui_info(home: Path, pid: int) -> UiInfo:
    deadline = time.monotonic() + BOUND_S
    while (info := read_ui_info(home)) is None or info.pid != pid:
        assert time.monotonic() < deadline, "the daemon wrote no ui.json"
        time.sleep(0.05)
    return info


@pytest.mark.slow
def test_only_requests_with_the_token_keep_an_on_demand_daemon_alive(tmp_path: Path) -> None:
    """With the token, a call every quarter of the limit keeps it running for three limits;
    then pages, assets and API calls without the token (or with a wrong one), as often, do not:
    it stops idle meanwhile."""
    home, limit = tmp_path / "home", 2.0
    with launcher.ensure_daemon(home, idle_exit_s=limit, extra_args=["--no-warm"]) as client:
        pid = client.runtime_status().pid
    info = _ui_info(home, pid)
    token = {"Authorization": f"Bearer {info.token}"}
    with httpx.Client(base_url=info.base_url, timeout=BOUND_S) as http:
        until = time.monotonic() + 3 * limit
        while time.monotonic() < until:
            assert http.post("/v1/list_projects", json={}, headers=token).status_code == 200
            time.sleep(limit / 4)
        assert alive(pid), "a request with the token did not count as activity"
        deadline = time.monotonic() + BOUND_S
        statuses: set[int] = set()
        while alive(pid):
            assert time.monotonic() < deadline, f"requests without the token kept it alive ({statuses})"
            with contextlib.suppress(httpx.TransportError):  # it stopped between two requests
                statuses.add(http.get("/").status_code)
                statuses.add(http.get("/static/app.css").status_code)
                statuses.add(http.post("/v1/list_projects", json={}).status_code)
                statuses.add(http.post("/v1/list_projects", json={}, headers={"Authorization": "Bearer x"}).status_code)
            time.sleep(limit / 4)
    assert statuses == {200, 401}  # they were served (or refused), as ever
    lines = launcher.log_path(home).read_text(encoding="utf-8").splitlines()
    assert any(json.loads(line).get("message") == "idle: stopping" for line in lines if line.startswith("{"))
