"""Canonical JSON and SHA-256: every hash of structured data is over this form (brief §3)."""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

_HEX64 = re.compile(r"[0-9a-f]{64}")


def canonical_json(value: Any) -> bytes:
    """UTF-8, keys sorted, separators ``,`` and ``:``, NaN rejected."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


# Field metadata: ``plain`` leaves the field out while it is None (a judgment names one target).
OMIT_NONE: Mapping[str, bool] = {"plain_omit_none": True}
_SCALARS = (str, int, float, bool, type(None))


_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}  # per class: (name, omit while None)


def _fields(cls: type) -> tuple[tuple[str, bool], ...]:
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = tuple((f.name, bool(f.metadata.get("plain_omit_none"))) for f in attrs.fields(cls))
    return found


def omit_none_fields(cls: type) -> tuple[str, ...]:
    """The fields of attrs class ``cls`` that ``plain`` leaves out while None; a wire format that
    writes the plain form (the storage format) omits them too."""
    return tuple(name for name, omit in _fields(cls) if omit)


def plain(value: Any) -> Any:
    """The plain-data form of a value, the one the core hashes and stores: an attrs instance is a
    dict of its fields in field order (``OMIT_NONE`` ones dropped while None), an enum its value,
    a tuple or list a list, a mapping a dict. Every identity hash is ``hash_json(plain(x))``; the
    wire converters (adapters, entrypoints) agree with it where a format carries the same value."""
    if isinstance(value, _SCALARS) and not isinstance(value, enum.Enum):
        return value
    if attrs.has(type(value)):
        out: dict[str, Any] = {}
        for name, omit in _fields(type(value)):
            v = getattr(value, name)
            if v is not None or not omit:
                out[name] = plain(v)
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


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
