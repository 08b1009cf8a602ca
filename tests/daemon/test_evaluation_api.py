"""Evaluation Set methods of the daemon.

In process (real app and dispatch, in-memory engine): every method's success and every error
code it can give, the two-editor judgment conflict, the corpus search, the report and fixture
equal to what the engine gives, the import's own body limit, the typed client and ``memcore eval``
through it. Through the real daemon (subprocesses, real adapters): activation → case →
judgments with a conflict → report → export → import into a second home → export again, byte for
byte; a case served again after a restart; Clear History keeping the pinned Run; the CLI's
``memcore eval`` going through the daemon and answering as it does embedded.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from memory_core.adapters.in_memory.storage import InMemoryScanner
from memory_core.domain.canonical import plain
from memory_core.domain.errors import ProjectNotIndexed, RunNotFound
from memory_core.domain.evaluation_errors import (
    EvaluationCaseNotFound,
    EvaluationJudgmentConflict,
    EvaluationRunNotSucceeded,
    FixtureHashMismatch,
    InvalidFixture,
    InvalidJudgments,
)
from memory_core.domain.model import Source
from memory_core.entrypoints.bootstrap import bootstrap_in_memory
from memory_core.entrypoints.cli import eval_commands, wire
from memory_core.entrypoints.cli.main import build_parser
from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.daemon.app import create_app
from memory_core.entrypoints.daemon.client import DaemonClient
from memory_core.entrypoints.daemon.dispatch import TABLE, Context
from memory_core.evaluation.cases import Case, Judgment, JudgmentSet
from memory_core.evaluation.fixture import ImportResult
from memory_core.operations.executor import Operations
from memory_core.services import corpus_search
from memory_core.services.engine import Engine

from .conftest import Contract, docs
from .test_api import SOURCES, assert_by_contract, assert_error, indexed, ok, post

ROOT = Path(__file__).resolve().parents[2]
QUERY = {"project_id": "ledger", "query": "how do I roll back a deploy?"}
EXPORTED_AT = re.compile(rb'"exported_at":"[^"]*"')


def make_case(http: TestClient, query: str = QUERY["query"]) -> dict[str, Any]:
    run_id = ok(http, "activate_memory", {**QUERY, "query": query})["run_id"]
    return ok(http, "create_evaluation_case", {"run_id": run_id})  # type: ignore[no-any-return]


def detail_of(http: TestClient, case_id: str) -> dict[str, Any]:
    return ok(http, "get_evaluation_case", {"case_id": case_id})  # type: ignore[no-any-return]


def selected_unit(detail: dict[str, Any]) -> str:
    return next(c["unit_id"] for c in detail["trace"]["candidates"] if c["disposition"] == "selected")


def without_exported_at(data: bytes) -> bytes:
    return EXPORTED_AT.sub(b'"exported_at":""', data)


def failed_run(http: TestClient) -> str:
    ok(http, "add_project", {"project_id": "fresh", "sources": [{"path": "/proj"}]})
    error = assert_error(post(http, "activate_memory", {**QUERY, "project_id": "fresh"}), "project_not_indexed", 409)
    return str(error["details"]["run_id"])


# -- cases ------------------------------------------------------------------------------------
def test_a_case_is_made_from_a_run_and_served_with_everything_a_reviewer_needs(
    http: TestClient, context: Context, contract: Contract
) -> None:
    indexed(http)
    run_id = ok(http, "activate_memory", QUERY)["run_id"]
    case = ok(http, "create_evaluation_case", {"run_id": run_id})
    contract.validate("Case", case)
    service = context.engine.evaluations()
    conv = api.make_converter()
    assert api.structure(conv, case, Case) == service.get_case(case["case_id"])
    assert case["source_run_id"] == run_id and case["provenance"] == "run"
    assert case["judgment_version"] == 0 and case["reviewed"] is False
    assert ok(http, "get_retrieval_run", {"run_id": run_id})["summary"]["pinned"] is True
    # Again from the same Run: the same case.
    assert ok(http, "create_evaluation_case", {"run_id": run_id}) == case

    detail = detail_of(http, case["case_id"])
    contract.validate("EvaluationCaseDetail", detail)
    decoded = api.structure(conv, detail, api.EvaluationCaseDetail)
    shown = service.show_case(case["case_id"])
    assert (decoded.case, decoded.trace, decoded.judgments) == (shown.case, shown.trace, shown.judgments)
    assert decoded.metrics == shown.metrics and decoded.missed_evidence == shown.missed
    assert decoded.corpus == service.get_corpus(case["corpus_id"])
    assert len(decoded.corpus.resources) == shown.corpus_resources == 3
    assert "content" not in json.dumps(detail["corpus"])  # a manifest, no bodies
    run = ok(http, "get_retrieval_run", {"run_id": run_id})
    assert detail["trace"]["candidates"] == run["candidates"]
    assert detail["judgments"] == {"case_id": case["case_id"], "version": 0, "judgments": [], "created_at": None}
    assert detail["judgment_history"] == []


def test_create_evaluation_case_errors(http: TestClient, context: Context) -> None:
    indexed(http)
    assert_error(post(http, "create_evaluation_case", {}), "invalid_request", 400)
    error = assert_error(post(http, "create_evaluation_case", {"run_id": "01NOSUCHRUN"}), "run_not_found", 404)
    assert error["details"] == {"run_id": "01NOSUCHRUN"}
    failed = failed_run(http)
    error = assert_error(post(http, "create_evaluation_case", {"run_id": failed}), "evaluation_run_not_succeeded", 409)
    assert error["details"] == {"run_id": failed, "status": "failed"}
    # A Run whose bodies are gone cannot be frozen.
    run_id = ok(http, "activate_memory", QUERY)["run_id"]
    blobs = context.engine.evaluations().blobs
    for digest in list(blobs.digests()):
        blobs.delete(digest)
    error = assert_error(post(http, "create_evaluation_case", {"run_id": run_id}), "evaluation_corpus_incomplete", 409)
    assert error["details"]["run_id"] == run_id and error["details"]["missing"]
    assert ok(http, "list_evaluation_cases", {})["cases"] == []  # nothing half-written
    assert ok(http, "get_retrieval_run", {"run_id": run_id})["summary"]["pinned"] is False


def test_list_evaluation_cases(http: TestClient) -> None:
    indexed(http)
    indexed(http, "other")
    first = make_case(http)
    second = make_case(http, "advisory locks")
    third = ok(http, "create_evaluation_case",
               {"run_id": ok(http, "activate_memory", {"project_id": "other", "query": "deploy"})["run_id"]})

    def ids(body: dict[str, Any]) -> list[str]:
        return [c["case_id"] for c in ok(http, "list_evaluation_cases", body)["cases"]]

    assert ids({}) == [first["case_id"], second["case_id"], third["case_id"]]  # oldest first
    assert ids({"project_id": "other"}) == [third["case_id"]]
    assert ids({"case_ids": [second["case_id"], first["case_id"]]}) == [first["case_id"], second["case_id"]]
    assert ids({"project_id": "other", "case_ids": [first["case_id"]]}) == []
    assert ids({"project_id": "nope"}) == []
    assert http.get("/v1/list_evaluation_cases").json() == ok(http, "list_evaluation_cases", {})
    error = assert_error(post(http, "list_evaluation_cases", {"case_ids": [first["case_id"], "NOPE"]}),
                         "evaluation_case_not_found", 404)
    assert error["details"] == {"case_id": "NOPE"}
    assert_error(post(http, "list_evaluation_cases", {"case_ids": "NOPE"}), "invalid_request", 400)


def test_get_evaluation_case_errors(http: TestClient) -> None:
    error = assert_error(post(http, "get_evaluation_case", {"case_id": "01NOSUCHCASE"}),
                         "evaluation_case_not_found", 404)
    assert error["details"] == {"case_id": "01NOSUCHCASE"}
    assert_error(post(http, "get_evaluation_case", {"case_id": 7}), "invalid_request", 400)
    assert_error(post(http, "get_evaluation_case", {}), "invalid_request", 400)


# -- the corpus search (missed-evidence picker) -------------------------------------------------
def test_search_corpus_resources_finds_ids_and_bodies(http: TestClient, contract: Contract) -> None:
    indexed(http)
    case = make_case(http)
    cid = case["case_id"]

    def search(**body: Any) -> dict[str, Any]:
        page = ok(http, "search_corpus_resources", {"case_id": cid, **body})
        contract.validate("CorpusResourcePage", page)
        return page  # type: ignore[no-any-return]

    page = search(text="PRINTER")  # any case
    assert [(r["resource"]["resource_id"], r["matched_in"]) for r in page["resources"]] == [("notes.txt", "body")]
    assert "printer is broken" in page["resources"][0]["snippet"]
    assert page["total_resources"] == 3 and page["next_cursor"] is None and page["corpus_id"] == case["corpus_id"]
    by_id = search(text="ADR-0004")
    assert [r["matched_in"] for r in by_id["resources"]] == ["resource_id"]
    assert by_id["resources"][0]["snippet"] is None
    assert search(text="no such words anywhere")["resources"] == []
    # The flags say what the source Run did with each resource.
    detail = detail_of(http, cid)
    selected = {c["resource_id"] for c in detail["trace"]["candidates"] if c["disposition"] == "selected"}
    everything = search(limit=200)["resources"]
    assert [r["resource"] for r in everything] == detail["corpus"]["resources"]
    assert all(r["matched_in"] is None and r["snippet"] is None for r in everything)
    assert {r["resource"]["resource_id"] for r in everything if r["selected"]} == selected
    # Pages of one, following next_cursor, give every resource once.
    seen, cursor = [], None
    while True:
        page = search(limit=1, cursor=cursor)
        seen += [r["resource"]["resource_id"] for r in page["resources"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [r["resource"]["resource_id"] for r in everything]


def test_search_reads_a_bounded_amount_per_call(http: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    indexed(http)
    cid = make_case(http)["case_id"]
    everything = ok(http, "search_corpus_resources", {"case_id": cid, "text": "use"})["resources"]
    assert [r["resource"]["resource_id"] for r in everything] == ["decisions/ADR-0004-advisory-locks.md"]
    monkeypatch.setattr(corpus_search, "SEARCH_SCAN_BYTES", 1)  # one body per call
    pages, cursor, found = 0, None, []
    while True:
        page = ok(http, "search_corpus_resources", {"case_id": cid, "text": "use", "cursor": cursor})
        pages += 1
        found += page["resources"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and found == everything  # no id matches "use": every call read one body


def test_search_corpus_resources_errors(http: TestClient, context: Context) -> None:
    indexed(http)
    case = make_case(http)
    cid = case["case_id"]
    for body, says in [
        ({"limit": 0}, "limit"),
        ({"limit": api.MAX_CORPUS_PAGE + 1}, "limit"),
        ({"text": "x" * (api.MAX_SEARCH_CHARS + 1)}, "longer"),
        ({"cursor": "abc"}, "cursor"),
        ({"cursor": "-1"}, "cursor"),
        ({"cursor": "99"}, "cursor"),
        ({"limit": "5"}, "$.limit"),
    ]:
        error = assert_error(post(http, "search_corpus_resources", {"case_id": cid, **body}), "invalid_request", 400)
        assert says in error["message"], error
    assert_error(post(http, "search_corpus_resources", {"case_id": "NOPE"}), "evaluation_case_not_found", 404)
    # A corrupted body is the blob store's typed error, and the daemon goes on serving.
    notes = next(e for e in context.engine.evaluations().get_corpus(case["corpus_id"]).resources
                 if e.resource_id == "notes.txt")
    context.engine.evaluations().blobs.blobs[notes.resource_hash] = b"tampered"  # type: ignore[attr-defined]
    error = assert_error(post(http, "search_corpus_resources", {"case_id": cid, "text": "printer"}),
                         "blob_corrupted", 500)
    assert error["details"] == {"digest": notes.resource_hash}
    assert ok(http, "search_corpus_resources", {"case_id": cid, "text": "ADR", "limit": 1})["resources"]


# -- judgments --------------------------------------------------------------------------------
def test_two_editors_and_a_stale_version(http: TestClient, context: Context, contract: Contract) -> None:
    indexed(http)
    cid = make_case(http)["case_id"]
    alice, bob = detail_of(http, cid), detail_of(http, cid)  # both editors load version 0
    unit = selected_unit(alice)
    first = ok(http, "replace_evaluation_judgments", {
        "case_id": cid, "expected_judgment_version": alice["judgments"]["version"],
        "judgments": [{"unit_id": unit, "relevance": 3, "note": "the steps"},
                      {"resource_id": "notes.txt", "relevance": 1}],
    })
    contract.validate("JudgmentSet", first)
    assert first["version"] == 1 and first["judgments"][0] == {
        "relevance": 3, "unit_id": unit, "resource_id": None, "note": "the steps"
    }
    stale = {"case_id": cid, "expected_judgment_version": bob["judgments"]["version"],
             "judgments": [{"unit_id": unit, "relevance": 1}]}
    error = assert_error(post(http, "replace_evaluation_judgments", stale), "evaluation_judgment_conflict", 409)
    assert error["details"] == {"case_id": cid, "expected_version": 0, "current_version": 1}
    assert detail_of(http, cid)["judgments"] == first  # the stale write changed nothing
    # Bob reloads, merges and saves on the current version.
    bob = detail_of(http, cid)
    second = ok(http, "replace_evaluation_judgments",
                {**stale, "expected_judgment_version": bob["judgments"]["version"]})
    assert second["version"] == 2
    detail = detail_of(http, cid)
    assert detail["case"]["judgment_version"] == 2 and detail["judgments"] == second
    assert [s["version"] for s in detail["judgment_history"]] == [1, 2] and detail["judgment_history"][0] == first
    conv = api.make_converter()
    assert api.structure(conv, second, JudgmentSet) == context.engine.evaluations().judgments(cid)
    # An empty set is a version too: "no judgments" after some.
    assert ok(http, "replace_evaluation_judgments",
              {"case_id": cid, "expected_judgment_version": 2, "judgments": []})["version"] == 3


BAD_JUDGMENTS = [
    ([{"unit_id": "nope#0", "relevance": 1}], "unit_id", "not in the source trace"),
    ([{"resource_id": "nope.md", "relevance": 1}], "resource_id", "not in the frozen corpus"),
    ([{"resource_id": "notes.txt", "relevance": 4}], "relevance", "0-3"),
    ([{"resource_id": "notes.txt", "relevance": 2.5}], "relevance", "0-3"),
    ([{"resource_id": "notes.txt", "relevance": True}], "relevance", "0-3"),
    ([{"resource_id": "notes.txt", "relevance": -1}], "relevance", "0-3"),
    ([{"resource_id": "notes.txt", "relevance": 1}, {"resource_id": "notes.txt", "relevance": 2}], "resource_id",
     "duplicate"),
    ([{"resource_id": "notes.txt", "unit_id": "<unit>", "relevance": 1}], "unit_id", "exactly one"),
    ([{"relevance": 1}], "unit_id", "exactly one"),
    ([{"resource_id": "notes.txt", "relevance": 1, "grade": 1}], "grade", "unknown field"),
    ([{"resource_id": "", "relevance": 1}], "resource_id", "non-empty"),
    ([{"resource_id": "notes.txt", "relevance": 1, "note": 5}], "note", "string"),
    (["notes.txt"], None, "not an object"),
    ({"resource_id": "notes.txt"}, "judgments", "not a list"),
]


@pytest.mark.parametrize(("judgments", "field", "reason"), BAD_JUDGMENTS)
def test_invalid_judgments_reject_the_whole_set(
    judgments: Any, field: str | None, reason: str, http: TestClient
) -> None:
    indexed(http)
    cid = make_case(http)["case_id"]
    unit = selected_unit(detail_of(http, cid))
    if isinstance(judgments, list):
        judgments = [{k: (unit if v == "<unit>" else v) for k, v in j.items()} if isinstance(j, dict) else j
                     for j in judgments]
        judgments = [{"unit_id": unit, "relevance": 2}, *judgments]  # a valid one first: rejected with the rest
    body = {"case_id": cid, "expected_judgment_version": 0, "judgments": judgments}
    error = assert_error(post(http, "replace_evaluation_judgments", body), "invalid_judgments", 400)
    problems = error["details"]["problems"]
    assert any(p["field"] == field and reason in p["reason"] for p in problems), problems
    assert detail_of(http, cid)["case"]["judgment_version"] == 0  # nothing written


def test_replace_evaluation_judgments_other_errors(http: TestClient) -> None:
    indexed(http)
    cid = make_case(http)["case_id"]
    body = {"case_id": cid, "expected_judgment_version": 0, "judgments": []}
    assert_error(post(http, "replace_evaluation_judgments", {**body, "case_id": "NOPE"}),
                 "evaluation_case_not_found", 404)
    assert_error(post(http, "replace_evaluation_judgments", {**body, "expected_judgment_version": -1}),
                 "invalid_request", 400)
    assert_error(post(http, "replace_evaluation_judgments", {**body, "expected_judgment_version": "0"}),
                 "invalid_request", 400)
    assert_error(post(http, "replace_evaluation_judgments", {"case_id": cid, "judgments": []}), "invalid_request", 400)
    assert_error(post(http, "replace_evaluation_judgments", {**body, "expected_judgment_version": 3}),
                 "evaluation_judgment_conflict", 409)


def test_review_marks_the_current_version(http: TestClient, contract: Contract) -> None:
    indexed(http)
    cid = make_case(http)["case_id"]
    ok(http, "replace_evaluation_judgments",
       {"case_id": cid, "expected_judgment_version": 0, "judgments": [{"resource_id": "notes.txt", "relevance": 1}]})
    error = assert_error(post(http, "mark_evaluation_reviewed", {"case_id": cid, "expected_judgment_version": 0}),
                         "evaluation_judgment_conflict", 409)
    assert error["details"]["current_version"] == 1
    reviewed = ok(http, "mark_evaluation_reviewed", {"case_id": cid, "expected_judgment_version": 1})
    contract.validate("Case", reviewed)
    assert reviewed["reviewed"] is True and reviewed["reviewed_version"] == 1
    assert ok(http, "evaluation_report", {})["reviewed_cases"] == 1
    # New judgments need a new review.
    ok(http, "replace_evaluation_judgments", {"case_id": cid, "expected_judgment_version": 1, "judgments": []})
    assert detail_of(http, cid)["case"]["reviewed"] is False
    ok(http, "mark_evaluation_reviewed", {"case_id": cid, "expected_judgment_version": 2})
    unreviewed = ok(http, "mark_evaluation_reviewed",
                    {"case_id": cid, "expected_judgment_version": 2, "reviewed": False})
    assert unreviewed["reviewed"] is False and unreviewed["reviewed_version"] is None
    assert_error(post(http, "mark_evaluation_reviewed", {"case_id": "NOPE", "expected_judgment_version": 0}),
                 "evaluation_case_not_found", 404)
    assert_error(post(http, "mark_evaluation_reviewed", {"case_id": cid, "expected_judgment_version": -1}),
                 "invalid_request", 400)


# -- report and fixtures ----------------------------------------------------------------------
def judged_cases(http: TestClient) -> list[str]:
    indexed(http)
    indexed(http, "other")
    ids = []
    for project, query in (("ledger", QUERY["query"]), ("ledger", "advisory locks"), ("other", "printer")):
        run_id = ok(http, "activate_memory", {"project_id": project, "query": query})["run_id"]
        case = ok(http, "create_evaluation_case", {"run_id": run_id})
        unit = selected_unit(detail_of(http, case["case_id"]))
        ok(http, "replace_evaluation_judgments", {
            "case_id": case["case_id"], "expected_judgment_version": 0,
            "judgments": [{"unit_id": unit, "relevance": 2}, {"resource_id": "notes.txt", "relevance": 3}],
        })
        ids.append(case["case_id"])
    ok(http, "mark_evaluation_reviewed", {"case_id": ids[0], "expected_judgment_version": 1})
    return ids


def test_the_report_is_the_engines_report(http: TestClient, context: Context, contract: Contract) -> None:
    ids = judged_cases(http)
    conv = api.make_converter()
    for body, project, chosen in [({}, None, None), ({"project_id": "ledger"}, "ledger", None),
                                  ({"case_ids": ids[1:]}, None, ids[1:])]:
        report = ok(http, "evaluation_report", body)
        contract.validate("EvaluationReport", report)
        expected = plain(context.engine.evaluation_report(project, chosen))
        assert report == json.loads(json.dumps(expected))
        decoded = api.structure(conv, report, api.EvaluationReport)
        assert plain(decoded.to_report()) == expected  # the client gets the engine's Report back
    assert ok(http, "evaluation_report", {})["cases"] == 3
    assert ok(http, "evaluation_report", {"project_id": "ledger"})["reviewed_cases"] == 1
    assert http.get("/v1/evaluation_report").json() == ok(http, "evaluation_report", {})
    empty = ok(http, "evaluation_report", {"project_id": "nope"})
    assert empty["cases"] == 0 and empty["levels"]["unit"]["judged_cases"] == 0
    assert_error(post(http, "evaluation_report", {"case_ids": ["NOPE"]}), "evaluation_case_not_found", 404)


def test_export_is_the_engines_fixture_as_an_object(http: TestClient, context: Context, contract: Contract) -> None:
    ids = judged_cases(http)
    for body, kwargs in [({}, {}), ({"project_id": "ledger", "with_history": True},
                                    {"project_id": "ledger", "with_history": True})]:
        document = ok(http, "export_evaluation_set", body)
        assert isinstance(document, dict)
        contract.validate("EvaluationFixture", document)
        embedded = context.engine.export_evaluation_set(**kwargs)
        written = api.EvaluationFixture(document).to_bytes()  # what the CLI writes through the daemon
        assert without_exported_at(written) == without_exported_at(embedded)
    chosen = ok(http, "export_evaluation_set", {"case_ids": [ids[2]]})
    assert [c["case_id"] for c in chosen["cases"]] == [ids[2]]
    assert_error(post(http, "export_evaluation_set", {"case_ids": ["NOPE"]}), "evaluation_case_not_found", 404)
    assert_error(post(http, "export_evaluation_set", {"with_history": "yes"}), "invalid_request", 400)
    # An unknown project is an error on every transport, not an empty fixture (the engine decides).
    assert_error(post(http, "export_evaluation_set", {"project_id": "nosuch"}), "project_not_found", 404)


@pytest.fixture
def second_home() -> Iterator[TestClient]:
    """A second, empty in-memory home behind its own app."""
    engine = bootstrap_in_memory(scanner=InMemoryScanner(docs()))
    with TestClient(create_app(Context(engine, home="/home/second"))) as client:
        yield client
    engine.close()


def test_export_import_export_is_byte_identical(http: TestClient, second_home: TestClient, contract: Contract) -> None:
    ids = judged_cases(http)
    exported = ok(http, "export_evaluation_set", {"with_history": True})
    result = ok(second_home, "import_evaluation_set", {"fixture": exported})
    contract.validate("ImportResult", result)
    # Both projects see the same sources: one corpus of three bodies.
    assert result == {"cases_added": ids, "cases_unchanged": [], "corpora_added": 1, "blobs_written": 3}
    again = ok(second_home, "export_evaluation_set", {"with_history": True})
    first_bytes, again_bytes = api.EvaluationFixture(exported).to_bytes(), api.EvaluationFixture(again).to_bytes()
    assert first_bytes != again_bytes  # the export time differs...
    assert without_exported_at(first_bytes) == without_exported_at(again_bytes)  # ...and nothing else
    imported = ok(second_home, "list_evaluation_cases", {})["cases"]
    assert {c["provenance"] for c in imported} == {"fixture_import"}
    assert {c["original_provenance"] for c in imported} == {"run"}
    # Importing the same set again changes nothing.
    assert ok(second_home, "import_evaluation_set", {"fixture": exported}) == {
        "cases_added": [], "cases_unchanged": ids, "corpora_added": 0, "blobs_written": 0
    }


def test_import_errors_write_nothing(http: TestClient, second_home: TestClient) -> None:
    ids = judged_cases(http)
    exported = ok(http, "export_evaluation_set", {})

    def tampered(change: Any) -> dict[str, Any]:
        copy = json.loads(json.dumps(exported))
        change(copy)
        return copy  # type: ignore[no-any-return]

    def body(doc: dict[str, Any]) -> None:
        doc["bodies"][0]["content"] += "!"

    error = assert_error(post(second_home, "import_evaluation_set", {"fixture": tampered(body)}),
                         "evaluation_fixture_hash_mismatch", 400)
    assert error["details"]["place"] == "/bodies/0/content"

    def version(doc: dict[str, Any]) -> None:
        doc["format_version"] = 2

    error = assert_error(post(second_home, "import_evaluation_set", {"fixture": tampered(version)}),
                         "invalid_evaluation_fixture", 400)
    assert error["details"]["place"] == "/format_version"

    def grade(doc: dict[str, Any]) -> None:
        doc["cases"][1]["judgments"][0]["relevance"] = 4

    error = assert_error(post(second_home, "import_evaluation_set", {"fixture": tampered(grade)}),
                         "invalid_evaluation_fixture", 400)
    assert error["details"]["place"].startswith("/cases/1/judgments/0")
    assert_error(post(second_home, "import_evaluation_set", {"fixture": [exported]}), "invalid_request", 400)
    assert_error(post(second_home, "import_evaluation_set", exported), "invalid_request", 400)  # not wrapped
    assert ok(second_home, "list_evaluation_cases", {})["cases"] == []  # nothing written
    # A different record under an existing id is a conflict; nothing of the file is imported.
    ok(second_home, "import_evaluation_set", {"fixture": ok(http, "export_evaluation_set", {"case_ids": ids[:1]})})
    ok(http, "replace_evaluation_judgments", {"case_id": ids[0], "expected_judgment_version": 1, "judgments": []})
    changed = ok(http, "export_evaluation_set", {})
    error = assert_error(post(second_home, "import_evaluation_set", {"fixture": changed}),
                         "evaluation_import_conflict", 409)
    assert error["details"] == {"case_id": ids[0]}
    assert [c["case_id"] for c in ok(second_home, "list_evaluation_cases", {})["cases"]] == ids[:1]


def test_the_import_has_its_own_larger_body_limit(
    http: TestClient, context: Context, contract: Contract, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert TABLE["import_evaluation_set"].max_body_bytes == api.MAX_IMPORT_BODY_BYTES == 256 << 20
    assert all(m.max_body_bytes is None for m in TABLE.values() if m.name != "import_evaluation_set")
    paths = contract.document["paths"]
    assert paths["/v1/import_evaluation_set"]["post"]["x-max-body-bytes"] == api.MAX_IMPORT_BODY_BYTES
    assert paths["/v1/activate_memory"]["post"]["x-max-body-bytes"] == api.MAX_BODY_BYTES
    assert f"import_evaluation_set: {api.MAX_IMPORT_BODY_BYTES} bytes" in contract.document["info"]["description"]
    ids = judged_cases(http)
    body = json.dumps({"fixture": ok(http, "export_evaluation_set", {})}).encode()
    with TestClient(create_app(context, max_body_bytes=1024)) as small:
        assert len(body) > 1024
        assert small.post("/v1/import_evaluation_set", content=body).json()["cases_unchanged"] == ids
        assert_error(small.post("/v1/list_evaluation_cases", content=b"{}" + b" " * 1024), "request_too_large", 413)
        # Its own limit holds too.
        monkeypatch.setitem(TABLE, "import_evaluation_set",
                            attrs.evolve(TABLE["import_evaluation_set"], max_body_bytes=len(body) - 1))
        error = assert_error(small.post("/v1/import_evaluation_set", content=body), "request_too_large", 413)
        assert error["details"] == {"limit": len(body) - 1}
        assert small.post("/v1/runtime_status").status_code == 200


# -- fuzzing with real ids: 200 by the contract, or a 4xx envelope ------------------------------
EVALUATION_METHODS = sorted(m for m in TABLE if "evaluation" in m or m == "search_corpus_resources")
IDS = st.sampled_from(["<case>", "<run>", "<unit>", "notes.txt", "NOPE", ""])
NUMBERS = st.integers(-3, 5) | st.floats(allow_nan=False, allow_infinity=False)
VALUES = st.none() | st.booleans() | NUMBERS | st.text(max_size=6) | IDS
JUDGMENT = st.dictionaries(st.sampled_from(["unit_id", "resource_id", "relevance", "note", "x"]), VALUES, max_size=4)
FIELD_VALUES = VALUES | st.lists(JUDGMENT, max_size=3) | st.lists(IDS, max_size=2) | st.dictionaries(
    st.text(max_size=6), VALUES, max_size=2)
FIELDS = ["case_id", "run_id", "project_id", "case_ids", "text", "limit", "cursor", "expected_judgment_version",
          "judgments", "reviewed", "with_history", "fixture"]


@pytest.fixture(scope="module")
def fuzz_target() -> Iterator[tuple[TestClient, Contract, dict[str, str]]]:
    engine = bootstrap_in_memory(scanner=InMemoryScanner(docs()))
    from memory_core.entrypoints.daemon.openapi import build_document

    with TestClient(create_app(Context(engine, home="/h"))) as client:
        ok(client, "add_project", {"project_id": "ledger", "sources": SOURCES})
        ok(client, "index_project", {"project_id": "ledger"})
        run_id = ok(client, "activate_memory", QUERY)["run_id"]
        case_id = ok(client, "create_evaluation_case", {"run_id": run_id})["case_id"]
        unit = selected_unit(detail_of(client, case_id))
        yield client, Contract(build_document()), {"<case>": case_id, "<run>": run_id, "<unit>": unit}
    engine.close()


def filled(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        return ids.get(value, value)
    if isinstance(value, list):
        return [filled(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: filled(v, ids) for k, v in value.items()}
    return value


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(method=st.sampled_from(EVALUATION_METHODS),
       body=st.dictionaries(st.sampled_from(FIELDS), FIELD_VALUES, max_size=4))
def test_fuzzed_evaluation_calls_answer_by_the_contract(
    method: str, body: dict[str, Any], fuzz_target: tuple[TestClient, Contract, dict[str, str]]
) -> None:
    client, contract, ids = fuzz_target
    assert_by_contract(contract, method, post(client, method, filled(body, ids)))


# -- the typed client and ``memcore eval`` over the app ------------------------------------------
@pytest.fixture
def client(http: TestClient) -> DaemonClient:
    return DaemonClient("/nonexistent/memcore.sock", http=http)


def test_the_client_decodes_every_evaluation_response(client: DaemonClient, http: TestClient,
                                                      context: Context) -> None:
    indexed(http)
    answer = client.activate_memory("ledger", QUERY["query"])
    case = client.create_evaluation_case(answer.run_id)
    service = context.engine.evaluations()
    assert case == service.get_case(case.case_id)
    assert client.list_evaluation_cases() == [case] == client.list_evaluation_cases("ledger", [case.case_id])
    detail = client.get_evaluation_case(case.case_id)
    unit = next(c.unit_id for c in detail.trace.candidates if c.disposition == "selected")
    judged = client.replace_evaluation_judgments(case.case_id, 0, [Judgment.unit(unit, 3),
                                                                  Judgment.resource("notes.txt", 1)])
    assert judged == service.judgments(case.case_id) and judged.version == 1
    # A judgment file works as embedded, and a bad one fails here as it would there.
    with_file = client.replace_evaluation_judgments(case.case_id, 1, {"judgments": [{"unit_id": unit, "relevance": 2}]})
    assert with_file.version == 2
    with pytest.raises(InvalidJudgments):
        client.replace_evaluation_judgments(case.case_id, 2, {"judgments": [{"unit_id": unit, "relevance": 7}]})
    with pytest.raises(EvaluationJudgmentConflict) as conflict:
        client.replace_evaluation_judgments(case.case_id, 0, [])
    assert conflict.value.details["current_version"] == 2
    reviewed = client.mark_evaluation_reviewed(case.case_id, 2)
    assert reviewed.reviewed and reviewed == service.get_case(case.case_id)
    page = client.search_corpus_resources(case.case_id, "printer")
    assert [m.resource.resource_id for m in page.resources] == ["notes.txt"]
    assert plain(client.evaluation_report().to_report()) == plain(service.report())
    fixture = client.export_evaluation_set(with_history=True)
    assert without_exported_at(fixture.to_bytes()) == without_exported_at(service.export_fixture(with_history=True))
    result = client.import_evaluation_set(fixture.to_bytes())
    assert result == ImportResult((), (case.case_id,), 0, 0)
    with pytest.raises(InvalidFixture):
        client.import_evaluation_set(b"{not json")
    with pytest.raises(FixtureHashMismatch):
        broken = json.loads(fixture.to_bytes())
        broken["bodies"][0]["content"] += "!"
        client.import_evaluation_set(broken)
    with pytest.raises(EvaluationCaseNotFound):
        client.get_evaluation_case("NOPE")
    with pytest.raises(EvaluationRunNotSucceeded):
        client.create_evaluation_case(failed_run(http))
    with pytest.raises(RunNotFound):
        client.create_evaluation_case("01NOSUCHRUN")


def eval_json(engine: Any, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    args: argparse.Namespace = build_parser().parse_args(["eval", *argv])
    assert eval_commands.handle(engine, args, Path("/nonexistent/home")) == 0
    out = capsys.readouterr().out
    return json.loads(out) if "--json" in argv else out


def test_memcore_eval_answers_the_same_through_the_client_engine(
    http: TestClient, context: Context, client: DaemonClient, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ids = judged_cases(http)
    embedded: Engine = context.engine
    served = Operations(client)
    for argv in (["case", "list", "--json"], ["case", "list", "--project", "other", "--json"],
                 ["case", "show", ids[0], "--json"], ["report", "--json"], ["report", "--case", ids[1], "--json"],
                 ["report"], ["case", "list"]):
        assert eval_json(served, capsys, *argv) == eval_json(embedded, capsys, *argv), argv
    for engine, name in ((embedded, "embedded.json"), (served, "served.json")):
        eval_json(engine, capsys, "export", "--with-history", "--out", str(tmp_path / name))
    assert without_exported_at((tmp_path / "served.json").read_bytes()) == \
        without_exported_at((tmp_path / "embedded.json").read_bytes())
    # Writes through the client engine land in the engine.
    run_id = ok(http, "activate_memory", {**QUERY, "query": "helm rollback"})["run_id"]
    added = eval_json(served, capsys, "case", "create", run_id, "--json")
    assert added == wire.to_json(embedded.evaluations().get_case(added["case_id"]))
    (tmp_path / "j.json").write_text(json.dumps({"judgments": [{"resource_id": "notes.txt", "relevance": 2}]}))
    judged = eval_json(served, capsys, "judge", added["case_id"], "--file", str(tmp_path / "j.json"),
                       "--expected-version", "0", "--json")
    assert judged == wire.to_json(embedded.evaluations().judgments(added["case_id"]))
    reviewed = eval_json(served, capsys, "review", added["case_id"], "--expected-version", "1", "--json")
    assert reviewed["reviewed"] is True
    imported = eval_json(served, capsys, "import", str(tmp_path / "served.json"), "--json")
    assert imported == {"cases_added": [], "cases_unchanged": ids, "corpora_added": 0, "blobs_written": 0}


def test_memcore_eval_report_on_one_case_says_it_has_too_few_for_an_interval(
    http: TestClient, context: Context, capsys: pytest.CaptureFixture[str]
) -> None:
    """It printed a zero-width 95% CI and p 1.000 as if they meant something (issue 19)."""
    ids = judged_cases(http)
    text = eval_json(context.engine, capsys, "report", "--case", ids[0])
    # B4 against B1-B3 and the four registered fusions (issue 32): 7 per level.
    assert text.count("(n=1: too few paired cases for an interval or p-value (needs 6))") == 14
    assert "95% CI" not in text and "p 1.000" not in text
    doc = eval_json(context.engine, capsys, "report", "--case", ids[0], "--json")
    for level in doc["levels"].values():
        for c in level["comparisons"]:
            assert (c["ci95_low"], c["ci95_high"], c["p_value"]) == (None, None, None) and c["mean_diff"] is not None
            assert c["interval_reason"].startswith("n=1: too few")


def test_eval_commands_go_through_the_daemon_except_the_long_local_ones() -> None:
    from memory_core.entrypoints.cli.commands import EMBEDDED_ONLY, HANDLERS

    through = {action for command, action in HANDLERS if command == "eval" and ("eval", action) not in EMBEDDED_ONLY}
    assert through == {"case", "judge", "review", "report", "export", "import", "tune", "learn"}
    assert {("eval", "import-beir"), ("eval", "replay")} <= EMBEDDED_ONLY


# -- through the real daemon ------------------------------------------------------------------
class Homes:
    """Two homes and what each stage learned, for the next stage to check."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.facts: dict[str, Any] = {}

    def daemon(self, name: str, *args: str) -> Any:
        from .test_server import Daemon

        return Daemon(self.base / name, self.base / f"{name}.log", *args)


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> Homes:
    return Homes(tmp_path_factory.mktemp("evaluation"))


def memcore(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "memory_core", "--home", str(home), *args],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    return result


@pytest.mark.slow
def test_evaluation_through_the_real_daemon(homes: Homes) -> None:
    from .test_server import memory_folder

    daemon = homes.daemon("first")
    try:
        c = daemon.client
        c.add_project("ledger", [Source(str(memory_folder(homes.base / "memory")))])
        c.add_project("fresh", [Source(str(memory_folder(homes.base / "fresh")))])
        assert c.index_project("ledger").status == "built"
        answer = c.activate_memory("ledger", "how do I roll back a deploy?")
        unpinned = c.activate_memory("ledger", "advisory locks for idempotency keys")
        with pytest.raises(ProjectNotIndexed) as not_indexed:
            c.activate_memory("fresh", "deploy")
        with pytest.raises(EvaluationRunNotSucceeded):
            c.create_evaluation_case(not_indexed.value.details["run_id"])
        with pytest.raises(RunNotFound):
            c.create_evaluation_case("01NOSUCHRUN0000000000000000")

        case = c.create_evaluation_case(answer.run_id)
        cid = case.case_id
        run = c.get_retrieval_run(answer.run_id)
        assert run.summary.pinned and case.corpus_id == run.summary.effective_memory_hash
        detail = c.get_evaluation_case(cid)
        assert detail.trace.candidates == run.candidates
        assert {e.resource_id for e in detail.corpus.resources} == {"runbooks/deploy.md", "decisions.md", "notes.txt"}
        unit = next(x.unit_id for x in detail.trace.candidates if x.disposition == "selected")

        # Two editors on their own connections, both starting from version 0.
        with DaemonClient(daemon.socket, timeout=60) as alice, DaemonClient(daemon.socket, timeout=60) as bob:
            seen_by_bob = bob.get_evaluation_case(cid).judgments.version
            alice_version = alice.get_evaluation_case(cid).judgments.version
            assert alice.replace_evaluation_judgments(
                cid, alice_version, [Judgment.unit(unit, 3), Judgment.resource("notes.txt", 1)]
            ).version == 1
            with pytest.raises(EvaluationJudgmentConflict) as conflict:
                bob.replace_evaluation_judgments(cid, seen_by_bob, [Judgment.unit(unit, 2)])
            assert conflict.value.details["current_version"] == 1 == conflict.value.current_version
            current = bob.get_evaluation_case(cid).judgments
            merged = bob.replace_evaluation_judgments(
                cid, current.version, [*current.judgments, Judgment.resource("decisions.md", 0)]
            )
            assert merged.version == 2
        found = c.search_corpus_resources(cid, "printer")
        assert [(m.resource.resource_id, m.matched_in) for m in found.resources] == [("notes.txt", "body")]
        assert c.mark_evaluation_reviewed(cid, 2).reviewed
        report = c.evaluation_report("ledger")
        assert report.cases == 1 and report.reviewed_cases == 1 and report.levels["unit"].judged_cases == 1
        exported = c.export_evaluation_set("ledger", with_history=True)
        detail = c.get_evaluation_case(cid)
        assert [s.version for s in detail.judgment_history] == [1, 2]

        # Clear History deletes the unpinned Run and keeps the case's pinned one.
        cleared = c.clear_retrieval_runs("ledger")
        assert cleared.kept_pinned == 1 and cleared.deleted_runs == 1
        with pytest.raises(RunNotFound):
            c.get_retrieval_run(unpinned.run_id)
        assert c.get_retrieval_run(answer.run_id) == run
        assert c.get_evaluation_case(cid) == detail
        assert without_exported_at(c.export_evaluation_set("ledger", with_history=True).to_bytes()) == \
            without_exported_at(exported.to_bytes())
        homes.facts.update(case_id=cid, run=run, detail=detail, exported=exported,
                           report=report, home=homes.base / "first")
    finally:
        assert daemon.stop() == 0


@pytest.mark.slow
def test_a_case_survives_a_restart_and_memcore_eval_goes_through_the_daemon(homes: Homes) -> None:
    facts = homes.facts
    assert "detail" in facts, "run the module's tests in order"
    home: Path = facts["home"]
    daemon = homes.daemon("first", "--no-warm")
    try:
        c = daemon.client
        assert c.get_evaluation_case(facts["case_id"]) == facts["detail"]
        assert c.get_retrieval_run(facts["run"].summary.run_id) == facts["run"]
        assert c.evaluation_report("ledger") == facts["report"]
        assert without_exported_at(c.export_evaluation_set("ledger", with_history=True).to_bytes()) == \
            without_exported_at(facts["exported"].to_bytes())

        # ``memcore eval`` while the daemon runs: every command is a daemon call.
        cid = facts["case_id"]
        served = {
            "cases": memcore(home, "eval", "case", "list", "--json").stdout,
            "show": memcore(home, "eval", "case", "show", cid, "--json").stdout,
            "report": memcore(home, "eval", "report", "--project", "ledger", "--json").stdout,
        }
        memcore(home, "eval", "export", "--with-history", "--out", str(homes.base / "served.json"))
        imported = json.loads(memcore(home, "eval", "import", str(homes.base / "served.json"), "--json").stdout)
        assert imported["cases_unchanged"] == [cid]
        (homes.base / "j.json").write_text(json.dumps({"judgments": [{"resource_id": "notes.txt", "relevance": 3}]}))
        judged = json.loads(memcore(home, "eval", "judge", cid, "--file", str(homes.base / "j.json"),
                                    "--expected-version", "2", "--json").stdout)
        assert judged["version"] == 3
        reviewed = json.loads(memcore(home, "eval", "review", cid, "--expected-version", "3", "--json").stdout)
        assert reviewed["reviewed"] is True
        # A Run of this daemon (indexes built by the first one) becomes a case through the CLI.
        run_id = c.activate_memory("ledger", "where is the coffee?").run_id
        added = json.loads(memcore(home, "eval", "case", "create", run_id, "--json").stdout)
        assert added["source_run_id"] == run_id and c.get_retrieval_run(run_id).summary.pinned
        served["cases after"] = memcore(home, "eval", "case", "list", "--json").stdout
        served["show after"] = memcore(home, "eval", "case", "show", cid, "--json").stdout
        served["report after"] = memcore(home, "eval", "report", "--json").stdout
        memcore(home, "eval", "export", "--out", str(homes.base / "served-after.json"))
        methods = {r.get("method") for r in daemon.log_records() if r.get("message") == "request"}
    finally:
        assert daemon.stop() == 0
    assert {"list_evaluation_cases", "get_evaluation_case", "evaluation_report", "export_evaluation_set",
            "import_evaluation_set", "replace_evaluation_judgments", "mark_evaluation_reviewed",
            "create_evaluation_case"} <= methods
    # Embedded, on the same home, the same commands answer the same.
    assert json.loads(memcore(home, "eval", "case", "list", "--json").stdout) == json.loads(served["cases after"])
    assert json.loads(memcore(home, "eval", "case", "show", cid, "--json").stdout) == json.loads(served["show after"])
    assert json.loads(memcore(home, "eval", "report", "--json").stdout) == json.loads(served["report after"])
    memcore(home, "eval", "export", "--out", str(homes.base / "embedded.json"))
    assert without_exported_at((homes.base / "embedded.json").read_bytes()) == \
        without_exported_at((homes.base / "served-after.json").read_bytes())
    # What the CLI showed through the daemon is what the typed client got.
    assert json.loads(served["show"])["judgments"]["version"] == 2
    assert json.loads(served["report"]) == plain(facts["report"].to_report())


@pytest.mark.slow
def test_export_import_export_across_two_daemons_is_byte_identical(homes: Homes) -> None:
    facts = homes.facts
    assert "exported" in facts, "run the module's tests in order"
    exported: api.EvaluationFixture = facts["exported"]
    daemon = homes.daemon("second", "--no-warm")
    try:
        c = daemon.client
        tampered = json.loads(exported.to_bytes())
        tampered["cases"][0]["trace"]["query"] += "!"
        with pytest.raises(FixtureHashMismatch):
            c.import_evaluation_set(tampered)
        assert c.list_evaluation_cases() == []
        result = c.import_evaluation_set(exported.to_bytes())
        assert result.cases_added == (facts["case_id"],) and result.corpora_added == 1 and result.blobs_written == 3
        again = c.export_evaluation_set("ledger", with_history=True).to_bytes()
        assert again != exported.to_bytes()
        assert without_exported_at(again) == without_exported_at(exported.to_bytes())
        imported = c.get_evaluation_case(facts["case_id"])
        assert imported.case.provenance == "fixture_import" and imported.case.reviewed
        assert imported.judgment_history == facts["detail"].judgment_history
        assert c.import_evaluation_set(exported).cases_unchanged == (facts["case_id"],)
    finally:
        assert daemon.stop() == 0
