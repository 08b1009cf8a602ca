"""The ModelStore port over ``local.db`` (migration 010): registered models and the models each
project, and the home by default, chose."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

import apsw

from memory_core.adapters.sqlite.catalog import project_not_found
from memory_core.adapters.sqlite.database import fetch, storage_errors, write_transaction
from memory_core.adapters.storage_format import CONVERTER as STORED
from memory_core.domain.canonical import canonical_json
from memory_core.domain.model_registry_errors import HOME, ModelExists, model_in_use, model_not_found
from memory_core.domain.models import ModelOverrides, ModelSpec
from memory_core.ports.models import RESERVED_NAMES, ModelChoice, RegisteredModel

_COLUMNS = "name, spec_json, overrides_json, added_at"


def _model(row: Sequence[Any]) -> RegisteredModel:
    return RegisteredModel(
        str(row[0]),
        STORED.structure(json.loads(str(row[1])), ModelSpec),
        STORED.structure(json.loads(str(row[2])), ModelOverrides),
        str(row[3]),
    )


def _json(value: Any) -> str:
    return canonical_json(STORED.unstructure(value)).decode("utf-8")


class SqliteModelStore:
    """Implements ``memory_core.ports.models.ModelStore`` on a connection of its own, behind a lock:
    the engine resolves a project's embedder from any thread (the daemon's re-index worker too),
    and an apsw connection refuses two threads at once."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def add_model(self, model: RegisteredModel, *, replace: bool = False) -> None:
        with self._lock, storage_errors("cannot register the model"), write_transaction(self._conn) as conn:
            exists = bool(fetch(conn, "SELECT 1 FROM models WHERE name = ?", (model.name,)))
            if replace and not exists:
                raise model_not_found(model.name, self._names(conn))
            if model.name in RESERVED_NAMES or (exists and not replace):
                raise ModelExists(f"a model named {model.name!r} is already registered (--replace puts new files "
                                  "in its place)", model=model.name)  # fmt: skip
            conn.execute(
                f"INSERT OR REPLACE INTO models({_COLUMNS}, kind) VALUES (?, ?, ?, ?, ?)",
                (model.name, _json(model.spec), _json(model.overrides), model.added_at, model.spec.kind),
            )

    def get_model(self, name: str) -> RegisteredModel:
        with self._lock, storage_errors("cannot read the model registry"):
            rows = fetch(self._conn, f"SELECT {_COLUMNS} FROM models WHERE name = ?", (name,))
            if not rows:
                raise model_not_found(name, self._names(self._conn))
            return _model(rows[0])

    def list_models(self) -> list[RegisteredModel]:
        with self._lock, storage_errors("cannot read the model registry"):
            return [_model(r) for r in fetch(self._conn, f"SELECT {_COLUMNS} FROM models ORDER BY name")]

    def remove_model(self, name: str) -> None:
        with self._lock, storage_errors("cannot remove the model"), write_transaction(self._conn) as conn:
            if not fetch(conn, "SELECT 1 FROM models WHERE name = ?", (name,)):
                raise model_not_found(name, self._names(conn))
            users = self._users(conn, name)
            if users:
                raise model_in_use(name, users)
            conn.execute("DELETE FROM models WHERE name = ?", (name,))

    def model_users(self, name: str) -> list[str]:
        with self._lock, storage_errors("cannot read the model registry"):
            return self._users(self._conn, name)

    def model_choice(self, project_id: str | None) -> ModelChoice:
        with self._lock, storage_errors("cannot read the model choice"):
            if project_id is None:
                rows = fetch(self._conn, "SELECT embedding, reranker FROM home_model_choice")
            else:
                rows = fetch(self._conn, "SELECT embedding, reranker FROM project_model_choice WHERE project_id = ?",
                             (project_id,))  # fmt: skip
        if not rows:
            return ModelChoice()
        embedding, reranker = rows[0]
        return ModelChoice(None if embedding is None else str(embedding), None if reranker is None else str(reranker))

    def set_model_choice(self, project_id: str | None, choice: ModelChoice) -> None:
        with self._lock, storage_errors("cannot record the model choice"), write_transaction(self._conn) as conn:
            if project_id is not None and not fetch(conn, "SELECT 1 FROM projects WHERE project_id = ?",
                                                    (project_id,)):  # fmt: skip
                raise project_not_found(conn, project_id)
            for name in (choice.embedding, choice.reranker):
                if (
                    name is not None
                    and name not in RESERVED_NAMES
                    and not fetch(conn, "SELECT 1 FROM models WHERE name = ?", (name,))
                ):
                    raise model_not_found(name, self._names(conn))
            if project_id is None:
                conn.execute("INSERT OR REPLACE INTO home_model_choice(scope, embedding, reranker) VALUES ('', ?, ?)",
                             (choice.embedding, choice.reranker))  # fmt: skip
            else:
                conn.execute("INSERT OR REPLACE INTO project_model_choice(project_id, embedding, reranker) "
                             "VALUES (?, ?, ?)", (project_id, choice.embedding, choice.reranker))  # fmt: skip

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @staticmethod
    def _names(conn: apsw.Connection) -> list[str]:
        return [str(r[0]) for r in fetch(conn, "SELECT name FROM models ORDER BY name")]

    @staticmethod
    def _users(conn: apsw.Connection, name: str) -> list[str]:
        home = fetch(conn, "SELECT 1 FROM home_model_choice WHERE embedding = ?1 OR reranker = ?1", (name,))
        projects = fetch(conn, "SELECT project_id FROM project_model_choice WHERE embedding = ?1 OR reranker = ?1 "
                               "ORDER BY project_id", (name,))  # fmt: skip
        return ([HOME] if home else []) + [str(r[0]) for r in projects]
