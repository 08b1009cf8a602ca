"""UTC wall-clock time as text: the one format stored and emitted (ISO 8601, milliseconds, ``Z``)."""

from __future__ import annotations

import datetime


def utc_now_iso() -> str:
    """Now, e.g. ``2026-12-03T16:35:10.123Z``: every stored and emitted timestamp has this form."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_now_compact() -> str:
    """Now, e.g. ``20261203T163510Z``: for file names, where ``:`` and ``.`` do not belong."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
