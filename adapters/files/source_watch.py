"""One project's watch: a thread following its source folders with ``watchfiles``.

``watchfiles`` (inotify, FSEvents or kqueue through Rust's ``notify``) groups changes until none
came for ``STEP_MS`` (at most ``DEBOUNCE_MS``), so an editor's save (a temp file, then a rename)
is one batch and a burst of thousands of writes a few. Where the OS runs out of watches (Linux's
``fs.inotify.max_user_watches``) the watch falls back to polling. A source folder that goes (or is
replaced, unreadable or a file) is reported with the scanner's own ``source_unavailable`` error
and looked for again every ``RETRY_S``. A changed name that is not valid UTF-8 (the scanner skips
it) makes ``watchfiles`` drop its whole batch with an error: the watch starts again and reports the
sources changed (a scan), never unavailable. A folder so named stops the OS watch as it starts:
the watch falls back to polling, which starts. Everything is reported to the owner (the ``Watcher``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from memory_core.adapters.files.filesystem_sources import _open_root, is_hidden, media_type_for
from memory_core.domain.errors import MemoryCoreError, SourceUnavailable
from memory_core.domain.model import Project

log = logging.getLogger("memory_core.watcher")

DEBOUNCE_MS = 1_600  # a batch is yielded at the latest this long after its first change
STEP_MS = 100  # ... or once no change came for this long (an editor's temp file + rename is one batch)
CHECK_MS = 1_000  # how often a watch wakes without changes, to check its folders are still there
RETRY_S = 1.0  # how often a missing or unreadable source is looked for again
POLL_DELAY_MS = 500  # the polling fallback's period

WatchFn = Callable[..., Iterator[set[tuple[Any, str]]]]


class WatchOwner(Protocol):
    """What a watch reports to (the ``Watcher``), from the watch's own thread."""

    watch_fn: WatchFn

    def report_changes(self, project_id: str, paths: list[str]) -> None: ...

    def report_watching(self, project_id: str, *, polling: bool) -> None: ...

    def report_source_problem(self, project_id: str, exc: MemoryCoreError) -> None: ...

    def report_source_back(self, project_id: str, roots: list[str]) -> None: ...

    def report_watch_limit(self, project_id: str, exc: BaseException) -> None: ...

    def report_undecodable_folder(self, project_id: str, exc: BaseException) -> None: ...


def default_watch() -> WatchFn:
    import watchfiles

    return watchfiles.watch


def relevant_paths(changes: Iterable[tuple[Any, str]], roots: Iterable[str]) -> list[str]:
    """The changed paths the scanner could care about: markdown/text files and folders, not hidden.

    A deleted path cannot be asked whether it was a folder, so deletions of anything not hidden
    count (a removed folder takes its resources with it); a no-op re-index costs a scan."""
    import watchfiles

    roots = [r.rstrip(os.sep) for r in roots]
    kept = []
    for change, path in changes:
        root = next((r for r in roots if path == r or path.startswith(r + os.sep)), None)
        if root is None:
            continue
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if rel != "." and is_hidden(rel):
            continue
        if media_type_for(path) or change == watchfiles.Change.deleted or rel == "." or os.path.isdir(path):
            kept.append(path)
    return sorted(kept)


def is_watch_limit(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and "watch limit" in str(exc).lower()


def is_undecodable_name(exc: BaseException) -> bool:
    """``watchfiles``' error for a changed path that is not valid UTF-8 (its batch is lost with it)."""
    return "unable to decode path" in str(exc).lower()


def has_undecodable_folder(roots: list[str]) -> bool:
    """Whether a folder below ``roots`` has a name that is not UTF-8 (links not followed)."""
    for root in roots:
        for _, folders, _ in os.walk(os.fsencode(root)):
            for name in folders:
                try:
                    name.decode("utf-8")
                except UnicodeDecodeError:
                    return True
    return False


# -- one project's watch ----------------------------------------------------------------------
class SourceWatch:
    """A thread following one project's source folders; reports batches and problems to the Watcher."""

    def __init__(self, owner: WatchOwner, project: Project) -> None:
        self.owner = owner
        self.project = project
        self.stop = threading.Event()
        self.polling = False
        # Off at first: with it on, watchfiles also hides the OS running out of watches.
        self.ignore_denied = False
        self.rescan = False  # a batch was lost: report the roots changed once the watch is back
        self.thread = threading.Thread(target=self._run, name=f"watch-{project.project_id}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self.stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def _roots(self) -> list[tuple[str, tuple[int, int]]]:
        """Each source's resolved folder and its identity; SourceUnavailable as the scanner words it."""
        out = []
        for source in self.project.sources:
            root = _open_root(source.path)
            st = os.stat(root)
            out.append((str(root), (st.st_dev, st.st_ino)))
        return out

    @staticmethod
    def _same(roots: list[tuple[str, tuple[int, int]]]) -> bool:
        for path, ident in roots:
            try:
                st = os.stat(path, follow_symlinks=False)  # a link to the folder moved away is not it
            except OSError:
                return False
            if (st.st_dev, st.st_ino) != ident:
                return False  # moved away and replaced: the old watch follows a folder no longer there
        return True

    def _run(self) -> None:
        pid = self.project.project_id
        was_unavailable = False
        while not self.stop.is_set():
            try:
                roots = self._roots()
            except SourceUnavailable as exc:
                if not was_unavailable:
                    self.owner.report_source_problem(pid, exc)
                    was_unavailable = True
                self.stop.wait(RETRY_S)
                continue
            if was_unavailable:  # back: what is there now may differ from the last generation
                was_unavailable = False
                self.owner.report_source_back(pid, [r for r, _ in roots])
            try:
                self._follow(roots)
            except Exception as exc:
                if is_undecodable_name(exc):
                    if not self.rescan:
                        self.rescan = True  # the next watch reports the sources changed once it runs
                        continue
                    # Again before the new watch ran: a folder so named fails the OS watch at its
                    # start; a file so named changed twice in a row only fails a batch again.
                    self.owner.report_changes(pid, [r for r, _ in roots])
                    if not has_undecodable_folder([r for r, _ in roots]):
                        continue
                    if not self.polling:
                        self.polling = True
                        self.owner.report_undecodable_folder(pid, exc)
                    continue
                if is_watch_limit(exc) and not self.polling:
                    self.polling = True
                    self.owner.report_watch_limit(pid, exc)
                    continue
                if isinstance(exc, PermissionError) and not self.ignore_denied:
                    self.ignore_denied = True  # an unreadable subfolder: the scanner warns about it
                    continue
                log.warning("watch failed", extra={"fields": {"project": pid, "error": str(exc)}})
                self.owner.report_source_problem(pid, SourceUnavailable(f"cannot watch the sources: {exc}"))
                was_unavailable = True
                self.stop.wait(RETRY_S)

    def _follow(self, roots: list[tuple[str, tuple[int, int]]]) -> None:
        watch = self.owner.watch_fn
        paths = [r for r, _ in roots]
        self.owner.report_watching(self.project.project_id, polling=self.polling)
        for changes in watch(
            *paths,
            debounce=DEBOUNCE_MS,
            step=STEP_MS,
            stop_event=self.stop,
            rust_timeout=CHECK_MS,
            yield_on_timeout=True,
            force_polling=self.polling,
            poll_delay_ms=POLL_DELAY_MS,
            ignore_permission_denied=self.ignore_denied,
        ):
            if self.rescan:  # following again: a scan from now on misses nothing the lost batch held
                self.rescan = False
                self.owner.report_changes(self.project.project_id, paths)
            if changes:
                kept = relevant_paths(changes, paths)
                if kept:
                    self.owner.report_changes(self.project.project_id, kept)
            if not self._same(roots):
                return  # re-resolve: the folder went (or was replaced); _run reports it
