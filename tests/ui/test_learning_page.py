"""The evaluation page's learned-ranker panel in a real browser (issue 32, item 2): a learning on
the project's reviewed cases whose verdict, gain and most important features are the stored
learning's, shown again on the next visit, and its model put in use with one action only when
it was proposed."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import PROJECT, Console, UiDaemon, shoot
from .test_tuning_page import QUERIES, RELEVANT

pytestmark = pytest.mark.slow


def test_the_learning_panel_learns_on_reviewed_cases_and_shows_its_gain_and_features(
    page: Any, ui_daemon: UiDaemon, console: Console
) -> None:
    console.allow(r"status of 409")  # a learning refused while nothing is reviewed (evaluation_set_empty)
    if sum(c.reviewed for c in ui_daemon.call("list_evaluation_cases", project_id=PROJECT).cases) < len(QUERIES):
        for query, resource in zip(QUERIES, RELEVANT, strict=True):
            case = ui_daemon.call("create_evaluation_case", run_id=ui_daemon.activate(query))
            judged = ui_daemon.call("replace_evaluation_judgments", case_id=case.case_id, expected_judgment_version=0,
                                    judgments=[{"resource_id": resource, "relevance": 2}])  # fmt: skip
            ui_daemon.call("mark_evaluation_reviewed", case_id=case.case_id, expected_judgment_version=judged.version)
    page.goto(ui_daemon.url(f"/evaluation?project={PROJECT}"))
    page.get_by_role("button", name="Learn from reviewed cases").click()
    expect(page.locator("#learn-verdict")).to_be_visible()
    stored = _shows_the_latest_learning(page, ui_daemon)
    if stored.model_digest is None:
        # On this page's few cases the grid's inner folds may keep the current ranking (no model).
        # A learning with the shipped learner alone, as a job's process runs it on the same home,
        # has a model: the page shows the latest learning on the next visit, with its features.
        from memory_core.entrypoints.bootstrap import bootstrap
        from memory_core.evaluation.learning import LearnerSetting

        with bootstrap(ui_daemon.home) as engine:
            engine.learn_project(PROJECT, settings=(LearnerSetting(),))
        page.reload()
        stored = _shows_the_latest_learning(page, ui_daemon)
        assert stored.model_digest is not None, stored.verdict
    shoot(page, "evaluation-learning")
    page.reload()  # the latest learning is shown on the next visit
    expect(page.locator("#learn-verdict")).to_have_text(stored.verdict)
    if stored.proposed:
        page.get_by_role("button", name="Rank with this model").click()
        expect(page.locator("#notice")).to_contain_text("Applied")
        after = ui_daemon.call("show_project_profile", project_id=PROJECT)
        assert after.in_use is not None and after.in_use.source == f"learn:{stored.learn_id}"
    else:
        expect(page.get_by_role("button", name="Rank with this model")).to_have_count(0)


def _shows_the_latest_learning(page: Any, ui_daemon: UiDaemon) -> Any:
    """The panel shows the project's latest stored learning: verdict, gain, setting, model."""
    stored = ui_daemon.call("list_learnings", project_id=PROJECT).learnings[0]
    expect(page.locator("#learn-verdict")).to_have_text(stored.verdict)
    panel = page.locator("#learn-result")
    if stored.gain is not None:
        expect(panel).to_contain_text(f"{stored.gain:+.4f}".lstrip("+") if stored.gain < 0 else f"+{stored.gain:.4f}")
    if stored.chosen_setting is not None:
        expect(panel).to_contain_text(stored.chosen_setting)
    # The page's cases were recorded with their spans: every window unit had its text, no warning.
    assert stored.text_units == stored.training_rows > 0
    expect(panel).to_contain_text(f"{stored.text_units} of {stored.training_rows} (100.0 %)")
    expect(page.locator("#learn-text-warning")).to_have_count(0)
    if stored.model_digest is not None:
        expect(panel).to_contain_text(stored.model_digest[:12])
        expect(panel).to_contain_text(stored.importances[0].feature)
    else:
        expect(page.get_by_role("button", name="Rank with this model")).to_have_count(0)
    return stored
