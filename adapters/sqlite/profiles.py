"""The ProfileStore port over ``local.db``: project profiles and tunings (migration 008), learnings
and learned models (009)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import apsw

from memory_core.adapters.sqlite.catalog import project_not_found
from memory_core.adapters.sqlite.database import fetch, storage_errors, write_transaction
from memory_core.adapters.storage_format import CONVERTER as STORED
from memory_core.domain.canonical import canonical_json
from memory_core.domain.clock import utc_now_iso
from memory_core.domain.evaluation_errors import LearningNotFound, TuningNotFound
from memory_core.evaluation.learning import LearnResult
from memory_core.evaluation.tuning import TuneResult
from memory_core.retrieval.profile import StoredProfile

_COLUMNS = "project_id, version, settings_json, source, created_at"


def _profile(row: Sequence[Any]) -> StoredProfile:
    return StoredProfile(str(row[0]), int(row[1]), json.loads(str(row[2])), str(row[3]), str(row[4]))


class SqliteProfileStore:
    """Implements ``memory_core.ports.profiles.ProfileStore`` on the catalog's connection."""

    def __init__(self, conn: apsw.Connection, now: Callable[[], str] = utc_now_iso) -> None:
        self._conn = conn
        self._now = now

    def latest_profile(self, project_id: str) -> StoredProfile | None:
        rows = fetch(self._conn, f"SELECT {_COLUMNS} FROM project_profiles WHERE project_id = ? "
                                 "ORDER BY version DESC LIMIT 1", (project_id,))  # fmt: skip
        return _profile(rows[0]) if rows else None

    def profile_history(self, project_id: str) -> list[StoredProfile]:
        rows = fetch(self._conn, f"SELECT {_COLUMNS} FROM project_profiles WHERE project_id = ? ORDER BY version",
                     (project_id,))  # fmt: skip
        return [_profile(r) for r in rows]

    def add_profile(self, project_id: str, settings: Mapping[str, Any], source: str) -> StoredProfile:
        with storage_errors("cannot store the project's profile"), write_transaction(self._conn) as conn:
            if not fetch(conn, "SELECT 1 FROM projects WHERE project_id = ?", (project_id,)):
                raise project_not_found(conn, project_id)
            (last,) = fetch(conn, "SELECT COALESCE(MAX(version), 0) FROM project_profiles WHERE project_id = ?",
                            (project_id,))[0]  # fmt: skip
            stored = StoredProfile(project_id, int(last) + 1, dict(settings), source, self._now())
            conn.execute(
                f"INSERT INTO project_profiles ({_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                (project_id, stored.version, canonical_json(dict(settings)).decode("utf-8"), source, stored.created_at),
            )
        return stored

    def put_tuning(self, result: TuneResult) -> None:
        document = json.dumps(STORED.unstructure(result), sort_keys=True, allow_nan=False)
        with storage_errors("cannot store the tuning"), write_transaction(self._conn) as conn:
            if not fetch(conn, "SELECT 1 FROM projects WHERE project_id = ?", (result.project_id,)):
                raise project_not_found(conn, result.project_id)
            conn.execute(
                "INSERT INTO project_tunings (tune_id, project_id, created_at, result_json) VALUES (?, ?, ?, ?)",
                (result.tune_id, result.project_id, result.created_at, document),
            )

    def get_tuning(self, tune_id: str) -> TuneResult:
        rows = fetch(self._conn, "SELECT result_json FROM project_tunings WHERE tune_id = ?", (tune_id,))
        if not rows:
            raise TuningNotFound(f"no tuning {tune_id!r}", tune_id=tune_id)
        return STORED.structure(json.loads(str(rows[0][0])), TuneResult)

    def tunings(self, project_id: str) -> list[TuneResult]:
        rows = fetch(self._conn, "SELECT result_json FROM project_tunings WHERE project_id = ? "
                                 "ORDER BY created_at DESC, tune_id DESC", (project_id,))  # fmt: skip
        return [STORED.structure(json.loads(str(r[0])), TuneResult) for r in rows]

    def put_learning(self, result: LearnResult, model: bytes | None) -> None:
        document = json.dumps(STORED.unstructure(result), sort_keys=True, allow_nan=False)
        with storage_errors("cannot store the learning"), write_transaction(self._conn) as conn:
            if not fetch(conn, "SELECT 1 FROM projects WHERE project_id = ?", (result.project_id,)):
                raise project_not_found(conn, result.project_id)
            if model is not None and result.model_digest is not None:
                conn.execute(
                    "INSERT OR IGNORE INTO learned_models (model_digest, project_id, model, created_at) "
                    "VALUES (?, ?, ?, ?)",
                    (result.model_digest, result.project_id, model, result.created_at),
                )
            conn.execute(
                "INSERT INTO project_learnings (learn_id, project_id, created_at, result_json) VALUES (?, ?, ?, ?)",
                (result.learn_id, result.project_id, result.created_at, document),
            )

    def get_learning(self, learn_id: str) -> LearnResult:
        rows = fetch(self._conn, "SELECT result_json FROM project_learnings WHERE learn_id = ?", (learn_id,))
        if not rows:
            raise LearningNotFound(f"no learning {learn_id!r}", learn_id=learn_id)
        return STORED.structure(json.loads(str(rows[0][0])), LearnResult)

    def learnings(self, project_id: str) -> list[LearnResult]:
        rows = fetch(self._conn, "SELECT result_json FROM project_learnings WHERE project_id = ? "
                                 "ORDER BY created_at DESC, learn_id DESC", (project_id,))  # fmt: skip
        return [STORED.structure(json.loads(str(r[0])), LearnResult) for r in rows]

    def learned_model(self, project_id: str, digest: str) -> bytes | None:
        rows = fetch(self._conn, "SELECT model FROM learned_models WHERE project_id = ? AND model_digest = ?",
                     (project_id, digest))  # fmt: skip
        return bytes(rows[0][0]) if rows else None
