"""A job: a long operation (a tuning, a fixture import, a storage move, an index or re-index)
that runs beside activations, as the daemon lists it (``list_jobs``) and cancels it
(``cancel_job``)."""

from __future__ import annotations

import attrs

# queued: waiting for a job slot, no process started yet (cancel_job ends it; it never ran)
QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = "queued", "running", "succeeded", "failed", "cancelled"
JOB_STATES = (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED)


@attrs.frozen
class JobInfo:
    """One job, queued, running or recently ended."""

    job_id: str = attrs.field(metadata={"schema": {"description": "what cancel_job takes"}})
    operation: str = attrs.field(metadata={"schema": {"description": "the daemon method it runs"}})
    project_id: str | None
    state: str = attrs.field(metadata={"schema": {"enum": list(JOB_STATES)}})
    started_at: str | None = attrs.field(metadata={"schema": {"description": "null: not known (a re-index)"}})
    ended_at: str | None
    progress: str | None = attrs.field(
        metadata={"schema": {"description": "its stage as it last said it (null: it says none)"}}
    )
    cancellable: bool = attrs.field(metadata={"schema": {"description": "cancel_job can stop it"}})
    error_code: str | None = attrs.field(
        default=None, metadata={"schema": {"description": "the error it ended with, if it failed or was cancelled"}}
    )
