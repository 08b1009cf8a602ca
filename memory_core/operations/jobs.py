"""The jobs beside activations. The daemon runs long operations as jobs on its job board and
answers these from it (``daemon/dispatch.py``); in process a long operation runs in the caller's
call, so there is no job to list or cancel."""

from __future__ import annotations

import attrs

from memory_core.domain import errors as err
from memory_core.domain.jobs import JobInfo
from memory_core.operations.bounds import bounded
from memory_core.operations.registry import READ, UI, WRITE, operation
from memory_core.services.engine import Engine


@attrs.frozen(field_transformer=bounded)
class ListJobsRequest:
    """No inputs."""


@attrs.frozen
class JobList:
    """Running jobs (oldest first), then those ended lately (newest first)."""

    jobs: tuple[JobInfo, ...]


@operation(READ | UI, ListJobsRequest, JobList,
           "The jobs running beside activations (tunings, imports, storage moves, re-indexes) and those ended "
           "lately, with their progress where they say it.", allow_get=True)  # fmt: skip
def list_jobs(_engine: Engine, _: ListJobsRequest) -> JobList:
    return JobList(())


@attrs.frozen(field_transformer=bounded)
class CancelJobRequest:
    """Stop a running job (list_jobs gives the ids); nothing it started is kept."""

    job_id: str = attrs.field(metadata={"schema": {"minLength": 1, "maxLength": 64}})


@operation(WRITE | UI, CancelJobRequest, JobInfo,
           "Stop a running job: its caller gets job_interrupted (reason cancelled) and nothing it started is "
           "kept. A re-index cannot be cancelled.", (err.JobNotFound, err.InvalidRequest))  # fmt: skip
def cancel_job(_engine: Engine, req: CancelJobRequest) -> JobInfo:
    raise err.JobNotFound(f"no job {req.job_id!r} is running or ended lately", job_id=req.job_id)
