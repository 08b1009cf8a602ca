"""The process that runs an activation, and whether it is still alive (Linux /proc, else the pid).

Recovery fails a ``running`` Run only once its owner is gone; every Run store applies this rule."""

from __future__ import annotations

import os

import attrs


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def current_boot_id() -> str | None:
    raw = _read("/proc/sys/kernel/random/boot_id")
    return raw.strip() if raw else None


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) from ``/proc/<pid>/stat``."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw or ")" not in raw:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = raw.rsplit(")", 1)[1].split()
    return (fields[0], fields[19]) if len(fields) > 19 else None


@attrs.frozen
class Owner:
    """The process that runs an activation; recovery fails a ``running`` Run only once it is gone."""

    pid: int
    started_at: str | None
    boot_id: str | None

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        stat = _proc_stat(pid)
        return cls(pid, stat[1] if stat else None, current_boot_id())

    def is_alive(self, boot_id: str | None = None) -> bool:
        """Alive: same boot, the pid exists and is no zombie, and it started when this owner did
        (otherwise the pid was reused). Without ``/proc`` only the pid is checked."""
        boot = boot_id if boot_id is not None else current_boot_id()
        if self.boot_id and boot and self.boot_id != boot:
            return False
        if self.pid <= 0:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # exists, owned by someone else
        except (OverflowError, ValueError):
            return False
        stat = _proc_stat(self.pid)
        if stat is None:
            return True
        state, started = stat
        if state in ("Z", "X"):
            return False
        return self.started_at is None or started == self.started_at


class _OwnerOfThisProcess:
    """``Owner.current()``, recomputed after a fork."""

    def __init__(self) -> None:
        self._owner: Owner | None = None

    def __call__(self) -> Owner:
        if self._owner is None or self._owner.pid != os.getpid():
            self._owner = Owner.current()
        return self._owner


def owner_gone(pid: int | None, started_at: str | None, boot_id: str | None, boot: str | None) -> bool:
    if pid is None:
        return True
    return not Owner(int(pid), started_at, boot_id).is_alive(boot)


# the fakes' name for it
OwnerOfThisProcess = _OwnerOfThisProcess
