"""The port of a learning-to-rank library (issue 32, item 2): fit grouped ranking data, load a
fitted model as a scorer. The adapter (``adapters/learning``) bounds its own time and memory."""

from __future__ import annotations

from typing import Protocol

from memory_core.evaluation.learning import FittedModel, LearnerSetting, RankingData, Scorer


class RankLearner(Protocol):
    @property
    def revision(self) -> str:
        """The library, objective and bounds a model is trained with (kept in the model)."""
        ...

    def with_setting(self, setting: LearnerSetting) -> RankLearner:
        """This learner fitting with ``setting`` (one of ``evaluation.learning.SETTINGS``);
        ``ValueError`` past the adapter's bounds."""
        ...

    def fit(self, data: RankingData) -> FittedModel:
        """Train on ``data`` (deterministic for the same data); ``InvalidRequest`` past the
        adapter's bounds."""
        ...

    def load(self, model: str) -> Scorer:
        """A scorer of feature rows from a fitted model's text; ``LearnedModelRefused`` when the
        text is not a model this library reads."""
        ...
