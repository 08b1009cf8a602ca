"""The evaluation fixture format's definition: its constants, and each object's fields with the
check that reads it (``RESOURCE_FIELDS``, ``CANDIDATE_FIELDS``, ``TRACE_FIELDS``, the case and the
document). A check returns the value checked and, for a record, built as its attrs class, so the
reader needs no ``from_dict``; tests/contracts/test_fixture_format.py holds these tables equal to
the attrs classes, ``contracts/evaluation-fixture.schema.json`` and the OpenAPI types.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memory_core.domain.canonical import is_sha256_hex, is_utf8_text, omit_none_fields
from memory_core.domain.evaluation_errors import InvalidFixture
from memory_core.domain.model import Layer, ManifestEntry
from memory_core.evaluation.cases import PROVENANCES, SourceTrace
from memory_core.runs.records import CandidateRecord

FORMAT = "memory-core-evaluation-set"
FORMAT_VERSION = 1
UTF8, BASE64 = "utf-8", "base64"
# SQLite stores integers as signed 64 bits: a larger one is an OverflowError at insert time, after
# the bodies were written. Every integer a fixture carries must fit.
MIN_STORED_INT, MAX_STORED_INT = -(2**63), 2**63 - 1
FREE_FORM = ("metric_conventions", "report")  # informative only: never stored, the report is recomputed


# -- structure checks -----------------------------------------------------------------------------
# Checkers take a value and return it checked. A problem raises ``_Bad``, which collects the path
# on its way up (no place string is built while everything is fine: fixtures hold ~10^5 objects).

Check = Callable[[Any], Any]


class _Bad(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str | int] = []


def _escape(key: str | int) -> str:
    text = str(key)
    if not is_utf8_text(text):  # the place goes into an error message, which must stay printable
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("~", "~0").replace("/", "~1")


def _pointer(path: Sequence[str | int]) -> str:
    return "".join(f"/{_escape(k)}" for k in path)


def _at(bad: _Bad, key: str | int) -> _Bad:
    bad.path.append(key)
    return bad


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad("must be a string")
    if not is_utf8_text(value):  # a lone surrogate: valid JSON, but neither storable nor hashable
        raise _Bad("must be valid Unicode text (it holds a lone surrogate)")
    return value


def _nonempty(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _Bad("must be a non-empty string")
    return _str(value)


def _hex(value: Any) -> str:
    if not is_sha256_hex(value):
        raise _Bad("must be a lowercase hex SHA-256")
    return str(value)


def _count(value: Any) -> int:
    if type(value) is not int or not 0 <= value <= MAX_STORED_INT:
        raise _Bad(f"must be an integer from 0 to {MAX_STORED_INT}")
    return value


def _rank(value: Any) -> int:
    if type(value) is not int or not 1 <= value <= MAX_STORED_INT:
        raise _Bad(f"must be an integer from 1 to {MAX_STORED_INT}")
    return value


def _num(value: Any) -> float | int:
    # NaN and infinities reach here from a mapping (or ``1e400`` in bytes); canonical JSON, and so
    # every hash, refuses them.
    if type(value) is float and math.isfinite(value):
        return value
    if type(value) is int and MIN_STORED_INT <= value <= MAX_STORED_INT:
        return value
    raise _Bad("must be a finite number within 64 bits")


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise _Bad("must be true or false")
    return value


def _any(value: Any) -> Any:
    return value


def _opt(check: Check) -> Check:
    return lambda value: None if value is None else check(value)


def _enum(*allowed: str) -> Check:
    def check(value: Any) -> str:
        if value not in allowed:
            raise _Bad(f"must be one of {', '.join(allowed)}")
        return str(value)

    return check


def _member(kind: type[enum.Enum]) -> Check:
    allowed = _enum(*(member.value for member in kind))
    return lambda value: kind(allowed(value))


def _tuple(item: Check) -> Check:
    items = _list(item)
    return lambda value: tuple(items(value))


def _list(item: Check) -> Check:
    def check(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise _Bad("must be a list")
        out = []
        for i, v in enumerate(value):
            try:
                out.append(item(v))
            except _Bad as bad:
                bad.path.append(i)
                raise
        return out

    return check


def _map(item: Check) -> Check:
    def check(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _Bad("must be an object")
        out = {}
        for k, v in value.items():
            # A non-string key can only come in a mapping; a lone surrogate also in bytes ("\ud800").
            if not isinstance(k, str) or not is_utf8_text(k):
                raise _at(_Bad("keys must be valid Unicode strings"), str(k))
            try:
                out[k] = item(v)
            except _Bad as bad:
                bad.path.append(k)
                raise
        return out

    return check


def _obj(
    required: Mapping[str, Check], optional: Mapping[str, Check] | None = None, make: Callable[..., Any] = dict
) -> Check:
    """An object with these fields, checked, built by ``make`` (a value class reads the format directly)."""
    fields = {**required, **(optional or {})}
    known = frozenset(fields)

    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _Bad("must be an object")
        if not known.issuperset(value):
            raise _at(_Bad("unknown field"), next(k for k in value if k not in known))
        out = {}
        for key, sub in fields.items():
            if key not in value:
                if key in required:
                    raise _at(_Bad("missing"), key)
                continue
            try:
                out[key] = sub(value[key])
            except _Bad as bad:
                bad.path.append(key)
                raise
        return make(**out)

    return check


def checked(check: Check, value: Any) -> Any:
    """``value`` checked (and built) by ``check``; InvalidFixture names the first problem's place."""
    try:
        return check(value)
    except _Bad as bad:
        raise InvalidFixture(bad.message, place=_pointer(bad.path[::-1])) from None


# Each record's fields and their checks; tests/contracts/test_fixture_format.py keeps these equal to
# the attrs classes, the JSON Schema and the OpenAPI types.
RESOURCE_FIELDS: dict[str, Check] = {
    "ordinal": _count,
    "resource_id": _nonempty,
    "layer": _member(Layer),
    "uri": _str,
    "resource_hash": _hex,
    "byte_size": _count,
    "media_type": _nonempty,
}
_RESOURCE = _obj(RESOURCE_FIELDS, make=ManifestEntry)
_CORPUS = _obj({"corpus_id": _hex, "resources": _list(_RESOURCE)})
_BODY = _obj({"sha256": _hex, "byte_size": _count, "encoding": _enum(UTF8, BASE64), "content": _str})
CANDIDATE_FIELDS: dict[str, Check] = {
    "unit_id": _nonempty,
    "resource_id": _nonempty,
    "unit_hash": _hex,
    "resource_hash": _hex,
    "heading_path": _tuple(_str),
    "token_count": _count,
    "exact_rank": _opt(_rank),
    "exact_score": _opt(_num),
    "bm25_rank": _opt(_rank),
    "bm25_score": _opt(_num),
    "lexical_rank": _opt(_rank),
    "dense_rank": _opt(_rank),
    "dense_score": _opt(_num),
    "dense_similarity": _opt(_num),
    "rrf_rank": _rank,
    "rrf_score": _num,
    "rerank_rank": _opt(_rank),
    "rerank_score": _opt(_num),
    "final_rank": _rank,
    "final_score": _opt(_num),
    "disposition": _enum("selected", "excluded"),
    "exclusion_code": _opt(_nonempty),
    "delta_action": _opt(_enum("add", "replace", "reuse")),
    "start": _opt(_count),
    "end": _opt(_count),
}
# The unit's span: written when recorded, absent from candidates of Runs recorded before spans were
# kept (``plain`` leaves it out while None), so older fixtures still read, with nothing to verify.
CANDIDATE_OPTIONAL = frozenset(omit_none_fields(CandidateRecord))
_CANDIDATE = _obj(
    {k: v for k, v in CANDIDATE_FIELDS.items() if k not in CANDIDATE_OPTIONAL},
    {k: v for k, v in CANDIDATE_FIELDS.items() if k in CANDIDATE_OPTIONAL},
    make=CandidateRecord,
)
TRACE_FIELDS: dict[str, Check] = {
    "run_id": _nonempty,
    "project_id": _nonempty,
    "query": _nonempty,
    "started_at": _str,
    "finished_at": _opt(_str),
    "state_fingerprint": _str,
    "token_budget": _count,
    "effective_memory_hash": _hex,
    "index_revision": _opt(_str),
    "revisions": _map(_str),
    "latency_ms": _map(_num),
    "warm": _bool,
    "fragment_count": _count,
    "token_count": _count,
    "candidates": _tuple(_CANDIDATE),
}
TRACE = _obj(TRACE_FIELDS, make=SourceTrace)  # public: tests reseal a trace as the reader builds it
_JUDGMENT = _any  # parse_judgments checks each judgment and names the problem
_HISTORY = _obj({"version": _rank, "created_at": _opt(_str), "judgments": _list(_JUDGMENT)})
_CASE = _obj(
    {
        "case_id": _nonempty,
        "project_id": _nonempty,
        "query": _nonempty,
        "corpus_id": _hex,
        "source_run_id": _nonempty,
        "provenance": _enum(*PROVENANCES),
        "created_at": _str,
        "judgment_version": _count,
        "reviewed_version": _opt(_count),
        "judgments": _list(_JUDGMENT),
        "judgments_created_at": _opt(_str),
        "trace_hash": _hex,
        "trace": TRACE,
    },
    {"judgment_history": _list(_HISTORY)},
)
DOCUMENT = _obj(
    {
        "format": _str,
        "format_version": _any,
        "exported_at": _str,
        "metric_conventions": _map(_any),
        "corpora": _list(_CORPUS),
        "bodies": _list(_BODY),
        "cases": _list(_CASE),
        "report": _opt(_map(_any)),
    }
)
