"""``RankLearner`` over LightGBM's lambdarank (issue 32, item 2).

Bounded and deterministic: one thread, a fixed number of rounds and leaves, a fixed seed and
``deterministic`` mode, so the same data gives the same model bytes; the rows are bounded by the
core (``MAX_TRAINING_ROWS``) before they reach here. LightGBM is imported on first use: an engine
that never learns or ranks with a learned model never loads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from memory_core.domain.evaluation_errors import LearnedModelRefused
from memory_core.evaluation.learning import (
    FEATURE_NAMES,
    FittedModel,
    LearnerSetting,
    RankingData,
    Scorer,
    importances_of,
)

MAX_ROUNDS = 300
MAX_LEAVES = 63
SEED = 0
BASE_FEATURE = "fusion_prior"
BASE_HEADER = "memory-core base_weight="  # the first line of a model's text; LightGBM's own follows


@attrs.frozen
class LightGBMRanker(LearnerSetting):
    """LightGBM fitting a ``LearnerSetting`` (the core's defaults are the shipped learner: small,
    shallow and slow, chosen on the dev collections' cross-validation, docs/ranking.md, where deeper
    trees fitted a few hundred queries' noise), with the learning rate, which no setting changes."""

    learning_rate: float = 0.03

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.rounds <= MAX_ROUNDS or not 2 <= self.leaves <= MAX_LEAVES:
            raise ValueError(f"rounds must be 1-{MAX_ROUNDS} and leaves 2-{MAX_LEAVES}")
        if not 0.0 < self.feature_fraction <= 1.0:
            raise ValueError("feature_fraction must be in (0, 1]")

    def with_setting(self, setting: LearnerSetting) -> LightGBMRanker:
        """This ranker with a grid setting's fields (the learning rate kept)."""
        return attrs.evolve(self, **attrs.asdict(setting))

    @property
    def revision(self) -> str:
        import lightgbm

        # A feature fraction of 1 is left out: the shipped trainer keeps the revision it had.
        sampled = f",features={self.feature_fraction:g}" if self.feature_fraction < 1.0 else ""
        return (f"lightgbm-{lightgbm.__version__}-lambdarank(rounds={self.rounds},leaves={self.leaves},"
                f"lr={self.learning_rate:g},min_leaf={self.min_data_in_leaf},"
                f"base={self.base_weight:g}{sampled})")  # fmt: skip

    def _params(self) -> dict[str, Any]:
        return {
            "objective": "lambdarank",
            "metric": "ndcg",
            "eval_at": [10],
            "num_leaves": self.leaves,
            "learning_rate": self.learning_rate,
            "min_data_in_leaf": self.min_data_in_leaf,
            "num_threads": 1,  # never more than one core: activations share the machine
            "seed": SEED,
            "deterministic": True,
            "force_row_wise": True,  # deterministic without the col/row-wise timing test
            "verbosity": -1,
            "max_bin": 63,  # smaller histograms: memory, not accuracy, at these sizes
            "feature_fraction": self.feature_fraction,
            "feature_fraction_seed": SEED,
        }

    def fit(self, data: RankingData) -> FittedModel:
        import lightgbm
        import numpy as np

        features = np.asarray(data.rows, dtype=np.float64).reshape(len(data.rows), len(data.feature_names))
        base = self.base_weight * features[:, data.feature_names.index(BASE_FEATURE)]
        dataset = lightgbm.Dataset(features, label=np.asarray(data.labels, dtype=np.float64), init_score=base,
                                   group=list(data.groups), feature_name=list(data.feature_names),
                                   params={"verbosity": -1, "max_bin": 63}, free_raw_data=True)  # fmt: skip
        booster = lightgbm.train(self._params(), dataset, num_boost_round=self.rounds)
        gains = booster.feature_importance(importance_type="gain")
        text = f"{BASE_HEADER}{self.base_weight!r}\n{booster.model_to_string()}"
        return FittedModel(text, importances_of(data.feature_names, [float(g) for g in gains]))

    def load(self, model: str) -> Scorer:
        import lightgbm
        import numpy as np

        header, _, trees = model.partition("\n")
        try:
            if not header.startswith(BASE_HEADER):
                raise ValueError("no base weight line")
            base_weight = float(header.removeprefix(BASE_HEADER))
            booster = lightgbm.Booster(model_str=trees)
        except (ValueError, lightgbm.basic.LightGBMError) as exc:
            raise LearnedModelRefused(f"LightGBM cannot read the model: {exc}", reason="unreadable") from exc
        width = booster.num_feature()
        column = FEATURE_NAMES.index(BASE_FEATURE)

        def score(rows: Sequence[Sequence[float]]) -> list[float]:
            matrix = np.asarray(rows, dtype=np.float64).reshape(len(rows), width)
            learned = booster.predict(matrix, num_threads=1) + base_weight * matrix[:, column]
            return [float(s) for s in learned]

        return score
