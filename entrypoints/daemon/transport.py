"""The daemon client's HTTP: HTTP/1.1 over the daemon's Unix socket with the standard library.

``DaemonClient`` needs one thing of an HTTP client: POST a JSON body, read the status and the
JSON answer, on a kept-alive connection. httpx does that in about 1.5 ms of the caller's CPU per
call, ``http.client`` in about 0.6 (docs/performance.md, *Through the daemon, on short queries*):
a third of what separates a short query's answer from the engine's own time. Failures are httpx's
exception types, which ``DaemonClient`` already turns into ``DaemonUnavailable``.

Connections are pooled (a caller on several threads, such as the MCP server, gets one each); an
idle connection the daemon has closed (uvicorn closes a connection idle for 5 s) is seen readable
before reuse and dropped, as httpx does. The daemon can close it between that look and the
request's first byte (a caller idle for just the keep-alive time): the write then fails before
the daemon read anything, and the request goes once more on a new connection. A request the
daemon may have read is never sent again.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import threading
from collections.abc import Mapping
from typing import Any

import httpx

POOL_SIZE = 4  # idle connections kept; more callers at once open more, closed after their call


class Reply:
    """What ``DaemonClient`` reads of an answer (httpx.Response's names)."""

    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

    def json(self) -> Any:
        return json.loads(self.content)


class _Connection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None, connect_timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path
        self._connect_timeout = connect_timeout

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self._connect_timeout)
            sock.connect(self._path)
            sock.settimeout(self.timeout)
        except BaseException:
            sock.close()
            raise
        self.sock = sock

    def stale(self) -> bool:
        """Readable while idle: the daemon closed it (or sent what no request asked for)."""
        if self.sock is None:
            return False
        try:
            return bool(select.select([self.sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True


class UnixSocketHTTP:
    """POST to the daemon on ``path``; ``timeout`` bounds each read or write (None: no limit),
    ``connect_timeout`` the connection's set-up."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float | None, connect_timeout: float) -> None:
        self._path = os.fspath(path)
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def post(self, url: str, *, content: bytes, headers: Mapping[str, str]) -> Reply:
        connection, reused = self._take()
        try:
            try:
                try:
                    connection.request("POST", url, body=content, headers=dict(headers))
                except (BrokenPipeError, ConnectionResetError):
                    if not reused:
                        raise
                    # A kept-alive connection the daemon closed after ``stale`` looked: it refused
                    # the request's bytes, so none of it was read; it goes on a new connection.
                    connection.close()
                    connection = _Connection(self._path, self._timeout, self._connect_timeout)
                    connection.request("POST", url, body=content, headers=dict(headers))
            except TimeoutError as exc:
                raise httpx.ConnectTimeout(f"connecting to {self._path}: {exc}") from exc
            except OSError as exc:
                raise httpx.ConnectError(f"connecting to {self._path}: {exc}") from exc
            try:
                response = connection.getresponse()
                reply = Reply(response.status, response.read())
            except TimeoutError as exc:
                raise httpx.ReadTimeout(f"waiting for the daemon on {self._path}: {exc}") from exc
            except http.client.HTTPException as exc:
                raise httpx.RemoteProtocolError(f"the daemon on {self._path} answered badly: {exc!r}") from exc
            except OSError as exc:
                raise httpx.ReadError(f"reading from the daemon on {self._path}: {exc}") from exc
        except BaseException:
            connection.close()
            raise
        if response.will_close:
            connection.close()
        else:
            self._give_back(connection)
        return reply

    def _take(self) -> tuple[_Connection, bool]:
        """An idle connection that looks open (True: reused), else a new one (False)."""
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                if not connection.stale():
                    return connection, True
                connection.close()
        return _Connection(self._path, self._timeout, self._connect_timeout), False

    def _give_back(self, connection: _Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < POOL_SIZE:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
