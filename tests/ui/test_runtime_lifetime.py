"""The Runtime page says whether the daemon stops by itself, and an open page is a client: it
keeps an on-demand daemon from stopping idle, and closing it lets the daemon stop (real daemon,
real Chromium, short idle limits, bounded waits)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from memory_core.entrypoints.daemon import launcher
from memory_core.entrypoints.ui.launch import read_ui_info
from tests.daemon.process import alive

from .conftest import WIDE, Console, UiDaemon

pytestmark = pytest.mark.slow
BOUND_S = 60.0


def test_a_daemon_started_by_serve_says_it_runs_until_stopped(page: Any, ui_daemon: UiDaemon) -> None:
    page.goto(ui_daemon.url("/runtime"))
    lifetime = page.locator("main dt:has-text('Lifetime') + dd")
    expect(lifetime).to_have_text("started by memcore serve; runs until stopped")


def test_an_open_page_keeps_an_on_demand_daemon_and_closing_it_lets_it_stop(
    browser: Any, console: Console, tmp_path: Path
) -> None:
    home, limit = tmp_path / "home", 3.0
    with launcher.ensure_daemon(home, idle_exit_s=limit, extra_args=["--no-warm"], client_timeout=10) as client:
        pid = client.runtime_status().pid
        info = read_ui_info(home)
        assert info is not None and info.pid == pid
        context = browser.new_context(viewport=WIDE)
        page = console.watch(context.new_page())
        page.goto(info.url)  # the launch address, as `memcore ui` prints it
    try:
        lifetime = page.locator("main dt:has-text('Lifetime') + dd")
        expect(lifetime).to_contain_text("started on demand (memcore mcp or ui); stops after 3s idle")
        time.sleep(4 * limit)  # only the open page's heartbeat keeps it
        assert alive(pid), "the daemon stopped while its UI page was open"
        assert console.unexpected() == [], console.unexpected()
    finally:
        context.close()
    deadline = time.monotonic() + BOUND_S
    while alive(pid):
        assert time.monotonic() < deadline, "the daemon did not stop once its page was closed"
        time.sleep(0.1)
