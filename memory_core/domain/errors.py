"""Domain errors. Each carries a stable ``code`` that entrypoints map to transport errors."""

from __future__ import annotations

from typing import Any


class MemoryCoreError(Exception):
    """Base of every error memory-core raises on purpose."""

    code = "internal_error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        # Whole, whatever the subclass's constructor takes: a daemon job's error crosses a pipe.
        return _restore, (type(self), self.args, self.__dict__)


def _restore(cls: type[MemoryCoreError], args: tuple[Any, ...], state: dict[str, Any]) -> MemoryCoreError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, *args)
    exc.__dict__.update(state)
    return exc


class InvalidRequest(MemoryCoreError):
    """A request failed validation at the boundary; nothing was written."""

    code = "invalid_request"


class InvalidQuery(InvalidRequest):
    """The query is empty after trimming or longer than the documented limit."""

    code = "invalid_query"


class InvalidBudget(InvalidRequest):
    """The token budget is out of the documented range."""

    code = "invalid_budget"


class InvalidActivationState(InvalidRequest):
    """The activation state is malformed (unknown fields, bad ids or hashes)."""

    code = "invalid_activation_state"


class InvalidProjectName(InvalidRequest):
    """A project name is not a valid slug."""

    code = "invalid_project_name"


class ProjectNotFound(MemoryCoreError):
    """No project with that id exists."""

    code = "project_not_found"
    KNOWN_SHOWN = 50  # names beyond this are counted, not listed (an agent reads the message)

    @classmethod
    def among(cls, project_id: str, known: list[str]) -> ProjectNotFound:
        """The error naming the projects that do exist, so whoever asked (often an agent) can
        correct the id instead of guessing; ``known`` is every project id, sorted."""
        shown = known[: cls.KNOWN_SHOWN]
        if not known:
            said = "no project exists yet (memcore project add NAME --source PATH)"
        else:
            more = f" and {len(known) - len(shown)} more" if len(known) > len(shown) else ""
            said = "known projects: " + ", ".join(shown) + more
        return cls(f"unknown project {project_id!r}; {said}", project=project_id, known_projects=shown)


class ProjectExists(MemoryCoreError):
    """A project with that id already exists."""

    code = "project_exists"


class SourceUnavailable(MemoryCoreError):
    """A project source path is missing or unreadable."""

    code = "source_unavailable"


class EmptyProject(MemoryCoreError):
    """A project's Effective Memory holds no resource to index."""

    code = "empty_project"


class InvalidStorageLocation(InvalidRequest):
    """A Project Local Storage destination cannot be used (``details.reason``: not_empty,
    not_writable, not_a_directory, overlaps, same_location, in_home); nothing was moved."""

    code = "invalid_storage_location"


class ProjectNotIndexed(MemoryCoreError):
    """The project has no current commit generation; run ``memcore index``."""

    code = "project_not_indexed"


class GenerationCorrupted(MemoryCoreError):
    """A commit generation on disk is missing files or fails verification."""

    code = "generation_corrupted"


class BlobCorrupted(MemoryCoreError):
    """A content-addressed blob does not hash to its name."""

    code = "blob_corrupted"


class BlobNotFound(MemoryCoreError):
    """A content-addressed blob is absent from the store."""

    code = "blob_not_found"


class StorageUnavailable(MemoryCoreError):
    """The home directory, database or a storage location cannot be written (read-only, full:
    ``details.path``), or is busy (``details.reason``: busy, another move or an index holds it)."""

    code = "storage_unavailable"


class JobInterrupted(MemoryCoreError):
    """A daemon job (tuning, import, storage move) ended before it finished: the daemon was
    stopping, or the job ran out of memory; what it had started was not kept."""

    code = "job_interrupted"


class JobNotFound(MemoryCoreError):
    """No running or recently ended job has this id (``list_jobs`` lists them)."""

    code = "job_not_found"


class RetrievalFailed(MemoryCoreError):
    """A search or model stage failed; the Run is recorded as ``failed``."""

    code = "retrieval_failed"

    def __init__(self, message: str, *, stage: str, error_code: str, run_id: str | None = None) -> None:
        super().__init__(message, stage=stage, error_code=error_code, run_id=run_id)
        self.stage = stage
        self.error_code = error_code
        self.run_id = run_id


class RunNotFound(MemoryCoreError):
    """No Retrieval Run with that id exists."""

    code = "run_not_found"


class ModelUnavailable(MemoryCoreError):
    """A model could not be read, built or run: its directory lacks weights, a tokenizer or a
    config, names an architecture memory-core does not run, holds a truncated or corrupt file,
    changed since it was added, or its inference failed to start. ``details`` name what is
    missing (``missing``, ``model_dir``, ``file``). An activation fails with this code in its
    model stage; an index build fails before any generation is written; nothing is changed."""

    code = "model_unavailable"
