"""The one decoder of JSON text that comes from outside: the daemon's ``/v1`` bodies (the UI port
serves the same app), the MCP server's stdin lines and the files the CLI reads (activation
state, judgments, fixtures, baselines). Decoding and validating text once, here, is what keeps a
lone surrogate, a 100,000-deep array or a duplicate key from reaching SQLite, a recursive walk or
a JSON encoder behind the boundary, whichever transport it came through.

It lives beside ``wire.py`` (the entrypoints' JSON output) because only entrypoints receive
foreign text; it imports only the stdlib and the core's errors, so no transport is needed to use
it. Refusals are ``InvalidRequest`` (HTTP 400; the CLI's usage exit code), with ``details.reason``:

- ``invalid_json`` (code ``invalid_json``): not UTF-8, not JSON, ``NaN``/``Infinity``;
- ``lone_surrogate``: a ``\\ud800`` escape without its pair, in a key or a value (valid JSON
  syntax, but not text: SQLite, hashing and every encoder refuse it);
- ``too_deep``: nesting deeper than ``MAX_DEPTH``, found without recursion before parsing
  (Python's own parser would raise ``RecursionError`` near 1,000 levels, and every walk after it);
- ``duplicate_key``: one object with a key twice (parsers disagree which one wins);
- ``number_out_of_range``: a number longer than ``MAX_NUMBER_CHARS`` or beyond a double (``1e999``).

``encodable`` is the other half: what an error renderer sends is always encodable UTF-8.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

from memory_core.domain.canonical import is_utf8_text, printable
from memory_core.domain.errors import InvalidRequest

MAX_DEPTH = 64  # arrays and objects; a request needs 5, a fixture about 8
MAX_NUMBER_CHARS = 100  # a 64-bit integer has 20 characters, a double's repr at most 24

# A JSON string token; used only to blank strings out before counting brackets.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
# A UTF-16 surrogate escape: the only way strictly decoded UTF-8 text can yield a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class InvalidJson(InvalidRequest):
    """The text is not valid UTF-8 JSON (NaN and Infinity are not JSON)."""

    code = "invalid_json"


class _Refused(Exception):
    """Raised inside the parser's hooks: JSON we refuse, with its reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether arrays and objects nest deeper than ``limit`` in ``text``, counted without
    recursion (strings blanked first, so brackets inside them do not count). For malformed text
    it counts as deep as a parser gets before failing, so text within the bound never recurses
    deeper in ``json.loads``."""
    if text.count("[") + text.count("{") <= limit:  # the common case: no scan at all
        return False
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, skeleton)), default=0) > limit


def _no_constant(name: str) -> Any:
    raise _Refused("invalid_json", f"{name} is not JSON")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # only then look for which key it was
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused("duplicate_key", f"duplicate key {printable(key)!r} in one object")
            seen.add(key)
    return out


def _int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Refused("number_out_of_range", f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if len(text) > MAX_NUMBER_CHARS or not math.isfinite(value):
        raise _Refused("number_out_of_range", f"number {text[:40]}{'...' if len(text) > 40 else ''} is out of range")
    return value


def _path(parts: list[Any]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{printable(p)}" for p in parts)


def first_unencodable(value: Any) -> str | None:
    """The JSON path of the first key or string holding a lone surrogate (None: there is none);
    iterative, so any depth is fine."""
    todo: list[tuple[Any, list[Any]]] = [(value, [])]
    while todo:
        node, at = todo.pop()
        if isinstance(node, str):
            if not is_utf8_text(node):
                return _path(at)
        elif isinstance(node, dict):
            for key, item in node.items():
                if isinstance(key, str) and not is_utf8_text(key):
                    return _path([*at, key])
                todo.append((item, [*at, key]))
        elif isinstance(node, list | tuple):
            todo.extend((item, [*at, i]) for i, item in enumerate(node))
    return None


def decode_json(data: bytes | str, *, what: str = "request body") -> Any:
    """Decode and validate JSON text from outside; any refusal is an ``InvalidRequest`` whose
    message starts with ``what`` and whose details name the reason (and the path, where known)."""
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidJson(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}", reason="invalid_json") from None
    else:
        text = data
        if not is_utf8_text(text):  # raw surrogates: text that came from undecodable bytes
            raise InvalidRequest(f"{what} is not valid Unicode text", reason="lone_surrogate", path="$")
    text = text.removeprefix("\ufeff")  # a byte order mark is not part of the value
    if too_deep(text):
        raise InvalidRequest(f"{what} nests arrays and objects deeper than {MAX_DEPTH} levels", reason="too_deep",
                             max_depth=MAX_DEPTH)  # fmt: skip
    try:
        value = json.loads(
            text, object_pairs_hook=_pairs, parse_constant=_no_constant, parse_int=_int, parse_float=_float
        )
    except _Refused as refused:
        cls = InvalidJson if refused.reason == "invalid_json" else InvalidRequest
        raise cls(f"{what}: {refused}", reason=refused.reason) from None
    except ValueError as exc:  # JSONDecodeError; its message names line and column
        raise InvalidJson(f"{what} is not valid JSON: {exc}", reason="invalid_json") from None
    except RecursionError:  # cannot happen within MAX_DEPTH; kept typed should the bound change
        raise InvalidRequest(f"{what} nests too deep", reason="too_deep", max_depth=MAX_DEPTH) from None
    if _SURROGATE_ESCAPE.search(text):  # paired escapes (emoji) are fine; only then walk it
        where = first_unencodable(value)
        if where is not None:
            raise InvalidRequest(
                f"{what} holds a lone surrogate at {where} (valid JSON, but not Unicode text)",
                reason="lone_surrogate", path=where,
            )  # fmt: skip
    return value


def check_arguments(values: dict[str, Any], *, local_paths: frozenset[str] = frozenset()) -> None:
    """Command-line arguments are the CLI's other text from outside: the OS decodes bytes that
    are not UTF-8 to lone surrogates (``surrogateescape``), which no id, query or stored path can
    hold. ``local_paths`` name arguments that are only opened here (any bytes are a file name)."""
    for name, value in values.items():
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            if name not in local_paths and isinstance(item, str) and not is_utf8_text(item):
                flag = name.replace("_", "-")
                raise InvalidRequest(
                    f"argument {flag} is not UTF-8 text: {printable(item)}", reason="lone_surrogate", argument=flag
                )


def pruned(text: str, limit: int = MAX_DEPTH) -> str:
    """``text`` with every array or object deeper than ``limit`` replaced by ``null``: the
    envelope of a message too deep to decode, so that its id can still be read and answered."""
    out: list[str] = []
    last = level = 0
    for token in _TOKEN.finditer(text):
        char = token.group()
        if char in ("[", "{"):
            level += 1
            if level == limit + 1:
                out.append(text[last : token.start()])
        elif char in ("]", "}"):
            if level == limit + 1:
                out.append("null")
                last = token.end()
            level -= 1
    if level <= limit:
        out.append(text[last:])
    return "".join(out)


def encodable(value: Any) -> Any:
    """``value`` with every string (keys too) that UTF-8 cannot encode shown as escapes
    (``canonical.printable``): error messages and details echo what a caller sent, and an
    envelope that cannot be encoded would be no answer at all. Other values become strings
    only if JSON has no form for them."""
    if isinstance(value, str):
        return value if is_utf8_text(value) else printable(value)
    if isinstance(value, bool | int | None):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {encodable(k if isinstance(k, str) else str(k)): encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [encodable(v) for v in value]
    return encodable(str(value))


__all__ = [
    "MAX_DEPTH", "MAX_NUMBER_CHARS", "InvalidJson", "check_arguments", "decode_json", "encodable", "pruned", "too_deep",
]  # fmt: skip
