"""``memcore index NAME --watch`` in the foreground and the health ``memcore project show`` prints,
without a daemon and through one (real processes, real files)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from memory_core.domain.model import Source
from tests.daemon.test_server import Daemon, memory_folder
from tests.daemon.test_watcher import editor_save, wait_for

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 180.0


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("MEMORY_CORE_HOME", "MEMORY_CORE_CRASH_POINT")}
    # PYTHONFAULTHANDLER: a child that does not stop is sent SIGABRT, which dumps every thread's stack.
    out.update(PYTHONUNBUFFERED="1", COLUMNS="200", PYTHONFAULTHANDLER="1")
    return out


def memcore(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memory_core", "--home", str(home), *args], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=300)


class Lines:
    """A child's stdout, line by line, read on a thread so a wait can be bounded."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        stream = proc.stdout
        threading.Thread(target=lambda: [self._queue.put(line) for line in stream], daemon=True).start()

    def until(self, needle: str, timeout: float = WAIT_S) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            if needle in line:
                return line
        raise AssertionError(f"no line with {needle!r} in:\n{''.join(self.seen)}")


def default_sigint() -> None:
    """Ctrl-C's default in the child. A shell starts a background job with SIGINT ignored, a child
    inherits that, and Python then installs no KeyboardInterrupt handler: with the suite run in
    the background (``.ci/run &``) this child ignored the test's SIGINT (faulthandler showed its
    main thread still in the follow loop), where a user's Ctrl-C stops it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stopped(proc: subprocess.Popen[str]) -> int:
    """The child's exit status after Ctrl-C (a re-index in flight finishes first); a child still
    running after WAIT_S fails the test with every thread's stack, not a bare timeout."""
    try:
        return proc.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=30)
        raise AssertionError("index --watch did not stop:\n" + (proc.stderr.read() if proc.stderr else "")) from None


def test_index_watch_keeps_a_project_current_without_a_daemon(tmp_path: Path) -> None:
    home, source = tmp_path / "home", memory_folder(tmp_path / "memory")
    assert memcore(home, "project", "add", "notes", "--source", str(source)).returncode == 0
    shown = memcore(home, "project", "show", "notes")
    assert "watching: no (no daemon runs" in shown.stdout, shown.stdout + shown.stderr
    proc = subprocess.Popen([sys.executable, "-m", "memory_core", "--home", str(home), "index", "notes", "--watch"],
                            cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    try:
        out = Lines(proc)
        out.until("watching notes")
        editor_save(source / "notes.txt", "The narwhal is indexed in the foreground.\n")
        out.until("after a watch trigger")
        assert any("re-indexed" in line and "built" in line for line in out.seen), out.seen
        shown = memcore(home, "project", "show", "notes")
        assert "sources: as the index has them" in shown.stdout, shown.stdout + shown.stderr
        activated = memcore(home, "activate", "notes", "narwhal foreground", "--json")
        fragments = json.loads(activated.stdout)["response"]["fragments"]
        assert any("narwhal" in (f["text"] or "") for f in fragments)
        (source / "notes.txt").write_text("The narwhal changed again, while nothing indexed.\n", encoding="utf-8")
    finally:
        proc.send_signal(signal.SIGINT)
        rc = stopped(proc)
    assert rc == 0, proc.stderr.read() if proc.stderr else ""


def test_project_show_prints_the_daemons_health(tmp_path: Path) -> None:
    home, source = tmp_path / "home", memory_folder(tmp_path / "memory")
    daemon = Daemon(home, tmp_path / "daemon.log")
    try:
        daemon.client.add_project("notes", [Source(str(source))])
        daemon.client.index_project("notes")
        editor_save(source / "notes.txt", "The daemon re-indexed the dugong.\n")
        wait_for("re-indexed by the watcher", lambda: any(
            h.project_id == "notes" and h.last_reindex is not None and h.last_reindex.trigger == "watch"
            and not h.reindex_pending for h in daemon.client.runtime_status().projects))
        shown = memcore(home, "project", "show", "notes")
        text = shown.stdout
        assert "watching: yes" in text, text + shown.stderr
        assert "last change seen:" in text and str(source / "notes.txt") in text
        assert "last re-index:" in text and "built" in text and "after a watch trigger" in text
        assert "pending: 0 changed path(s)" in text
        as_json = json.loads(memcore(home, "project", "show", "notes", "--json").stdout)
        assert as_json["daemon"] is True and as_json["health"]["state"] == "watching"
        assert as_json["health"]["last_reindex"]["trigger"] == "watch"
        os.rename(source, tmp_path / "gone")
        wait_for("unhealthy", lambda: any(h.project_id == "notes" and not h.healthy
                                          for h in daemon.client.runtime_status().projects))
        text = memcore(home, "project", "show", "notes").stdout
        assert "unhealthy" in text and "error: [source_unavailable]" in text, text
    finally:
        assert daemon.stop() == 0
