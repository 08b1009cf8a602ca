"""The Runtime page's jobs panel (issue 31, item 2): the jobs ``list_jobs`` answers, how each
ended, and no "busy (0 call(s) ...)" engine line (real daemon, real Chromium)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from memory_core.domain.evaluation_errors import EvaluationSetEmpty

from .conftest import UNINDEXED, UiDaemon, shoot


def test_runtime_page_lists_the_jobs_and_how_they_ended(page: Any, ui_daemon: UiDaemon) -> None:
    with pytest.raises(EvaluationSetEmpty):  # a job that fails at once: no case of this project
        ui_daemon.client.tune_project(UNINDEXED)
    (ended,) = [j for j in ui_daemon.client.list_jobs().jobs if j.project_id == UNINDEXED]
    assert (ended.state, ended.error_code, ended.cancellable) == ("failed", "evaluation_set_empty", False)

    page.goto(ui_daemon.url("/runtime"))
    row = page.get_by_role("table", name="Jobs").get_by_role("row", name=re.compile(f"^tune_project {ended.job_id}"))
    expect(row).to_contain_text(UNINDEXED)
    expect(row).to_contain_text("failed (evaluation_set_empty)")
    expect(row.get_by_role("button", name="Cancel")).to_have_count(0)  # an ended job is not cancellable
    expect(page.locator("main dt:has-text('Engine') + dd")).not_to_contain_text("0 call(s)")
    shoot(page, "runtime-jobs")
