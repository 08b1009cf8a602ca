"""The Runtime page's watcher panel: each project's watch, last change, last re-index, pending
changes and errors, as ``runtime_status`` reports them (real daemon, real Chromium)."""

from __future__ import annotations

import re
import time
from typing import Any

from playwright.sync_api import expect

from .conftest import PROJECT, UNINDEXED, UiDaemon, shoot

WAIT_S = 60.0


def test_runtime_page_shows_each_projects_watch(page: Any, ui_daemon: UiDaemon) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:  # the watches start right after the daemon, asynchronously
        health = {h.project_id: h for h in ui_daemon.client.runtime_status().projects}
        if all(p in health and health[p].watching for p in (PROJECT, UNINDEXED)) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert health[PROJECT].watching and health[PROJECT].indexed
    page.goto(ui_daemon.url("/runtime"))
    watcher = page.get_by_role("table", name="Watcher health")
    indexed = watcher.get_by_role("row", name=re.compile(f"^{PROJECT} "))
    expect(indexed).to_contain_text("watching")
    unindexed = watcher.get_by_role("row", name=re.compile(f"^{UNINDEXED} "))
    expect(unindexed).to_contain_text("not indexed yet")
    last = health[PROJECT].last_reindex
    if last is not None:  # the start-up check, once it ran
        expect(indexed).to_contain_text(last.status)
    shoot(page, "runtime-watcher")
