"""``<home>/run/ui.json`` (the UI's address and this start's token, 0600) and ``memcore ui``.

The daemon writes the file once its UI port is bound and removes it when it stops; ``memcore
ui`` starts the home's daemon when none runs, checks that the file belongs to the daemon that
answers (a crashed daemon leaves a stale one), prints the launch address and opens it when a
browser can be shown.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import attrs

from memory_core.entrypoints.daemon import paths

UI_FILE = "ui.json"
FILE_MODE = 0o600


def ui_file(home: Path) -> Path:
    return paths.run_dir(home) / UI_FILE


@attrs.frozen
class UiInfo:
    url: str = attrs.field(repr=False)  # the launch address, token included
    base_url: str
    port: int
    token: str = attrs.field(repr=False)
    pid: int
    started_at: str

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True, indent=2) + "\n"

    @classmethod
    def parse(cls, text: str) -> UiInfo | None:
        try:
            raw: Any = json.loads(text)
            return cls(url=str(raw["url"]), base_url=str(raw["base_url"]), port=int(raw["port"]),
                       token=str(raw["token"]), pid=int(raw["pid"]), started_at=str(raw["started_at"]))
        except (ValueError, TypeError, KeyError):
            return None


def write_ui_info(home: Path, info: UiInfo) -> Path:
    """Atomically, 0600 from birth (it holds the token), in the 0700 run directory."""
    target = ui_file(home)
    paths.ensure_private_dir(target.parent)
    temp = target.with_name(f".{UI_FILE}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.write(fd, info.to_json().encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, target)
    return target


def read_ui_info(home: Path) -> UiInfo | None:
    try:
        return UiInfo.parse(ui_file(home).read_text(encoding="utf-8"))
    except OSError:
        return None


def remove_ui_info(home: Path, pid: int) -> None:
    """Remove the file if it is still this process's (never a successor daemon's)."""
    info = read_ui_info(home)
    if info is not None and info.pid == pid:
        with contextlib.suppress(FileNotFoundError):
            ui_file(home).unlink()


def display_available() -> bool:
    """Whether opening a browser can show anything (a headless Linux box would start lynx)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def main(home_arg: str | None, *, open_browser: bool = True, start_timeout_s: float = 60.0,
         print_json: bool = False, idle_exit_s: float | None = None) -> int:
    """``memcore ui``: print (and open) the Diagnostics address of the home's daemon."""
    from memory_core.entrypoints.bootstrap import resolve_home
    from memory_core.entrypoints.daemon import api
    from memory_core.entrypoints.daemon.launcher import ensure_daemon

    home = resolve_home(home_arg)
    try:
        with ensure_daemon(home, timeout_s=start_timeout_s, client_timeout=30, idle_exit_s=idle_exit_s) as client:
            status = client.runtime_status()
    except api.DaemonUnavailable as exc:
        print(f"error[{exc.code}]: {exc.message}", file=sys.stderr)
        return 1
    info = read_ui_info(home)
    if info is None or info.pid != status.pid:
        print(f"error[ui_unavailable]: the daemon for {str(home)!r} (pid {status.pid}) serves no UI; "
              "restart it without --no-ui", file=sys.stderr)
        return 1
    if print_json:
        print(json.dumps({"url": info.url, "base_url": info.base_url, "port": info.port, "pid": info.pid}))
    else:
        print(info.url)
    if open_browser and display_available():
        import webbrowser

        with contextlib.suppress(Exception):  # printing the address is the contract; opening is a courtesy
            webbrowser.open(info.url, new=2)
    return 0
