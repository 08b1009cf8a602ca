"""The daemon's wire contract: typed requests and responses, stable error codes with one HTTP
status each, and the private cattrs converter that reads and writes them.

Responses reuse the engine's own attrs values (``ProjectInfo``, ``IndexReport``,
``ActivationResponse``), so a client decodes exactly what an embedded caller gets. The converter
is strict: wrong JSON types are rejected, never coerced (cattrs would turn ``5`` into ``"5"``),
and unknown fields are errors.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory, mapping_structure_factory
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from memory_core.adapters.files.watcher import HealthError, ProjectHealth, ReindexRecord
from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.domain.evaluation_errors import InvalidJudgments
from memory_core.domain.model import PROJECT_ID_RE, Generation, IndexRevisions, Layer, ManifestEntry, Project, Source
from memory_core.entrypoints.wire_input import InvalidJson
from memory_core.evaluation.cases import (
    CASE_ID_RE,
    MAX_JUDGMENTS,
    MAX_NOTE_CHARS,
    PROVENANCES,
    Case,
    Corpus,
    Judgment,
    JudgmentSet,
    SourceTrace,
    parse_judgments,
)
from memory_core.evaluation.fixture import FORMAT, FORMAT_VERSION, dump
from memory_core.evaluation.metrics import MAX_RELEVANCE
from memory_core.evaluation.report import (
    REPORT_VERSION,
    LatencyReport,
    LevelReport,
    MissedEvidence,
    Report,
)
from memory_core.retrieval.activation_state import ActivationState
from memory_core.retrieval.profile import MAX_BUDGET, MAX_QUERY_CHARS, MIN_BUDGET
from memory_core.runs.records import (
    FAILED,
    MAX_PAGE,
    RUNNING,
    SUCCEEDED,
    CandidateRecord,
    ClearReport,
    RunDetail,
    RunPage,
    RunSummary,
)
from memory_core.services.engine import ActivationResponse, Fragment, ProjectInfo
from memory_core.services.indexing import IndexReport

API_VERSION = "1.2.0"  # 1.1: Evaluation Set methods; 1.2: Project Local Storage, remove_project purge
MAX_WAIT_FOR_INDEX_MS = 60_000  # activate_memory's wait for a pending re-index, at most
MAX_BODY_BYTES = 1 << 20  # 1 MiB: a 10,000-unit activation state is about 0.9 MiB
# import_evaluation_set carries whole fixtures (corpus bodies included): its own, larger limit.
MAX_IMPORT_BODY_BYTES = 256 << 20


# -- errors the transport adds to the domain's ------------------------------------------------
class UnknownMethod(MemoryCoreError):
    """No method of that name in the dispatch table."""

    code = "unknown_method"


class NotFound(MemoryCoreError):
    """No resource at that path (only ``/v1/<method>`` and ``/v1/openapi.json`` exist)."""

    code = "not_found"


class MethodNotAllowed(MemoryCoreError):
    """Methods are called with ``POST`` (a few read-only ones also with ``GET``)."""

    code = "method_not_allowed"


class RequestTooLarge(InvalidRequest):
    """The body is larger than the daemon accepts."""

    code = "request_too_large"


class DaemonUnavailable(MemoryCoreError):
    """Client side: no daemon answers on the socket."""

    code = "daemon_unavailable"


class DaemonAlreadyRunning(MemoryCoreError):
    """A daemon already serves this home (one per home)."""

    code = "daemon_already_running"


# One fixed HTTP status per stable code. A test checks every MemoryCoreError code is listed,
# so a new error cannot silently fall back to a guessed status.
STATUS_BY_CODE: dict[str, int] = {
    "invalid_request": 400,
    "invalid_json": 400,
    "invalid_query": 400,
    "invalid_budget": 400,
    "invalid_activation_state": 400,
    "invalid_project_name": 400,
    "invalid_storage_location": 400,
    "not_found": 404,
    "unknown_method": 404,
    "project_not_found": 404,
    "run_not_found": 404,
    "method_not_allowed": 405,
    "project_exists": 409,
    "project_not_indexed": 409,
    "empty_project": 409,
    "daemon_already_running": 409,
    "request_too_large": 413,
    "source_unavailable": 422,
    "internal_error": 500,
    "retrieval_failed": 500,
    "generation_corrupted": 500,
    "blob_corrupted": 500,
    "blob_not_found": 500,
    "storage_unavailable": 503,
    "daemon_unavailable": 503,
    "jvm_unavailable": 503,
    "model_unavailable": 503,
    # Evaluation Sets (memory_core.domain.evaluation_errors), ahead of their methods in the table.
    "invalid_judgments": 400,
    "invalid_evaluation_fixture": 400,
    "evaluation_fixture_hash_mismatch": 400,
    "invalid_beir_collection": 400,
    "evaluation_case_not_found": 404,
    "evaluation_corpus_not_found": 404,
    "evaluation_case_exists": 409,
    "evaluation_run_not_succeeded": 409,
    "evaluation_corpus_incomplete": 409,
    "evaluation_judgment_conflict": 409,
    "evaluation_import_conflict": 409,
    "evaluation_set_empty": 409,
    "evaluation_replay_corpus_mismatch": 409,
}


def status_for(code: str) -> int:
    return STATUS_BY_CODE.get(code, 500)


def error_classes() -> Iterator[type[MemoryCoreError]]:
    """Every MemoryCoreError subclass defined so far (domain and transport)."""
    todo: list[type[MemoryCoreError]] = [MemoryCoreError]
    while todo:
        cls = todo.pop()
        yield cls
        todo.extend(cls.__subclasses__())


def exception_for(code: str, message: str, details: dict[str, Any]) -> MemoryCoreError:
    """Rebuild the typed exception a daemon reported, so a client raises what the engine would."""
    cls = next((c for c in error_classes() if c.code == code), MemoryCoreError)
    try:
        exc = cls(message, **details)
    except TypeError:  # a class with its own constructor (RetrievalFailed) and odd details
        exc = cls.__new__(cls)
        MemoryCoreError.__init__(exc, message, **details)
    # The daemon's message as sent: some constructors decorate theirs (InvalidFixture prefixes
    # the place), which would say it twice.
    exc.message, exc.args = message, (message,)
    if exc.code != code:  # a code this client does not know yet
        exc.code = code
    return exc


# -- envelope ---------------------------------------------------------------------------------
@attrs.frozen
class ErrorBody:
    code: str = attrs.field(metadata={"schema": {"description": "stable error code"}})
    message: str
    details: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ErrorEnvelope:
    """Every failed call answers ``{"error": {"code", "message", "details"}}``."""

    error: ErrorBody

    @classmethod
    def of(cls, exc: MemoryCoreError) -> ErrorEnvelope:
        return cls(ErrorBody(exc.code, exc.message, dict(exc.details)))


# -- requests ---------------------------------------------------------------------------------
@attrs.frozen
class RuntimeStatusRequest:
    """No inputs."""


@attrs.frozen
class AddProjectRequest:
    project_id: str = attrs.field(
        metadata={"schema": {"pattern": PROJECT_ID_RE.pattern, "description": "lowercase slug, 1-63 characters"}}
    )
    sources: tuple[Source, ...] = attrs.field(
        metadata={"schema": {"minItems": 1, "description": "absolute paths, in precedence order"}}
    )


@attrs.frozen
class ListProjectsRequest:
    """No inputs."""


@attrs.frozen
class ShowProjectRequest:
    project_id: str


@attrs.frozen
class RemoveProjectRequest:
    project_id: str
    purge: bool = attrs.field(
        default=False,
        metadata={"schema": {"description": "also delete the project's Evaluation Cases and their pinned Runs"}},
    )


@attrs.frozen
class ShowProjectStorageRequest:
    project_id: str


@attrs.frozen
class MoveProjectStorageRequest:
    """Move a project's Local Storage (its rebuildable generations) to another directory."""

    project_id: str
    destination: str = attrs.field(
        metadata={"schema": {"minLength": 1, "description": "absolute path of an empty or new directory"}}
    )


@attrs.frozen
class ClearProjectStorageRequest:
    """Delete a project's generations; the next index rebuilds them."""

    project_id: str


@attrs.frozen
class IndexProjectRequest:
    project_id: str
    force: bool = attrs.field(default=False, metadata={"schema": {"description": "rebuild even when unchanged"}})


@attrs.frozen
class ActivateMemoryRequest:
    project_id: str
    query: str = attrs.field(
        # Not blank: the engine trims the query and refuses an empty one.
        metadata={"schema": {"minLength": 1, "maxLength": MAX_QUERY_CHARS, "pattern": "\\S"}}
    )
    budget: int | None = attrs.field(
        default=None,
        metadata={"schema": {"minimum": MIN_BUDGET, "maximum": MAX_BUDGET, "description": "token budget"}},
    )
    activation_state: ActivationState | None = attrs.field(
        default=None,
        metadata={"schema": {"description": "what the agent already holds: the previous answer's activation_state"}},
    )
    wait_for_index_ms: int = attrs.field(
        default=0,
        metadata={"schema": {"minimum": 0, "maximum": MAX_WAIT_FOR_INDEX_MS, "description": (
            "wait up to this long for a re-index the daemon's watcher has pending for the project (changes it "
            "saw, not yet served) before ranking; 0 (the default) answers at once from the current generation"
        )}},
    )


RUN_STATUSES = (RUNNING, SUCCEEDED, FAILED)
_TIME = "ISO-8601 date or date-time; without an offset it is UTC"


@attrs.frozen
class ListRetrievalRunsRequest:
    """Filters combine with AND; Runs come newest first, a page at a time."""

    project_id: str | None = None
    status: str | None = attrs.field(default=None, metadata={"schema": {"enum": [*RUN_STATUSES, None]}})
    since: str | None = attrs.field(
        default=None, metadata={"schema": {"description": f"started at or after this time (inclusive); {_TIME}"}}
    )
    until: str | None = attrs.field(
        default=None, metadata={"schema": {"description": f"started before this time (exclusive); {_TIME}"}}
    )
    query: str | None = attrs.field(
        default=None, metadata={"schema": {"description": "only Runs whose query contains this text"}}
    )
    limit: int = attrs.field(default=50, metadata={"schema": {"minimum": 1, "maximum": MAX_PAGE}})
    cursor: str | None = attrs.field(
        default=None, metadata={"schema": {"description": "next_cursor of the previous page"}}
    )


@attrs.frozen
class GetRetrievalRunRequest:
    run_id: str
    manifest: bool = attrs.field(
        default=False,
        metadata={"schema": {"description": "also return the Effective Memory manifest the Run saw at activation"}},
    )


@attrs.frozen
class ClearRetrievalRunsRequest:
    """Clear History: exactly one of ``project_id`` or ``all: true``."""

    project_id: str | None = attrs.field(
        default=None, metadata={"schema": {"description": "clear this project's unpinned Runs"}}
    )
    all: bool = attrs.field(
        default=False, metadata={"schema": {"description": "clear every project's unpinned Runs"}}
    )


# -- Evaluation Sets: requests ----------------------------------------------------------------
_CASE_ID = {"pattern": CASE_ID_RE.pattern, "description": "an Evaluation Case id"}
MAX_CORPUS_PAGE = 200
MAX_SEARCH_CHARS = 500


@attrs.frozen
class CreateEvaluationCaseRequest:
    """Freeze a succeeded Run as an Evaluation Case (pins the Run); again for the same Run gives the same case."""

    run_id: str


@attrs.frozen
class ListEvaluationCasesRequest:
    """Every case, a project's, or the chosen ones (unknown ids are evaluation_case_not_found)."""

    project_id: str | None = None
    case_ids: tuple[str, ...] | None = attrs.field(
        default=None, metadata={"schema": {"description": "only these cases (with project_id: those of it)"}}
    )


@attrs.frozen
class GetEvaluationCaseRequest:
    case_id: str = attrs.field(metadata={"schema": _CASE_ID})


@attrs.frozen
class SearchCorpusResourcesRequest:
    """A page of a case's frozen corpus: resources whose id or body contains text (any case).

    In manifest order; without ``text``, every resource. A call reads a bounded amount of bodies,
    so a page may hold fewer than ``limit`` matches while ``next_cursor`` is not null."""

    case_id: str = attrs.field(metadata={"schema": _CASE_ID})
    text: str | None = attrs.field(default=None, metadata={"schema": {"maxLength": MAX_SEARCH_CHARS}})
    limit: int = attrs.field(default=20, metadata={"schema": {"minimum": 1, "maximum": MAX_CORPUS_PAGE}})
    cursor: str | None = attrs.field(
        default=None, metadata={"schema": {"description": "next_cursor of the previous page"}}
    )


@attrs.frozen
class JudgmentInput:
    """One judgment: relevance 0-3 of exactly one target, given as unit_id or resource_id.

    ``unit_id`` names a unit of the source trace, ``resource_id`` a resource of the frozen corpus
    (a relevant resource the Run did not select is missed evidence)."""

    relevance: int = attrs.field(metadata={"schema": {"minimum": 0, "maximum": MAX_RELEVANCE}})
    unit_id: str | None = attrs.field(default=None, metadata={"schema": {"type": "string", "minLength": 1}})
    resource_id: str | None = attrs.field(default=None, metadata={"schema": {"type": "string", "minLength": 1}})
    note: str | None = attrs.field(default=None, metadata={"schema": {"maxLength": MAX_NOTE_CHARS}})

    @classmethod
    def of(cls, judgment: Judgment) -> JudgmentInput:
        return cls(judgment.relevance, judgment.unit_id, judgment.resource_id, judgment.note)

    def to_judgment(self) -> Judgment:
        return Judgment(self.relevance, self.unit_id, self.resource_id, self.note)


@attrs.frozen
class ReplaceEvaluationJudgmentsRequest:
    """Replace a case's whole judgment set (compare-and-set on its version)."""

    case_id: str = attrs.field(metadata={"schema": _CASE_ID})
    expected_judgment_version: int = attrs.field(
        metadata={"schema": {"minimum": 0, "description": "the version you edited (0: none yet)"}}
    )
    judgments: tuple[JudgmentInput, ...] = attrs.field(metadata={"schema": {"maxItems": MAX_JUDGMENTS}})


@attrs.frozen
class MarkEvaluationReviewedRequest:
    """Record that a person reviewed (or, with ``reviewed: false``, un-reviewed) the current judgments."""

    case_id: str = attrs.field(metadata={"schema": _CASE_ID})
    expected_judgment_version: int = attrs.field(metadata={"schema": {"minimum": 0}})
    reviewed: bool = True


@attrs.frozen
class EvaluationReportRequest:
    """The B1-B4 report of every case, a project's, or the chosen ones."""

    project_id: str | None = None
    case_ids: tuple[str, ...] | None = None


@attrs.frozen
class ExportEvaluationSetRequest:
    """The self-contained fixture of every case, a project's, or the chosen ones."""

    project_id: str | None = None
    case_ids: tuple[str, ...] | None = None
    with_history: bool = attrs.field(
        default=False, metadata={"schema": {"description": "include earlier judgment versions"}}
    )
    with_uris: bool = attrs.field(
        default=False,
        metadata={
            "schema": {
                "description": "keep each resource's file:/// URI (local paths); by default a resource's uri is "
                "its resource_id"
            }
        },
    )


@attrs.frozen
class EvaluationFixture:
    """An evaluation fixture document, passed whole: the wire value is the document itself.

    Its JSON Schema is ``contracts/evaluation-fixture.schema.json``."""

    document: Mapping[str, Any]

    def to_bytes(self) -> bytes:
        """The file ``memcore eval export`` writes: canonical JSON and a newline."""
        return dump(self.document)


@attrs.frozen
class ImportEvaluationSetRequest:
    """Import a fixture: every hash verified first; all or nothing."""

    fixture: EvaluationFixture


# -- Evaluation Sets: responses ---------------------------------------------------------------
@attrs.frozen
class EvaluationCaseList:
    cases: tuple[Case, ...]


CaseMetricsWire = dict[str, dict[str, dict[str, float | None]]]  # level -> variant -> metric -> value


@attrs.frozen
class EvaluationCaseDetail:
    """A case with what a reviewer needs: trace, frozen corpus manifest, judgments, history, metrics."""

    case: Case
    trace: SourceTrace
    corpus: Corpus = attrs.field(
        metadata={"schema": {"description": "the frozen manifest (bodies: search_corpus_resources)"}}
    )
    judgments: JudgmentSet = attrs.field(metadata={"schema": {"description": "the current version (0: none yet)"}})
    judgment_history: tuple[JudgmentSet, ...] = attrs.field(
        metadata={"schema": {"description": "every stored version, ascending (the last is the current one)"}}
    )
    metrics: CaseMetricsWire = attrs.field(
        metadata={"schema": {"description": "level (unit, resource) -> variant (b1_bm25 .. b4_reranked) -> metric"}}
    )
    missed_evidence: tuple[MissedEvidence, ...]


MATCH_KINDS = ("resource_id", "body")


@attrs.frozen
class CorpusResourceMatch:
    resource: ManifestEntry
    matched_in: str | None = attrs.field(
        metadata={"schema": {"enum": [*MATCH_KINDS, None], "description": "null when no text was given"}}
    )
    snippet: str | None = attrs.field(metadata={"schema": {"description": "body text around the first match"}})
    retrieved: bool = attrs.field(metadata={"schema": {"description": "a unit of it is in the source trace"}})
    selected: bool = attrs.field(metadata={"schema": {"description": "the source Run selected a unit of it"}})


@attrs.frozen
class CorpusResourcePage:
    case_id: str
    corpus_id: str
    total_resources: int
    resources: tuple[CorpusResourceMatch, ...]
    next_cursor: str | None


@attrs.frozen
class MissedEvidenceSummary:
    counts: dict[str, int]
    items: tuple[MissedEvidence, ...]


@attrs.frozen
class EvaluationReport:
    """The B1-B4 report: the document ``Report.to_dict`` writes, typed."""

    report_version: int = attrs.field(metadata={"schema": {"const": REPORT_VERSION}})
    project_id: str | None
    cases: int
    reviewed_cases: int
    levels: dict[str, LevelReport] = attrs.field(metadata={"schema": {"description": "unit and resource level"}})
    latency_ms: LatencyReport
    missed_evidence: MissedEvidenceSummary
    per_case: dict[str, CaseMetricsWire] = attrs.field(
        metadata={"schema": {"description": "case id -> level -> variant -> recall@20, ndcg@10, mrr"}}
    )

    @classmethod
    def of(cls, report: Report) -> EvaluationReport:
        doc = report.to_dict()
        return cls(
            report_version=doc["report_version"],
            project_id=report.project_id,
            cases=report.case_count,
            reviewed_cases=report.reviewed_cases,
            levels=dict(report.levels),
            latency_ms=report.latency,
            missed_evidence=MissedEvidenceSummary(report.missed_counts(), report.missed),
            per_case=doc["per_case"],
        )

    def to_report(self) -> Report:
        """The engine's value (its ``per_case`` keeps the judged metrics the document carries)."""
        return Report(
            project_id=self.project_id,
            case_count=self.cases,
            reviewed_cases=self.reviewed_cases,
            levels=self.levels,
            latency=self.latency_ms,
            missed=self.missed_evidence.items,
            per_case=self.per_case,
        )


# -- wire shapes beyond plain attrs records (the converter and the OpenAPI builder share them) --
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


# -- responses the engine has no value for ----------------------------------------------------
@attrs.frozen
class RuntimeStatus:
    service: str
    version: str
    api_version: str
    pid: int
    home: str
    socket: str | None
    started_at: str
    uptime_seconds: float
    engine_busy: bool = attrs.field(metadata={"schema": {"description": "an engine call is running"}})
    in_flight: int = attrs.field(metadata={"schema": {"description": "engine calls running or queued"}})
    watching: bool = attrs.field(
        default=False, metadata={"schema": {"description": "the daemon follows its projects' sources"}}
    )
    projects: tuple[ProjectHealth, ...] = attrs.field(
        default=(), metadata={"schema": {"description": "each project's watch and re-index health"}}
    )
    on_demand: bool = attrs.field(
        default=False,
        metadata={"schema": {"description": "started by a client (memcore mcp, memcore ui), not by memcore serve"}},
    )
    idle_exit_seconds: float | None = attrs.field(
        default=None,
        metadata={"schema": {"description": "it stops after this long idle (no request, client or re-index); "
                             "null: it runs until stopped"}},
    )


@attrs.frozen
class ProjectList:
    projects: tuple[ProjectInfo, ...]


# -- the converter ----------------------------------------------------------------------------
def _strict(kind: type | tuple[type, ...], label: str, cast: Callable[[Any], Any] | None = None) -> Any:
    def hook(value: Any, _: Any) -> Any:
        # bool is an int in Python, never in JSON.
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise TypeError(f"expected {label}, got a boolean")
        if not isinstance(value, kind):
            raise TypeError(f"expected {label}, got {_json_type(value)}")
        return cast(value) if cast else value

    return hook


def _json_type(value: Any) -> str:
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                       (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def _origin_is(*origins: Any) -> Callable[[Any], bool]:
    return lambda t: typing.get_origin(t) in origins


def make_converter() -> cattrs.Converter:
    """The daemon's private converter; use :func:`structure` and :func:`unstructure`."""
    import collections.abc as cabc

    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook(str, _strict(str, "a string"))
    conv.register_structure_hook(int, _strict(int, "an integer"))
    conv.register_structure_hook(float, _strict((int, float), "a number", float))
    conv.register_structure_hook(bool, _strict(bool, "a boolean"))

    def sequences(t: Any) -> Any:
        inner = (homogenous_tuple_structure_factory if typing.get_origin(t) is tuple else list_structure_factory)(
            t, conv
        )
        check = _strict(list, "an array")
        return lambda value, tp: inner(check(value, tp), tp)

    def mappings(t: Any) -> Any:
        inner = mapping_structure_factory(t, conv)
        check = _strict(dict, "an object")
        return lambda value, tp: inner(check(value, tp), tp)

    def classes(cls: Any) -> Any:
        inner = make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True)
        check = _strict(dict, "an object")
        return lambda value, tp: inner(check(value, tp), tp)

    conv.register_structure_hook_factory(lambda t: attrs.has(t) and t is not ActivationState, classes)
    conv.register_structure_hook_factory(_origin_is(tuple, list, cabc.Sequence), sequences)
    conv.register_structure_hook_factory(_origin_is(dict, cabc.Mapping), mappings)
    # The activation state validates itself and raises its own typed error.
    conv.register_structure_hook(ActivationState, lambda value, _: ActivationState.from_json(value))
    conv.register_unstructure_hook(ActivationState, lambda s: s.to_json())
    conv.register_unstructure_hook(tuple, lambda t: [conv.unstructure(x) for x in t])
    for cls, computed in COMPUTED.items():
        _register_computed(conv, cls, computed, classes(cls))
    # Judgments are checked as the engine checks a judgment file, so every problem of a set is
    # one invalid_judgments error listing {index, field, reason}, whatever the problem.
    conv.register_structure_hook_func(lambda t: t == tuple[JudgmentInput, ...], _structure_judgments)
    conv.register_unstructure_hook(
        JudgmentInput, lambda j: {k: v for k, v in attrs.asdict(j).items() if v is not None}
    )
    for cls in DOCUMENT_SCHEMAS:
        conv.register_structure_hook(cls, _document_hook(cls))
        conv.register_unstructure_hook(cls, lambda d: d.document)
    return conv


def _register_computed(
    conv: cattrs.Converter, cls: type, computed: dict[str, tuple[type, str]], structure_fields: Any
) -> None:
    unstructure_fields: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(cls, conv)

    def unstructure(value: Any) -> dict[str, Any]:
        return {**unstructure_fields(value), **{name: getattr(value, name) for name in computed}}

    def structure(raw: Any, tp: Any) -> Any:
        raw = _strict(dict, "an object")(raw, tp)
        given: dict[str, Any] = {
            name: conv.structure(raw[name], kind) for name, (kind, _) in computed.items() if name in raw
        }
        missing = sorted(set(computed) - set(given))
        if missing:
            raise ValueError(f"missing read-only field(s) {', '.join(missing)} of {cls.__name__}")
        value = structure_fields({k: v for k, v in raw.items() if k not in computed}, tp)
        for name, said in given.items():
            if getattr(value, name) != said:
                raise ValueError(f"{cls.__name__}.{name} is {said!r} but its fields say {getattr(value, name)!r}")
        return value

    conv.register_unstructure_hook(cls, unstructure)
    conv.register_structure_hook(cls, structure)


def _structure_judgments(raw: Any, _: Any) -> tuple[JudgmentInput, ...]:
    if not isinstance(raw, list):
        raise InvalidJudgments(
            "judgments must be a list", problems=[{"index": None, "field": "judgments", "reason": "not a list"}]
        )
    return tuple(JudgmentInput.of(j) for j in parse_judgments(raw))


def _document_hook(cls: type) -> Callable[[Any, Any], Any]:
    check = _strict(dict, "an object")
    return lambda raw, tp: cls(check(raw, tp))


def _domain_error(exc: BaseException) -> MemoryCoreError | None:
    """The first typed error a hook raised, from inside cattrs' exception groups."""
    if isinstance(exc, MemoryCoreError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _domain_error(inner)
        if found is not None:
            return found
    return None


def _describe(exc: BaseException, type_: Any) -> str:
    # Our hooks' messages ("expected a string, got an integer") and enum errors are clearer.
    if isinstance(exc, TypeError | ValueError) and not isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return str(exc)
    return cattrs.v.format_exception(exc, type_)


def structure(conv: cattrs.Converter, raw: Any, cls: type[Any]) -> Any:
    """Decode a JSON value into ``cls``; any mismatch is an InvalidRequest naming the paths."""
    if not isinstance(raw, dict):
        raise InvalidRequest(f"expected a JSON object for {cls.__name__}, got {_json_type(raw)}")
    try:
        return conv.structure(raw, cls)
    except Exception as exc:
        domain = _domain_error(exc)
        if domain is not None:
            raise domain from None
        problems = cattrs.transform_error(exc, path="$", format_exception=_describe)
        raise InvalidRequest(
            f"invalid {cls.__name__}: " + "; ".join(problems[:5]), errors=problems[:50]
        ) from None


def unstructure(conv: cattrs.Converter, value: Any) -> Any:
    return conv.unstructure(value)


__all__ = [
    "API_VERSION",
    "MAX_BODY_BYTES",
    "MAX_IMPORT_BODY_BYTES",
    "STATUS_BY_CODE",
    "ActivationResponse",
    "CandidateRecord",
    "ClearReport",
    "ErrorEnvelope",
    "InvalidJson",
    "Fragment",
    "HealthError",
    "ProjectHealth",
    "ReindexRecord",
    "Generation",
    "IndexReport",
    "IndexRevisions",
    "Layer",
    "Project",
    "ProjectInfo",
    "RunDetail",
    "RunPage",
    "RunSummary",
    "exception_for",
    "make_converter",
    "status_for",
    "structure",
    "unstructure",
]
