"""A guard that fails any test whose code opens a non-loopback network connection (issue 8 item 7).

Nothing leaves the machine (brief §1): ``connect``/``connect_ex`` of Python sockets,
``socket.create_connection`` and name resolution of non-local hosts are refused with an
``OSError`` and recorded; the test then fails at teardown even if the code under test swallowed
the error. Unix sockets and loopback addresses (127.0.0.0/8, ::1, ``localhost``) stay allowed.

It sees connections made through Python's ``socket`` module (httpx, urllib, requests, asyncio,
uvicorn, the MCP SDK); native code that opens its own sockets (the JVM, a C library) is not seen.
To guard the whole suite, import the fixture into ``tests/conftest.py``::

    from tests.reliability.network_guard import no_network  # noqa: F401  (an autouse fixture)
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import pytest

LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


class NetworkAccessRefused(ConnectionRefusedError):
    """A test tried to reach the network."""


def is_local_host(host: object) -> bool:
    if host is None or host in ("", b""):
        return True  # getaddrinfo(None, port): the local host
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    name = host.strip("[]").split("%", 1)[0].rstrip(".").lower()
    if name in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_allowed(family: int, address: Any) -> bool:
    if family == getattr(socket, "AF_UNIX", object()):
        return True
    host = address[0] if isinstance(address, tuple) and address else address
    return is_local_host(host)


class Guard:
    """The patched entry points and what they refused."""

    def __init__(self) -> None:
        self.violations: list[str] = []

    def refuse(self, what: str) -> NetworkAccessRefused:
        self.violations.append(what)
        return NetworkAccessRefused(f"network access refused in tests: {what}")

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_connect = socket.socket.connect
        real_connect_ex = socket.socket.connect_ex
        real_create_connection = socket.create_connection
        real_getaddrinfo = socket.getaddrinfo
        guard = self

        def connect(sock: socket.socket, address: Any) -> None:
            if not is_allowed(sock.family, address):
                raise guard.refuse(f"connect to {address!r}")
            return real_connect(sock, address)

        def connect_ex(sock: socket.socket, address: Any) -> int:
            if not is_allowed(sock.family, address):
                raise guard.refuse(f"connect_ex to {address!r}")
            return real_connect_ex(sock, address)

        def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
            if not is_allowed(socket.AF_INET, address):
                raise guard.refuse(f"create_connection to {address!r}")
            return real_create_connection(address, *args, **kwargs)

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            if not is_local_host(host):
                raise guard.refuse(f"name resolution of {host!r}")
            return real_getaddrinfo(host, *args, **kwargs)

        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
        monkeypatch.setattr(socket, "create_connection", create_connection)
        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[Guard]:
    """Autouse: refuse non-loopback connections; fail the test if any was attempted."""
    guard = Guard()
    guard.install(monkeypatch)
    yield guard
    if guard.violations:
        pytest.fail("the test tried to reach the network: " + "; ".join(guard.violations), pytrace=False)
