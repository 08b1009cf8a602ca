"""A typed Python client for the daemon over its Unix socket.

Every answer is decoded into the same attrs values the engine returns; an error envelope is
raised as the matching ``memory_core.domain.errors`` exception (``ProjectNotFound``, ``InvalidQuery``…).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from memory_core.domain.errors import MemoryCoreError
from memory_core.domain.model import Source
from memory_core.entrypoints.daemon import api, dispatch, paths
from memory_core.evaluation.cases import Case, Judgment, JudgmentSet, parse_judgments
from memory_core.evaluation.fixture import ImportResult, parse_document
from memory_core.retrieval.activation_state import ActivationState
from memory_core.runs.records import ClearReport, RunDetail, RunFilter, RunPage
from memory_core.services.engine import ActivationResponse, ProjectInfo
from memory_core.services.indexing import IndexReport
from memory_core.services.local_storage import ProjectRemoval, ProjectStorage

CONNECT_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 5.0


class DaemonClient:
    """One connection pool to one daemon. ``timeout`` bounds a whole call (``None``: no limit,
    as indexing a large project may take minutes)."""

    def __init__(
        self, socket_path: str | os.PathLike[str], *, timeout: float | None = None, http: Any | None = None
    ) -> None:
        import httpx

        self.socket_path = Path(socket_path)
        self._httpx = httpx
        # ``http``: an httpx.Client of the caller's (tests pass a Starlette TestClient on the app).
        self._http = http or httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.socket_path)),
            base_url="http://localhost",
            timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S),
        )
        self._converter = api.make_converter()

    @classmethod
    def for_home(cls, home: str | os.PathLike[str] | None = None, *, timeout: float | None = None) -> DaemonClient:
        """A client for the daemon serving ``home`` (resolved as the CLI does)."""
        from memory_core.adapters.system.home import resolve_home

        return cls(paths.socket_path_for(resolve_home(home)), timeout=timeout)

    @classmethod
    def running(
        cls, home: str | os.PathLike[str] | None = None, *, timeout: float | None = None
    ) -> DaemonClient | None:
        """A client when a daemon answers for ``home``, else ``None`` (use the engine directly)."""
        from memory_core.adapters.system.home import resolve_home

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
    def call(self, name: str, request: Any) -> Any:
        """Call ``name`` with its typed request; return its typed response."""
        method = dispatch.lookup(name)
        if not isinstance(request, method.request):
            raise TypeError(f"{name} takes {method.request.__name__}, not {type(request).__name__}")
        payload = json.dumps(api.unstructure(self._converter, request), allow_nan=False, separators=(",", ":")).encode()
        try:
            reply = self._http.post(f"/v1/{name}", content=payload, headers={"content-type": "application/json"})
        except self._httpx.TransportError as exc:
            raise api.DaemonUnavailable(
                f"no daemon answers on {str(self.socket_path)!r}: {exc}; start one with `memcore serve`",
                socket=str(self.socket_path),
            ) from exc
        try:
            body = reply.json()
        except ValueError as exc:
            raise MemoryCoreError(f"daemon answered {reply.status_code} with a body that is not JSON") from exc
        if reply.status_code != 200:
            raise _error_from(body, reply.status_code)
        try:
            return api.structure(self._converter, body, method.response)
        except MemoryCoreError as exc:
            raise MemoryCoreError(f"daemon response to {name} does not match {method.response.__name__}: "
                                  f"{exc.message}", **exc.details) from exc

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- typed methods (one per dispatch entry) ----------------------------------------------
    def runtime_status(self) -> api.RuntimeStatus:
        return self.call("runtime_status", api.RuntimeStatusRequest())  # type: ignore[no-any-return]

    def add_project(self, project_id: str, sources: Sequence[Source]) -> ProjectInfo:
        return self.call("add_project", api.AddProjectRequest(project_id, tuple(sources)))  # type: ignore[no-any-return]

    def list_projects(self) -> list[ProjectInfo]:
        return list(self.call("list_projects", api.ListProjectsRequest()).projects)

    def show_project(self, project_id: str) -> ProjectInfo:
        return self.call("show_project", api.ShowProjectRequest(project_id))  # type: ignore[no-any-return]

    def remove_project(self, project_id: str, *, purge: bool = False) -> ProjectRemoval:
        return self.call("remove_project", api.RemoveProjectRequest(project_id, purge))  # type: ignore[no-any-return]

    def show_project_storage(self, project_id: str) -> ProjectStorage:
        return self.call("show_project_storage", api.ShowProjectStorageRequest(project_id))  # type: ignore[no-any-return]

    def move_project_storage(self, project_id: str, destination: str | os.PathLike[str]) -> ProjectStorage:
        request = api.MoveProjectStorageRequest(project_id, os.fspath(destination))
        return self.call("move_project_storage", request)  # type: ignore[no-any-return]

    def clear_project_storage(self, project_id: str) -> ProjectStorage:
        return self.call("clear_project_storage", api.ClearProjectStorageRequest(project_id))  # type: ignore[no-any-return]

    def index_project(self, project_id: str, *, force: bool = False) -> IndexReport:
        return self.call("index_project", api.IndexProjectRequest(project_id, force))  # type: ignore[no-any-return]

    def activate_memory(
        self,
        project_id: str,
        query: str,
        *,
        budget: int | None = None,
        activation_state: ActivationState | None = None,
        wait_for_index_ms: int = 0,
    ) -> ActivationResponse:
        request = api.ActivateMemoryRequest(project_id, query, budget, activation_state, wait_for_index_ms)
        return self.call("activate_memory", request)  # type: ignore[no-any-return]

    def list_retrieval_runs(
        self, run_filter: RunFilter | None = None, *, limit: int = 50, cursor: str | None = None
    ) -> RunPage:
        f = run_filter or RunFilter()
        request = api.ListRetrievalRunsRequest(
            project_id=f.project_id, status=f.status, since=f.since, until=f.until, query=f.query_contains,
            limit=limit, cursor=cursor,
        )
        return self.call("list_retrieval_runs", request)  # type: ignore[no-any-return]

    def get_retrieval_run(self, run_id: str, *, manifest: bool = False) -> RunDetail:
        request = api.GetRetrievalRunRequest(run_id, manifest)
        return self.call("get_retrieval_run", request)  # type: ignore[no-any-return]

    def clear_retrieval_runs(self, project_id: str | None = None, *, all: bool = False) -> ClearReport:
        """Clear History of one project, or of every project with ``all=True``."""
        request = api.ClearRetrievalRunsRequest(project_id, all)
        return self.call("clear_retrieval_runs", request)  # type: ignore[no-any-return]

    # -- Evaluation Sets ---------------------------------------------------------------------
    def create_evaluation_case(self, run_id: str) -> Case:
        return self.call("create_evaluation_case", api.CreateEvaluationCaseRequest(run_id))  # type: ignore[no-any-return]

    def list_evaluation_cases(
        self, project_id: str | None = None, case_ids: Iterable[str] | None = None
    ) -> list[Case]:
        request = api.ListEvaluationCasesRequest(project_id, None if case_ids is None else tuple(case_ids))
        return list(self.call("list_evaluation_cases", request).cases)

    def get_evaluation_case(self, case_id: str) -> api.EvaluationCaseDetail:
        return self.call("get_evaluation_case", api.GetEvaluationCaseRequest(case_id))  # type: ignore[no-any-return]

    def search_corpus_resources(
        self, case_id: str, text: str | None = None, *, limit: int = 20, cursor: str | None = None
    ) -> api.CorpusResourcePage:
        request = api.SearchCorpusResourcesRequest(case_id, text, limit, cursor)
        return self.call("search_corpus_resources", request)  # type: ignore[no-any-return]

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

    def mark_evaluation_reviewed(self, case_id: str, expected_judgment_version: int, reviewed: bool = True) -> Case:
        request = api.MarkEvaluationReviewedRequest(case_id, expected_judgment_version, reviewed)
        return self.call("mark_evaluation_reviewed", request)  # type: ignore[no-any-return]

    def evaluation_report(
        self, project_id: str | None = None, case_ids: Iterable[str] | None = None
    ) -> api.EvaluationReport:
        request = api.EvaluationReportRequest(project_id, None if case_ids is None else tuple(case_ids))
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
        request = api.ExportEvaluationSetRequest(
            project_id, None if case_ids is None else tuple(case_ids), with_history, with_uris
        )
        return self.call("export_evaluation_set", request)  # type: ignore[no-any-return]

    def import_evaluation_set(self, fixture: bytes | str | Mapping[str, Any] | api.EvaluationFixture) -> ImportResult:
        """A fixture file's bytes (parsed here: malformed JSON is the engine's InvalidFixture) or
        its document. The daemon accepts up to ``api.MAX_IMPORT_BODY_BYTES``."""
        if isinstance(fixture, bytes | str):
            fixture = parse_document(fixture)
        document = fixture if isinstance(fixture, api.EvaluationFixture) else api.EvaluationFixture(dict(fixture))
        return self.call("import_evaluation_set", api.ImportEvaluationSetRequest(document))  # type: ignore[no-any-return]


def _error_from(body: Any, status: int) -> MemoryCoreError:
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return MemoryCoreError(f"daemon answered {status} without an error envelope", status=status)
    details = error.get("details")
    return api.exception_for(error["code"], str(error.get("message", "")), details if isinstance(details, dict) else {})
