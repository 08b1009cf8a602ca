"""Time-ordered identifiers (ULIDs: 48-bit milliseconds + 80 random bits, Crockford base32)."""

from __future__ import annotations

import secrets
import threading
import time

_id_lock = threading.Lock()
_last: list[int] = [-1, 0]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id() -> str:
    """A sortable 26-char ULID-like id (48-bit ms + 80 random bits, monotonic in a process)."""
    with _id_lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last[0]:
            ms, rand = _last[0], (_last[1] + 1) % (1 << 80)
        else:
            rand = secrets.randbits(80)
        _last[0], _last[1] = ms, rand
    value = (ms % (1 << 48)) << 80 | rand
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


# Evaluation Cases and Retrieval Runs share the one generator
new_case_id = new_id
