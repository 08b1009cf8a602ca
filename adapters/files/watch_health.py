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
UNDECODABLE_FOLDER = "undecodable_folder_name"  # ... when a folder's name stops the OS watch (polling)

# A failed re-index (a full disk, storage gone) is tried again after RETRY_FIRST_S, doubling per
# failure up to RETRY_MAX_S: never a busy loop, and a failure that clears is caught up in a minute.
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0


def retry_delay(failures: int) -> float:
    """Seconds until the next try after ``failures`` re-indexes failed in a row (at least 1)."""
    return float(min(RETRY_FIRST_S * 2 ** min(failures - 1, 16), RETRY_MAX_S))


def utc_now(after_s: float = 0.0) -> str:
    at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=after_s)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- health values ----------------------------------------------------------------------------
@attrs.frozen
class HealthError:
    code: str = attrs.field(metadata={"schema": {"description": "a stable error code (source_unavailable, ...)"}})
    message: str
    at: str


@attrs.frozen
class ReindexRecord:
    """One re-index the daemon ran for a project (a watch batch, a request, the start-up check, a retry,
    a new embedding model)."""

    trigger: str = attrs.field(metadata={"schema": {"enum": ["watch", "request", "start", "retry", "model"]}})
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
    failed_attempts: int = attrs.field(
        default=0, metadata={"schema": {"description": "re-indexes failed in a row (0 after one succeeds)"}}
    )
    next_retry_at: str | None = attrs.field(
        default=None,
        metadata={"schema": {"description": "when the failed re-index of the changes seen is tried again"}},
    )
    queue_position: int | None = attrs.field(
        default=None,
        metadata={
            "schema": {
                "description": "an index request of it waits behind this many re-indexes (running or "
                "queued); null when none waits"
            }
        },
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
    failures: int = 0  # re-indexes failed in a row
    retry_at: float = 0.0  # time.monotonic() before which no watch re-index is tried (after a failure)
    next_retry_at: str | None = None  # the same, in UTC, for the health record

    def finished(self, record: ReindexRecord, seen: int, failure: BaseException | None, at: str, now_s: float) -> None:
        """A re-index that started from ``seen`` ended (``failure`` None: it built or found nothing
        to do) at ``now_s`` (``time.monotonic()``)."""
        self.indexing, self.progress = False, None
        self.last_reindex = record
        if failure is None:
            self.covered = max(self.covered, seen)
            self.reset_backoff()
            self.indexed = True
            if self.covered == self.seen:
                self.changed.clear()
            # A failed re-index's error is resolved by this one; a folder the watch finds gone
            # stays an error until the watch sees it back (a re-index may have started before).
            folder_gone = self.state == SOURCE_UNAVAILABLE
            if self.error is not None and not (self.error.code == SourceUnavailable.code and folder_gone):
                self.error = None
            return
        # The changes it started from stay pending (``covered`` unchanged): tried again after a
        # backoff, so a failure that clears (space freed) is caught up without another change.
        self.failures += 1
        delay = retry_delay(self.failures)
        self.retry_at, self.next_retry_at = now_s + delay, utc_now(delay)
        message = failure.message if isinstance(failure, MemoryCoreError) else f"{type(failure).__name__}: {failure}"
        self.error = self.last_error = HealthError(record.error_code or "internal_error", message, at)

    def reset_backoff(self) -> None:
        self.failures, self.retry_at, self.next_retry_at = 0, 0.0, None

    def backing_off(self, now_s: float) -> bool:
        """A failed re-index waits for its retry (the changes stay pending meanwhile)."""
        return self.failures > 0 and now_s < self.retry_at

    def pending(self) -> bool:
        """A re-index is queued or running for changes seen (none is while a source is missing)."""
        if not self.indexed:
            return False
        return self.indexing or (self.seen != self.covered and self.state != SOURCE_UNAVAILABLE)

    def health(self, queue_position: int | None = None) -> ProjectHealth:
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
            failed_attempts=self.failures,
            # Only while there is something to retry: a failed request with nothing pending is its caller's.
            next_retry_at=self.next_retry_at if self.indexed and self.seen != self.covered else None,
            queue_position=queue_position,
        )
