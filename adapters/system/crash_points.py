"""Named crash points for crash tests (brief §12).

``$MEMORY_CORE_CRASH_POINT=<name>`` makes the process exit hard (``os._exit(70)``: no cleanup,
no flush, like SIGKILL) the first time it reaches ``crash_point("<name>")``;
``<name>@<n>`` exits the n-th time instead (a crash between two blob writes, say). Unset, a call
costs one environment lookup. The core stays pure: points live in the adapters it calls.
"""

from __future__ import annotations

import os
import threading

CRASH_POINT_ENV = "MEMORY_CORE_CRASH_POINT"
CRASH_EXIT = 70

_hits: dict[str, int] = {}
_lock = threading.Lock()


def parse(spec: str) -> tuple[str, int]:
    """``"name"`` or ``"name@n"`` -> (name, n >= 1)."""
    name, _, nth = spec.partition("@")
    return name, max(int(nth), 1) if nth.isdigit() else 1


def crash_point(name: str) -> None:
    """Exit hard at ``name`` when ``$MEMORY_CORE_CRASH_POINT`` names it (and its hit count)."""
    spec = os.environ.get(CRASH_POINT_ENV)
    if not spec:
        return
    target, nth = parse(spec)
    if target != name:
        return
    with _lock:
        _hits[name] = count = _hits.get(name, 0) + 1
    if count >= nth:
        os._exit(CRASH_EXIT)


__all__ = ["CRASH_EXIT", "CRASH_POINT_ENV", "crash_point", "parse"]
