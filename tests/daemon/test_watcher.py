"""The daemon's source watcher, through the real daemon on its real socket, with real files.

Every wait polls with a generous bound and asserts on what the daemon reports (its health, the
text it serves, its log), never on how long something took.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from memory_core.adapters.files.watcher import ProjectHealth
from memory_core.domain.model import Source
from tests.daemon.test_server import Daemon, memory_folder

T = TypeVar("T")
WAIT_S = 120.0


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT_S) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def health(daemon: Daemon, project: str) -> ProjectHealth | None:
    return next((h for h in daemon.client.runtime_status().projects if h.project_id == project), None)


def served(daemon: Daemon, project: str, query: str, needle: str) -> bool:
    response = daemon.client.activate_memory(project, query)
    return any(needle in (f.text or "") for f in response.fragments)


def settled(daemon: Daemon, project: str) -> ProjectHealth | None:
    """The project's health once no re-index is pending or running."""
    h = health(daemon, project)
    return h if h is not None and not h.reindex_pending and not h.indexing else None


def editor_save(path: Path, text: str) -> None:
    """What editors do: write a temp file next to it, then rename it over the original."""
    temp = path.with_name(f".{path.name}.swp")
    temp.write_text(text, encoding="utf-8")
    os.replace(temp, path)


def reindex_count(daemon: Daemon, project: str) -> int:
    return sum(1 for r in daemon.log_records() if r.get("message") == "reindex" and r.get("project") == project)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    base = tmp_path_factory.mktemp("watcher")
    running = Daemon(base / "home", base / "daemon.log")
    yield running
    assert running.stop() == 0


@pytest.fixture
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test's folder for what the module's daemon watches or stores: the daemon watches it after
    the test ends, so not the test's ``tmp_path``, removed as a passing test ends
    (``tmp_path_retention_policy``), which would make that project source_unavailable and start
    re-indexes on the shared worker during later tests."""
    return tmp_path_factory.mktemp("watched")


def add_indexed(daemon: Daemon, name: str, source: Path) -> None:
    daemon.client.add_project(name, [Source(str(source))])
    assert daemon.client.index_project(name).status == "built"
    wait_for(f"{name} watched", lambda: (h := health(daemon, name)) is not None and h.watching)


def test_an_editor_save_is_served_without_memcore_index(daemon: Daemon, folder: Path) -> None:
    source = memory_folder(folder / "memory")
    add_indexed(daemon, "edits", source)
    assert not served(daemon, "edits", "zebracorn rollback", "zebracorn")
    before = settled(daemon, "edits")
    assert before is not None and before.healthy and before.state == "watching"

    editor_save(source / "runbooks" / "deploy.md", "# Deploy runbook\n\nRoll back with the zebracorn lever.\n")
    wait_for("the edit served", lambda: served(daemon, "edits", "zebracorn rollback", "zebracorn"))
    after = wait_for("the re-index settled", lambda: settled(daemon, "edits"))
    assert after.last_reindex is not None
    assert after.last_reindex.trigger == "watch" and after.last_reindex.status == "built"
    assert after.last_reindex.embedded and after.last_reindex.embedded >= 1
    assert str(source / "runbooks" / "deploy.md") in after.last_change_paths
    assert after.last_change_at is not None and after.pending_changes == 0 and after.error is None
    # The swap file of the save is hidden: never a resource.
    generation = daemon.client.show_project("edits").generation
    assert generation is not None and generation.resource_count == 3


def test_deletes_moves_and_new_folders_are_followed(daemon: Daemon, folder: Path) -> None:
    source = memory_folder(folder / "memory")
    add_indexed(daemon, "moves", source)
    (source / "notes.txt").unlink()
    (source / "archive").mkdir()
    os.rename(source / "decisions.md", source / "archive" / "decisions.md")
    (source / "new" / "deeper").mkdir(parents=True)
    (source / "new" / "deeper" / "quokka.md").write_text("# Quokka\n\nThe quokka policy is new.\n", encoding="utf-8")

    wait_for("the new folder's file served", lambda: served(daemon, "moves", "quokka policy", "quokka"))
    wait_for("settled", lambda: settled(daemon, "moves"))
    run_id = daemon.client.activate_memory("moves", "advisory locks").run_id
    assert run_id is not None
    resources = {c.resource_id for c in daemon.client.get_retrieval_run(run_id).candidates}
    assert "archive/decisions.md" in resources and "decisions.md" not in resources
    assert "notes.txt" not in resources
    generation = daemon.client.show_project("moves").generation
    assert generation is not None and generation.resource_count == 3  # deploy, archive/decisions, quokka


def test_a_burst_of_writes_is_a_few_reindexes(daemon: Daemon, folder: Path) -> None:
    source = memory_folder(folder / "memory")
    add_indexed(daemon, "burst", source)
    before = reindex_count(daemon, "burst")
    burst = source / "burst"
    burst.mkdir()
    for i in range(300):
        (burst / f"note-{i:04d}.md").write_text(f"# Note {i}\n\nBurst note number {i}.\n", encoding="utf-8")
    generation = wait_for(
        "every burst file indexed",
        lambda: (g := daemon.client.show_project("burst").generation) is not None and g.resource_count == 303 and g,
        timeout=600,
    )
    assert generation
    wait_for("settled", lambda: settled(daemon, "burst"))
    reindexes = reindex_count(daemon, "burst") - before
    assert 1 <= reindexes <= 5, f"{reindexes} re-indexes for one burst of 300 writes"


def test_a_vanished_source_is_unhealthy_keeps_serving_and_recovers(daemon: Daemon, folder: Path) -> None:
    source = memory_folder(folder / "memory")
    add_indexed(daemon, "vanish", source)
    away = folder / "moved-away"
    os.rename(source, away)
    down = wait_for("unhealthy", lambda: (h := health(daemon, "vanish")) is not None and not h.healthy and h)
    assert down.state == "source_unavailable" and not down.watching
    assert down.error is not None and down.error.code == "source_unavailable"
    assert str(source) in down.error.message
    # The last generation keeps serving, and nothing was lost.
    assert served(daemon, "vanish", "advisory locks idempotency", "advisory")

    os.rename(away, source)
    (source / "back.md").write_text("# Back\n\nThe wombat returned.\n", encoding="utf-8")
    wait_for("the folder's new file served", lambda: served(daemon, "vanish", "wombat returned", "wombat"))
    up = wait_for("healthy again", lambda: (h := settled(daemon, "vanish")) is not None and h.healthy and h)
    assert up.state == "watching" and up.watching and up.error is None
    assert up.last_error is not None and up.last_error.code == "source_unavailable"  # kept for a person to see


def test_a_source_folder_replaced_by_a_link_to_itself_is_unhealthy(daemon: Daemon, folder: Path) -> None:
    """Issue 30, item 1: the folder moved away and a symlink to it put in its place keeps the
    device and inode ``os.stat`` sees; the watch must not follow the link as if nothing changed."""
    source = memory_folder(folder / "memory")
    add_indexed(daemon, "relinked", source)
    away = folder / "moved-away"
    os.rename(source, away)
    source.symlink_to(away, target_is_directory=True)
    down = wait_for("unhealthy", lambda: (h := health(daemon, "relinked")) is not None and not h.healthy and h)
    assert down.state == "source_unavailable" and not down.watching
    assert down.error is not None and str(source) in down.error.message
    assert served(daemon, "relinked", "advisory locks idempotency", "advisory")  # the last generation serves


def test_a_source_that_is_a_file_is_a_clear_error(daemon: Daemon, folder: Path) -> None:
    source = folder / "not-a-folder.md"
    source.write_text("# Not a folder\n", encoding="utf-8")
    daemon.client.add_project("afile", [Source(str(source))])
    down = wait_for("unhealthy", lambda: (h := health(daemon, "afile")) is not None and h.error is not None and h)
    assert down.error is not None and down.error.code == "source_unavailable"
    assert "not a directory" in down.error.message and not down.watching


def test_a_symlink_loop_is_watched_and_scanned_once(daemon: Daemon, folder: Path) -> None:
    source = memory_folder(folder / "memory")
    os.symlink(".", source / "loop")
    os.symlink("../runbooks", source / "runbooks" / "again")
    add_indexed(daemon, "loops", source)
    editor_save(source / "notes.txt", "The capybara sits in the loop.\n")
    wait_for("the edit served", lambda: served(daemon, "loops", "capybara loop", "capybara"))
    h = wait_for("settled", lambda: settled(daemon, "loops"))
    assert h.healthy and h.watching
    generation = daemon.client.show_project("loops").generation
    assert generation is not None and generation.resource_count == 3


def test_removing_a_project_stops_its_watch_and_adding_starts_one(daemon: Daemon, folder: Path) -> None:
    source = memory_folder(folder / "memory")
    add_indexed(daemon, "comes-and-goes", source)
    daemon.client.remove_project("comes-and-goes")
    assert health(daemon, "comes-and-goes") is None
    (source / "after.md").write_text("# After\n\nWritten after the removal.\n", encoding="utf-8")
    daemon.client.add_project("comes-and-goes", [Source(str(source))])
    h = wait_for("watched again", lambda: (h := health(daemon, "comes-and-goes")) is not None and h.watching and h)
    assert not h.indexed and h.last_reindex is None  # a new project's first index is asked for


def test_index_project_and_the_watcher_share_one_worker(daemon: Daemon, folder: Path) -> None:
    source = memory_folder(folder / "memory")
    add_indexed(daemon, "explicit", source)
    editor_save(source / "notes.txt", "The axolotl explicit note.\n")
    report = daemon.client.index_project("explicit")  # serialised with the watcher's re-index, whichever runs first
    assert report.status in {"built", "unchanged"}
    wait_for("the edit served", lambda: served(daemon, "explicit", "axolotl", "axolotl"))
    h = wait_for("settled", lambda: settled(daemon, "explicit"))
    assert h.last_reindex is not None and h.last_reindex.status in {"built", "unchanged"}


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    import subprocess

    probe = subprocess.run(
        ["unshare", "-U", "-r", "sh", "-c", "echo 4 > /proc/sys/user/max_inotify_watches"], capture_output=True
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs user namespaces to lower the inotify watch limit safely")
def test_the_watch_limit_falls_back_to_polling_with_a_clear_error(tmp_path: Path) -> None:
    """The daemon runs in its own user namespace whose inotify watch limit is 2 (the host's is
    untouched): more folders than that cannot be watched, so the project is polled instead."""
    source = memory_folder(tmp_path / "memory")
    for i in range(4):
        (source / f"folder-{i}").mkdir()
    home = tmp_path / "home"
    launcher = tmp_path / "limited.sh"
    launcher.write_text('echo 2 > /proc/sys/user/max_inotify_watches && exec "$@"\n')
    daemon = Daemon(home, tmp_path / "daemon.log", wrapper=["unshare", "-U", "-r", "sh", str(launcher)])
    try:
        add_indexed_polling(daemon, "limited", source)
        h = wait_for("the limit reported", lambda: (h := health(daemon, "limited")) is not None and h.error and h)
        assert h.error is not None and h.error.code == "watch_limit_reached"
        assert "max_user_watches" in h.error.message and h.state == "polling" and h.watching and h.healthy
        editor_save(source / "folder-3" / "polled.md", "# Polled\n\nThe pangolin is polled.\n")
        wait_for("the polled edit served", lambda: served(daemon, "limited", "pangolin polled", "pangolin"))
    finally:
        assert daemon.stop() == 0


def add_indexed_polling(daemon: Daemon, name: str, source: Path) -> None:
    daemon.client.add_project(name, [Source(str(source))])
    assert daemon.client.index_project(name).status == "built"


def test_an_activation_may_wait_for_the_pending_reindex(daemon: Daemon, folder: Path) -> None:
    from memory_core.domain.errors import InvalidRequest

    source = memory_folder(folder / "memory")
    add_indexed(daemon, "waits", source)
    with pytest.raises(InvalidRequest, match="wait_for_index_ms"):
        daemon.client.activate_memory("waits", "okapi", wait_for_index_ms=-1)
    seen = health(daemon, "waits")
    editor_save(source / "notes.txt", "The okapi waits for its index.\n")
    wait_for(
        "the change seen",
        lambda: (
            (h := health(daemon, "waits")) is not None and h.last_change_at != (seen.last_change_at if seen else None)
        ),
    )
    # Seen but (a re-index takes seconds) not yet served: the request waits for it, then ranks.
    response = daemon.client.activate_memory("waits", "okapi index", wait_for_index_ms=60_000)
    assert any("okapi" in (f.text or "") for f in response.fragments)
    assert not response.freshness.reindex_pending and not response.freshness.index_behind


NOBODY = 65534


def _owned_by_nobody(base: Path) -> None:
    for path in (base, *base.rglob("*")):
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root to start the daemon as another user")  # fmt: skip
def test_an_unreadable_source_is_a_clear_error_keeps_serving_and_recovers() -> None:
    """As root every file is readable, so the daemon runs as ``nobody`` (setpriv), with its home
    and the source owned by that user; then the source loses its read permission."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="memcore-unreadable-"))  # /tmp: pytest's root-only folders are closed to nobody
    try:
        source = memory_folder(base / "memory")
        (base / "tmp").mkdir()
        _owned_by_nobody(base)
        wrapper = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
        daemon = Daemon(base / "home", base / "daemon.log", env={"HOME": str(base)}, wrapper=wrapper)
        try:
            add_indexed(daemon, "closed", source)
            os.chmod(source, 0)
            down = wait_for("unhealthy", lambda: (h := health(daemon, "closed")) is not None and h.error and h)
            assert down.error is not None and down.error.code == "source_unavailable", down
            assert str(source) in down.error.message and "ermission denied" in down.error.message, down.error
            assert not down.healthy
            # The last generation keeps serving, and says it cannot tell how fresh it is.
            response = daemon.client.activate_memory("closed", "advisory locks idempotency")
            assert any("advisory" in (f.text or "") for f in response.fragments)
            assert not response.freshness.live and "ermission denied" in (response.freshness.error or "")

            os.chmod(source, 0o755)
            editor_save(source / "notes.txt", "The quokka can read again.\n")
            os.chown(source / "notes.txt", NOBODY, NOBODY)
            wait_for("the edit served", lambda: served(daemon, "closed", "quokka read again", "quokka"))
            up = wait_for("healthy again", lambda: (h := settled(daemon, "closed")) is not None and h.healthy and h)
            assert up.error is None and up.watching
        finally:
            assert daemon.stop() == 0
    finally:
        os.chmod(base / "memory", 0o755) if (base / "memory").exists() else None
        shutil.rmtree(base, ignore_errors=True)


def test_a_project_removed_mid_reindex_is_discarded_and_its_caller_told(daemon: Daemon, folder: Path) -> None:
    """The build in flight stops at its next progress step; nothing of it is published, the
    ``index_project`` caller gets a clear error, and the daemon serves on."""
    import threading

    from memory_core.domain.errors import MemoryCoreError
    from memory_core.entrypoints.daemon.client import DaemonClient

    source = memory_folder(folder / "memory")
    for i in range(1500):  # enough units that the build runs for a while
        (source / f"note-{i:04d}.md").write_text(f"# Note {i}\n\nThe numbat counts {i} termites.\n", encoding="utf-8")
    daemon.client.add_project("doomed", [Source(str(source))])
    outcome: list[object] = []

    def index() -> None:
        with DaemonClient(daemon.socket, timeout=120) as other:
            try:
                outcome.append(other.index_project("doomed"))
            except MemoryCoreError as exc:
                outcome.append(exc)

    caller = threading.Thread(target=index)
    caller.start()
    wait_for("the build under way", lambda: (h := health(daemon, "doomed")) is not None and h.progress, timeout=60)
    daemon.client.remove_project("doomed")
    caller.join(120)
    assert len(outcome) == 1 and isinstance(outcome[0], MemoryCoreError), outcome
    assert "removed while it re-indexed" in outcome[0].message
    assert "doomed" not in [p.project.project_id for p in daemon.client.list_projects()]
    # Added again, it starts with no generation: the discarded build was never published.
    daemon.client.add_project("doomed", [Source(str(source))])
    assert daemon.client.show_project("doomed").generation is None
    assert daemon.client.index_project("doomed").status == "built"
    assert served(daemon, "doomed", "numbat termites 42", "numbat")


def test_a_storage_move_keeps_the_change_seen_and_a_clear_stops_reindexing(daemon: Daemon, folder: Path) -> None:
    """The move pauses the project's re-indexes (issue 30 item 4): a change made just before it is
    served after it with no other change, and the project is still watched; after a clear it has
    no generation, and only ``index_project`` builds one."""
    source = memory_folder(folder / "memory")
    add_indexed(daemon, "moving", source)
    editor_save(source / "notes.txt", "The platypus moved house.\n")
    moved = daemon.client.move_project_storage("moving", folder / "elsewhere")
    assert Path(moved.location) == folder / "elsewhere" and not moved.default_location
    wait_for("the change served after the move", lambda: served(daemon, "moving", "platypus house", "platypus"))
    after = wait_for("settled", lambda: settled(daemon, "moving"))
    assert after.watching and after.healthy and after.indexed and after.pending_changes == 0

    daemon.client.clear_project_storage("moving")
    wait_for("not indexed after the clear", lambda: (h := health(daemon, "moving")) is not None and not h.indexed)
    assert daemon.client.show_project("moving").generation is None
    assert daemon.client.index_project("moving").status == "built"
    assert served(daemon, "moving", "platypus house", "platypus")


@pytest.mark.slow
def test_a_reindex_that_a_full_disk_failed_is_retried_once_space_returns(
    tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    """Issue 30 item 4: the failed re-index stays pending, its retry shows in the health, and
    once space is freed the retry builds the change with no other file change."""
    import sys

    from tests.reliability.full_disk import TMPFS, FullDisk
    from tests.reliability.harness import PROJECT, write_memory

    home = tmp_path / "home"
    source = write_memory(tmp_path / "memory", 0)
    disk = FullDisk(home / "projects" / PROJECT / "generations")
    record_property("full_disk", disk.mode)
    wrapper = () if disk.mode == TMPFS else (sys.executable, "-m", "tests.reliability.full_disk", str(disk.marker))
    try:
        running = Daemon(home, tmp_path / "daemon.log", "--no-warm", "--no-ui", wrapper=wrapper)
        try:
            add_indexed(running, PROJECT, source)
            first = running.client.show_project(PROJECT).generation
            assert first is not None
            disk.fill()
            (source / "b.md").write_text("# Advisory locks\n\nWritten on a full disk: the kakapo.\n", encoding="utf-8")
            failing = wait_for(
                "the re-index failed and due again",
                lambda: (h := health(running, PROJECT)) is not None and h.failed_attempts >= 1 and h,
            )
            assert failing.error is not None and failing.error.code == "storage_unavailable"
            assert failing.next_retry_at is not None and failing.reindex_pending and not failing.healthy
            assert failing.last_reindex is not None and failing.last_reindex.status == "failed"
            assert served(running, PROJECT, "advisory locks", "advisory")  # the last generation serves

            disk.free()
            wait_for("the change served", lambda: served(running, PROJECT, "kakapo", "kakapo"))
            done = wait_for("settled", lambda: settled(running, PROJECT))
            assert done.healthy and done.failed_attempts == 0 and done.next_retry_at is None
            assert done.last_reindex is not None and done.last_reindex.trigger == "retry"
            assert done.last_error is not None and done.last_error.code == "storage_unavailable"
        finally:
            assert running.stop() == 0
    finally:
        disk.close()
