"""The daemon's wire contract: typed requests and responses, stable error codes with one HTTP
status each, and the private cattrs converter that reads and writes them.

Responses reuse the engine's own attrs values (``ProjectInfo``, ``IndexReport``,
``ActivationResponse``), so a client decodes exactly what an embedded caller gets. The converter
is strict: wrong JSON types are rejected, never coerced (cattrs would turn ``5`` into ``"5"``),
and unknown fields are errors.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory, mapping_structure_factory
from cattrs.gen import make_dict_structure_fn

from memory_core.activation_state import ActivationState
from memory_core.engine import ActivationResponse, Fragment, ProjectInfo
from memory_core.errors import InvalidRequest, MemoryCoreError
from memory_core.indexing import IndexReport
from memory_core.model import PROJECT_ID_RE, Generation, IndexRevisions, Layer, Project, Source
from memory_core.profile import MAX_BUDGET, MAX_QUERY_CHARS, MIN_BUDGET
from memory_core.recording import (
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

API_VERSION = "1.0.0"
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


class InvalidJson(InvalidRequest):
    """The body is not valid UTF-8 JSON (NaN and Infinity are not JSON)."""

    code = "invalid_json"


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
    # Evaluation Sets (memory_core.evaluation_errors), ahead of their methods in the table.
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


@attrs.frozen
class ClearRetrievalRunsRequest:
    """Clear History: exactly one of ``project_id`` or ``all: true``."""

    project_id: str | None = attrs.field(
        default=None, metadata={"schema": {"description": "clear this project's unpinned Runs"}}
    )
    all: bool = attrs.field(
        default=False, metadata={"schema": {"description": "clear every project's unpinned Runs"}}
    )


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


@attrs.frozen
class ProjectList:
    projects: tuple[ProjectInfo, ...]


@attrs.frozen
class ProjectRemoved:
    project_id: str


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
    return conv


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
    "STATUS_BY_CODE",
    "ActivationResponse",
    "CandidateRecord",
    "ClearReport",
    "ErrorEnvelope",
    "Fragment",
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
