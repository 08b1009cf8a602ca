"""The daemon's HTTP API in process (real app, real dispatch, in-memory engine): every method,
the error envelope for every kind of bad input, and the daemon still serving afterwards."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import attrs
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from memory_core.adapters.in_memory.storage import InMemoryCatalog, InMemoryScanner
from memory_core.adapters.in_memory.vectors import HashingEmbedder
from memory_core.domain.errors import MemoryCoreError, RetrievalFailed
from memory_core.entrypoints.bootstrap import bootstrap_in_memory
from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.daemon.app import create_app
from memory_core.entrypoints.daemon.dispatch import TABLE, Context
from memory_core.evaluation.learning import LearnerSetting

from .conftest import ORG, PROJ, Contract, docs

SOURCES = [{"path": ORG, "layer": "organization"}, {"path": PROJ}]


def post(http: TestClient, method: str, body: Any) -> httpx.Response:
    return http.post(f"/v1/{method}", json=body)


def ok(http: TestClient, method: str, body: Any) -> Any:
    reply = post(http, method, body)
    assert reply.status_code == 200, reply.text
    return reply.json()


def assert_error(reply: httpx.Response, code: str, status: int) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code, body
    assert api.STATUS_BY_CODE[code] == status
    return body["error"]  # type: ignore[no-any-return]


def assert_by_contract(contract: Contract, method: str, reply: httpx.Response) -> None:
    """A 200 answer matches the method's response schema; any other is a 4xx error envelope whose
    code maps to that status."""
    if reply.status_code == 200:
        contract.validate(contract.response_component(method), reply.json())
    else:
        error = reply.json()["error"]
        assert 400 <= reply.status_code < 500, error
        assert api.STATUS_BY_CODE[error["code"]] == reply.status_code


def indexed(http: TestClient, project_id: str = "ledger") -> None:
    ok(http, "add_project", {"project_id": project_id, "sources": SOURCES})
    ok(http, "index_project", {"project_id": project_id})


# One success case per method; a new dispatch entry must add one (test below).
SUCCESS: dict[str, tuple[bool, dict[str, Any]]] = {  # method -> (needs an indexed project, body)
    "runtime_status": (False, {}),
    "add_project": (False, {"project_id": "ledger", "sources": SOURCES}),
    "list_projects": (True, {}),
    "show_project": (True, {"project_id": "ledger"}),
    "remove_project": (True, {"project_id": "ledger"}),
    "show_project_storage": (True, {"project_id": "ledger"}),
    "move_project_storage": (True, {"project_id": "ledger", "destination": "/elsewhere/ledger"}),
    "clear_project_storage": (True, {"project_id": "ledger"}),
    "index_project": (True, {"project_id": "ledger", "force": True}),
    "activate_memory": (True, {"project_id": "ledger", "query": "how do I roll back a deploy?", "budget": 200}),
    "list_retrieval_runs": (True, {"project_id": "ledger", "status": "succeeded", "limit": 10}),
    "get_retrieval_run": (True, {"run_id": "<run_id>"}),  # filled in with a real Run's id
    "clear_retrieval_runs": (True, {"project_id": "ledger"}),
    # Evaluation Sets; "<case_id>" is filled in with a case made from a real Run.
    "create_evaluation_case": (True, {"run_id": "<run_id>"}),
    "list_evaluation_cases": (True, {"project_id": "ledger"}),
    "get_evaluation_case": (True, {"case_id": "<case_id>"}),
    "search_corpus_resources": (True, {"case_id": "<case_id>", "text": "rollback", "limit": 5}),
    "replace_evaluation_judgments": (True, {"case_id": "<case_id>", "expected_judgment_version": 0,
                                            "judgments": [{"resource_id": "notes.txt", "relevance": 1}]}),
    "mark_evaluation_reviewed": (True, {"case_id": "<case_id>", "expected_judgment_version": 0}),
    "evaluation_report": (True, {"project_id": "ledger"}),
    "export_evaluation_set": (True, {"project_id": "ledger", "with_history": True}),
    "import_evaluation_set": (True, {"fixture": {"<fixture>": True}}),  # filled in with this home's export
    # Ranking profiles and tuning (issue 18); "<with_case>": a case exists first (it has no judgment).
    "show_project_profile": (True, {"project_id": "ledger"}),
    "set_project_profile": (True, {"project_id": "ledger", "settings": {"rrf_k": 30, "alpha": 0.5}}),
    "restore_project_profile": (True, {"project_id": "ledger", "version": 0}),
    "tune_project": (True, {"project_id": "ledger", "include_unreviewed": True, "folds": 2, "<with_case>": True}),
    "list_tunings": (True, {"project_id": "ledger"}),
    "learn_project": (True, {"project_id": "ledger", "include_unreviewed": True, "folds": 2, "<with_case>": True}),
    "list_learnings": (True, {"project_id": "ledger"}),
    # "<learn_id>": a learning of judged cases, stored as proposed (six cases are too few for a real gain).
    "set_profile_from_learning": (True, {"project_id": "ledger", "learn_id": "<learn_id>"}),
    # Jobs (issue 31); "<job_id>": a tuning's, run first (an ended job answers cancel_job as it ended).
    "list_jobs": (False, {}),
    "cancel_job": (True, {"job_id": "<job_id>"}),
    # The model registry (issue 33); "<model_dir>": a directory the in-memory loader knows, "<added>": a
    # model registered from it first.
    "add_model": (False, {"name": "small", "path": "<model_dir>", "overrides": {"query_prefix": "query: "}}),
    "list_models": (False, {}),
    "show_model": (False, {"name": "minilm"}),
    "remove_model": (False, {"name": "<added>"}),
    "show_project_models": (True, {"project_id": "ledger"}),
    "set_project_models": (True, {"project_id": "ledger", "embedding": "minilm", "reranker": "none"}),
}
RUN_QUERY = {"project_id": "ledger", "query": "how do I roll back a deploy?"}


def with_run_id(http: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    """The body with its placeholders filled in: a real Run, a case made from one, a fixture."""
    if body.get("run_id") == "<run_id>":
        body = {**body, "run_id": ok(http, "activate_memory", RUN_QUERY)["run_id"]}
    if body.get("case_id") == "<case_id>":
        run_id = ok(http, "activate_memory", RUN_QUERY)["run_id"]
        body = {**body, "case_id": ok(http, "create_evaluation_case", {"run_id": run_id})["case_id"]}
    if body.get("<with_case>"):
        with_run_id(http, {"case_id": "<case_id>"})
        body = without_placeholders(body)
    if body.get("job_id") == "<job_id>":
        ok(http, "tune_project", with_run_id(http, SUCCESS["tune_project"][1]))
        body = {**body, "job_id": ok(http, "list_jobs", {})["jobs"][0]["job_id"]}
    if body.get("fixture") == {"<fixture>": True}:
        with_case = with_run_id(http, {"case_id": "<case_id>"})
        assert with_case["case_id"]
        body = {**body, "fixture": ok(http, "export_evaluation_set", {})}
    return body


def without_placeholders(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if not k.startswith("<")}


def known_model(context: Context) -> str:
    """A model directory the engine's in-memory loader reads (what ``model add`` is given)."""
    from tests.core.test_project_models import spec

    context.engine.models.loader.put(spec("/models/small"))
    return "/models/small"


def proposed_learning(http: TestClient, context: Context) -> str:
    """The id of a learning of 'ledger' on six judged cases, stored again as proposed."""
    for query in ("how do I roll back a deploy?", "advisory locks", "coffee", "printer", "helm upgrade", "outbox"):
        answer = ok(http, "activate_memory", {"project_id": "ledger", "query": query})
        case = ok(http, "create_evaluation_case", {"run_id": answer["run_id"]})
        judgment = {"resource_id": answer["fragments"][0]["resource_id"], "relevance": 2}
        ok(http, "replace_evaluation_judgments", {"case_id": case["case_id"], "expected_judgment_version": 0,
                                                   "judgments": [judgment]})  # fmt: skip
    # The grid narrowed to the shipped learner: on six cases the whole grid keeps the fusion, no model.
    learned = context.engine.learn_project("ledger", folds=2, include_unreviewed=True, settings=(LearnerSetting(),))
    proposed = attrs.evolve(learned, learn_id="01LEARNEDPROPOSAL00000000X", proposed=True)
    context.engine.profile_store.put_learning(proposed, None)  # its model is stored already
    return proposed.learn_id


def test_every_method_has_a_success_case() -> None:
    assert set(SUCCESS) == set(TABLE)


@pytest.mark.parametrize("method", sorted(SUCCESS))
def test_method_answers_a_response_that_matches_the_contract(
    method: str, http: TestClient, context: Context, contract: Contract
) -> None:
    needs_index, body = SUCCESS[method]
    if needs_index:
        indexed(http)
        ok(http, "activate_memory", RUN_QUERY)  # a Run to list, show and clear
    body = with_run_id(http, body)
    if body.get("learn_id") == "<learn_id>":
        body = {**body, "learn_id": proposed_learning(http, context)}
    if "<model_dir>" in (body.get("path"), body.get("name")):
        body = {**body, "path": known_model(context)}
    if body.get("name") == "<added>":
        body = {"name": ok(http, "add_model", {"name": "small", "path": known_model(context)})["name"]}
    contract.validate(contract.request_component(method), body)
    answer = ok(http, method, body)
    contract.validate(contract.response_component(method), answer)
    # The client's decoder reads it back into the method's response type.
    decoded = api.structure(api.make_converter(), answer, TABLE[method].response)
    assert isinstance(decoded, TABLE[method].response)


def test_responses_decode_to_what_the_engine_returns(http: TestClient, context: Context) -> None:
    indexed(http)
    conv = api.make_converter()
    shown = api.structure(conv, ok(http, "show_project", {"project_id": "ledger"}), TABLE["show_project"].response)
    assert shown == context.engine.show_project("ledger")
    listed = api.structure(conv, ok(http, "list_projects", {}), api.ProjectList)
    assert list(listed.projects) == context.engine.list_projects()


def test_runtime_status_describes_the_daemon(http: TestClient) -> None:
    status = ok(http, "runtime_status", {})
    assert status["service"] == "memory-core" and status["api_version"] == api.API_VERSION
    assert status["home"] == "/home/test" and status["socket"] == "/home/test/run/memcore.sock"
    assert status["engine_busy"] is False and status["in_flight"] == 0


def test_runtime_status_answers_while_the_engine_is_busy(http: TestClient, context: Context) -> None:
    with context.engine_lock:  # as during a long index
        status = ok(http, "runtime_status", {})
    assert status["engine_busy"] is True


def test_get_works_only_for_read_only_methods(http: TestClient) -> None:
    assert http.get("/v1/runtime_status").status_code == 200
    assert http.get("/v1/list_projects").json() == {"projects": []}
    error = assert_error(http.get("/v1/add_project"), "method_not_allowed", 405)
    assert "POST" in error["message"]
    assert http.get("/v1/add_project").headers["allow"] == "POST"
    assert_error(http.put("/v1/runtime_status"), "method_not_allowed", 405)


def test_empty_body_means_no_inputs(http: TestClient) -> None:
    assert http.post("/v1/runtime_status").status_code == 200
    assert_error(http.post("/v1/show_project"), "invalid_request", 400)


def test_activation_state_round_trip_reuses_held_units(http: TestClient) -> None:
    indexed(http)
    query = {"project_id": "ledger", "query": "how do I roll back a deploy?"}
    first = ok(http, "activate_memory", query)
    assert first["fragments"] and {f["delta_action"] for f in first["fragments"]} == {"add"}
    second = ok(http, "activate_memory", {**query, "activation_state": first["activation_state"]})
    assert {f["delta_action"] for f in second["fragments"]} == {"reuse"}
    assert all(f["text"] is None for f in second["fragments"])
    assert second["activation_state"] == first["activation_state"]


# -- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize("method", sorted(SUCCESS))
def test_unknown_fields_are_rejected(method: str, http: TestClient, context: Context) -> None:
    indexed(http, "other")
    body = {**without_placeholders(SUCCESS[method][1]), "surprise": 1}  # rejected before any lookup
    error = assert_error(post(http, method, body), "invalid_request", 400)
    assert "surprise" in error["message"]
    assert error["details"]["errors"] == ["extra fields found (surprise) @ $"]
    assert context.engine.list_projects()[0].project.project_id == "other"  # nothing written


def has_required_fields(method: str) -> bool:
    return any(f.default is attrs.NOTHING for f in attrs.fields(TABLE[method].request))


@pytest.mark.parametrize("method", sorted(m for m in SUCCESS if has_required_fields(m)))
def test_missing_fields_are_rejected(method: str, http: TestClient) -> None:
    error = assert_error(post(http, method, {}), "invalid_request", 400)
    assert "required field missing" in error["message"]


WRONG = [
    ("show_project", {"project_id": 5}, "invalid_request", "expected a string, got an integer @ $.project_id"),
    ("show_project", {"project_id": None}, "invalid_request", "expected a string, got null @ $.project_id"),
    ("index_project", {"project_id": "ledger", "force": "yes"}, "invalid_request", "expected a boolean"),
    ("index_project", {"project_id": "ledger", "force": 1}, "invalid_request", "expected a boolean"),
    ("activate_memory", {"project_id": "ledger", "query": "q", "budget": "10"}, "invalid_request", "$.budget"),
    ("activate_memory", {"project_id": "ledger", "query": "q", "budget": True}, "invalid_request", "got a boolean"),
    ("activate_memory", {"project_id": "ledger", "query": "q", "budget": 1.5}, "invalid_request", "$.budget"),
    ("activate_memory", {"project_id": "ledger", "query": ["q"]}, "invalid_request", "$.query"),
    ("activate_memory", {"project_id": "ledger", "query": "q", "budget": 0}, "invalid_budget", ""),
    ("activate_memory", {"project_id": "ledger", "query": " "}, "invalid_query", ""),
    ("activate_memory", {"project_id": "ledger", "query": "q" * 2001}, "invalid_query", ""),
    ("activate_memory", {"project_id": "ledger", "query": "q", "activation_state": []}, "invalid_activation_state", ""),
    ("activate_memory", {"project_id": "ledger", "query": "q", "activation_state": {"units": [{"unit_id": "a"}]}},
     "invalid_activation_state", ""),
    ("activate_memory", {"project_id": "ledger", "query": "q",
                         "activation_state": {"units": [{"unit_id": "a", "unit_hash": "XYZ"}]}},
     "invalid_activation_state", ""),
    ("add_project", {"project_id": "x", "sources": "/proj"}, "invalid_request", "expected an array, got a string"),
    ("add_project", {"project_id": "x", "sources": ["/proj"]}, "invalid_request",
     "expected an object, got a string @ $.sources[0]"),
    ("add_project", {"project_id": "x", "sources": [{"path": "/proj", "layer": "team"}]}, "invalid_request",
     "'team' is not a valid Layer @ $.sources[0].layer"),
    ("list_retrieval_runs", {"limit": 0}, "invalid_request", "limit must be an integer from 1 to 500"),
    ("list_retrieval_runs", {"limit": 501}, "invalid_request", "limit"),
    ("list_retrieval_runs", {"limit": "5"}, "invalid_request", "$.limit"),
    ("list_retrieval_runs", {"status": "done"}, "invalid_request", "status must be one of"),
    ("list_retrieval_runs", {"project_id": 7}, "invalid_request", "$.project_id"),
    ("get_retrieval_run", {"run_id": None}, "invalid_request", "$.run_id"),
    ("clear_retrieval_runs", {}, "invalid_request", "exactly one of project_id or all"),
    ("clear_retrieval_runs", {"project_id": "ledger", "all": True}, "invalid_request", "exactly one"),
    ("clear_retrieval_runs", {"all": "yes"}, "invalid_request", "expected a boolean"),
    ("add_project", {"project_id": "x", "sources": [{"path": "relative/notes"}]}, "invalid_request", "absolute"),
    ("add_project", {"project_id": "x", "sources": []}, "invalid_request", "at least one source"),
    ("add_project", {"project_id": "Not A Slug", "sources": SOURCES}, "invalid_project_name", ""),
]


@pytest.mark.parametrize(("method", "body", "code", "says"), WRONG)
def test_wrong_values_get_their_code(
    method: str, body: dict[str, Any], code: str, says: str, http: TestClient, context: Context
) -> None:
    indexed(http)
    error = assert_error(post(http, method, body), code, 400)
    assert says in error["message"]
    assert [i.project.project_id for i in context.engine.list_projects()] == ["ledger"]  # nothing half-written


@pytest.mark.parametrize(("method", "body", "code", "says"), WRONG)
def test_the_contract_rejects_what_the_daemon_rejects(
    method: str, body: dict[str, Any], code: str, says: str, contract: Contract
) -> None:
    validator = contract.validator(contract.request_component(method))
    # Source.path being absolute is the domain's rule; "exactly one scope" is the handler's.
    schema_can_say_it = says != "absolute" and "exactly one" not in says
    assert validator.is_valid(body) is not schema_can_say_it


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "invalid_json"),
        (b'{"project_id": NaN}', "invalid_json"),
        (b'{"budget": Infinity}', "invalid_json"),
        (b"\xff\xfe\xfa", "invalid_json"),
        (b" \n", "invalid_json"),  # whitespace is not "no body"
        (b"[]", "invalid_request"),
        (b'"runtime_status"', "invalid_request"),
        (b"null", "invalid_request"),
    ],
)
def test_malformed_bodies(body: bytes, code: str, http: TestClient) -> None:
    assert_error(http.post("/v1/activate_memory", content=body), code, 400)
    assert http.post("/v1/runtime_status").status_code == 200


def test_oversized_bodies_are_refused_before_reading(http: TestClient) -> None:
    big = json.dumps({"project_id": "ledger", "query": "x" * api.MAX_BODY_BYTES}).encode()
    error = assert_error(http.post("/v1/activate_memory", content=big), "request_too_large", 413)
    assert error["details"] == {"limit": api.MAX_BODY_BYTES}

    def chunks() -> Any:  # no Content-Length: the limit applies while streaming
        for _ in range(20):
            yield b" " * 65536

    assert_error(http.post("/v1/runtime_status", content=chunks()), "request_too_large", 413)
    assert http.post("/v1/runtime_status", json={}).status_code == 200


def test_a_body_just_under_the_limit_is_read(context: Context) -> None:
    with TestClient(create_app(context, max_body_bytes=64)) as small:
        assert small.post("/v1/runtime_status", content=b"{}" + b" " * 62).status_code == 200
        assert_error(small.post("/v1/runtime_status", content=b"{}" + b" " * 63), "request_too_large", 413)


def test_unknown_methods_and_paths(http: TestClient) -> None:
    error = assert_error(post(http, "activate", {}), "unknown_method", 404)
    assert "activate_memory" in error["details"]["known"]
    assert_error(post(http, "list_runs", {}), "unknown_method", 404)
    assert_error(http.get("/v2/runtime_status"), "not_found", 404)
    assert_error(http.get("/"), "not_found", 404)


def test_domain_errors_keep_their_codes(http: TestClient, scanner: InMemoryScanner) -> None:
    assert_error(post(http, "show_project", {"project_id": "nope"}), "project_not_found", 404)
    assert_error(post(http, "remove_project", {"project_id": "nope"}), "project_not_found", 404)
    ok(http, "add_project", {"project_id": "ledger", "sources": SOURCES})
    assert_error(post(http, "add_project", {"project_id": "ledger", "sources": SOURCES}), "project_exists", 409)
    error = assert_error(post(http, "activate_memory", {"project_id": "ledger", "query": "q"}),
                         "project_not_indexed", 409)
    assert error["details"]["project"] == "ledger"
    ok(http, "add_project", {"project_id": "gone", "sources": [{"path": "/missing"}]})
    assert_error(post(http, "index_project", {"project_id": "gone"}), "source_unavailable", 422)


def import_every_error_module() -> None:
    """Error classes register as subclasses when their module loads: load them all, so these
    checks do not depend on what other tests imported first."""
    import importlib
    import pkgutil

    import memory_core

    for module in pkgutil.iter_modules(memory_core.__path__):
        if module.name.endswith("errors"):
            importlib.import_module(f"memory_core.{module.name}")
    import memory_core.adapters

    # Adapters define errors too (JvmUnavailable, ModelUnavailable); importing one starts no
    # JVM and loads no model (both are lazy).
    for module in pkgutil.walk_packages(memory_core.adapters.__path__, "memory_core.adapters."):
        importlib.import_module(module.name)


import_every_error_module()


def test_every_error_code_has_one_fixed_status() -> None:
    classes = list(api.error_classes())
    codes = [c.code for c in classes]
    assert len(codes) == len(set(codes)), "two error classes share a code"
    missing = sorted(set(codes) - set(api.STATUS_BY_CODE))
    assert not missing, f"add these codes to api.STATUS_BY_CODE: {missing}"
    assert all(400 <= s < 600 for s in api.STATUS_BY_CODE.values())


@pytest.mark.parametrize("cls", list(api.error_classes()), ids=lambda c: c.code)
def test_the_client_rebuilds_every_typed_error(cls: type[MemoryCoreError]) -> None:
    exc = api.exception_for(cls.code, "it went wrong", {"project": "p"})
    assert type(exc) is cls and exc.code == cls.code
    assert exc.message == "it went wrong" and exc.details == {"project": "p"}
    unknown = api.exception_for("from_the_future", "new", {})
    assert type(unknown) is MemoryCoreError and unknown.code == "from_the_future"


def test_the_client_keeps_the_daemons_message_as_sent() -> None:
    # InvalidFixture prefixes its place to the message it is given; rebuilt, it must not twice.
    exc = api.exception_for("invalid_evaluation_fixture", "/cases/0: bad hash", {"place": "/cases/0"})
    assert exc.message == str(exc) == "/cases/0: bad hash" and exc.details == {"place": "/cases/0"}


def test_retrieval_failed_keeps_its_fields_through_the_client() -> None:
    details = {"stage": "embed_query", "error_code": "RuntimeError", "run_id": "r1"}
    exc = api.exception_for("retrieval_failed", "boom", details)
    assert isinstance(exc, RetrievalFailed) and exc.stage == "embed_query" and exc.run_id == "r1"


def test_the_client_has_every_method_of_the_table_and_no_other() -> None:
    from memory_core.entrypoints.daemon.client import DaemonClient, Remote

    for name, method in TABLE.items():
        member = vars(DaemonClient)[name]  # declared, or derived from the table
        if isinstance(member, Remote):
            assert (member.name, member.request, member.response) == (name, method.request, method.response)
        else:
            assert callable(member), name
    remotes = {name for name, member in vars(DaemonClient).items() if isinstance(member, Remote)}
    assert remotes <= set(TABLE)


def test_a_client_method_that_disagrees_with_the_table_fails_when_the_class_is_made() -> None:
    from memory_core.entrypoints.daemon import client

    class Drifted(client.DaemonClient):
        show_project = client.Remote(api.ShowProjectRequest, api.ProjectList)  # the table says ProjectInfo

    with pytest.raises(TypeError, match="show_project disagrees"):
        client._of_the_table(Drifted)


def test_a_remote_sends_its_request_type_built_from_its_arguments() -> None:
    from memory_core.entrypoints.daemon.client import DaemonClient

    sent: list[tuple[str, Any]] = []

    class Recording(DaemonClient):
        def call(self, name: str, request: Any) -> Any:
            sent.append((name, request))
            return "answer"

    recording = Recording.__new__(Recording)  # no transport: call is replaced
    assert recording.index_project("ledger", force=True) == "answer"
    assert recording.get_retrieval_run("r1", manifest=True) == "answer"
    assert sent == [("index_project", api.IndexProjectRequest("ledger", True)),
                    ("get_retrieval_run", api.GetRetrievalRunRequest("r1", True))]  # fmt: skip


# -- faults -----------------------------------------------------------------------------------
class BrokenCatalog(InMemoryCatalog):
    """A storage fault the engine does not anticipate (a fake port, for the fault path); it
    passes, so the next request (add_project lists the projects too) shows serving goes on."""

    failed = False

    def list_projects(self):  # type: ignore[no-untyped-def]
        if not self.failed:
            self.failed = True
            raise RuntimeError("disk on fire")
        return super().list_projects()


class BrokenEmbedder(HashingEmbedder):
    def embed_query(self, text: str):  # type: ignore[no-untyped-def]
        raise RuntimeError("model crashed")


def test_an_unexpected_error_is_an_internal_error_envelope_and_serving_goes_on(caplog) -> None:  # type: ignore[no-untyped-def]
    engine = bootstrap_in_memory(catalog=BrokenCatalog(), scanner=InMemoryScanner(docs()))
    with TestClient(create_app(Context(engine, home="/h"))) as http:
        error = assert_error(post(http, "list_projects", {}), "internal_error", 500)
        assert "disk on fire" not in error["message"]  # internals stay in the log
        assert "disk on fire" in caplog.text
        ok(http, "add_project", {"project_id": "ledger", "sources": SOURCES})


def test_a_failed_stage_is_retrieval_failed_with_the_stage() -> None:
    engine = bootstrap_in_memory(embedder=BrokenEmbedder(), scanner=InMemoryScanner(docs()))
    with TestClient(create_app(Context(engine, home="/h"))) as http:
        ok(http, "add_project", {"project_id": "ledger", "sources": SOURCES})
        # Indexing embeds documents, not queries, so it succeeds.
        ok(http, "index_project", {"project_id": "ledger"})
        error = assert_error(post(http, "activate_memory", {"project_id": "ledger", "query": "deploy"}),
                             "retrieval_failed", 500)
        assert error["details"]["stage"] == "embed_query"
        assert ok(http, "list_projects", {})["projects"][0]["project"]["project_id"] == "ledger"


def test_concurrent_requests_are_all_answered(context: Context, http: TestClient) -> None:
    indexed(http)

    async def burst() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=create_app(context))
        async with httpx.AsyncClient(transport=transport, base_url="http://daemon") as client:
            calls = [
                client.post("/v1/activate_memory", json={"project_id": "ledger", "query": f"deploy rollback {i}"})
                for i in range(16)
            ] + [client.post("/v1/list_projects", json={}) for _ in range(4)]
            return await asyncio.gather(*calls)

    replies = asyncio.run(burst())
    assert [r.status_code for r in replies] == [200] * 20


# -- fuzzing: no input makes the daemon answer 5xx or break its contract ---------------------
SCALARS = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=20)
JSON_VALUES = st.recursive(
    SCALARS | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
FIELDS = ["project_id", "query", "budget", "activation_state", "sources", "force", "path", "layer", "units"]
BODIES = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), JSON_VALUES, max_size=5) | JSON_VALUES


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(sorted(TABLE)), body=BODIES)
def test_fuzzed_bodies_get_a_contract_response_or_a_4xx_envelope(
    method: str, body: Any, http: TestClient, contract: Contract
) -> None:
    if not hasattr(http, "_indexed"):
        indexed(http)
        http._indexed = True  # type: ignore[attr-defined]
    if method == "remove_project":
        body = {"project_id": "ledger-copy"} if isinstance(body, dict) else body  # keep the fixture project
    assert_by_contract(contract, method, post(http, method, body))
