"""An evaluation service and a BEIR workspace over the session's Cranfield home and engine,
shared by the modules that import Cranfield as cases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory_core.adapters.files.blob_store import FileBlobStore
from memory_core.adapters.files.evaluation_sources import FolderSources
from memory_core.adapters.sqlite import open_database
from memory_core.adapters.sqlite.evaluation import SqliteEvaluationStore
from memory_core.adapters.system.home import HomeLayout
from memory_core.entrypoints.bootstrap import utc_now
from memory_core.services.beir_import import EngineWorkspace
from memory_core.services.evaluation import EvaluationService


def evaluation_over(home: Path, engine: Any, sources: str) -> tuple[EvaluationService, EngineWorkspace, Any]:
    """The service (on a connection of its own: close the third value), and a workspace whose
    collections are written under ``home.parent / sources``."""
    layout = HomeLayout.at(home)
    conn = open_database(layout.db_path)
    blobs = FileBlobStore(layout.blobs_dir)
    service = EvaluationService(SqliteEvaluationStore(conn), engine.history, blobs, now=utc_now)
    return service, EngineWorkspace(engine, FolderSources(home.parent / sources)), conn
