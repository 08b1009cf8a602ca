"""Projects, their Local Storage and their index: the operations."""

from __future__ import annotations

import os
from typing import Any

import attrs

from memory_core.domain import errors as err
from memory_core.domain.model import PROJECT_ID_RE, Source
from memory_core.operations.bounds import bounded, described
from memory_core.operations.registry import JOB, MCP, READ, UI, WRITE, current_progress, operation, reported
from memory_core.services.engine import Engine, ProjectInfo
from memory_core.services.indexing import IndexReport
from memory_core.services.local_storage import ProjectRemoval, ProjectStorage


def _nonempty_sources(_instance: Any, _attribute: Any, sources: tuple[Source, ...]) -> None:
    if not sources:
        raise err.InvalidRequest("a project needs at least one source")
    for source in sources:
        # The daemon's working directory is not the caller's: a relative path would be wrong.
        if not os.path.isabs(source.path):
            raise err.InvalidRequest(f"source path {source.path!r} must be absolute", path=source.path)


def _absolute_destination(_instance: Any, _attribute: Any, destination: str) -> None:
    # The daemon's working directory is not the caller's: a relative path would be wrong.
    if not destination or not os.path.isabs(destination):
        raise err.InvalidStorageLocation(
            f"destination {destination!r} must be absolute", destination=destination, reason="not_absolute"
        )


@attrs.frozen(field_transformer=bounded)
class AddProjectRequest:
    project_id: str = attrs.field(
        metadata={"schema": {"pattern": PROJECT_ID_RE.pattern, "description": "lowercase slug, 1-63 characters"}}
    )
    sources: tuple[Source, ...] = attrs.field(
        validator=_nonempty_sources,
        metadata={"schema": {"minItems": 1, "description": "absolute paths, in precedence order"}},
    )


@operation(WRITE, AddProjectRequest, ProjectInfo, "Add a project with ordered sources.",
           (err.InvalidProjectName, err.ProjectExists))  # fmt: skip
def add_project(engine: Engine, req: AddProjectRequest) -> ProjectInfo:
    project = engine.add_project(req.project_id, req.sources)
    return engine.show_project(project.project_id)


@attrs.frozen(field_transformer=bounded)
class ListProjectsRequest:
    """No inputs."""


@attrs.frozen
class ProjectList:
    projects: tuple[ProjectInfo, ...]


@operation(READ | UI | MCP, ListProjectsRequest, ProjectList, "Every project with its current commit generation.",
           allow_get=True)  # fmt: skip
def list_projects(engine: Engine, _: ListProjectsRequest) -> ProjectList:
    return ProjectList(tuple(engine.list_projects()))


@attrs.frozen(field_transformer=bounded)
class ShowProjectRequest:
    project_id: str


@operation(READ, ShowProjectRequest, ProjectInfo, "One project with its current commit generation.",
           (err.ProjectNotFound,))  # fmt: skip
def show_project(engine: Engine, req: ShowProjectRequest) -> ProjectInfo:
    return engine.show_project(req.project_id)


@attrs.frozen(field_transformer=bounded)
class RemoveProjectRequest:
    project_id: str
    purge: bool = described("also delete the project's Evaluation Cases and their pinned Runs", False)


@operation(WRITE, RemoveProjectRequest, ProjectRemoval,
           "Remove a project, its unpinned Runs and its Project Local Storage; its Evaluation Cases and their "
           "pinned Runs stay unless purge: true. Unreferenced blobs are collected as Clear History does.",
           (err.ProjectNotFound,))  # fmt: skip
def remove_project(engine: Engine, req: RemoveProjectRequest) -> ProjectRemoval:
    return engine.remove_project(req.project_id, purge=req.purge)


@attrs.frozen(field_transformer=bounded)
class ShowProjectStorageRequest:
    project_id: str


@operation(READ, ShowProjectStorageRequest, ProjectStorage,
           "Where a project's Local Storage is, its size and its generations (current, previous, unreferenced).",
           (err.ProjectNotFound,))  # fmt: skip
def show_project_storage(engine: Engine, req: ShowProjectStorageRequest) -> ProjectStorage:
    return engine.project_storage(req.project_id)


@attrs.frozen(field_transformer=bounded)
class MoveProjectStorageRequest:
    """Move a project's Local Storage (its rebuildable generations) to another directory."""

    project_id: str
    destination: str = attrs.field(
        validator=_absolute_destination,
        metadata={"schema": {"minLength": 1, "description": "absolute path of an empty or new directory"}},
    )


@operation(WRITE | JOB, MoveProjectStorageRequest, ProjectStorage,
           "Move a project's generations to an empty or new directory (made owner-only) and record it; a failure "
           "leaves the old location serving. Runs, Cases and blobs are not touched. Runs as a job, beside "
           "activations.",
           (err.ProjectNotFound, err.InvalidStorageLocation, err.GenerationCorrupted, err.JobInterrupted))  # fmt: skip
def move_project_storage(engine: Engine, req: MoveProjectStorageRequest) -> ProjectStorage:
    return engine.move_project_storage(req.project_id, req.destination, reported())


@attrs.frozen(field_transformer=bounded)
class ClearProjectStorageRequest:
    """Delete a project's generations; the next index rebuilds them."""

    project_id: str


@operation(WRITE, ClearProjectStorageRequest, ProjectStorage,
           "Delete a project's generations; the next index_project rebuilds them, and until then activate_memory "
           "answers project_not_indexed (a failed Run). Runs, Cases and blobs are not touched.",
           (err.ProjectNotFound,))  # fmt: skip
def clear_project_storage(engine: Engine, req: ClearProjectStorageRequest) -> ProjectStorage:
    return engine.clear_project_storage(req.project_id)


@attrs.frozen(field_transformer=bounded)
class IndexProjectRequest:
    project_id: str
    force: bool = described("rebuild even when unchanged", False)


@operation(WRITE | JOB, IndexProjectRequest, IndexReport,
           "Build the project's commit generation (a no-op when nothing changed); in the daemon it runs "
           "beside activations, which serve the current generation until the new one is published.",
           (err.ProjectNotFound, err.SourceUnavailable, err.EmptyProject))  # fmt: skip
def index_project(engine: Engine, req: IndexProjectRequest) -> IndexReport:
    return engine.index(req.project_id, force=req.force, progress=current_progress())
