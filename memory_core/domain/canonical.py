"""Canonical JSON and SHA-256: every hash of structured data is over this form (brief §3)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

_HEX64 = re.compile(r"[0-9a-f]{64}")


def canonical_json(value: Any) -> bytes:
    """UTF-8, keys sorted, separators ``,`` and ``:``, NaN rejected."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hash_json(value: Any) -> str:
    return sha256_hex(canonical_json(value))


def is_sha256_hex(value: object) -> bool:
    return isinstance(value, str) and bool(_HEX64.fullmatch(value))


def is_utf8_text(value: str) -> bool:
    """False for strings holding lone surrogates: valid JSON, but not storable as UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(text: str) -> str:
    """``text`` safe to print and encode: a file name's undecodable bytes (``os.fsdecode``'s
    surrogate escapes) shown as ``\\xNN``, any other lone surrogate as ``\\udNNN``."""
    if is_utf8_text(text):
        return text
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")
