"""The ProfileStore port over ``local.db``: project profiles and tunings (migration 008), learnings
and learned models (009)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

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
# A tuning's or a learning's result: each kept whole as JSON in its own table, in the same
# columns but its key.
_Result = TypeVar("_Result", TuneResult, LearnResult)
_KEYS = {"project_tunings": "tune_id", "project_learnings": "learn_id"}


def _profile(row: Sequence[Any]) -> StoredProfile:
    return StoredProfile(str(row[0]), int(row[1]), json.loads(str(row[2])), str(row[3]), str(row[4]))


def _require_project(conn: apsw.Connection, project_id: str) -> None:
    """``project_not_found`` unless the project is in the catalog (checked inside the write)."""
    if not fetch(conn, "SELECT 1 FROM projects WHERE project_id = ?", (project_id,)):
        raise project_not_found(conn, project_id)


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
            _require_project(conn, project_id)
            (last,) = fetch(conn, "SELECT COALESCE(MAX(version), 0) FROM project_profiles WHERE project_id = ?",
                            (project_id,))[0]  # fmt: skip
            stored = StoredProfile(project_id, int(last) + 1, dict(settings), source, self._now())
            conn.execute(
                f"INSERT INTO project_profiles ({_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                (project_id, stored.version, canonical_json(dict(settings)).decode("utf-8"), source, stored.created_at),
            )
        return stored

    def _put_result(
        self, what: str, table: str, result_id: str, result: Any, also: Callable[[apsw.Connection], None]
    ) -> None:
        """Keeps ``result`` (and whatever ``also`` writes in the same transaction) for its project."""
        document = json.dumps(STORED.unstructure(result), sort_keys=True, allow_nan=False)
        with storage_errors(f"cannot store the {what}"), write_transaction(self._conn) as conn:
            _require_project(conn, result.project_id)
            also(conn)
            conn.execute(
                f"INSERT INTO {table} ({_KEYS[table]}, project_id, created_at, result_json) VALUES (?, ?, ?, ?)",
                (result_id, result.project_id, result.created_at, document),
            )

    def _result(self, table: str, result_id: str, kind: type[_Result], missing: Exception) -> _Result:
        rows = fetch(self._conn, f"SELECT result_json FROM {table} WHERE {_KEYS[table]} = ?", (result_id,))
        if not rows:
            raise missing
        return STORED.structure(json.loads(str(rows[0][0])), kind)

    def _results(self, table: str, project_id: str, kind: type[_Result]) -> list[_Result]:
        """The project's results, newest first."""
        rows = fetch(self._conn, f"SELECT result_json FROM {table} WHERE project_id = ? "
                                 f"ORDER BY created_at DESC, {_KEYS[table]} DESC", (project_id,))  # fmt: skip
        return [STORED.structure(json.loads(str(r[0])), kind) for r in rows]

    def put_tuning(self, result: TuneResult) -> None:
        self._put_result("tuning", "project_tunings", result.tune_id, result, also=lambda conn: None)

    def get_tuning(self, tune_id: str) -> TuneResult:
        missing = TuningNotFound(f"no tuning {tune_id!r}", tune_id=tune_id)
        return self._result("project_tunings", tune_id, TuneResult, missing)

    def tunings(self, project_id: str) -> list[TuneResult]:
        return self._results("project_tunings", project_id, TuneResult)

    def put_learning(self, result: LearnResult, model: bytes | None) -> None:
        def keep_model(conn: apsw.Connection) -> None:  # once, by its digest, however many learnings name it
            if model is not None and result.model_digest is not None:
                conn.execute(
                    "INSERT OR IGNORE INTO learned_models (model_digest, project_id, model, created_at) "
                    "VALUES (?, ?, ?, ?)",
                    (result.model_digest, result.project_id, model, result.created_at),
                )

        self._put_result("learning", "project_learnings", result.learn_id, result, also=keep_model)

    def get_learning(self, learn_id: str) -> LearnResult:
        missing = LearningNotFound(f"no learning {learn_id!r}", learn_id=learn_id)
        return self._result("project_learnings", learn_id, LearnResult, missing)

    def learnings(self, project_id: str) -> list[LearnResult]:
        return self._results("project_learnings", project_id, LearnResult)

    def learned_model(self, project_id: str, digest: str) -> bytes | None:
        rows = fetch(self._conn, "SELECT model FROM learned_models WHERE project_id = ? AND model_digest = ?",
                     (project_id, digest))  # fmt: skip
        return bytes(rows[0][0]) if rows else None
