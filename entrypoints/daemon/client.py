"""A typed Python client for the daemon over its Unix socket.

Every answer is decoded into the same attrs values the engine returns; an error envelope is
raised as the matching ``memory_core.domain.errors`` exception (``ProjectNotFound``, ``InvalidQuery``…).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from memory_core.domain.errors import MemoryCoreError
from memory_core.domain.model import Source
from memory_core.entrypoints.daemon import api, dispatch, paths
from memory_core.evaluation.cases import Case, Judgment, JudgmentSet, parse_judgments
from memory_core.evaluation.fixture import ImportResult, parse_document
from memory_core.evaluation.learning import LearnResult
from memory_core.evaluation.tuning import TuneResult
from memory_core.operations import Operation
from memory_core.runs.records import RunFilter, RunPage
from memory_core.services.engine import ProjectInfo
from memory_core.services.local_storage import ProjectStorage

CONNECT_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 5.0


P = ParamSpec("P")
Q = TypeVar("Q")
R = TypeVar("R")


class Remote(Generic[P, R]):
    """A daemon method as a client method: called with its request type's fields (positionally
    or by name), it sends the request and returns the decoded response. Typed from the request
    type's constructor, so mypy checks every call; the name is the attribute's."""

    def __init__(self, request: Callable[P, Any], response: type[R]) -> None:
        self.request = request
        self.response = response
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __call__(self, client: DaemonClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return client.call(self.name, self.request(*args, **kwargs))  # type: ignore[no-any-return]

    @overload
    def __get__(self, client: None, owner: type) -> Remote[P, R]: ...

    @overload
    def __get__(self, client: DaemonClient, owner: type) -> Callable[P, R]: ...

    def __get__(self, client: DaemonClient | None, owner: type) -> Any:
        if client is None:
            return self

        def bound(*args: P.args, **kwargs: P.kwargs) -> R:
            return self(client, *args, **kwargs)

        bound.__name__ = bound.__qualname__ = self.name
        return bound


class DaemonClient:
    """One connection pool to one daemon. ``timeout`` bounds a whole call (``None``: no limit,
    as indexing a large project may take minutes)."""

    def __init__(
        self, socket_path: str | os.PathLike[str], *, timeout: float | None = None, http: Any | None = None
    ) -> None:
        import httpx

        from memory_core.entrypoints.daemon.transport import UnixSocketHTTP

        self.socket_path = Path(socket_path)
        self._httpx = httpx
        # ``http``: an httpx.Client of the caller's (tests pass a Starlette TestClient on the app);
        # by default the standard library's HTTP on the socket, at a third of httpx's CPU per call.
        self._http = http or UnixSocketHTTP(self.socket_path, timeout=timeout, connect_timeout=CONNECT_TIMEOUT_S)
        self._converter = api.make_converter()

    @classmethod
    def for_home(cls, home: str | os.PathLike[str] | None = None, *, timeout: float | None = None) -> DaemonClient:
        """A client for the daemon serving ``home`` (resolved as the CLI does)."""
        from memory_core.entrypoints.bootstrap import resolve_home

        return cls(paths.socket_path_for(resolve_home(home)), timeout=timeout)

    @classmethod
    def running(
        cls, home: str | os.PathLike[str] | None = None, *, timeout: float | None = None
    ) -> DaemonClient | None:
        """A client when a daemon answers for ``home``, else ``None`` (use the engine directly)."""
        from memory_core.entrypoints.bootstrap import resolve_home

        # Checked before building a client: an embedded CLI call should not pay for httpx.
        if not paths.socket_path_for(resolve_home(home)).exists():
            return None
        # A bounded probe: a daemon that does not answer runtime_status (it answers even while
        # indexing) must not hang the caller, who then works embedded.
        with cls.for_home(home, timeout=PROBE_TIMEOUT_S) as probe:
            try:
                probe.runtime_status()
            except api.DaemonUnavailable:
                return None
        return cls.for_home(home, timeout=timeout)

    # -- transport ---------------------------------------------------------------------------
    @overload
    def call(self, name: Operation[Q, R], request: Q) -> R: ...

    @overload
    def call(self, name: str, request: Any) -> Any: ...

    def call(self, name: str | Operation[Any, Any], request: Any) -> Any:
        """Call operation ``name`` (or its name) with its typed request; return its typed response.
        So a client is an executor (``memory_core.operations.executor``): the CLI's calls run here."""
        method = dispatch.lookup(name if isinstance(name, str) else name.name)
        if not isinstance(request, method.request):
            raise TypeError(f"{method.name} takes {method.request.__name__}, not {type(request).__name__}")
        body = self.call_json(method.name, api.unstructure(self._converter, request))
        try:
            return api.structure(self._converter, body, method.response)
        except MemoryCoreError as exc:
            raise MemoryCoreError(f"daemon response to {method.name} does not match {method.response.__name__}: "
                                  f"{exc.message}", **exc.details) from exc

    def call_json(self, name: str, body: Mapping[str, Any]) -> Any:
        """Call ``name`` with a JSON body as it is (the daemon decodes and checks it); return its
        JSON answer as it is (what MCP forwards), or raise its error typed."""
        payload = json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
        try:
            reply = self._http.post(f"/v1/{name}", content=payload, headers={"content-type": "application/json"})
        except self._httpx.TransportError as exc:
            raise api.DaemonUnavailable(
                f"no daemon answers on {str(self.socket_path)!r}: {exc}; start one with `memcore serve`",
                socket=str(self.socket_path),
            ) from exc
        try:
            answer = reply.json()
        except ValueError as exc:
            raise MemoryCoreError(f"daemon answered {reply.status_code} with a body that is not JSON") from exc
        if reply.status_code != 200:
            raise _error_from(answer, reply.status_code)
        return answer

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the operations as methods --------------------------------------------------------------
    # Every operation of the table is a method of its name, called with its request type's fields
    # (a ``Remote``, made below the class by ``_of_the_table``): nothing here to add for a new one.
    # ``call(op, request)`` is the typed form. What follows are the calls where the client adapts
    # its arguments or the answer (an iterable of ids, a filter, a judgment file, fixture bytes).
    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Callable[..., Any]: ...

    def list_tunings(self, project_id: str) -> list[TuneResult]:
        return list(self.call("list_tunings", api.ListTuningsRequest(project_id)).tunings)

    def list_learnings(self, project_id: str) -> list[LearnResult]:
        return list(self.call("list_learnings", api.ListLearningsRequest(project_id)).learnings)

    def add_project(self, project_id: str, sources: Sequence[Source]) -> ProjectInfo:
        return self.call("add_project", api.AddProjectRequest(project_id, tuple(sources)))  # type: ignore[no-any-return]

    def list_projects(self) -> list[ProjectInfo]:
        return list(self.call("list_projects", api.ListProjectsRequest()).projects)

    def move_project_storage(self, project_id: str, destination: str | os.PathLike[str]) -> ProjectStorage:
        request = api.MoveProjectStorageRequest(project_id, os.fspath(destination))
        return self.call("move_project_storage", request)  # type: ignore[no-any-return]

    def list_retrieval_runs(
        self, run_filter: RunFilter | None = None, *, limit: int = 50, cursor: str | None = None
    ) -> RunPage:
        f = run_filter or RunFilter()
        request = api.ListRetrievalRunsRequest(
            project_id=f.project_id, status=f.status, since=f.since, until=f.until, query=f.query_contains,
            limit=limit, cursor=cursor,
        )
        return self.call("list_retrieval_runs", request)  # type: ignore[no-any-return]

    # -- Evaluation Sets ---------------------------------------------------------------------
    def list_evaluation_cases(
        self, project_id: str | None = None, case_ids: Iterable[str] | None = None
    ) -> list[Case]:
        request = api.ListEvaluationCasesRequest(project_id, _ids(case_ids))
        return list(self.call("list_evaluation_cases", request).cases)

    def replace_evaluation_judgments(
        self, case_id: str, expected_judgment_version: int, judgments: object
    ) -> JudgmentSet:
        """``judgments``: ``Judgment`` values, or a judgment file (``{"judgments": [...]}`` or its
        list), checked here as the engine checks it (``InvalidJudgments`` before any call)."""
        parsed: Sequence[Judgment] = parse_judgments(judgments)
        request = api.ReplaceEvaluationJudgmentsRequest(
            case_id, expected_judgment_version, tuple(api.JudgmentInput.of(j) for j in parsed)
        )
        return self.call("replace_evaluation_judgments", request)  # type: ignore[no-any-return]

    def evaluation_report(
        self, project_id: str | None = None, case_ids: Iterable[str] | None = None
    ) -> api.EvaluationReport:
        request = api.EvaluationReportRequest(project_id, _ids(case_ids))
        return self.call("evaluation_report", request)  # type: ignore[no-any-return]

    def export_evaluation_set(
        self,
        project_id: str | None = None,
        *,
        case_ids: Iterable[str] | None = None,
        with_history: bool = False,
        with_uris: bool = False,
    ) -> api.EvaluationFixture:
        """The fixture document; ``.to_bytes()`` is the file an embedded export writes."""
        request = api.ExportEvaluationSetRequest(project_id, _ids(case_ids), with_history, with_uris)
        return self.call("export_evaluation_set", request)  # type: ignore[no-any-return]

    def import_evaluation_set(self, fixture: bytes | str | Mapping[str, Any] | api.EvaluationFixture) -> ImportResult:
        """A fixture file's bytes (parsed here: malformed JSON is the engine's InvalidFixture) or
        its document. The daemon accepts up to ``api.MAX_IMPORT_BODY_BYTES``."""
        if isinstance(fixture, bytes | str):
            fixture = parse_document(fixture)
        document = fixture if isinstance(fixture, api.EvaluationFixture) else api.EvaluationFixture(dict(fixture))
        return self.call("import_evaluation_set", api.ImportEvaluationSetRequest(document))  # type: ignore[no-any-return]


def _ids(case_ids: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if case_ids is None else tuple(case_ids)


def _of_the_table(cls: type[DaemonClient]) -> None:
    """Every method of the dispatch table, the one list of operations, as a ``Remote`` of its
    types, unless the class spells it out (a ``Remote`` it declares must agree with the table)."""
    for name, member in vars(cls).items():
        if isinstance(member, Remote):
            method = dispatch.lookup(name)
            if (member.request, member.response) != (method.request, method.response):
                raise TypeError(f"DaemonClient.{name} disagrees with the dispatch table's {name}")
    for method in dispatch.METHODS:
        if method.name not in vars(cls):
            remote: Remote[..., Any] = Remote(method.request, method.response)
            remote.__set_name__(cls, method.name)
            setattr(cls, method.name, remote)


_of_the_table(DaemonClient)


def _error_from(body: Any, status: int) -> MemoryCoreError:
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return MemoryCoreError(f"daemon answered {status} without an error envelope", status=status)
    details = error.get("details")
    return api.exception_for(error["code"], str(error.get("message", "")), details if isinstance(details, dict) else {})
