"""The Evaluation page shows what the agent was given (issue 18 item 5): B4's wasted tokens,
relevant items per 1,000 returned tokens and reuse that skipped a changed unit, as the report says."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from memory_core.evaluation.metric_registry import JUDGED, RANKING, of_kind

from .conftest import PROJECT, UiDaemon
from .test_browser import js_number, make_case

pytestmark = pytest.mark.slow


def shown(value: float | None, digits: int) -> str:
    """What the page's fmtNum shows with ``digits`` decimals."""
    if value is None:
        return "—"
    return str(int(value)) if float(value).is_integer() else f"{value:.{digits}f}"


def test_evaluation_page_shows_what_the_agent_was_given(page: Any, ui_daemon: UiDaemon) -> None:
    case_id, detail = make_case(ui_daemon, "rollback runbook for a failed deploy")
    selected = [c for c in detail.trace.candidates if c.disposition == "selected" and c.delta_action != "reuse"]
    assert len(selected) >= 2, "the small memory returns at least two fragments"
    # One returned fragment judged irrelevant, one relevant.
    ui_daemon.call(
        "replace_evaluation_judgments", case_id=case_id, expected_judgment_version=0,
        judgments=[{"unit_id": selected[0].unit_id, "relevance": 0},
                   {"unit_id": selected[1].unit_id, "relevance": 2}],
    )  # fmt: skip
    case = ui_daemon.call("get_evaluation_case", case_id=case_id)
    own = case.metrics["unit"]["b4_reranked"]
    tokens = sum(c.token_count for c in selected)
    assert own["wasted_tokens"] == selected[0].token_count
    assert own["relevant_per_1k_tokens"] == pytest.approx(1000.0 / tokens)
    assert own["changed_unit_reuse"] == 0  # the index is current

    report = ui_daemon.call("evaluation_report", project_id=PROJECT)
    b4 = report.levels["unit"].variants["b4_reranked"]
    page.goto(ui_daemon.url(f"/evaluation?project={PROJECT}"))
    table = page.locator("#returned")
    expect(table).to_be_visible()
    for metric, digits in (("wasted_tokens", 1), ("relevant_per_1k_tokens", 2), ("changed_unit_reuse", 2)):
        cells = table.locator(f"tr[data-metric='{metric}'] td")
        expect(cells.nth(0)).to_have_text(shown(b4[metric].mean, digits))
        expect(cells.nth(1)).to_have_text(str(b4[metric].counted))
        expect(cells.nth(2)).to_have_text(str(b4[metric].excluded))
    # The ranking table's columns are the registry's ranking metrics, in its order, each explained.
    ranking = of_kind(JUDGED, RANKING)
    headers = page.locator("#benchmark thead th")
    expect(headers).to_have_text(["Variant", *(m.label for m in ranking), "Warm p50", "Warm p95"])
    expect(headers.nth(2)).to_have_attribute("title", f"{ranking[1].definition} ({ranking[1].source})")
    expect(page.locator("#benchmark tr[data-variant='b4_reranked'] td").nth(1)).to_have_text(
        js_number(b4["ndcg@10"].mean)
    )
    page.locator("#level").select_option("resource")
    resource = report.levels["resource"].variants["b4_reranked"]
    expect(table.locator("tr[data-metric='wasted_tokens'] td").nth(0)).to_have_text(
        shown(resource["wasted_tokens"].mean, 1)
    )
