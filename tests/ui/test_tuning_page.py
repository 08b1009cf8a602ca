"""The evaluation page's tuning panel in a real browser (issue 18): the project's profile, a tuning
on its reviewed cases whose verdict and figures are the stored tuning's, a refusal said plainly,
and a proposal applied with one action when there is one."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import PROJECT, Console, UiDaemon, shoot

pytestmark = pytest.mark.slow

QUERIES = ("how do I roll back the ledger deploy?", "database failover replica", "advisory locks idempotency",
           "transactional outbox events", "page the on-call engineer", "helm upgrade atomic",
           "replay the outbox after a rollback")  # fmt: skip
DEPLOY, INCIDENT, LOCKS, OUTBOX = ("runbooks/deploy.md", "runbooks/incident.md",
                                   "decisions/ADR-0004-advisory-locks.md", "decisions/ADR-0007-outbox.md")  # fmt: skip
RELEVANT = (DEPLOY, INCIDENT, LOCKS, OUTBOX, INCIDENT, DEPLOY, OUTBOX)


def four(value: float) -> str:
    """What the page's fmtNum(value, 4) shows: integers plainly."""
    return str(int(value)) if float(value).is_integer() else f"{value:.4f}"


def test_the_tuning_panel_tunes_on_reviewed_cases_and_says_its_verdict(
    page: Any, ui_daemon: UiDaemon, console: Console
) -> None:
    console.allow(r"status of 409")  # Chromium logs the refused tuning's fetch (evaluation_set_empty is a 409)
    page.goto(ui_daemon.url(f"/evaluation?project={PROJECT}"))
    profile = ui_daemon.call("show_project_profile", project_id=PROJECT)
    expect(page.locator("#profile")).to_contain_text(profile.ranking_profile)
    if not any(c.reviewed for c in ui_daemon.call("list_evaluation_cases", project_id=PROJECT).cases):
        page.get_by_role("button", name="Tune on reviewed cases").click()
        expect(page.get_by_role("alert")).to_contain_text("evaluation_set_empty")  # refused: nothing reviewed yet

    for query, resource in zip(QUERIES, RELEVANT, strict=True):
        case = ui_daemon.call("create_evaluation_case", run_id=ui_daemon.activate(query))
        judged = ui_daemon.call("replace_evaluation_judgments", case_id=case.case_id, expected_judgment_version=0,
                                judgments=[{"resource_id": resource, "relevance": 2}])  # fmt: skip
        ui_daemon.call("mark_evaluation_reviewed", case_id=case.case_id, expected_judgment_version=judged.version)
    page.reload()
    page.get_by_role("button", name="Tune on reviewed cases").click()
    expect(page.locator("#tune-verdict")).to_be_visible()
    stored = ui_daemon.call("list_tunings", project_id=PROJECT).tunings[0]
    expect(page.locator("#tune-verdict")).to_have_text(stored.verdict)
    assert stored.cases >= len(QUERIES) and stored.current_metrics is not None
    current = page.locator("#tune-metrics tr[data-row='current'] td")
    expect(current.nth(0)).to_have_text(four(stored.current_metrics.ndcg_at_10))
    expect(current.nth(2)).to_have_text(four(stored.current_metrics.mrr))
    tuned = page.locator("#tune-metrics tr[data-row='tuned'] td")
    expect(tuned.nth(0)).to_have_text(four(stored.cross_validated.ndcg_at_10))
    shoot(page, "evaluation-tuning")
    if stored.proposed:
        page.get_by_role("button", name="Apply the proposal").click()
        expect(page.locator("#notice")).to_contain_text("Applied")
        after = ui_daemon.call("show_project_profile", project_id=PROJECT)
        assert after.in_use is not None and after.in_use.source == f"tune:{stored.tune_id}"
        expect(page.locator("#profile")).to_contain_text(after.ranking_profile)
    else:
        expect(page.get_by_role("button", name="Apply the proposal")).to_have_count(0)
