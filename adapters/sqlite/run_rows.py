"""Retrieval Run rows: the columns, statements and the mapping between rows and records."""

from __future__ import annotations

import json
import operator
import weakref
from collections.abc import Iterable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

import attrs

from memory_core.domain.canonical import canonical_json
from memory_core.domain.model import ManifestEntry, Unit
from memory_core.retrieval.pipeline import Candidate
from memory_core.runs.records import (
    CandidateRecord,
    RunSummary,
)

_CANDIDATE_FIELDS = [f.name for f in attrs.fields(CandidateRecord)]
# Where a column is named otherwise than its field (``end`` is an SQL keyword).
_COLUMN_OF = {"heading_path": "heading_path_json", "start": "span_start", "end": "span_end"}
_CANDIDATE_COLUMNS = [_COLUMN_OF.get(f, f) for f in _CANDIDATE_FIELDS]
INSERT_CANDIDATE = (
    f"INSERT INTO retrieval_run_candidates(run_id, {', '.join(_CANDIDATE_COLUMNS)}) "
    f"VALUES (?{', ?' * len(_CANDIDATE_COLUMNS)})"
)
SELECT_CANDIDATES = (
    f"SELECT {', '.join(_CANDIDATE_COLUMNS)} FROM retrieval_run_candidates WHERE run_id = ? ORDER BY final_rank"
)
SUMMARY_COLUMNS = (
    "run_id, project_id, query, status, started_at, finished_at, state_fingerprint, token_budget, "
    "effective_memory_hash, index_revision, warm, candidate_count, fragment_count, token_count, total_ms, "
    "error_stage, error_code, error_summary, pinned"
)
RESOURCE_COLUMNS = "manifest_hash, ordinal, resource_id, layer, uri, resource_hash, byte_size, media_type"


# A candidate row is the unit's identity columns, the Candidate's stage columns, then the unit's
# span, in CandidateRecord's field order (checked here, so the two can never drift apart silently).
_UNIT_FIELDS = ("unit_id", "resource_id", "unit_hash", "resource_hash", "heading_path", "token_count")
_SPAN_FIELDS = ("start", "end")
_STAGE_FIELDS = tuple(_CANDIDATE_FIELDS[len(_UNIT_FIELDS) : -len(_SPAN_FIELDS)])
if (
    tuple(_CANDIDATE_FIELDS[: len(_UNIT_FIELDS)]) != _UNIT_FIELDS
    or tuple(_CANDIDATE_FIELDS[-len(_SPAN_FIELDS) :]) != _SPAN_FIELDS
    or tuple(f.name for f in attrs.fields(Candidate) if f.name != "unit") != _STAGE_FIELDS
):
    raise ImportError("CandidateRecord and Candidate disagree on the stored columns")
_GET_UNIT_FIELDS = operator.attrgetter("unit_id", "resource_id", "unit_hash", "resource_hash")
_GET_STAGE_FIELDS = operator.attrgetter(*_STAGE_FIELDS)


class UnitColumns:
    """The identity columns of a candidate row, per Unit, built once per Unit object.

    On the activation's hot path (one row per candidate, ~180 per Run); a loaded generation
    hands every activation the same Unit objects, so most candidates were seen before (saves
    ~0.08 ms a Run). Keyed by ``id(unit)`` beside a weak reference to the unit: a hit must be
    that very object (a freed unit's id can be reused), and the cache never keeps a replaced
    generation's texts alive. Emptied when full."""

    def __init__(self, limit: int = 100_000) -> None:
        self._limit = limit
        self._seen: dict[int, tuple[weakref.ref[Unit], tuple[Any, ...]]] = {}

    def __call__(self, unit: Unit) -> tuple[Any, ...]:
        hit = self._seen.get(id(unit))
        if hit is not None and hit[0]() is unit:
            return hit[1]
        columns = (*_GET_UNIT_FIELDS(unit), heading_path_json(unit.heading_path), unit.token_count)
        if len(self._seen) >= self._limit:
            self._seen = {}
        self._seen[id(unit)] = (weakref.ref(unit), columns)
        return columns


def candidate_rows(run_id: str, candidates: Iterable[Candidate], unit_columns: UnitColumns) -> list[tuple[Any, ...]]:
    return [(run_id, *unit_columns(c.unit), *_GET_STAGE_FIELDS(c), c.unit.start, c.unit.end) for c in candidates]


def heading_path_json(heading_path: Sequence[str]) -> str:
    """``json.dumps(list(heading_path), ensure_ascii=False)``, byte for byte, in a quarter of the
    time: the C string encoder json.dumps itself uses, without its per-call set-up (~180 calls
    per Run, most of them for a heading path no earlier Run had)."""
    return "[" + ", ".join(map(encode_basestring, heading_path)) + "]"


def _json_list(value: Sequence[str]) -> str:
    return json.dumps(list(value), ensure_ascii=False)


def candidate_from_row(row: Sequence[Any]) -> CandidateRecord:
    values = dict(zip(_CANDIDATE_FIELDS, row, strict=True))
    values["heading_path"] = tuple(json.loads(values["heading_path"]))
    return CandidateRecord(**values)


def summary_from_row(row: Sequence[Any]) -> RunSummary:
    (run_id, project_id, query, status, started_at, finished_at, fingerprint, budget, em_hash, revision, warm,
     candidates, fragments, tokens, total, stage, code, summary, pinned) = row  # fmt: skip
    return RunSummary(
        run_id=run_id,
        project_id=project_id,
        query=query,
        status=status,
        started_at=started_at,
        finished_at=finished_at,
        state_fingerprint=fingerprint,
        token_budget=int(budget),
        effective_memory_hash=em_hash,
        index_revision=revision,
        warm=None if warm is None else bool(warm),
        candidate_count=int(candidates),
        fragment_count=int(fragments),
        token_count=int(tokens),
        total_ms=None if total is None else float(total),
        error_stage=stage,
        error_code=code,
        error_summary=summary,
        pinned=bool(pinned),
    )


def manifest_rows(manifest_hash: str, entries: Iterable[ManifestEntry]) -> list[tuple[Any, ...]]:
    return [
        (manifest_hash, e.ordinal, e.resource_id, e.layer.value, e.uri, e.resource_hash, e.byte_size, e.media_type)
        for e in entries
    ]


# Where a blob is referenced. A blob is live while any of these names it (brief §6). Each entry is
# (table that must exist, query yielding digests): evaluation corpora arrive with their own
# migration, and adding a reference is one line here.
LIVE_BLOB_QUERIES: tuple[tuple[str, str], ...] = (
    (
        "retrieval_run_resources",
        "SELECT r.resource_hash FROM retrieval_run_resources r WHERE r.manifest_hash IN "
        "(SELECT effective_memory_hash FROM retrieval_runs WHERE effective_memory_hash IS NOT NULL)",
    ),
    (
        "project_generation_pointers",
        "SELECT json_extract(j.value, '$.resource_hash') FROM project_generation_pointers p "
        "JOIN generations g ON g.project_id = p.project_id "
        " AND g.index_revision IN (p.current_revision, p.previous_revision) "
        "JOIN manifests m ON m.manifest_hash = coalesce(g.manifest_hash, g.effective_memory_hash), "
        "json_each(m.entries_json) j",
    ),
    ("evaluation_corpus_resources", "SELECT resource_hash FROM evaluation_corpus_resources"),
)

# Manifest rows stay while a Run or a current/previous generation refers to them (so the first
# Run after an index never has to copy a manifest).
DELETE_UNUSED_MANIFESTS = (
    "DELETE FROM retrieval_run_resources WHERE manifest_hash NOT IN ("
    " SELECT effective_memory_hash FROM retrieval_runs WHERE effective_memory_hash IS NOT NULL"
    " UNION SELECT coalesce(g.manifest_hash, g.effective_memory_hash) FROM project_generation_pointers p"
    " JOIN generations g ON g.project_id = p.project_id"
    "  AND g.index_revision IN (p.current_revision, p.previous_revision))"
)


def json_column(value: Mapping[str, Any]) -> str:
    return canonical_json(dict(value)).decode("utf-8")
