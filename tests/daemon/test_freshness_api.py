"""Freshness over HTTP (issue 15): the activation answer says how far the index lags the sources,
and ``get_retrieval_run`` returns the Effective Memory a Run saw when asked (real app and
dispatch, in-memory engine; the real-adapter path is tests/integration/test_live_memory.py)."""

from __future__ import annotations

from starlette.testclient import TestClient

from memory_core.adapters.in_memory.storage import InMemoryScanner
from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.daemon.dispatch import Context
from memory_core.runs.records import RunDetail

from .conftest import ORG, PROJ, Contract
from .test_api import indexed, ok

QUERY = {"project_id": "ledger", "query": "how do I roll back a deploy? advisory locks"}


def test_an_answer_carries_its_freshness_and_a_run_its_live_manifest(
    http: TestClient, context: Context, scanner: InMemoryScanner, contract: Contract
) -> None:
    indexed(http)
    current = ok(http, "activate_memory", QUERY)
    contract.validate("ActivationResponse", current)
    assert current["freshness"] == {
        "live": True, "index_behind": False, "changed_resources": 0, "reindex_pending": False,
        "effective_memory_hash": current["revisions"]["effective_memory_hash"],
        "stale_resources": [], "missing_resources": [], "error": None,
    }  # fmt: skip
    returned = {f["resource_id"] for f in current["fragments"]}
    assert {"runbooks/deploy.md", "decisions/ADR-0004-advisory-locks.md"} <= returned

    scanner.write(
        PROJ, "runbooks/deploy.md", b"# Deploy runbook\n\nDeploy with argo now.\n\n## Rollback\n\nargo undo.\n"
    )
    scanner.remove(PROJ, "decisions/ADR-0004-advisory-locks.md")
    lagging = ok(http, "activate_memory", QUERY)
    contract.validate("ActivationResponse", lagging)
    assert [f["unit_id"] for f in lagging["fragments"]] == [f["unit_id"] for f in current["fragments"]]
    freshness = lagging["freshness"]
    assert freshness["live"] and freshness["index_behind"] and freshness["changed_resources"] == 2
    assert freshness["stale_resources"] == ["runbooks/deploy.md"]
    assert freshness["missing_resources"] == ["decisions/ADR-0004-advisory-locks.md"]

    plain = ok(http, "get_retrieval_run", {"run_id": lagging["run_id"]})
    assert plain["manifest"] is None  # only on request: a manifest can be large
    detail = ok(http, "get_retrieval_run", {"run_id": lagging["run_id"], "manifest": True})
    contract.validate("RunDetail", detail)
    decoded = api.structure(api.make_converter(), detail, RunDetail)
    assert decoded == context.engine.get_run(lagging["run_id"], manifest=True)
    live = {e["resource_id"]: e["resource_hash"] for e in detail["manifest"]}
    assert detail["summary"]["effective_memory_hash"] == freshness["effective_memory_hash"]
    assert detail["revisions"]["effective_memory_hash"] == current["revisions"]["effective_memory_hash"]
    assert "decisions/ADR-0004-advisory-locks.md" not in live and set(live) == {
        "runbooks/deploy.md", "notes.txt"
    }  # fmt: skip
    stale = {c["resource_id"] for c in detail["candidates"] if live.get(c["resource_id"], c["resource_hash"]) !=
             c["resource_hash"]}  # fmt: skip
    assert stale == {"runbooks/deploy.md"}


def test_a_vanished_source_is_said_not_failed(http: TestClient, scanner: InMemoryScanner, contract: Contract) -> None:
    indexed(http)
    before = ok(http, "activate_memory", QUERY)
    del scanner.sources[ORG]
    after = ok(http, "activate_memory", QUERY)
    contract.validate("ActivationResponse", after)
    assert [f["unit_id"] for f in after["fragments"]] == [f["unit_id"] for f in before["fragments"]]
    freshness = after["freshness"]
    assert freshness["live"] is False and freshness["index_behind"] is None
    assert ORG in freshness["error"] and freshness["changed_resources"] is None
    run = ok(http, "get_retrieval_run", {"run_id": after["run_id"]})
    assert run["summary"]["status"] == "succeeded"
