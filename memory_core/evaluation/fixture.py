"""Evaluation fixtures: one self-contained, versioned JSON document (brief §7; JSON Schema in
``contracts/evaluation-fixture.schema.json``).

``{"format": "memory-core-evaluation-set", "format_version": 1, "exported_at", "metric_conventions",
"corpora": [{corpus_id, resources}], "bodies": [{sha256, byte_size, encoding, content}],
"cases": [{..., trace, trace_hash, judgment_version, judgments, judgment_history?}], "report"}``

Bodies are UTF-8 text when they decode as such, base64 otherwise. A resource's ``uri`` is its
``resource_id`` unless the export asks ``with_uris`` (a ``file:///`` URI names local folders);
the corpus id, the trace's ``effective_memory_hash`` and the trace hash are then those of that
portable manifest, so every check below holds for both forms. A case carries its original
provenance (an imported case records ``fixture_import`` here and keeps the original). The file is
canonical JSON (sorted keys, no spaces) plus a newline, so export → import → export is
byte-identical apart from ``exported_at``.

Three modules: ``fixture_format`` defines the format (constants, each object's fields and
checks), ``fixture_reader`` loads and verifies a document, and this one writes the values a
document carries (through ``plain``, as every hash is taken) and re-exports the other two's names.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import attrs

from memory_core.domain.canonical import canonical_json, plain
from memory_core.evaluation.cases import CaseRecord, Corpus, JudgmentSet
from memory_core.evaluation.fixture_format import (
    BASE64,
    CANDIDATE_FIELDS,
    FORMAT,
    FORMAT_VERSION,
    RESOURCE_FIELDS,
    TRACE_FIELDS,
    UTF8,
)
from memory_core.evaluation.fixture_reader import EvaluationSet, load_fixture, parse_document

__all__ = [  # the import surface: the format's and the reader's names too
    "CANDIDATE_FIELDS",
    "FORMAT",
    "FORMAT_VERSION",
    "RESOURCE_FIELDS",
    "TRACE_FIELDS",
    "EvaluationSet",
    "ExportScope",
    "ImportResult",
    "body_dict",
    "case_dict",
    "dump",
    "load_fixture",
    "parse_document",
    "portable_corpus",
    "portable_record",
]

BLOB_WRITERS = 8


class ExportScope(TypedDict, total=False):
    """Which cases an export takes and what it keeps: the keywords of ``export_document``
    (services/fixtures.py), which the methods that only wrap it pass through as they are."""

    project_id: str | None
    case_ids: Sequence[str] | None
    with_history: bool
    with_uris: bool


# -- export ---------------------------------------------------------------------------------------


def body_dict(digest: str, data: bytes) -> dict[str, Any]:
    try:
        return {"sha256": digest, "byte_size": len(data), "encoding": UTF8, "content": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {
            "sha256": digest,
            "byte_size": len(data),
            "encoding": BASE64,
            "content": base64.b64encode(data).decode(),
        }


def case_dict(record: CaseRecord, with_history: bool) -> dict[str, Any]:
    """A case as a fixture carries it (original provenance, current judgments, trace)."""
    c = record.case
    current = record.judgment_sets[-1] if record.judgment_sets else JudgmentSet(c.case_id, 0, (), None)
    out: dict[str, Any] = {
        "case_id": c.case_id,
        "project_id": c.project_id,
        "query": c.query,
        "corpus_id": c.corpus_id,
        "source_run_id": c.source_run_id,
        "provenance": c.original_provenance,
        "created_at": c.created_at,
        "judgment_version": c.judgment_version,
        "reviewed_version": c.reviewed_version,
        "judgments": plain(current.judgments),
        "judgments_created_at": current.created_at,
        "trace_hash": c.trace_hash,
        "trace": plain(record.trace),
    }
    if with_history:
        out["judgment_history"] = [
            {"version": s.version, "created_at": s.created_at, "judgments": plain(s.judgments)}
            for s in record.judgment_sets
        ]
    return out


def portable_corpus(corpus: Corpus) -> Corpus:
    """The corpus with each ``uri`` (``file:///`` plus the source's absolute path) replaced by its
    resource id, so that no local directory name travels; ``corpus_id`` is that manifest's hash."""
    return Corpus.of(attrs.evolve(e, uri=e.resource_id) for e in corpus.resources)


def portable_record(record: CaseRecord, corpus: Corpus) -> CaseRecord:
    """The record pointing at ``corpus`` (its portable copy): the case's corpus_id and the trace's
    effective_memory_hash name it, and the trace hash is recomputed, so every check holds."""
    trace = attrs.evolve(record.trace, effective_memory_hash=corpus.corpus_id)
    case = attrs.evolve(record.case, corpus_id=corpus.corpus_id, trace_hash=trace.trace_hash)
    return CaseRecord(case, trace, record.judgment_sets)


def dump(document: Mapping[str, Any]) -> bytes:
    """Canonical JSON plus a newline: the same document always gives the same bytes."""
    return canonical_json(document) + b"\n"


# -- import ---------------------------------------------------------------------------------------


@attrs.frozen
class ImportResult:
    cases_added: tuple[str, ...]
    cases_unchanged: tuple[str, ...]
    corpora_added: int
    blobs_written: int
