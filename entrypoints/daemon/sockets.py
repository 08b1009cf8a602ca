"""One daemon per home, and the sockets it listens on: the home's lock, the Unix socket (0600,
never a live one replaced) and the UI's loopback TCP socket."""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import stat
from pathlib import Path

from memory_core.domain.errors import InvalidRequest, StorageUnavailable
from memory_core.entrypoints.daemon import api, paths

log = logging.getLogger("memory_core.daemon")
BACKLOG = 128
UI_HOST = "127.0.0.1"  # loopback only: never another interface


class DaemonLock:
    """An exclusive ``flock`` on ``<home>/run/daemon.lock``, released when the process ends
    (even on SIGKILL), so a stale file never blocks a new daemon."""

    def __init__(self, home: Path) -> None:
        self.path = paths.lock_path(home)
        self._fd: int | None = None

    def acquire(self, home: Path) -> None:
        paths.ensure_private_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            info = paths.read_info(home)
            pid = info.pid if info else None
            where = f" on {info.socket}" if info else ""
            raise api.DaemonAlreadyRunning(
                f"a memcore daemon is already running for home {str(home)!r} (pid {pid}){where}",
                pid=pid,
                socket=info.socket if info else None,
            ) from None
        self._fd = fd

    def record(self, info: paths.DaemonInfo) -> None:
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, info.to_json().encode(), 0)
        os.fsync(self._fd)

    def release(self) -> None:
        if self._fd is None:
            return
        # Emptied, not removed: unlinking a lock file races with a daemon opening it.
        os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = None


# -- the socket -------------------------------------------------------------------------------
def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(os.fspath(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def bind_socket(path: Path, *, private_parent: bool) -> socket.socket:
    """A listening socket at ``path``, mode 0600; a stale socket file is replaced, a live one
    (another home's daemon on a shared ``--socket``) is not."""
    if private_parent:
        paths.ensure_private_dir(path.parent)
    elif stat.S_IMODE(os.stat(path.parent).st_mode) & 0o077:
        # An existing directory the user chose: not ours to chmod; the socket itself is 0600.
        log.warning("socket directory is open to other users", extra={"fields": {"dir": str(path.parent)}})
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise StorageUnavailable(f"{str(path)!r} exists and is not a socket", path=str(path))
        if _answers(path):
            raise api.DaemonAlreadyRunning(f"another daemon already answers on {str(path)!r}", socket=str(path))
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket is born 0600: no window where others may connect
    try:
        sock.bind(os.fspath(path))
    except OSError as exc:
        sock.close()
        raise StorageUnavailable(f"cannot bind {str(path)!r}: {exc.strerror or exc}", path=str(path)) from exc
    finally:
        os.umask(old)
    os.chmod(path, paths.SOCKET_MODE)
    sock.listen(BACKLOG)
    return sock


def bind_ui_socket(port: int) -> socket.socket:
    """A listening TCP socket on 127.0.0.1:``port`` (0: a free port)."""
    if not 0 <= port <= 65535:
        raise InvalidRequest(f"the UI port must be 0-65535, got {port}", port=port)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
    try:
        sock.bind((UI_HOST, port))
    except OSError as exc:
        sock.close()
        raise InvalidRequest(
            f"cannot listen on {UI_HOST}:{port} for the UI: {exc.strerror or exc}; "
            "choose another --ui-port (0 picks a free one)",
            port=port,
        ) from exc
    sock.listen(BACKLOG)
    return sock


def remove_socket(path: Path, inode: int) -> None:
    try:
        if os.lstat(path).st_ino == inode:  # never remove a socket another daemon bound since
            os.unlink(path)
    except FileNotFoundError:
        pass
