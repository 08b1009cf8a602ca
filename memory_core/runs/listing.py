"""Listing Runs: page cursors, the listing's checks and the text filter's matching rule."""

from __future__ import annotations

import base64
import binascii
import json

from memory_core.domain.canonical import canonical_json
from memory_core.domain.errors import InvalidRequest
from memory_core.runs.records import FAILED, MAX_PAGE, RUNNING, SUCCEEDED, RunFilter

STATUSES = (RUNNING, SUCCEEDED, FAILED)


def encode_cursor(started_at: str, run_id: str) -> str:
    return base64.urlsafe_b64encode(canonical_json([started_at, run_id])).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if isinstance(raw, list) and len(raw) == 2 and all(isinstance(v, str) for v in raw):
            return raw[0], raw[1]
    except (ValueError, binascii.Error, TypeError):
        pass
    raise InvalidRequest("invalid cursor: pass the next_cursor of a previous page", cursor=cursor)


def check_listing(run_filter: RunFilter, limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_PAGE}", limit=limit)
    if run_filter.status is not None and run_filter.status not in STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(STATUSES)}", status=run_filter.status)


def like_escape(text: str) -> str:
    """A LIKE pattern matching ``text`` literally anywhere (escape character ``\\``)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def contains_ascii_nocase(haystack: str, needle: str) -> bool:
    """SQLite's LIKE semantics: case-insensitive for ASCII letters only."""
    return needle.translate(_ASCII_LOWER) in haystack.translate(_ASCII_LOWER)

