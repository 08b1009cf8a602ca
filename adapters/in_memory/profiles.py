"""In-memory twin of ``SqliteProfileStore`` (same contract: ``tests/contracts/test_profile_store.py``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from memory_core.domain.clock import utc_now_iso
from memory_core.domain.evaluation_errors import LearningNotFound, TuningNotFound
from memory_core.evaluation.learning import LearnResult
from memory_core.evaluation.tuning import TuneResult
from memory_core.retrieval.profile import StoredProfile

_Result = TypeVar("_Result", TuneResult, LearnResult)  # a tuning's or a learning's, kept whole by its id


class InMemoryProfileStore:
    """``ProfileStore`` over dicts; ``require_project(project_id)`` raises ``ProjectNotFound``
    (give it a catalog's ``get_project``), as the SQLite store's foreign key does."""

    def __init__(self, require_project: Callable[[str], object], now: Callable[[], str] = utc_now_iso) -> None:
        self._require = require_project
        self._now = now
        self._profiles: dict[str, list[StoredProfile]] = {}
        self._tunings: dict[str, TuneResult] = {}
        self._learnings: dict[str, LearnResult] = {}
        self._models: dict[tuple[str, str], bytes] = {}
        self._lock = threading.Lock()

    def latest_profile(self, project_id: str) -> StoredProfile | None:
        with self._lock:
            history = self._profiles.get(project_id)
            return history[-1] if history else None

    def profile_history(self, project_id: str) -> list[StoredProfile]:
        with self._lock:
            return list(self._profiles.get(project_id, ()))

    def add_profile(self, project_id: str, settings: Mapping[str, Any], source: str) -> StoredProfile:
        self._require(project_id)
        with self._lock:
            history = self._profiles.setdefault(project_id, [])
            stored = StoredProfile(project_id, len(history) + 1, dict(settings), source, self._now())
            history.append(stored)
            return stored

    def put_tuning(self, result: TuneResult) -> None:
        self._require(result.project_id)
        with self._lock:
            self._tunings[result.tune_id] = result

    def _kept(self, results: dict[str, _Result], result_id: str, missing: Exception) -> _Result:
        with self._lock:
            if result_id not in results:
                raise missing
            return results[result_id]

    def _newest_first(
        self, results: dict[str, _Result], project_id: str, id_of: Callable[[_Result], str]
    ) -> list[_Result]:
        with self._lock:
            mine = [r for r in results.values() if r.project_id == project_id]
        return sorted(mine, key=lambda r: (r.created_at, id_of(r)), reverse=True)

    def get_tuning(self, tune_id: str) -> TuneResult:
        return self._kept(self._tunings, tune_id, TuningNotFound(f"no tuning {tune_id!r}", tune_id=tune_id))

    def tunings(self, project_id: str) -> list[TuneResult]:
        return self._newest_first(self._tunings, project_id, lambda t: t.tune_id)

    def put_learning(self, result: LearnResult, model: bytes | None) -> None:
        self._require(result.project_id)
        with self._lock:
            if model is not None and result.model_digest is not None:
                self._models.setdefault((result.project_id, result.model_digest), model)
            self._learnings[result.learn_id] = result

    def get_learning(self, learn_id: str) -> LearnResult:
        return self._kept(self._learnings, learn_id, LearningNotFound(f"no learning {learn_id!r}", learn_id=learn_id))

    def learnings(self, project_id: str) -> list[LearnResult]:
        return self._newest_first(self._learnings, project_id, lambda r: r.learn_id)

    def learned_model(self, project_id: str, digest: str) -> bytes | None:
        with self._lock:
            return self._models.get((project_id, digest))
