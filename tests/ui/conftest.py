"""UI test fixtures: a real daemon with its UI (a subprocess on a temp home, a small indexed
project) and Debian's Chromium driven by Playwright (never a downloaded browser).

Screenshots go to ``test-output/screenshots/`` at the repository root (git-ignored); the README's
copies in ``docs/screenshots/`` are refreshed from there by hand.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from memory_core.domain.model import Source
from memory_core.entrypoints.daemon import api, paths
from memory_core.entrypoints.daemon.client import DaemonClient
from memory_core.entrypoints.ui.launch import UiInfo, read_ui_info
from tests.daemon.process import DaemonProcess

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-output" / "screenshots"
CHROMIUM = Path(os.environ.get("MEMCORE_TEST_CHROMIUM", "/usr/bin/chromium"))
# Headless Chromium as root, offline (brief §12); Playwright's own browser is never used.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
START_TIMEOUT_S = 90
WIDE = {"width": 1280, "height": 900}
NARROW = {"width": 390, "height": 844}
PROJECT = "ledger"
UNINDEXED = "pending"
SMALL_BUDGET = 60  # a few fragments: some units and resources go unselected (missed evidence)

MEMORY = {
    "runbooks/deploy.md": "# Deploy runbook\n\nDeploy the ledger with helm upgrade --atomic.\n\n"
    "## Rollback\n\nRoll back with helm rollback ledger, then replay the outbox.\n",
    "runbooks/incident.md": "# Incident response\n\nPage the on-call engineer and open an incident channel.\n\n"
    "## Database failover\n\nPromote the replica with pg_ctl promote, then repoint the ledger.\n",
    "decisions/ADR-0004-advisory-locks.md": "# ADR-0004: Advisory locks\n\n"
    "Use Postgres advisory locks for idempotency keys.\n",
    "decisions/ADR-0007-outbox.md": "# ADR-0007: Transactional outbox\n\n"
    "Publish ledger events through a transactional outbox table, replayed after a rollback.\n",
    "notes.txt": "Coffee is on the second floor.\n\nThe printer is broken.\n",
}


class UiDaemon(DaemonProcess):
    """``memory_core.entrypoints.daemon`` in a subprocess, its UI on a free loopback port."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.home = base / "home"
        self.memory = base / "memory"
        for rel, text in MEMORY.items():
            (self.memory / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.memory / rel).write_text(text, encoding="utf-8")
        tmp = base / "tmp"
        tmp.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("MEMORY_CORE_HOME", "MEMORY_CORE_CRASH_POINT")}
        env.update(TMPDIR=str(tmp), PYTHONUNBUFFERED="1")
        self.log = base / "daemon.log"
        self._stderr = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memory_core.entrypoints.daemon", "--home", str(self.home), "--ui-port", "0"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self._stderr,
        )
        self.client = DaemonClient(paths.default_socket_path(self.home), timeout=180)
        self.info = self._wait()

    def _wait(self) -> UiInfo:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.log.read_text()}")
            info = read_ui_info(self.home)
            if info is not None and info.pid == self.proc.pid:
                try:
                    self.client.runtime_status()
                    return info
                except api.DaemonUnavailable:
                    pass
            if time.monotonic() > deadline:
                raise AssertionError(f"daemon did not answer:\n{self.log.read_text()}")
            time.sleep(0.05)

    def url(self, path: str = "/") -> str:
        return self.info.base_url.rstrip("/") + path

    def launch(self, path: str = "/") -> str:
        """``path`` with this start's token in the fragment, as ``memcore ui`` opens the base."""
        return f"{self.url(path)}#{urlencode({'token': self.info.token})}"

    def call(self, method: str, **fields: Any) -> Any:
        """A dispatch-table call over the Unix socket (what the CLI does), typed both ways."""
        from memory_core.entrypoints.daemon import dispatch

        request = api.structure(api.make_converter(), fields, dispatch.lookup(method).request)
        return self.client.call(method, request)

    def activate(self, query: str, budget: int = SMALL_BUDGET) -> str:
        run_id = self.client.activate_memory(PROJECT, query, budget=budget).run_id
        assert run_id is not None
        return run_id


@pytest.fixture(scope="session")
def ui_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiDaemon]:
    daemon = UiDaemon(tmp_path_factory.mktemp("ui"))
    try:
        daemon.client.add_project(PROJECT, [Source(str(daemon.memory))])
        daemon.client.index_project(PROJECT)
        daemon.client.add_project(UNINDEXED, [Source(str(daemon.memory))])
        yield daemon
    finally:
        assert daemon.stop() == 0, daemon.log.read_text()


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: install Debian's `chromium` package (`./dev test` does)")
    from playwright.sync_api import sync_playwright

    # The driver makes its profile and download folders under TMPDIR: keep them in the test's tmp.
    scratch = tmp_path_factory.mktemp("chromium")
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(scratch)
    try:
        manager = sync_playwright().start()
    finally:
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
    chromium = manager.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
    try:
        yield chromium
    finally:
        chromium.close()
        manager.stop()


class Console:
    """Every console error and uncaught page error of a test's pages; the test fails on any
    that it did not expect (``allow``)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.allowed: list[re.Pattern[str]] = []

    def watch(self, page: Any) -> Any:
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        return page

    def allow(self, pattern: str) -> None:
        self.allowed.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def session(browser: Any, ui_daemon: UiDaemon, console: Console) -> Iterator[Any]:
    """A fresh browser context whose first tab opened the launch address (so the page holds the
    token in that tab's sessionStorage)."""
    context = browser.new_context(viewport=WIDE, accept_downloads=True)
    try:
        page = console.watch(context.new_page())
        page.goto(ui_daemon.info.url)
        page.wait_for_load_state("networkidle")
        yield context
        assert console.unexpected() == [], "console errors:\n" + "\n".join(console.unexpected())
    finally:
        context.close()


@pytest.fixture
def page(session: Any) -> Any:
    return session.pages[0]


def new_page(session: Any, console: Console, ui_daemon: UiDaemon) -> Any:
    """Another tab of the same browser, opened from the launch address (each tab keeps the token
    in its own sessionStorage), watched for console errors too."""
    page = console.watch(session.new_page())
    page.goto(ui_daemon.launch())
    page.wait_for_load_state("networkidle")
    return page


def shoot(page: Any, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(target), full_page=full_page)
    return target


def fits_width(page: Any) -> bool:
    """No horizontal page scroll: wide tables and charts scroll inside their own boxes."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"))


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
