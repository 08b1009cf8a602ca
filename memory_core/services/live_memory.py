"""The in-process LiveMemory: the sources scanned at each call, cheap through the hash cache.

A scan stats every file and re-hashes only those whose (path, size, mtime) changed since the
cache last saw them, so a read costs a directory walk, not a read of the corpus. The daemon
replaces it with a watcher-backed one that keeps the answer between change events.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from memory_core.domain.model import EffectiveMemory, Project
from memory_core.ports import SourceScanner
from memory_core.retrieval.effective_memory import read_effective_memory as read_effective_memory  # re-exported


class ScanningLiveMemory:
    """Reads a project's live Effective Memory by scanning its sources; nothing re-indexes in
    the background here, so a re-index is never pending."""

    def __init__(self, scanner: SourceScanner) -> None:
        self.scanner = scanner

    def effective_memory(self, project: Project) -> EffectiveMemory:
        return read_effective_memory(project, self.scanner)

    def read_ahead(self, project: Project) -> Callable[[], EffectiveMemory]:
        return partial(self.effective_memory, project)  # the scan uses the catalog: the caller's thread

    def reindex_pending(self, project_id: str) -> bool:
        return False
