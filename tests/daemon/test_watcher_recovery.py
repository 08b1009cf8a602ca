"""The watcher keeps work it could not do yet (issue 30 item 4 and two of its smaller points):
changes seen while a project's re-indexes are paused (its storage moving), re-indexes that failed
(a full disk), names that are not valid UTF-8, and index requests waiting behind another project.

The real ``Watcher`` in process, following real folders with ``watchfiles``, re-indexing through
the product's engine (``engine_for``: the cheap embedder). A fault comes from ``FaultyIndexer``:
the real engine, except that while armed its ``index`` raises what a full disk raises, and its
gate can hold a build to keep the worker busy. Every wait polls the watcher's own health.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from memory_core.adapters.files.watch_health import RETRY_FIRST_S, UNDECODABLE_FOLDER, retry_delay
from memory_core.adapters.files.watcher import ProjectHealth, Watcher, parse_progress
from memory_core.domain.model import Source
from memory_core.domain.progress import Progress, no_progress
from memory_core.services.engine import Engine
from memory_core.services.indexing import IndexReport
from tests.daemon.test_watcher import wait_for
from tests.reliability.harness import engine_for, write_memory

WAIT_S = 60.0


def settled(h: ProjectHealth) -> bool:
    return not h.indexing and not h.reindex_pending


class FaultyIndexer:
    """The engine's indexing, with a full disk to switch on and a gate to hold a build at its start."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.catalog = engine.catalog
        self.disk_full = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.started: list[tuple[str, float]] = []  # (project, time.monotonic()) of every index call

    def index(self, project_id: str, *, force: bool = False, progress: Progress = no_progress) -> IndexReport:
        self.started.append((project_id, time.monotonic()))
        assert self.gate.wait(WAIT_S), "the test never opened the gate"
        if self.disk_full.is_set():
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.engine.index(project_id, force=force, progress=progress)


class Setup:
    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.engine = engine_for(self.home)
        self.sources: dict[str, Path] = {}
        self.indexer = FaultyIndexer(self.engine)
        self.watcher: Watcher | None = None
        self._reader: Engine | None = None

    def add(self, name: str, folder: Path) -> Path:
        source = write_memory(folder, 0)
        self.engine.add_project(name, [Source(str(source))])
        self.engine.index(name)
        self.sources[name] = source
        return source

    @property
    def reader(self) -> Engine:
        """A second engine on the home for the test's reads: the first one is the worker's."""
        if self._reader is None:
            self._reader = engine_for(self.home)
        return self._reader

    def start(self) -> Watcher:
        self.watcher = Watcher(self.indexer).start()
        for name in self.sources:
            wait_for(f"{name} watched", lambda name=name: self.health(name).watching)  # type: ignore[misc]
        # The start-up check of each project (nothing changed: unchanged) is behind us.
        for name in self.sources:
            wait_for(f"{name} settled", lambda name=name: self.settled(name))  # type: ignore[misc]
        return self.watcher

    def health(self, name: str) -> ProjectHealth:
        watcher = self.watcher
        assert watcher is not None
        return wait_for(f"{name} followed", lambda: next(iter(watcher.health(name)), None))

    def settled(self, name: str) -> ProjectHealth | None:
        h = self.health(name)
        return h if settled(h) else None

    def until(self, name: str, what: str, test: Callable[[ProjectHealth], object]) -> ProjectHealth:
        """The project's health once ``test`` holds for it."""
        return wait_for(what, lambda: h if test(h := self.health(name)) else None)

    def revision(self, name: str) -> str:
        generation = self.reader.catalog.current_generation(name)
        assert generation is not None
        return str(generation.index_revision)

    def calls(self, name: str) -> int:
        return sum(1 for project, _ in self.indexer.started if project == name)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.indexer.gate.set()
    if made.watcher is not None:
        made.watcher.close()
    made.engine.close()
    if made._reader is not None:
        made._reader.close()


def index_in_background(watcher: Watcher, name: str) -> Future[IndexReport]:
    """``index_now`` from another thread (as the daemon's request handler calls it)."""
    outcome: Future[IndexReport] = Future()

    def run() -> None:
        try:
            outcome.set_result(watcher.index_now(name))
        except BaseException as exc:
            outcome.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return outcome


def _served(setup: Setup, name: str, query: str, needle: str) -> bool:
    return any(needle in (f.text or "") for f in setup.reader.activate(name, query).response.fragments)


# -- a pause keeps what was seen -------------------------------------------------------------------
def test_changes_seen_before_and_during_a_pause_are_indexed_after_it(setup: Setup, tmp_path: Path) -> None:
    """The move of issue 30 item 4: the change was seen but not yet indexed (the worker busy with
    another project) when the pause began, another came during it; after it both are indexed
    with no further change. Nothing of the paused project runs meanwhile, a request included."""
    notes = setup.add("notes", tmp_path / "notes")
    setup.add("busy", tmp_path / "busy")
    watcher = setup.start()
    before = setup.revision("notes")

    setup.indexer.gate.clear()  # the worker's next build holds it
    busy = index_in_background(watcher, "busy")
    wait_for("the worker busy", lambda: setup.health("busy").indexing)
    (notes / "b.md").write_text("# Advisory locks\n\nSeen before the pause: the wombat key.\n", encoding="utf-8")
    wait_for("the change seen", lambda: setup.health("notes").pending_changes)

    with watcher.paused("notes"):
        setup.indexer.gate.set()
        assert busy.result(WAIT_S).status in ("built", "unchanged")
        (notes / "c.md").write_text("# On-call\n\nSeen during the pause: the quokka rota.\n", encoding="utf-8")
        wait_for("the second change seen", lambda: setup.health("notes").pending_changes >= 2)
        held = index_in_background(watcher, "notes")
        waiting = setup.until("notes", "the request queued", lambda h: h.queue_position is not None)
        assert waiting.queue_position == 0 and waiting.reindex_pending and not waiting.indexing
        assert setup.calls("notes") == 1  # the start-up check only: nothing ran while paused
        assert not held.done() and setup.revision("notes") == before

    report = held.result(WAIT_S)  # the request ran after the pause, and built both changes
    assert report.status == "built"
    after = wait_for("notes settled", lambda: setup.settled("notes"))
    assert after.pending_changes == 0 and after.healthy and after.queue_position is None
    assert setup.revision("notes") != before
    assert _served(setup, "notes", "wombat key", "wombat") and _served(setup, "notes", "quokka rota", "quokka")


def test_a_change_seen_during_a_pause_is_indexed_after_it_without_another(setup: Setup, tmp_path: Path) -> None:
    notes = setup.add("notes", tmp_path / "notes")
    watcher = setup.start()
    before = setup.revision("notes")
    with watcher.paused("notes"):
        (notes / "b.md").write_text("# Advisory locks\n\nThe numbat ledger moved.\n", encoding="utf-8")
        seen = setup.until("notes", "the change seen", lambda h: h.pending_changes)
        assert seen.reindex_pending  # pending, not forgotten: issue 30 item 4 had nothing pending
    after = setup.until("notes", "re-indexed after the pause", lambda h: settled(h) and h.last_reindex)
    assert after.last_reindex is not None and after.last_reindex.trigger == "watch"
    assert after.last_reindex.status == "built" and after.pending_changes == 0
    assert setup.revision("notes") != before


def test_a_reindex_in_flight_when_a_pause_begins_is_discarded_and_runs_after_it(setup: Setup, tmp_path: Path) -> None:
    """Nothing is published into the old place: the build stops at its next progress step, is
    not recorded as a failure, and its changes are built once the pause ends."""
    notes = setup.add("notes", tmp_path / "notes")
    watcher = setup.start()
    before = setup.revision("notes")
    start_check = setup.health("notes").last_reindex
    setup.indexer.gate.clear()
    (notes / "b.md").write_text("# Advisory locks\n\nBuilt after the move: the dugong.\n", encoding="utf-8")
    wait_for("the re-index started", lambda: setup.health("notes").indexing)

    entered = threading.Event()
    leave = threading.Event()

    def move() -> None:
        with watcher.paused("notes"):
            entered.set()
            assert leave.wait(WAIT_S)

    mover = threading.Thread(target=move, daemon=True)
    mover.start()
    setup.indexer.gate.set()  # the build goes on to its first progress step, and stops there
    assert entered.wait(WAIT_S)
    held = setup.health("notes")
    assert not held.indexing and held.reindex_pending and held.pending_changes >= 1
    assert held.last_reindex == start_check and held.healthy  # no failure recorded
    assert setup.revision("notes") == before
    leave.set()
    mover.join(WAIT_S)

    after = setup.until("notes", "built after the pause", lambda h: settled(h) and h.last_reindex != start_check)
    assert after.last_reindex is not None and after.last_reindex.status == "built"
    assert _served(setup, "notes", "dugong", "dugong")


# -- a failed re-index is retried ------------------------------------------------------------------
def test_a_failed_reindex_is_retried_with_backoff_until_the_fault_clears(setup: Setup, tmp_path: Path) -> None:
    notes = setup.add("notes", tmp_path / "notes")
    watcher = setup.start()
    before = setup.revision("notes")
    setup.indexer.disk_full.set()
    (notes / "b.md").write_text("# Advisory locks\n\nWritten while the disk was full: the okapi.\n", encoding="utf-8")

    failing = setup.until("notes", "two failed tries", lambda h: h.failed_attempts >= 2)
    assert failing.last_reindex is not None and failing.last_reindex.status == "failed"
    assert failing.last_reindex.trigger in ("watch", "retry")  # the second try is the retry
    assert not failing.healthy and failing.error is not None and "No space left" in failing.error.message
    assert failing.reindex_pending and failing.pending_changes >= 1 and failing.next_retry_at is not None
    assert not watcher.wait_current("notes", WAIT_S)  # no activation waits on a re-index that backs off
    assert setup.revision("notes") == before

    setup.indexer.disk_full.clear()  # space again: the next retry builds, with no other change
    done = setup.until("notes", "the retry built", lambda h: settled(h) and h.failed_attempts == 0)
    assert done.last_reindex is not None and done.last_reindex.trigger == "retry"
    assert done.last_reindex.status == "built" and done.healthy and done.error is None
    assert done.next_retry_at is None and done.pending_changes == 0
    assert done.last_error is not None and "No space left" in done.last_error.message  # kept for the record
    assert setup.revision("notes") != before

    # Never a busy loop: each try waited at least its backoff after the one before.
    tries = [at for project, at in setup.indexer.started if project == "notes"][1:]  # after the start-up check
    assert len(tries) >= 3
    for failures, (earlier, later) in enumerate(zip(tries, tries[1:], strict=False), start=1):
        assert later - earlier >= retry_delay(failures) - 0.05, (failures, later - earlier)


def test_the_backoff_doubles_up_to_a_minute() -> None:
    delays = [retry_delay(n) for n in range(1, 12)]
    assert delays[0] == RETRY_FIRST_S and delays[1] == 2 * RETRY_FIRST_S
    assert all(b == min(2 * a, 60.0) for a, b in zip(delays, delays[1:], strict=False))
    assert max(delays) == 60.0 == retry_delay(10_000)


# -- names that are not UTF-8 ----------------------------------------------------------------------
class _Recorded(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def watcher_log() -> Iterator[_Recorded]:
    handler = _Recorded()
    logger = logging.getLogger("memory_core.watcher")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def test_a_file_name_that_is_not_utf8_never_marks_the_source_unavailable(
    setup: Setup, tmp_path: Path, watcher_log: _Recorded
) -> None:
    notes = setup.add("notes", tmp_path / "notes")
    setup.start()
    with open(os.path.join(os.fsencode(notes), b"caf\xe9.md"), "wb") as bad:  # Latin-1 bytes
        bad.write(b"# Cafe\n\nThe undecodable capybara.\n")
    (notes / "b.md").write_text("# Advisory locks\n\nAfter the odd name: the axolotl.\n", encoding="utf-8")
    wait_for("the change after it served", lambda: _served(setup, "notes", "axolotl", "axolotl"))
    for _ in range(5):  # and changed again, in quick succession: a file, not a folder, so no polling
        with open(os.path.join(os.fsencode(notes), b"caf\xe9.md"), "ab") as bad:
            bad.write(b"More.\n")
        time.sleep(0.02)
    (notes / "c.md").write_text("# On-call\n\nAnd again: the pangolin.\n", encoding="utf-8")
    wait_for("the next change served", lambda: _served(setup, "notes", "pangolin", "pangolin"))

    h = wait_for("settled", lambda: setup.settled("notes"))
    assert h.state == "watching" and h.healthy and h.error is None and h.last_error is None
    assert "source unavailable" not in watcher_log.messages
    assert not _served(setup, "notes", "undecodable capybara", "capybara")  # skipped, as the scanner does


def test_a_folder_name_that_is_not_utf8_falls_back_to_polling_not_unavailable(
    setup: Setup, tmp_path: Path, watcher_log: _Recorded
) -> None:
    """The OS watch fails at its start on such a folder; polling follows the sources instead."""
    notes = setup.add("notes", tmp_path / "notes")
    odd = os.path.join(os.fsencode(notes), b"dossier-\xff")
    os.mkdir(odd)
    with open(os.path.join(odd, b"inside.md"), "wb") as inside:
        inside.write(b"# Inside\n\nThe hidden tapir.\n")
    setup.start()
    polling = setup.until("notes", "polling", lambda h: h.state == "polling")
    assert polling.healthy and polling.error is not None and polling.error.code == UNDECODABLE_FOLDER
    (notes / "b.md").write_text("# Advisory locks\n\nFollowed by polling: the narwhal.\n", encoding="utf-8")
    wait_for("the change served", lambda: _served(setup, "notes", "narwhal", "narwhal"))
    assert setup.health("notes").state == "polling"
    assert "source unavailable" not in watcher_log.messages


# -- an index request behind another project's re-index ---------------------------------------------
def test_an_index_request_behind_another_reindex_reports_its_place(setup: Setup, tmp_path: Path) -> None:
    setup.add("first", tmp_path / "first")
    setup.add("second", tmp_path / "second")
    setup.add("third", tmp_path / "third")
    watcher = setup.start()
    setup.indexer.gate.clear()
    first = index_in_background(watcher, "first")
    wait_for("first running", lambda: setup.health("first").indexing)
    second = index_in_background(watcher, "second")
    wait_for("second queued", lambda: setup.health("second").queue_position == 1)
    third = index_in_background(watcher, "third")
    wait_for("third queued", lambda: setup.health("third").queue_position == 2)
    assert setup.health("first").queue_position is None  # running: its progress says where it is
    setup.indexer.gate.set()
    for done in (first, second, third):
        assert done.result(WAIT_S).status in ("built", "unchanged")
    assert all(setup.health(n).queue_position is None for n in ("first", "second", "third"))


def test_progress_text_reads_back() -> None:
    from memory_core.adapters.files.watcher import progress_text

    assert parse_progress(progress_text("embed units", 3, 10)) == ("embed units", 3, 10)
    assert parse_progress(None) is None and parse_progress("starting") is None and parse_progress("x 1/") is None


def test_memcore_index_through_the_daemon_draws_its_wait_behind_another_project(setup: Setup, tmp_path: Path) -> None:
    """``memcore index`` (``index_project`` with a progress bar, cli/executor.py) queued behind another
    project's build: the bar says how many re-indexes are ahead, then that none is."""
    from starlette.testclient import TestClient

    from memory_core.entrypoints.cli.executor import index_progress
    from memory_core.entrypoints.cli.watch_commands import QUEUED_STAGE
    from memory_core.entrypoints.daemon.app import create_app
    from memory_core.entrypoints.daemon.client import DaemonClient
    from memory_core.entrypoints.daemon.dispatch import Context
    from memory_core.operations.executor import Operations

    setup.add("big", tmp_path / "big")
    setup.add("small", tmp_path / "small")
    watcher = setup.start()
    context = Context(setup.engine, home=str(setup.home), socket=None, started_at="2026-01-01T00:00:00Z")
    context.watcher = watcher
    drawn: list[tuple[str, int, int]] = []
    with TestClient(create_app(context)) as http:
        ops = Operations(DaemonClient(setup.home / "unused.sock", timeout=WAIT_S, http=http))
        setup.indexer.gate.clear()
        big = index_in_background(watcher, "big")
        wait_for("big building", lambda: setup.health("big").indexing)
        small: Future[IndexReport] = Future()

        def index_small() -> None:
            try:
                with index_progress(ops, "small", lambda *step: drawn.append(step)):
                    report = ops.index_project("small", force=True)
                small.set_result(report)
            except BaseException as exc:
                small.set_exception(exc)

        threading.Thread(target=index_small, daemon=True).start()
        wait_for("the wait drawn", lambda: (QUEUED_STAGE, 0, 1) in drawn)
        setup.indexer.gate.set()
        assert big.result(WAIT_S).status in ("built", "unchanged")
        assert small.result(WAIT_S).status == "built"
    assert drawn[0] == (QUEUED_STAGE, 0, 1)
    queued = [step for step in drawn if step[0] == QUEUED_STAGE]
    assert all(total == 1 for _, _, total in queued) and queued[-1] == (QUEUED_STAGE, 1, 1)


def test_project_show_says_when_a_failed_reindex_is_retried_and_where_a_request_waits() -> None:
    from memory_core.adapters.files.watch_health import HealthError, ReindexRecord
    from memory_core.entrypoints.cli.watch_commands import health_lines

    failed = ReindexRecord("retry", "2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z", 0.5, "failed", error_code="x")
    h = ProjectHealth(
        project_id="notes",
        watching=True,
        state="watching",
        healthy=False,
        indexed=True,
        last_change_at="2026-01-01T00:00:00Z",
        last_change_paths=("/n/b.md",),
        pending_changes=1,
        reindex_pending=True,
        indexing=False,
        progress=None,
        last_reindex=failed,
        error=HealthError("storage_unavailable", "No space left on device", "2026-01-01T00:00:02Z"),
        last_error=None,
        failed_attempts=3,
        next_retry_at="2026-01-01T00:00:06Z",
        queue_position=2,
    )
    pending = next(line for line in health_lines(h, daemon=True) if line.startswith("pending:"))
    assert "failed 3 time(s) in a row: retried at 2026-01-01T00:00:06Z" in pending
    assert "an index request waits behind 2 re-index(es)" in pending


# -- a stale catalog read undoes no add or remove -----------------------------------------------------
class HeldCatalog:
    """The engine's catalog, except that while armed its next ``current_generation`` reads, then
    waits at a gate: the watcher's periodic catalog read caught between reading and applying what
    it read (each test's catalog has one project when the read begins)."""

    def __init__(self, catalog: object) -> None:
        self._catalog = catalog
        self.armed = False
        self.read = threading.Event()
        self.gate = threading.Event()
        self.next_read = threading.Event()  # set when the read after the held one begins
        self.after = threading.Event()  # that read waits for this

    def __getattr__(self, name: str) -> object:
        return getattr(self._catalog, name)

    def list_projects(self) -> object:
        if self.gate.is_set() and not self.next_read.is_set():
            self.next_read.set()
            assert self.after.wait(WAIT_S), "the test never let the next read go"
        return self._catalog.list_projects()  # type: ignore[attr-defined]

    def current_generation(self, project_id: str) -> object:
        generation = self._catalog.current_generation(project_id)  # type: ignore[attr-defined]
        if self.armed:
            self.armed = False
            self.read.set()
            assert self.gate.wait(WAIT_S), "the test never opened the gate"
        return generation


@pytest.fixture
def held(setup: Setup) -> Iterator[HeldCatalog]:
    catalog = HeldCatalog(setup.engine.catalog)
    setup.indexer.catalog = catalog
    yield catalog
    catalog.gate.set()
    catalog.after.set()


def _hold_a_read(setup: Setup, held: HeldCatalog, name: str, folder: Path) -> Watcher:
    """Add project ``name``, start the watcher and hold its worker's next catalog read (a project
    list from before whatever the test does next)."""
    setup.add(name, folder)
    watcher = setup.start()
    held.armed = True
    assert held.read.wait(WAIT_S)
    return watcher


def _after_the_read(held: HeldCatalog) -> None:
    """Open the gate and wait until the held read is applied: the worker's next read has begun
    (and waits until the test is done)."""
    held.gate.set()
    assert held.next_read.wait(WAIT_S)


def test_a_catalog_read_from_before_a_removal_does_not_bring_its_watch_back(
    setup: Setup, held: HeldCatalog, tmp_path: Path
) -> None:
    watcher = _hold_a_read(setup, held, "goes", tmp_path / "goes")  # a project list that still names "goes"
    with watcher.removing("goes"):
        setup.engine.remove_project("goes")
    assert watcher.health("goes") == []
    _after_the_read(held)
    assert watcher.health("goes") == []


def test_a_catalog_read_from_before_an_add_does_not_drop_the_new_watch(
    setup: Setup, held: HeldCatalog, tmp_path: Path
) -> None:
    watcher = _hold_a_read(setup, held, "stays", tmp_path / "stays")  # a project list without "comes"
    source = write_memory(tmp_path / "comes", 0)
    watcher.project_added(setup.engine.add_project("comes", [Source(str(source))]))
    _after_the_read(held)
    assert [h.project_id for h in watcher.health("comes")] == ["comes"]
    held.after.set()
    assert setup.until("comes", "comes watched", lambda h: h.watching).watching
