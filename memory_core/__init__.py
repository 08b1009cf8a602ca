"""memory-core as a library: ``memory_core.open(home)`` gives the Engine.

    import memory_core

    with memory_core.open("~/memcore-home") as engine:
        engine.add_project("notes", [memory_core.Source("/path/to/notes")])
        engine.index("notes")
        activation = engine.activate("notes", "how do we roll back a deploy?")

Every failure a caller can handle is a :class:`MemoryCoreError` with a stable ``code``.
Importing this package is cheap: the models, the search libraries and the database driver load
inside ``open()`` and the adapters, never at import time.
"""

from __future__ import annotations

import os
from typing import Any

from memory_core.domain.errors import (
    EmptyProject,
    InvalidActivationState,
    InvalidBudget,
    InvalidProjectName,
    InvalidQuery,
    InvalidRequest,
    InvalidStorageLocation,
    MemoryCoreError,
    ProjectExists,
    ProjectNotFound,
    ProjectNotIndexed,
    RetrievalFailed,
    RunNotFound,
    SourceUnavailable,
    StorageUnavailable,
)
from memory_core.domain.model import Generation, Project, Source
from memory_core.domain.version import package_version
from memory_core.retrieval.activation_state import ActivationState
from memory_core.runs.records import RunDetail, RunFilter, RunPage, RunSummary
from memory_core.services.activation import Activation, ActivationResponse, Fragment
from memory_core.services.engine import Engine, ProjectInfo
from memory_core.services.freshness import Freshness
from memory_core.services.indexing import IndexReport

__version__: str = package_version()


def open(home: str | os.PathLike[str] | None = None, **overrides: Any) -> Engine:  # noqa: A001
    """The Engine over the memory home ``home`` with the real adapters.

    ``home``: ``~`` is expanded; by default ``$MEMORY_CORE_HOME``, else the platform's user data
    folder. Any adapter may be passed by keyword instead (the arguments of
    ``memory_core.entrypoints.bootstrap.bootstrap``). Use the engine as a context manager, or
    call ``close()``: closing lets pending Run writes land and releases the open indexes.
    Raises ``StorageUnavailable`` when the home cannot be prepared or opened.
    """
    from memory_core.entrypoints.bootstrap import bootstrap  # the composition root, loaded late

    return bootstrap(home, **overrides)


__all__ = [
    "Activation",
    "ActivationResponse",
    "ActivationState",
    "EmptyProject",
    "Engine",
    "Fragment",
    "Freshness",
    "Generation",
    "IndexReport",
    "InvalidActivationState",
    "InvalidBudget",
    "InvalidProjectName",
    "InvalidQuery",
    "InvalidRequest",
    "InvalidStorageLocation",
    "MemoryCoreError",
    "Project",
    "ProjectExists",
    "ProjectInfo",
    "ProjectNotFound",
    "ProjectNotIndexed",
    "RetrievalFailed",
    "RunDetail",
    "RunFilter",
    "RunNotFound",
    "RunPage",
    "RunSummary",
    "Source",
    "SourceUnavailable",
    "StorageUnavailable",
    "__version__",
    "open",
]
