"""The port that keeps each project's own ranking settings, its tunings (issue 18), its learnings
and their learned models (issue 32)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from memory_core.evaluation.learning import LearnResult
from memory_core.evaluation.tuning import TuneResult
from memory_core.retrieval.profile import StoredProfile


class ProfileStore(Protocol):
    """Versions of a project's ranking settings (append-only: restoring appends a copy) and the
    tunings measured for it; both go when the project is removed."""

    def latest_profile(self, project_id: str) -> StoredProfile | None:
        """The version in use; None: the engine's defaults."""
        ...

    def profile_history(self, project_id: str) -> list[StoredProfile]:
        """Every version, oldest first."""
        ...

    def add_profile(self, project_id: str, settings: Mapping[str, Any], source: str) -> StoredProfile:
        """Append the next version (it is then in use); raises ``ProjectNotFound``."""
        ...

    def put_tuning(self, result: TuneResult) -> None:
        """Keep a tuning; raises ``ProjectNotFound``."""
        ...

    def get_tuning(self, tune_id: str) -> TuneResult:
        """Raises ``TuningNotFound``."""
        ...

    def tunings(self, project_id: str) -> list[TuneResult]:
        """The project's tunings, newest first."""
        ...

    def put_learning(self, result: LearnResult, model: bytes | None) -> None:
        """Keep a learning and its model's bytes (under ``result.model_digest``, once); raises
        ``ProjectNotFound``."""
        ...

    def get_learning(self, learn_id: str) -> LearnResult:
        """Raises ``LearningNotFound``."""
        ...

    def learnings(self, project_id: str) -> list[LearnResult]:
        """The project's learnings, newest first."""
        ...

    def learned_model(self, project_id: str, digest: str) -> bytes | None:
        """The bytes of the project's model ``digest`` as stored (unchecked), or None."""
        ...
