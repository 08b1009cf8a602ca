"""The in-process LiveMemory over real directories: the hash-cache scan, skipped when a stat walk
of the sources shows nothing changed since the last one.

A full scan of a 10,000-unit project (1,000 files) costs tens of milliseconds in Python: per file a
path resolve, a stat and a hash-cache query. Between two activations nothing has usually changed,
and proving that takes only the stats. So each scan is keyed by a fingerprint of the source trees
taken just before it -- every non-hidden entry's relative path, size, mtime, ctime and inode, as
``os.scandir`` sees it -- and the next read whose fingerprint is equal returns that scan's
Effective Memory. Any difference (an edit, a delete, a rename, a chmod: ctime moves) means a full
scan through the scanner, whose rules alone decide what the memory holds.

A file modified within the racy window (its content may still change without its size or mtime
changing, git's "racily clean" rule, as in the hash cache) makes the fingerprint untrusted: such a
read always scans. Taking the fingerprint before the scan means a change during the scan shows as
a difference next time, never as a cached answer. The walk only decides whether to scan: what the
memory holds, and every byte read, comes from the scanner, which opens only what it checked
(``filesystem_sources``); a source folder that is a symbolic link makes the fingerprint
untrusted, so the scan that refuses it runs.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Protocol

from memory_core.adapters.files.filesystem_sources import RACY_WINDOW_NS
from memory_core.domain.model import EffectiveMemory, Project, Source
from memory_core.ports import SourceScanner
from memory_core.retrieval.effective_memory import read_effective_memory

Fingerprint = tuple[tuple[str, int, int, int, int], ...]


class _Untrusted(Exception):
    """The walk saw something a stat cannot vouch for (a racy file, an unreadable folder)."""


def _walk(root: str, now_ns: int, racy_ns: int) -> list[tuple[str, int, int, int, int]]:
    rows: list[tuple[str, int, int, int, int]] = []
    visited: set[tuple[int, int]] = set()
    todo = [(root, "")]
    while todo:
        directory, rel = todo.pop()
        try:
            # The source folder itself never through a link: the scanner refuses one swapped in
            # for it, so no stat of what it points to may vouch for the last scan.
            st = os.stat(directory, follow_symlinks=bool(rel))
            if stat.S_ISLNK(st.st_mode):
                raise _Untrusted(directory)
            if (st.st_dev, st.st_ino) in visited:
                continue  # a loop, or a second link to one folder: the scanner walks it once too
            visited.add((st.st_dev, st.st_ino))
            rows.append((rel + "/", 0, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.name.startswith("."):
                        continue  # hidden: never part of the memory
                    child = f"{rel}/{entry.name}" if rel else entry.name
                    if entry.is_dir():  # follows symlinks, as the scanner does for links inside
                        todo.append((entry.path, child))
                        continue
                    est = entry.stat()
                    if now_ns - max(est.st_mtime_ns, est.st_ctime_ns) < racy_ns:
                        raise _Untrusted(child)
                    rows.append((child, est.st_size, est.st_mtime_ns, est.st_ctime_ns, est.st_ino))
        except OSError as exc:
            raise _Untrusted(directory) from exc
    # Unsorted: an unchanged folder lists in the same order; were it to reorder, the fingerprints
    # would differ and the read would scan (never a wrong answer, only a slower one).
    return rows


def fingerprint(sources: tuple[Source, ...], racy_ns: int = RACY_WINDOW_NS) -> Fingerprint | None:
    """The stat fingerprint of every source tree, or None when a stat cannot vouch for it."""
    now_ns = time.time_ns()
    rows: list[tuple[str, int, int, int, int]] = []
    try:
        for index, source in enumerate(sources):
            rows.append((f"#{index}:{source.layer.value}:{source.path}", 0, 0, 0, 0))
            rows.extend(_walk(os.path.expanduser(source.path), now_ns, racy_ns))
    except _Untrusted:
        return None
    return tuple(rows)


class FileSystemLiveMemory:
    """Implements ``memory_core.ports.LiveMemory`` in process over real directories; nothing
    re-indexes in the background here, so a re-index is never pending."""

    def __init__(self, scanner: SourceScanner, *, racy_window_ns: int = RACY_WINDOW_NS) -> None:
        self.scanner = scanner
        self.racy_window_ns = racy_window_ns
        self._last: dict[str, tuple[Fingerprint, EffectiveMemory]] = {}
        self._lock = threading.Lock()
        self._walker: ThreadPoolExecutor | None = None  # started by the first read_ahead

    def effective_memory(self, project: Project) -> EffectiveMemory:
        return self._read(project, fingerprint(project.sources, self.racy_window_ns))

    def read_ahead(self, project: Project) -> Callable[[], EffectiveMemory]:
        """The stat walk on a thread of its own while the caller ranks (it is mostly system
        calls, which release the GIL, as the query embedding and Lucene do); the comparison, and
        the scan when something changed, on the caller's thread (the scan uses the catalog)."""
        with self._lock:
            if self._walker is None:
                self._walker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memcore-live-walk")
            walk = self._walker.submit(fingerprint, project.sources, self.racy_window_ns)
        return lambda: self._read(project, walk.result())

    def _read(self, project: Project, seen: Fingerprint | None) -> EffectiveMemory:
        key = project.project_id
        with self._lock:
            last = self._last.get(key)
        if seen is not None and last is not None and last[0] == seen:
            return last[1]
        memory = read_effective_memory(project, self.scanner)  # raises on a vanished source
        with self._lock:
            if seen is None:
                self._last.pop(key, None)
            else:
                self._last[key] = (seen, memory)
        return memory

    def reindex_pending(self, project_id: str) -> bool:
        return False


class WatcherMemory(Protocol):
    """What ``WatchedMemory`` asks of the daemon's ``Watcher`` (``adapters/files/watcher.py``)."""

    def cached_memory(self, project: Project, read: Callable[[Project], EffectiveMemory]) -> EffectiveMemory: ...

    def reindex_pending(self, project_id: str) -> bool: ...


class WatchedMemory:
    """The daemon's LiveMemory: the watcher's cached Effective Memory, read again after a change.

    ``fallback`` is the in-process LiveMemory (a scan through the hash cache); it is called on the
    engine's thread, as the engine would call it itself."""

    def __init__(self, watcher: WatcherMemory, fallback: Any) -> None:
        self.watcher = watcher
        self.fallback = fallback

    def effective_memory(self, project: Project) -> EffectiveMemory:
        return self.watcher.cached_memory(project, self.fallback.effective_memory)

    def read_ahead(self, project: Project) -> Callable[[], EffectiveMemory]:
        return partial(self.effective_memory, project)  # a cached read: nothing worth overlapping

    def reindex_pending(self, project_id: str) -> bool:
        return self.watcher.reindex_pending(project_id)
