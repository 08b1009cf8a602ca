"""Evaluation Sets (cases, judgments, the report, fixtures): the operations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from memory_core.domain import errors as err
from memory_core.domain.evaluation_errors import (
    EvaluationCaseNotFound,
    EvaluationCorpusIncomplete,
    EvaluationCorpusNotFound,
    EvaluationImportConflict,
    EvaluationJudgmentConflict,
    EvaluationRunNotSucceeded,
    FixtureHashMismatch,
    InvalidFixture,
    InvalidJudgments,
)
from memory_core.evaluation.cases import (
    CASE_ID_RE,
    MAX_JUDGMENTS,
    MAX_NOTE_CHARS,
    Case,
    Corpus,
    Judgment,
    JudgmentSet,
    SourceTrace,
)
from memory_core.evaluation.fixture import ImportResult, dump
from memory_core.evaluation.metrics import MAX_RELEVANCE
from memory_core.evaluation.passages import CandidatePassage
from memory_core.evaluation.report import (
    JUDGED_METRICS,
    REPORT_VERSION,
    LatencyReport,
    LevelReport,
    MissedEvidence,
    MissedEvidenceSummary,
    Report,
)
from memory_core.operations.bounds import bounded, described
from memory_core.operations.registry import JOB, READ, UI, WRITE, operation, reported
from memory_core.services.corpus_search import (
    MAX_CORPUS_PAGE,
    MAX_SEARCH_CHARS,
    CorpusQuery,
    CorpusResourcePage,
    search_corpus,
)
from memory_core.services.engine import Engine

__all__ = ["MissedEvidenceSummary"]  # re-exported: the report's part the API names
# import_evaluation_set carries whole fixtures (corpus bodies included): its own, larger limit.
MAX_IMPORT_BODY_BYTES = 256 << 20
_BLOBS = (err.BlobNotFound, err.BlobCorrupted)
_CASE_ID = {"pattern": CASE_ID_RE.pattern, "description": "an Evaluation Case id"}


@attrs.frozen(field_transformer=bounded)
class CreateEvaluationCaseRequest:
    """Freeze a succeeded Run as an Evaluation Case (pins the Run); again for the same Run gives the same case."""

    run_id: str


@operation(WRITE | UI, CreateEvaluationCaseRequest, Case,
           "Freeze a succeeded Run as an Evaluation Case (corpus, trace) and pin the Run.",
           (err.RunNotFound, EvaluationRunNotSucceeded, EvaluationCorpusIncomplete))  # fmt: skip
def create_evaluation_case(engine: Engine, req: CreateEvaluationCaseRequest) -> Case:
    return engine.create_evaluation_case(req.run_id)


@attrs.frozen(field_transformer=bounded)
class ListEvaluationCasesRequest:
    """Every case, a project's, or the chosen ones (unknown ids are evaluation_case_not_found)."""

    project_id: str | None = None
    case_ids: tuple[str, ...] | None = described("only these cases (with project_id: those of it)", None)


@attrs.frozen
class EvaluationCaseList:
    cases: tuple[Case, ...]


@operation(READ | UI, ListEvaluationCasesRequest, EvaluationCaseList,
           "Evaluation Cases, oldest first: all, a project's, or the chosen ones.", (EvaluationCaseNotFound,),
           allow_get=True)  # fmt: skip
def list_evaluation_cases(engine: Engine, req: ListEvaluationCasesRequest) -> EvaluationCaseList:
    return EvaluationCaseList(tuple(engine.evaluations().list_cases(req.project_id, req.case_ids)))


@attrs.frozen(field_transformer=bounded)
class GetEvaluationCaseRequest:
    case_id: str = attrs.field(metadata={"schema": _CASE_ID})


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
        metadata={"schema": {"description": "level (unit, resource) -> variant (b1_bm25 .. b4_reranked, "
                             "fusion_<name> per registered fusion) -> metric"}}
    )
    missed_evidence: tuple[MissedEvidence, ...]
    passages: tuple[CandidatePassage, ...] = attrs.field(
        metadata={"schema": {"description": "each candidate of the trace, in its order: its text cut from the "
                             "frozen corpus by its span and checked against its unit_hash, or why not"}}
    )


@operation(READ | UI, GetEvaluationCaseRequest, EvaluationCaseDetail,
           "One case: trace, frozen corpus manifest, current judgments, every judgment version, metrics, "
           "missed evidence, and each candidate's text from the frozen corpus (verified against its unit hash).",
           (EvaluationCaseNotFound, EvaluationCorpusNotFound))  # fmt: skip
def get_evaluation_case(engine: Engine, req: GetEvaluationCaseRequest) -> EvaluationCaseDetail:
    service = engine.evaluations()
    detail = service.show_case(req.case_id)
    return EvaluationCaseDetail(
        case=detail.case,
        trace=detail.trace,
        corpus=service.get_corpus(detail.case.corpus_id),
        judgments=detail.judgments,
        judgment_history=tuple(service.judgment_history(req.case_id)),
        metrics=detail.metrics,
        missed_evidence=detail.missed,
        passages=detail.passages,
    )


@attrs.frozen(field_transformer=bounded)
class SearchCorpusResourcesRequest:
    """A page of a case's frozen corpus: resources whose id or body contains text (any case).

    In manifest order; without ``text``, every resource. A call reads a bounded amount of bodies,
    so a page may hold fewer than ``limit`` matches while ``next_cursor`` is not null."""

    case_id: str = attrs.field(metadata={"schema": _CASE_ID})
    text: str | None = attrs.field(default=None, metadata={"schema": {"maxLength": MAX_SEARCH_CHARS}})
    limit: int = attrs.field(default=20, metadata={"schema": {"minimum": 1, "maximum": MAX_CORPUS_PAGE}})
    cursor: str | None = described("next_cursor of the previous page", None)


@operation(READ | UI, SearchCorpusResourcesRequest, CorpusResourcePage,
           "Resources of a case's frozen corpus whose id or body contains a text, with the passages that match "
           "(the missed-evidence picker).",
           (EvaluationCaseNotFound, EvaluationCorpusNotFound, *_BLOBS))  # fmt: skip
def search_corpus_resources(engine: Engine, req: SearchCorpusResourcesRequest) -> CorpusResourcePage:
    service = engine.evaluations()
    return search_corpus(service.store, service.blobs, CorpusQuery(req.case_id, req.text, req.limit, req.cursor))


@attrs.frozen(field_transformer=bounded)
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


@attrs.frozen(field_transformer=bounded)
class ReplaceEvaluationJudgmentsRequest:
    """Replace a case's whole judgment set (compare-and-set on its version)."""

    case_id: str = attrs.field(metadata={"schema": _CASE_ID})
    expected_judgment_version: int = attrs.field(
        metadata={"schema": {"minimum": 0, "description": "the version you edited (0: none yet)"}}
    )
    judgments: tuple[JudgmentInput, ...] = attrs.field(metadata={"schema": {"maxItems": MAX_JUDGMENTS}})


@operation(WRITE | UI, ReplaceEvaluationJudgmentsRequest, JudgmentSet,
           "Replace a case's whole judgment set if it is still at expected_judgment_version; returns the new "
           "version (a stale one: evaluation_judgment_conflict with details.current_version).",
           (InvalidJudgments, EvaluationCaseNotFound, EvaluationJudgmentConflict))  # fmt: skip
def replace_evaluation_judgments(engine: Engine, req: ReplaceEvaluationJudgmentsRequest) -> JudgmentSet:
    judgments = [j.to_judgment() for j in req.judgments]
    return engine.replace_evaluation_judgments(req.case_id, req.expected_judgment_version, judgments)


@attrs.frozen(field_transformer=bounded)
class MarkEvaluationReviewedRequest:
    """Record that a person reviewed (or, with ``reviewed: false``, un-reviewed) the current judgments."""

    case_id: str = attrs.field(metadata={"schema": _CASE_ID})
    expected_judgment_version: int = attrs.field(metadata={"schema": {"minimum": 0}})
    reviewed: bool = True


@operation(WRITE | UI, MarkEvaluationReviewedRequest, Case,
           "Record that a person reviewed the current judgment version (only reviewed cases may gate).",
           (EvaluationCaseNotFound, EvaluationJudgmentConflict))  # fmt: skip
def mark_evaluation_reviewed(engine: Engine, req: MarkEvaluationReviewedRequest) -> Case:
    return engine.evaluations().mark_reviewed(req.case_id, req.expected_judgment_version, req.reviewed)



@attrs.frozen(field_transformer=bounded)
class EvaluationReportRequest:
    """The B1-B4 report of every case, a project's, or the chosen ones."""

    project_id: str | None = None
    case_ids: tuple[str, ...] | None = None


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
        # The judged metrics, as the registry names them (evaluation/metric_registry.py).
        metadata={"schema": {"description": "case id -> level -> variant -> " + ", ".join(JUDGED_METRICS)}}
    )

    @classmethod
    def of(cls, report: Report) -> EvaluationReport:
        return cls(**attrs.asdict(report, recurse=False))  # the same fields

    def to_report(self) -> Report:
        """The engine's value."""
        return Report(**attrs.asdict(self, recurse=False))


@operation(READ | UI, EvaluationReportRequest, EvaluationReport,
           "The B1-B4 benchmark report (unit and resource level, B4 comparisons, latency, missed evidence).",
           (EvaluationCaseNotFound,), allow_get=True)  # fmt: skip
def evaluation_report(engine: Engine, req: EvaluationReportRequest) -> EvaluationReport:
    return EvaluationReport.of(engine.evaluation_report(req.project_id, req.case_ids))


@attrs.frozen(field_transformer=bounded)
class ExportEvaluationSetRequest:
    """The self-contained fixture of every case, a project's, or the chosen ones."""

    project_id: str | None = None
    case_ids: tuple[str, ...] | None = None
    with_history: bool = described("include earlier judgment versions", False)
    with_uris: bool = described(
        "keep each resource's file:/// URI (local paths); by default a resource's uri is its resource_id", False
    )


@attrs.frozen(field_transformer=bounded)
class EvaluationFixture:
    """An evaluation fixture document, passed whole: the wire value is the document itself.

    Its JSON Schema is ``contracts/evaluation-fixture.schema.json``."""

    document: Mapping[str, Any]

    def to_bytes(self) -> bytes:
        """The file ``memcore eval export`` writes: canonical JSON and a newline."""
        return dump(self.document)


@operation(READ, ExportEvaluationSetRequest, EvaluationFixture,
           "The self-contained evaluation fixture (a JSON object; written as canonical JSON it is the file "
           "`memcore eval export` writes).", (EvaluationCaseNotFound, *_BLOBS))  # fmt: skip
def export_evaluation_set(engine: Engine, req: ExportEvaluationSetRequest) -> EvaluationFixture:
    # The document, not its bytes: a client writes the same bytes with EvaluationFixture.to_bytes.
    document = engine.export_evaluation_document(
        project_id=req.project_id, case_ids=req.case_ids, with_history=req.with_history, with_uris=req.with_uris
    )
    return EvaluationFixture(document)


@attrs.frozen(field_transformer=bounded)
class ImportEvaluationSetRequest:
    """Import a fixture: every hash verified first; all or nothing."""

    fixture: EvaluationFixture


@operation(WRITE | UI | JOB, ImportEvaluationSetRequest, ImportResult,
           f"Import a fixture: every hash verified, all or nothing. Bodies up to {MAX_IMPORT_BODY_BYTES >> 20} "
           "MiB. Runs as a job, beside activations.",
           (InvalidFixture, FixtureHashMismatch, EvaluationImportConflict, err.JobInterrupted),
           max_body_bytes=MAX_IMPORT_BODY_BYTES)  # fmt: skip
def import_evaluation_set(engine: Engine, req: ImportEvaluationSetRequest) -> ImportResult:
    return engine.import_evaluation_set(req.fixture.document, reported())
