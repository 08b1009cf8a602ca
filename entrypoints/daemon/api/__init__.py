"""The daemon's wire contract: typed requests and responses, stable error codes with one HTTP
status each, and the private cattrs converter that reads and writes them.

Responses reuse the engine's own attrs values (``ProjectInfo``, ``IndexReport``,
``ActivationResponse``), so a client decodes exactly what an embedded caller gets. The converter
is strict: wrong JSON types are rejected, never coerced (cattrs would turn ``5`` into ``"5"``),
and unknown fields are errors.

One import name, ``api``, for the whole contract; its parts are modules of their own:
the request and response types of each operation, declared in the core beside it
(``memory_core.operations``) and re-exported here, ``responses`` (the daemon's own answers),
``shapes`` (schema keywords and wire forms beyond plain attrs records, shared by the converter
and the OpenAPI builder) and ``converter``. This module holds the version, the limits, the
transport's errors and the status of every code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs

from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.domain.model import Generation, IndexRevisions, Layer, Project
from memory_core.entrypoints.bootstrap import HealthError, ProjectHealth, ReindexRecord
from memory_core.entrypoints.wire_input import InvalidJson
from memory_core.runs.records import CandidateRecord, ClearReport, RunDetail, RunPage, RunSummary
from memory_core.services.activation import ActivationResponse, Fragment
from memory_core.services.engine import ProjectInfo
from memory_core.services.indexing import IndexReport

API_VERSION = "1.11.0"  # 1.1: Evaluation Set methods; 1.2: Project Local Storage, remove_project purge;
# 1.3: ranking profiles and tuning, candidate spans and passages (issue 18); 1.4: an activation's
# notices (issue 30); 1.5: list_jobs and cancel_job (issue 31); 1.6: the model registry (issue 33);
# 1.7: a learning's settings grid and the setting each fold and the final model chose (issue 32);
# 1.8: daemon_busy, an import refused while the daemon holds as many bodies as it takes (issue 31);
# 1.9: a job's state queued, while it waits for one of the daemon's job slots (issue 31); 1.10: a
# learning's text_units, the window units learned from that had their text (issue 32); 1.11:
# learn_project's group_by, a separator its folds group cases by (issue 32)
MAX_BODY_BYTES = 1 << 20  # 1 MiB: a 10,000-unit activation state is about 0.9 MiB


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


class DaemonBusy(MemoryCoreError):
    """The daemon holds as many job bodies (imports) as it takes at once, or as many bytes of
    them: this one was refused before it was read, and nothing of it was kept; try again once
    one has ended (``list_jobs``). ``details``: ``operation``, ``reason`` (``bodies`` or
    ``bytes``), ``held_bodies``, ``held_bytes``, ``max_bodies``, ``max_bytes``."""

    code = "daemon_busy"


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
    "job_interrupted": 503,
    "daemon_busy": 503,
    "job_not_found": 404,
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
    "tuning_not_found": 404,
    "learning_not_found": 404,
    "learned_model_refused": 422,
    # The model registry (memory_core.domain.model_registry_errors, issue 33).
    "model_not_found": 404,
    "model_exists": 409,
    "model_in_use": 409,
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


# The parts, under the one name (imported last: they use nothing of the above but their own).
from memory_core.entrypoints.daemon.api.converter import (  # noqa: E402
    decode_body,
    make_converter,
    structure,
    structure_body,
    unstructure,
)
from memory_core.entrypoints.daemon.api.responses import RuntimeStatus, RuntimeStatusRequest  # noqa: E402
from memory_core.entrypoints.daemon.api.shapes import COMPUTED, DOCUMENT_SCHEMAS, SCHEMA_EXTRA  # noqa: E402
from memory_core.operations.evaluation import (  # noqa: E402
    MAX_IMPORT_BODY_BYTES,
    CaseMetricsWire,
    CreateEvaluationCaseRequest,
    EvaluationCaseDetail,
    EvaluationCaseList,
    EvaluationFixture,
    EvaluationReport,
    EvaluationReportRequest,
    ExportEvaluationSetRequest,
    GetEvaluationCaseRequest,
    ImportEvaluationSetRequest,
    JudgmentInput,
    ListEvaluationCasesRequest,
    MarkEvaluationReviewedRequest,
    MissedEvidenceSummary,
    ReplaceEvaluationJudgmentsRequest,
    SearchCorpusResourcesRequest,
)
from memory_core.operations.jobs import CancelJobRequest, JobList, ListJobsRequest  # noqa: E402
from memory_core.operations.profiles import (  # noqa: E402
    LearningList,
    LearnProjectRequest,
    ListLearningsRequest,
    ListTuningsRequest,
    RestoreProjectProfileRequest,
    SetProfileFromLearningRequest,
    SetProjectProfileRequest,
    ShowProjectProfileRequest,
    TuneProjectRequest,
    TuningList,
)
from memory_core.operations.projects import (  # noqa: E402
    AddProjectRequest,
    ClearProjectStorageRequest,
    IndexProjectRequest,
    ListProjectsRequest,
    MoveProjectStorageRequest,
    ProjectList,
    RemoveProjectRequest,
    ShowProjectRequest,
    ShowProjectStorageRequest,
)
from memory_core.operations.runs import (  # noqa: E402
    MAX_WAIT_FOR_INDEX_MS,
    RUN_STATUSES,
    ActivateMemoryRequest,
    ClearRetrievalRunsRequest,
    GetRetrievalRunRequest,
    ListRetrievalRunsRequest,
)
from memory_core.services.corpus_search import (  # noqa: E402
    MATCH_KINDS,
    MAX_CORPUS_PAGE,
    MAX_SEARCH_CHARS,
    CorpusResourceMatch,
    CorpusResourcePage,
)

__all__ = [
    "API_VERSION",
    "COMPUTED",
    "DOCUMENT_SCHEMAS",
    "MATCH_KINDS",
    "MAX_BODY_BYTES",
    "MAX_CORPUS_PAGE",
    "MAX_IMPORT_BODY_BYTES",
    "MAX_SEARCH_CHARS",
    "MAX_WAIT_FOR_INDEX_MS",
    "RUN_STATUSES",
    "SCHEMA_EXTRA",
    "STATUS_BY_CODE",
    "ActivateMemoryRequest",
    "ActivationResponse",
    "AddProjectRequest",
    "CancelJobRequest",
    "JobList",
    "ListJobsRequest",
    "CandidateRecord",
    "CaseMetricsWire",
    "ClearProjectStorageRequest",
    "ClearReport",
    "ClearRetrievalRunsRequest",
    "CorpusResourceMatch",
    "CorpusResourcePage",
    "CreateEvaluationCaseRequest",
    "DaemonAlreadyRunning",
    "DaemonUnavailable",
    "ErrorBody",
    "ErrorEnvelope",
    "EvaluationCaseDetail",
    "EvaluationCaseList",
    "EvaluationFixture",
    "EvaluationReport",
    "EvaluationReportRequest",
    "ExportEvaluationSetRequest",
    "Fragment",
    "Generation",
    "GetEvaluationCaseRequest",
    "GetRetrievalRunRequest",
    "HealthError",
    "ImportEvaluationSetRequest",
    "IndexProjectRequest",
    "IndexReport",
    "IndexRevisions",
    "InvalidJson",
    "JudgmentInput",
    "Layer",
    "ListEvaluationCasesRequest",
    "ListProjectsRequest",
    "ListRetrievalRunsRequest",
    "LearnProjectRequest",
    "LearningList",
    "ListLearningsRequest",
    "ListTuningsRequest",
    "MarkEvaluationReviewedRequest",
    "MethodNotAllowed",
    "MissedEvidenceSummary",
    "MoveProjectStorageRequest",
    "NotFound",
    "Project",
    "ProjectHealth",
    "ProjectInfo",
    "ProjectList",
    "ReindexRecord",
    "RemoveProjectRequest",
    "ReplaceEvaluationJudgmentsRequest",
    "RequestTooLarge",
    "RestoreProjectProfileRequest",
    "RunDetail",
    "RunPage",
    "RunSummary",
    "RuntimeStatus",
    "RuntimeStatusRequest",
    "SearchCorpusResourcesRequest",
    "SetProfileFromLearningRequest",
    "SetProjectProfileRequest",
    "ShowProjectProfileRequest",
    "ShowProjectRequest",
    "ShowProjectStorageRequest",
    "TuneProjectRequest",
    "TuningList",
    "UnknownMethod",
    "decode_body",
    "error_classes",
    "exception_for",
    "make_converter",
    "status_for",
    "structure",
    "structure_body",
    "unstructure",
]
