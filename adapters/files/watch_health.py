"""What the watcher reports per project (``ProjectHealth``) and the state it keeps to report it.

``runtime_status``, the Runtime page and ``memcore project show`` show these values; the daemon's
API schema is made from their attrs metadata.
"""

from __future__ import annotations

import datetime as dt

import attrs

from memory_core.adapters.files.source_watch import SourceWatch
from memory_core.domain.errors import MemoryCoreError, SourceUnavailable
from memory_core.domain.model import EffectiveMemory, Project

CHANGED_PATHS_KEPT = 5  # the last change's paths a health record names

# Health states (ProjectHealth.state)
WATCHING, POLLING, SOURCE_UNAVAILABLE, STOPPED, NOT_WATCHED = (
    "watching",
    "polling",
    "source_unavailable",
    "stopped",
    "not_watched",
)
WATCH_LIMIT = "watch_limit_reached"  # the code of the health error when inotify ran out of watches


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- health values ----------------------------------------------------------------------------
@attrs.frozen
class HealthError:
    code: str = attrs.field(metadata={"schema": {"description": "a stable error code (source_unavailable, ...)"}})
    message: str
    at: str


@attrs.frozen
class ReindexRecord:
    """One re-index the daemon ran for a project (a watch batch, a request or the start-up check)."""

    trigger: str = attrs.field(metadata={"schema": {"enum": ["watch", "request", "start"]}})
    started_at: str
    finished_at: str
    seconds: float
    status: str = attrs.field(metadata={"schema": {"enum": ["built", "unchanged", "failed"]}})
    index_revision: str | None = None
    units: int | None = None
    embedded: int | None = attrs.field(default=None, metadata={"schema": {"description": "units embedded"}})
    error_code: str | None = None


@attrs.frozen
class ProjectHealth:
    """What a person needs to trust a project's index: is it followed, is it current, what went wrong."""

    project_id: str
    watching: bool = attrs.field(metadata={"schema": {"description": "changes to its sources are followed now"}})
    state: str = attrs.field(
        metadata={"schema": {"enum": [WATCHING, POLLING, SOURCE_UNAVAILABLE, STOPPED, NOT_WATCHED]}}
    )
    healthy: bool = attrs.field(metadata={"schema": {"description": "no current error"}})
    indexed: bool = attrs.field(metadata={"schema": {"description": "it has a generation (only those re-index)"}})
    last_change_at: str | None
    last_change_paths: tuple[str, ...] = attrs.field(
        metadata={"schema": {"description": f"up to {CHANGED_PATHS_KEPT} paths of the last change seen"}}
    )
    pending_changes: int = attrs.field(
        metadata={"schema": {"description": "changed paths seen that no finished re-index covers yet"}}
    )
    reindex_pending: bool = attrs.field(
        metadata={"schema": {"description": "a re-index is queued or running for changes seen"}}
    )
    indexing: bool
    progress: str | None = attrs.field(metadata={"schema": {"description": "the running re-index's stage"}})
    last_reindex: ReindexRecord | None
    error: HealthError | None = attrs.field(metadata={"schema": {"description": "the current problem, if any"}})
    last_error: HealthError | None = attrs.field(
        metadata={"schema": {"description": "the most recent problem, kept after it is resolved"}}
    )


# -- what the watcher keeps per project -------------------------------------------------------
@attrs.define
class ProjectState:
    """What the watcher knows of one project (read and written under the Watcher's lock)."""

    project: Project
    indexed: bool = False
    watch: SourceWatch | None = None
    state: str = NOT_WATCHED
    seen: int = 0  # batches of changes seen (a version)
    covered: int = 0  # the ``seen`` the last finished re-index started from
    changed: set[str] = attrs.field(factory=set)
    last_change_at: str | None = None
    last_change_paths: tuple[str, ...] = ()
    last_event: float = 0.0
    trigger: str = "watch"
    indexing: bool = False
    progress: str | None = None
    last_reindex: ReindexRecord | None = None
    error: HealthError | None = None
    watch_error: HealthError | None = None  # a degraded watch (polling) that is not a failure
    last_error: HealthError | None = None
    memory: EffectiveMemory | None = None
    memory_seen: int = -1
    removed: bool = False

    def finished(self, record: ReindexRecord, seen: int, failure: BaseException | None, at: str) -> None:
        """A re-index that started from ``seen`` ended (``failure`` None: it built or found nothing to do)."""
        self.indexing, self.progress = False, None
        self.last_reindex = record
        # Not retried in a loop after a failure: the next change (or request) tries again.
        self.covered = max(self.covered, seen)
        if failure is None:
            self.indexed = True
            if self.covered == self.seen:
                self.changed.clear()
            # A failed re-index's error is resolved by this one; a folder the watch finds gone
            # stays an error until the watch sees it back (a re-index may have started before).
            folder_gone = self.state == SOURCE_UNAVAILABLE
            if self.error is not None and not (self.error.code == SourceUnavailable.code and folder_gone):
                self.error = None
            return
        message = failure.message if isinstance(failure, MemoryCoreError) else f"{type(failure).__name__}: {failure}"
        self.error = self.last_error = HealthError(record.error_code or "internal_error", message, at)

    def pending(self) -> bool:
        """A re-index is queued or running for changes seen (none is while a source is missing)."""
        if not self.indexed:
            return False
        return self.indexing or (self.seen != self.covered and self.state != SOURCE_UNAVAILABLE)

    def health(self) -> ProjectHealth:
        watching = self.watch is not None and self.state in (WATCHING, POLLING)
        return ProjectHealth(
            project_id=self.project.project_id,
            watching=watching,
            state=self.state,
            healthy=self.error is None,
            indexed=self.indexed,
            last_change_at=self.last_change_at,
            last_change_paths=self.last_change_paths,
            pending_changes=len(self.changed),
            reindex_pending=self.pending(),
            indexing=self.indexing,
            progress=self.progress,
            last_reindex=self.last_reindex,
            error=self.error or self.watch_error,
            last_error=self.last_error,
        )
