"""What the Runtime page shows beyond ``runtime_status``: storage sizes, the schema version,
projects with their generation, models warm or cold, and recent per-stage latency.

A UI-only view (``GET /ui/api/runtime``): it reads the engine the daemon keeps warm, so it takes
the engine lock, but only briefly: while indexing holds the lock the page still answers, with
the engine's part marked busy instead of waiting minutes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, cast

from memory_core.domain.canonical import plain
from memory_core.entrypoints.daemon.dispatch import Context
from memory_core.runs.records import SUCCEEDED, RunFilter

RECENT_RUNS = 30
LOCK_WAIT_S = 1.0


def tree_size(path: str | os.PathLike[str]) -> dict[str, int] | None:
    """``{"bytes", "files"}`` under ``path`` (symlinks not followed); None when absent."""
    root = Path(path)
    if not root.exists():
        return None
    total = files = 0
    for dirpath, _, names in os.walk(root, followlinks=False):
        for name in names:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue  # removed while we walked (GC, a new generation)
            total += st.st_size
            files += 1
    return {"bytes": total, "files": files}


def database_facts(db: Path) -> dict[str, Any]:
    """``local.db`` with its WAL sidecars, and its schema version (a read-only connection)."""
    files = (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"))
    sizes = [p.stat().st_size for p in files if p.exists()]
    version: int | None = None
    expected: int | None = None
    if db.exists():
        import apsw

        from memory_core.entrypoints.bootstrap import schema_version

        expected = schema_version()
        conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            # PRAGMA user_version is always an integer; apsw types a cell as any SQLite value
            version = int(cast(int, conn.execute("PRAGMA user_version").fetchall()[0][0]))
        finally:
            conn.close()
    return {
        "path": str(db),
        "bytes": sum(sizes) if sizes else None,
        "schema_version": version,
        "expected_schema_version": expected,
    }


def _model(name: str, component: object, *, weights: bool = True) -> dict[str, Any]:
    loaded = getattr(component, "loaded", None)
    if not weights:
        loaded = True  # nothing to load: always warm
    try:
        revision = str(getattr(component, "revision", "")) or None
    except Exception as exc:  # a revision hashes weights; a broken install should not hide the page
        revision = f"unavailable: {exc}"
    return {
        "name": name,
        "kind": type(component).__name__,
        "revision": revision,
        "state": "warm" if loaded else ("cold" if loaded is not None else "unknown"),
    }


def engine_facts(context: Context, recent: int = RECENT_RUNS) -> dict[str, Any]:
    """Projects, models and recent latency; call with the engine lock held."""
    engine = context.engine
    projects = []
    for info in engine.list_projects():
        generation = info.generation
        entry: dict[str, Any] = {
            "project_id": info.project.project_id,
            "sources": [{"path": s.path, "layer": s.layer.value} for s in info.project.sources],
            "generation": None,
        }
        if generation is not None:
            entry["generation"] = {
                "index_revision": generation.index_revision,
                "effective_memory_hash": generation.effective_memory_hash,
                "units": generation.unit_count,
                "resources": generation.resource_count,
                "created_at": generation.created_at,
                "revisions": plain(generation.revisions),
                "size": tree_size(generation.directory),
                "state": "warm" if engine.warm_revision(generation.project_id) == generation.index_revision else "cold",
            }
        projects.append(entry)
    reranker_weights = hasattr(engine.reranker, "loaded") or hasattr(engine.reranker, "model_dir")
    models = [
        _model("embedding model", engine.embedder),
        _model("reranker", engine.reranker, weights=reranker_weights),
    ]
    jvm = sys.modules.get("memory_core.adapters.search.jvm")
    models.append(
        {
            "name": "Lucene (JVM)",
            "kind": "jvm",
            "revision": None,
            "state": "warm" if jvm is not None and jvm.jvm_started() else "cold",
        }
    )
    latency = []
    if engine.history is not None:
        page = engine.list_runs(RunFilter(status=SUCCEEDED), limit=recent)
        for summary in reversed(page.runs):  # oldest first, as a chart reads
            detail = engine.get_run(summary.run_id)
            latency.append(
                {
                    "run_id": summary.run_id,
                    "project_id": summary.project_id,
                    "started_at": summary.started_at,
                    "warm": summary.warm,
                    "latency_ms": dict(detail.latency_ms),
                }
            )
    return {"projects": projects, "models": models, "recent_latency": latency}


def runtime_facts(context: Context, recent: int = RECENT_RUNS) -> dict[str, Any]:
    """Everything the Runtime page adds to ``runtime_status``."""
    from memory_core.entrypoints.bootstrap import HomeLayout

    layout = HomeLayout.at(context.home)
    facts: dict[str, Any] = {
        "database": database_facts(layout.db_path),
        "blob_store": {"path": str(layout.blobs_dir), "size": tree_size(layout.blobs_dir)},
        "engine_busy": False,
    }
    if not context.engine_lock.acquire(timeout=LOCK_WAIT_S):
        facts.update(engine_busy=True, projects=None, models=None, recent_latency=None)
        return facts
    try:
        facts.update(engine_facts(context, recent))
    finally:
        context.engine_lock.release()
    return facts
