"""The table of operations (``memory_core/operations``, served by ``daemon/dispatch.py``): what is
derived from it, the request types' bounds enforced where they are declared, and one interface
over an executor, in process or through the daemon."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from memory_core.domain.errors import InvalidRequest, ProjectNotFound
from memory_core.entrypoints.daemon import api, dispatch
from memory_core.entrypoints.daemon.client import DaemonClient
from memory_core.entrypoints.mcp.tools import tool_definitions
from memory_core.entrypoints.ui.app import UI_METHODS
from memory_core.operations import OPERATIONS, READ, Operation, names, projects, registry
from memory_core.operations.executor import InProcess, Operations
from memory_core.services.engine import Engine, ProjectInfo

BOUNDS = ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems")


def request_types() -> list[type]:
    found = [m.request for m in dispatch.METHODS] + [api.JudgmentInput]
    return list(dict.fromkeys(found))


def out_of_bounds(schema: dict[str, Any]) -> list[Any]:
    """A value just past each bound the schema declares."""
    values: list[Any] = []
    if "minimum" in schema:
        values.append(schema["minimum"] - 1)
    if "maximum" in schema:
        values.append(schema["maximum"] + 1)
    if "minLength" in schema:
        values.append("x" * (schema["minLength"] - 1))
    if "maxLength" in schema:
        values.append("x" * (schema["maxLength"] + 1))
    if "minItems" in schema:
        values.append(())
    if "maxItems" in schema:
        values.append((None,) * (schema["maxItems"] + 1))
    return values


BOUNDED = [(cls, field) for cls in request_types() for field in attrs.fields(cls)
           if set(BOUNDS) & set(field.metadata.get("schema", {}))]  # fmt: skip


def test_the_requests_declare_bounds() -> None:
    names = {f"{cls.__name__}.{field.name}" for cls, field in BOUNDED}
    assert {"ActivateMemoryRequest.query", "ActivateMemoryRequest.budget", "ActivateMemoryRequest.wait_for_index_ms",
            "ListRetrievalRunsRequest.limit", "TuneProjectRequest.folds"} <= names  # fmt: skip


@pytest.mark.parametrize(("cls", "field"), BOUNDED, ids=lambda x: getattr(x, "__name__", getattr(x, "name", "")))
def test_every_declared_bound_is_enforced_by_the_request_type(cls: type, field: attrs.Attribute[Any]) -> None:
    """Whoever builds the request (the daemon decoding a body, the client) meets the bound: no
    bound lives only in the OpenAPI document."""
    assert field.validator is not None, f"{cls.__name__}.{field.name} declares a bound nothing enforces"
    for bad in out_of_bounds(field.metadata["schema"]):
        with pytest.raises(InvalidRequest):
            field.validator(None, field, bad)


def test_an_out_of_range_wait_is_refused_by_the_request_with_the_daemons_words() -> None:
    with pytest.raises(InvalidRequest, match="wait_for_index_ms must be an integer from 0 to 60000") as caught:
        api.ActivateMemoryRequest("p", "q", wait_for_index_ms=60_001)
    assert caught.value.details == {"wait_for_index_ms": 60_001}
    with pytest.raises(InvalidRequest, match="exactly one of project_id or all"):
        api.ClearRetrievalRunsRequest()
    with pytest.raises(InvalidRequest, match="must be absolute"):
        api.MoveProjectStorageRequest("p", "relative/dir")


def test_the_allow_lists_are_the_tables() -> None:
    assert dispatch.names(dispatch.UI) == UI_METHODS
    assert set(tool_definitions()) == dispatch.MCP_METHODS
    jobs = dispatch.names(dispatch.JOB)
    assert {"tune_project", "import_evaluation_set", "move_project_storage", "index_project"} <= jobs
    assert not dispatch.names(dispatch.WRITE) & {"list_projects", "get_retrieval_run", "runtime_status"}


def test_the_jobs_a_child_runs_are_the_tables_jobs() -> None:
    """A ``JOB`` runs beside activations: in a child process (``jobs.OPERATIONS``), except an
    index, which runs on the watcher's worker."""
    from memory_core.entrypoints.daemon import jobs

    assert dispatch.names(dispatch.JOB) - {"index_project"} == jobs.OPERATIONS
    for name in jobs.OPERATIONS:
        assert dispatch.TABLE[name].uses_engine is False, f"{name} must not hold the engine lock while it runs"


# -- one table in the core, one interface over an executor ----------------------------------------
def test_the_daemons_methods_are_the_cores_operations_and_its_own_runtime_status() -> None:
    assert [m.name for m in dispatch.METHODS] == ["runtime_status", *(o.name for o in OPERATIONS)]
    for method, op in zip(dispatch.METHODS[1:], OPERATIONS, strict=True):
        assert method.op is op and method.request is op.request and method.response is op.response
    assert names(READ) | {"runtime_status"} == dispatch.names(dispatch.READ)


def test_every_method_is_a_client_method() -> None:
    for name in dispatch.TABLE:
        assert callable(getattr(DaemonClient, name)), name


def test_an_operation_answers_alike_in_process_and_through_the_daemon(http: Any, context: Any) -> None:
    from .test_api import indexed

    indexed(http)
    here = Operations(InProcess(context.engine))
    there = Operations(DaemonClient("/nonexistent/memcore.sock", http=http))
    for name, args in (("list_projects", ()), ("show_project", ("ledger",)), ("show_project_storage", ("ledger",)),
                       ("show_project_profile", ("ledger",)), ("list_tunings", ("ledger",))):  # fmt: skip
        assert getattr(here, name)(*args) == getattr(there, name)(*args), name
    assert here.call(projects.show_project, projects.ShowProjectRequest("ledger")).project.project_id == "ledger"
    for ops in (here, there):  # the same typed error either way
        with pytest.raises(ProjectNotFound):
            ops.show_project("nope")
        with pytest.raises(InvalidRequest, match="must be absolute"):  # the request refuses it, before any call
            ops.move_project_storage("ledger", "relative/dir")


def test_a_registered_operation_is_callable_at_once(context: Any) -> None:
    """Adding an operation is its declaration: the interface over an executor finds it by name."""

    def echo_project(engine: Engine, req: projects.ShowProjectRequest) -> ProjectInfo:
        return engine.show_project(req.project_id)

    op = registry.register(Operation("echo_project", READ, projects.ShowProjectRequest, ProjectInfo, echo_project,
                                     "A throwaway operation."))  # fmt: skip
    try:
        assert "echo_project" in names(READ)
        with pytest.raises(ProjectNotFound):
            Operations(InProcess(context.engine)).echo_project("nope")
        with pytest.raises(ValueError, match="declared twice"):
            registry.register(op)
    finally:
        OPERATIONS.remove(op)
    assert not hasattr(Operations(InProcess(context.engine)), "echo_project")
