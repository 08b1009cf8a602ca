"""The real LightGBM lambdarank adapter on a small synthetic set: deterministic, it learns the one
informative feature, its importances say so, and text that is not a model is refused, typed."""

from __future__ import annotations

import random

import attrs
import pytest

from memory_core.adapters.learning.lightgbm_ranker import LightGBMRanker
from memory_core.domain.evaluation_errors import LearnedModelRefused
from memory_core.evaluation.learning import FEATURE_NAMES, RankingData

SIGNAL = FEATURE_NAMES.index("dense_similarity")


def synthetic(queries: int, seed: int) -> RankingData:
    """Each query: 12 candidates of random features; relevance rises with one feature."""
    rnd = random.Random(seed)
    rows, labels, groups = [], [], []
    for _ in range(queries):
        for _ in range(12):
            row = [rnd.random() for _ in FEATURE_NAMES]
            rows.append(tuple(row))
            labels.append(3 if row[SIGNAL] > 0.85 else 1 if row[SIGNAL] > 0.6 else 0)
        groups.append(12)
    return RankingData(tuple(rows), tuple(labels), tuple(groups))


def test_the_same_data_gives_the_same_model_and_it_ranks_by_the_informative_feature() -> None:
    ranker = LightGBMRanker(rounds=30, base_weight=0.0)
    first, second = ranker.fit(synthetic(80, seed=1)), ranker.fit(synthetic(80, seed=1))
    assert first.model == second.model and first.importances == second.importances
    top = max(first.importances, key=lambda f: f.share)
    assert top.feature == "dense_similarity" and top.share > 0.5
    assert sum(f.share for f in first.importances) == pytest.approx(1.0, abs=1e-4)
    held_out = synthetic(20, seed=2)
    scores = ranker.load(first.model)(held_out.rows)
    assert len(scores) == len(held_out.rows)
    best = [max(range(i * 12, i * 12 + 12), key=lambda j: scores[j]) for i in range(20)]
    assert sum(held_out.labels[j] == 3 for j in best) >= 15  # the top is a relevance-3 candidate
    assert "lambdarank" in ranker.revision and "rounds=30" in ranker.revision


def test_a_model_boosted_from_the_fusion_prior_adds_it_back_when_it_scores() -> None:
    prior = FEATURE_NAMES.index("fusion_prior")
    data = synthetic(40, seed=3)
    flat = attrs.evolve(data, rows=tuple(r[:prior] + (0.0,) + r[prior + 1 :] for r in data.rows))  # no split on it
    ranker = LightGBMRanker(rounds=5, base_weight=10.0)
    model = ranker.fit(flat).model
    assert model.startswith("memory-core base_weight=10.0\n")
    rows = [list(r) for r in synthetic(2, seed=4).rows]
    lifted = [r[:prior] + [r[prior] + 0.5] + r[prior + 1 :] for r in rows]
    score = ranker.load(model)
    assert [b - a for a, b in zip(score(rows), score(lifted), strict=True)] == pytest.approx([5.0] * len(rows))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not a model",
        "memory-core base_weight=x\ntree",
        "memory-core base_weight=1.0\ntree\nversion=v4\nnum_class=1\n\x00garbage",
    ],
)
def test_text_that_is_not_a_model_is_refused_typed(text: str) -> None:
    with pytest.raises(LearnedModelRefused):
        LightGBMRanker().load(text)


def test_bounds_on_rounds_and_leaves() -> None:
    with pytest.raises(ValueError, match="rounds"):
        LightGBMRanker(rounds=10_000)
    with pytest.raises(ValueError, match="leaves"):
        LightGBMRanker(leaves=1)
    for fraction in (0.0, 1.5):
        with pytest.raises(ValueError, match="feature_fraction"):
            LightGBMRanker(feature_fraction=fraction)


def test_sampling_features_stays_deterministic_and_is_named_only_when_used() -> None:
    sampled = LightGBMRanker(rounds=30, base_weight=0.0, feature_fraction=0.5)
    first, second = sampled.fit(synthetic(80, seed=1)), sampled.fit(synthetic(80, seed=1))
    assert first.model == second.model
    assert first.model != LightGBMRanker(rounds=30, base_weight=0.0).fit(synthetic(80, seed=1)).model
    assert "features=0.5" in sampled.revision and "features=" not in LightGBMRanker().revision


def test_every_grid_setting_is_within_the_bounds_and_the_first_model_is_the_shipped_learner() -> None:
    from memory_core.evaluation.learning import SETTINGS, LearnerSetting

    assert LightGBMRanker().with_setting(LearnerSetting()) == LightGBMRanker()
    for setting in (s for s in SETTINGS if s is not None):
        ranker = LightGBMRanker().with_setting(setting)  # the bounds are checked on construction
        assert (ranker.rounds, ranker.leaves, ranker.feature_fraction) == (
            setting.rounds, setting.leaves, setting.feature_fraction)  # fmt: skip
        assert f"rounds={setting.rounds},leaves={setting.leaves}," in ranker.revision
