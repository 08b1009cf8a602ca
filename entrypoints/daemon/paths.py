"""Where a home's daemon lives: its lock file and its socket, in owner-only directories.

``<home>/run/daemon.lock`` is held (``fcntl.flock``) by the one daemon serving a home and holds
``{"pid", "socket", "started_at"}`` so a second daemon can name it and a client can find it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import attrs

from memory_core.domain.errors import StorageUnavailable
from memory_core.entrypoints.bootstrap import HomeLayout

SOCKET_NAME = "memcore.sock"
LOCK_NAME = "daemon.lock"
# sun_path holds 108 bytes on Linux and 104 on macOS, NUL included; stay well below both.
MAX_SOCKET_PATH_BYTES = 100
DIR_MODE = 0o700
SOCKET_MODE = 0o600


def run_dir(home: Path) -> Path:
    return HomeLayout.at(home).run_dir  # the home's folders are one list, there


def lock_path(home: Path) -> Path:
    return run_dir(home) / LOCK_NAME


def default_socket_path(home: Path, fallback_root: Path = Path("/tmp")) -> Path:
    """``<home>/run/memcore.sock``, or, when that path is too long for a socket,
    ``/tmp/memcore-<uid>/<hash of the home>.sock`` (still one per home)."""
    preferred = run_dir(home) / SOCKET_NAME
    if len(os.fsencode(preferred)) < MAX_SOCKET_PATH_BYTES:
        return preferred
    digest = hashlib.sha256(os.fsencode(home.absolute())).hexdigest()[:16]
    fallback = fallback_root / f"memcore-{os.getuid()}" / f"{digest}.sock"
    if len(os.fsencode(fallback)) >= MAX_SOCKET_PATH_BYTES:
        raise StorageUnavailable(f"no socket path under {MAX_SOCKET_PATH_BYTES} bytes for home {str(home)!r}")
    return fallback


def ensure_private_dir(path: Path, *, tighten: bool = True) -> Path:
    """Create ``path`` 0700; refuse one that is a symlink or owned by someone else (a shared
    ``/tmp`` could hold a directory planted by another user)."""
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise StorageUnavailable(
                f"{str(path)!r} is not a directory owned by this user; refusing to put the socket there",
                path=str(path),
            )
        if tighten and stat.S_IMODE(st.st_mode) != DIR_MODE:
            os.chmod(path, DIR_MODE)
    except OSError as exc:
        raise StorageUnavailable(f"cannot prepare {str(path)!r}: {exc.strerror or exc}", path=str(path)) from exc
    return path


@attrs.frozen
class DaemonInfo:
    """What the lock file says about the daemon holding it."""

    pid: int
    socket: str
    started_at: str

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> DaemonInfo | None:
        try:
            raw: Any = json.loads(text)
            return cls(pid=int(raw["pid"]), socket=str(raw["socket"]), started_at=str(raw["started_at"]))
        except (ValueError, TypeError, KeyError):
            return None  # empty (a daemon that stopped cleanly) or being written


def read_info(home: Path) -> DaemonInfo | None:
    """The last daemon's record; it may have stopped since (connect to be sure)."""
    try:
        return DaemonInfo.parse(lock_path(home).read_text(encoding="utf-8"))
    except OSError:
        return None


def socket_path_for(home: Path) -> Path:
    """The socket a client should try: the running daemon's, else the default one."""
    info = read_info(home)
    return Path(info.socket) if info is not None else default_socket_path(home)
