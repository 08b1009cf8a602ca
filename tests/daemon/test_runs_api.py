"""Retrieval Run methods over HTTP in process (real app and dispatch, in-memory engine): listing
with filters and pages, one Run's trace, Clear History, their error codes, and the identity
between what an activation returned and what its Run recorded."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.daemon.dispatch import TABLE, Context
from memory_core.runs.records import RunDetail, RunFilter, RunPage

from .conftest import Contract
from .test_api import SOURCES, assert_error, indexed, ok, post

QUERY = {"project_id": "ledger", "query": "how do I roll back a deploy?"}


def activate(http: TestClient, **extra: Any) -> dict[str, Any]:
    return ok(http, "activate_memory", {**QUERY, **extra})  # type: ignore[no-any-return]


def test_a_run_is_served_with_its_full_trace(http: TestClient, context: Context, contract: Contract) -> None:
    indexed(http)
    answer = activate(http)
    detail = ok(http, "get_retrieval_run", {"run_id": answer["run_id"]})
    contract.validate("RunDetail", detail)
    decoded = api.structure(api.make_converter(), detail, RunDetail)
    assert decoded == context.engine.get_run(answer["run_id"])  # what an embedded caller gets
    assert detail["summary"]["status"] == "succeeded" and detail["summary"]["query"] == QUERY["query"]
    assert detail["summary"]["fragment_count"] == len(answer["fragments"])
    assert detail["revisions"] == answer["revisions"]


def test_returned_fragments_are_the_selected_candidates_of_the_run(http: TestClient) -> None:
    indexed(http)
    first = activate(http, budget=60)
    second = activate(http, budget=60, activation_state=first["activation_state"])
    for answer in (first, second):
        candidates = ok(http, "get_retrieval_run", {"run_id": answer["run_id"]})["candidates"]
        selected = [c for c in candidates if c["disposition"] == "selected"]
        assert [c["final_rank"] for c in candidates] == list(range(1, len(candidates) + 1))
        assert len(selected) == len(answer["fragments"])
        for fragment, candidate in zip(answer["fragments"], selected, strict=True):
            for key in ("unit_id", "unit_hash", "resource_id", "heading_path", "token_count", "delta_action",
                        "final_rank", "final_score"):
                assert fragment[key] == candidate[key], key
    assert {f["delta_action"] for f in second["fragments"]} == {"reuse"}


def test_a_failed_activation_is_a_failed_run_and_a_rejected_one_is_none(http: TestClient) -> None:
    ok(http, "add_project", {"project_id": "ledger", "sources": SOURCES})
    error = assert_error(post(http, "activate_memory", QUERY), "project_not_indexed", 409)
    run_id = error["details"]["run_id"]
    failed = ok(http, "get_retrieval_run", {"run_id": run_id})["summary"]
    assert failed["status"] == "failed" and failed["error_code"] == "project_not_indexed"
    assert failed["error_stage"] == "load"
    assert_error(post(http, "activate_memory", {**QUERY, "query": "  "}), "invalid_query", 400)
    assert_error(post(http, "activate_memory", {**QUERY, "project_id": "nope"}), "project_not_found", 404)
    runs = ok(http, "list_retrieval_runs", {})["runs"]
    assert [r["run_id"] for r in runs] == [run_id]  # validation failures record nothing


def test_an_unknown_run_is_run_not_found(http: TestClient) -> None:
    error = assert_error(post(http, "get_retrieval_run", {"run_id": "01NOSUCHRUN"}), "run_not_found", 404)
    assert error["details"] == {"run_id": "01NOSUCHRUN"}
    assert http.post("/v1/runtime_status").status_code == 200


def test_listing_filters_and_pages(http: TestClient, context: Context) -> None:
    indexed(http)
    indexed(http, "other")
    ids = [activate(http, query=f"deploy rollback {i}")["run_id"] for i in range(5)]
    other = ok(http, "activate_memory", {"project_id": "other", "query": "advisory locks"})["run_id"]
    everything = ok(http, "list_retrieval_runs", {})
    assert [r["run_id"] for r in everything["runs"]] == [other, *reversed(ids)]
    assert everything["next_cursor"] is None
    assert {r["run_id"] for r in ok(http, "list_retrieval_runs", {"project_id": "other"})["runs"]} == {other}
    assert {r["run_id"] for r in ok(http, "list_retrieval_runs", {"query": "rollback 3"})["runs"]} == {ids[3]}
    assert ok(http, "list_retrieval_runs", {"status": "failed"})["runs"] == []
    # Pages of two, following next_cursor, give every Run once, newest first.
    seen: list[str] = []
    cursor = None
    while True:
        page = ok(http, "list_retrieval_runs", {"project_id": "ledger", "limit": 2, "cursor": cursor})
        seen += [r["run_id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    # The typed page is what the engine lists.
    typed = api.structure(api.make_converter(), ok(http, "list_retrieval_runs", {"limit": 3}), RunPage)
    assert typed == context.engine.list_runs(RunFilter(), limit=3)
    # GET lists with the defaults.
    assert http.get("/v1/list_retrieval_runs").json() == everything


def test_time_filters_accept_any_iso_8601_form(http: TestClient) -> None:
    indexed(http)
    run_id = activate(http)["run_id"]
    started = ok(http, "get_retrieval_run", {"run_id": run_id})["summary"]["started_at"]  # ...Z
    year = started[:4]

    def listed(**filters: str) -> list[str]:
        return [r["run_id"] for r in ok(http, "list_retrieval_runs", filters)["runs"]]

    assert listed(since=started) == [run_id]  # inclusive
    assert listed(until=started) == []  # exclusive
    assert listed(since=f"{year}-01-01") == [run_id]
    assert listed(until=f"{int(year) + 1}-01-01T00:00:00+00:00") == [run_id]
    # The same instant written with an offset: compared as an instant, not as text.
    shifted = started.replace("Z", "+00:00")
    assert listed(since=shifted) == [run_id]
    # Two hours later in +02:00 is the same instant.
    import datetime as dt

    instant = dt.datetime.fromisoformat(started.replace("Z", "+00:00"))
    in_paris = instant.astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat(timespec="milliseconds")
    assert listed(since=in_paris) == [run_id] and listed(until=in_paris) == []
    error = assert_error(post(http, "list_retrieval_runs", {"since": "last tuesday"}), "invalid_request", 400)
    assert error["details"] == {"since": "last tuesday"}
    assert_error(post(http, "list_retrieval_runs", {"cursor": "not-a-cursor"}), "invalid_request", 400)


def test_clear_history_of_one_project_or_all(http: TestClient) -> None:
    indexed(http)
    indexed(http, "other")
    activate(http)
    activate(http)
    ok(http, "activate_memory", {"project_id": "other", "query": "advisory locks"})
    assert_error(post(http, "clear_retrieval_runs", {"project_id": "nope"}), "project_not_found", 404)
    report = ok(http, "clear_retrieval_runs", {"project_id": "ledger"})
    assert report["deleted_runs"] == 2 and report["kept_pinned"] == 0
    assert [r["project_id"] for r in ok(http, "list_retrieval_runs", {})["runs"]] == ["other"]
    assert ok(http, "clear_retrieval_runs", {"all": True})["deleted_runs"] == 1
    assert ok(http, "list_retrieval_runs", {})["runs"] == []
    # The projects and their indexes stay: Clear History deletes Runs only.
    assert activate(http)["fragments"]


@pytest.mark.parametrize("method", ["list_retrieval_runs", "get_retrieval_run", "clear_retrieval_runs"])
def test_run_methods_are_in_the_table_and_the_contract(method: str, contract: Contract) -> None:
    assert method in TABLE
    assert f"/v1/{method}" in contract.document["paths"]
    if method == "get_retrieval_run":
        responses = contract.document["paths"]["/v1/get_retrieval_run"]["post"]["responses"]
        assert "run_not_found" in responses["404"]["description"]
