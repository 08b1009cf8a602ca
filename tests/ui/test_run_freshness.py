"""The Run page names the resources that were stale or deleted when the index lagged (issue 15),
in real Chromium against the real daemon and its UI.

The lagging Run is made by an embedded engine on the daemon's home (a second process on one home
is supported): it indexes its own project, then a file is edited and another deleted, and it
answers at once -- before the daemon's watcher, which picks up projects added elsewhere within
five seconds, could re-index it.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from memory_core.domain.model import Source
from memory_core.entrypoints.bootstrap import bootstrap

from .conftest import PROJECT, UiDaemon, shoot

pytestmark = pytest.mark.slow


def test_the_run_page_shows_which_resources_were_stale_or_missing(page: Any, ui_daemon: UiDaemon) -> None:
    folder = ui_daemon.base / "lagging-memory"
    folder.mkdir()
    (folder / "wing.md").write_text("# Wing flutter\n\nSupersonic wing flutter and the boundary layer.\n", "utf-8")
    (folder / "layer.md").write_text("# Boundary layer\n\nThe boundary layer over a supersonic wing.\n", "utf-8")
    (folder / "nozzle.md").write_text("# Nozzle\n\nA convergent nozzle chokes at the throat.\n", "utf-8")
    engine = bootstrap(ui_daemon.home, recover=False)
    try:
        engine.activate(PROJECT, "warm up the models")  # so the steps below take a moment only
        engine.add_project("lagging", [Source(str(folder))])
        engine.index("lagging")
        (folder / "wing.md").write_text("# Wing flutter\n\nRewritten since the index.\n", "utf-8")
        (folder / "layer.md").unlink()
        response = engine.activate("lagging", "supersonic wing boundary layer").response
        assert response.freshness.index_behind, "the daemon re-indexed first; the Run would not lag"
        current = engine.activate(PROJECT, "how do we roll back?").response
    finally:
        engine.close()

    page.goto(ui_daemon.url(f"/retrieval/runs/{response.run_id}"))
    panel = page.locator("#index-lag")
    expect(panel).to_contain_text("The index lagged the sources")
    expect(panel.locator("#lag-stale")).to_have_text("wing.md")
    expect(panel.locator("#lag-missing")).to_have_text("layer.md")
    shoot(page, "run-index-lagged")

    page.goto(ui_daemon.url(f"/retrieval/runs/{current.run_id}"))
    expect(page.locator("#index-lag")).to_contain_text("The index matched the sources")
