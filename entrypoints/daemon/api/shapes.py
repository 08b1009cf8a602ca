"""Wire shapes beyond plain attrs records, shared by the converter and the OpenAPI builder:
read-only computed fields, schema keywords a type's own fields do not carry, and the values sent
whole as one JSON object."""

from __future__ import annotations

from typing import Any

from memory_core.domain.model import ManifestEntry
from memory_core.evaluation.cases import PROVENANCES, Case, Corpus, Judgment, JudgmentSet
from memory_core.evaluation.fixture import FORMAT, FORMAT_VERSION
from memory_core.evaluation.metrics import MAX_RELEVANCE
from memory_core.evaluation.passages import PASSAGE_STATUSES, CandidatePassage, TextPassage
from memory_core.operations.evaluation import EvaluationFixture, JudgmentInput
from memory_core.runs.records import CandidateRecord
from memory_core.services.corpus_search import MATCH_KINDS, CorpusResourceMatch

# Read-only properties a response carries besides the fields; a decoder checks and drops them.
COMPUTED: dict[type, dict[str, tuple[type, str]]] = {
    Case: {"reviewed": (bool, "a person reviewed the current judgment version (only those may gate)")},
}
# Keywords added to a component's schema.
_SHA256 = {"pattern": "^[0-9a-f]{64}$"}
SCHEMA_EXTRA: dict[type, dict[str, Any]] = {  # "properties" merge into the fields' own schemas
    JudgmentInput: {"oneOf": [{"required": ["unit_id"]}, {"required": ["resource_id"]}]},
    Case: {"properties": {"provenance": {"enum": list(PROVENANCES)}, "original_provenance": {"enum": list(PROVENANCES)},
                          "corpus_id": _SHA256, "trace_hash": _SHA256, "judgment_version": {"minimum": 0}}},
    Judgment: {"properties": {"relevance": {"minimum": 0, "maximum": MAX_RELEVANCE}}},
    JudgmentSet: {"properties": {"version": {"minimum": 0}}},
    ManifestEntry: {"properties": {"resource_hash": _SHA256}},
    Corpus: {"properties": {"corpus_id": _SHA256}},
    # The corpus search's value is the use case's own (the core carries no schema metadata).
    CorpusResourceMatch: {"properties": {
        "matched_in": {"enum": [*MATCH_KINDS, None], "description": "null when no text was given"},
        "snippet": {"description": "body text around the first match"},
        "retrieved": {"description": "a unit of it is in the source trace"},
        "selected": {"description": "the source Run selected a unit of it"},
        "passages": {"description": "the paragraphs of the body holding the first matches (none for an id match)"},
    }},
    CandidateRecord: {"properties": {
        "start": {"minimum": 0, "description": "the unit's span [start, end) in code points of its resource's "
                  "text; null in Runs recorded before spans were kept"},
        "end": {"minimum": 0},
    }},
    # What a judge reads (memory_core.evaluation.passages): offsets are code points of the text.
    CandidatePassage: {"properties": {
        "start": {"minimum": 0, "description": "the unit's span [start, end); null: recorded before spans were kept"},
        "end": {"minimum": 0},
        "status": {"enum": list(PASSAGE_STATUSES), "description": "shown: text is the unit's, verified"},
        "text": {"description": "the unit's text, only when status is shown"},
        "note": {"description": "why no text is shown (null when it is)"},
    }},
    TextPassage: {"properties": {
        "start": {"minimum": 0, "description": "[start, end) in the resource's text"},
        "end": {"minimum": 0},
        "heading_path": {"description": "the markdown headings of the section holding the match"},
        "match_start": {"minimum": 0},
        "match_end": {"minimum": 0},
    }},
}
# Values sent as one JSON object, whole; validated by the engine, not field by field.
_FIXTURE_REQUIRED = ["format", "format_version", "exported_at", "metric_conventions", "corpora", "bodies", "cases",
                     "report"]
DOCUMENT_SCHEMAS: dict[type, dict[str, Any]] = {
    EvaluationFixture: {
        "type": "object",
        "title": "EvaluationFixture",
        "description": "An evaluation fixture document (full JSON Schema: contracts/evaluation-fixture.schema.json).",
        "properties": {
            "format": {"const": FORMAT},
            "format_version": {"const": FORMAT_VERSION},
            "exported_at": {"type": "string"},
            "metric_conventions": {"type": "object"},
            "corpora": {"type": "array", "items": {"type": "object"}},
            "bodies": {"type": "array", "items": {"type": "object"}},
            "cases": {"type": "array", "items": {"type": "object"}},
            "report": {"type": ["object", "null"], "description": "the report at export (EvaluationReport)"},
        },
        "required": _FIXTURE_REQUIRED,
        "additionalProperties": False,
    },
}
