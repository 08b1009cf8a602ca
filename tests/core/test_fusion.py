"""The registered fusion functions (issue 32): each one's semantics as properties, and the registry."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.domain.errors import InvalidRequest
from memory_core.retrieval.fusion import (
    DEFAULT_FUSION,
    FUSION_PARAMETERS,
    FUSIONS,
    ConvexFusionReranker,
    ConvexMinMaxFusion,
    DistributionFusion,
    RRFFusion,
    fusion_from_settings,
    is_fusion,
    parameters_of,
)
from memory_core.retrieval.profile import FUSION_KEYS, RankingProfile, ranking_from_settings
from memory_core.retrieval.rerankers import ConvexFusionReranker as ExportedConvex
from tests.units import RerankCandidate as Cand  # what it reads of a candidate

PROPERTIES = settings(max_examples=60, deadline=None, derandomize=True)
EPS = 1e-9


bm25s = st.none() | st.floats(0.0, 60.0)
cosines = st.floats(-1.0, 1.0)
candidates = st.lists(
    st.builds(Cand, st.sampled_from("abcd"), bm25s, cosines, st.none() | st.integers(1, 3), st.floats(0.0, 0.04)),
    min_size=1,
    max_size=12,
)
weights = st.floats(0.0, 1.0)
convex_fusions = st.one_of(
    st.builds(ConvexFusionReranker, weights, st.floats(0.0, 10.0), st.floats(-1.0, 0.9),
              st.sampled_from(["max", "minmax"]), weights),
    st.builds(ConvexMinMaxFusion, weights, st.floats(0.0, 10.0), weights),
    st.builds(DistributionFusion, weights, st.floats(0.0, 10.0), weights),
)  # fmt: skip
any_fusion = convex_fusions | st.just(RRFFusion())


@PROPERTIES
@given(any_fusion, candidates)
def test_every_fusion_scores_each_candidate_within_its_stated_range(fusion: Any, cands: list[Cand]) -> None:
    scores = fusion.rerank("q", cands)
    lo, hi = fusion.score_range
    assert len(scores) == len(cands)
    assert all(lo - EPS <= s <= hi + EPS and math.isfinite(s) for s in scores)


@PROPERTIES
@given(any_fusion, candidates, st.randoms(use_true_random=False))
def test_a_score_does_not_depend_on_the_order_candidates_come_in(fusion: Any, cands: list[Cand], rnd: Any) -> None:
    order = list(range(len(cands)))
    rnd.shuffle(order)
    shuffled = fusion.rerank("q", [cands[i] for i in order])
    original = fusion.rerank("q", cands)
    assert all(math.isclose(shuffled[k], original[i], abs_tol=1e-12) for k, i in enumerate(order))


@PROPERTIES
@given(convex_fusions, candidates, st.data())
def test_more_lexical_evidence_never_lowers_a_candidates_own_score(fusion: Any, cands: list[Cand], data: Any) -> None:
    fusion = attrs.evolve(fusion, resource_weight=0.0)  # pooled, another unit of its resource may lose more
    i = data.draw(st.integers(0, len(cands) - 1))
    raised = data.draw(st.floats(0.0, 30.0))
    before = cands[i].bm25_score
    more = attrs.evolve(cands[i], bm25_score=(before or 0.0) + raised)
    after = [*cands[:i], more, *cands[i + 1 :]]
    assert fusion.rerank("q", after)[i] >= fusion.rerank("q", cands)[i] - 1e-9


@PROPERTIES
@given(candidates, st.floats(0.01, 100.0), st.floats(-20.0, 20.0), weights, weights)
def test_minmax_and_distribution_fusions_ignore_the_scale_and_shift_of_a_list(
    cands: list[Cand], scale: float, shift: float, alpha: float, resource_weight: float
) -> None:
    """Bruch et al.'s point: a normalised fusion depends on the scores' shape, not their units."""
    moved = [attrs.evolve(c, bm25_score=None if c.bm25_score is None else scale * c.bm25_score + shift) for c in cands]
    for fusion in (ConvexMinMaxFusion(alpha, 1.0, resource_weight), DistributionFusion(alpha, 1.0, resource_weight)):
        for a, b in zip(fusion.rerank("q", cands), fusion.rerank("q", moved), strict=True):
            assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)


@PROPERTIES
@given(candidates, st.floats(0.01, 100.0), weights)
def test_the_convex_floor_fusion_divides_bm25_by_the_best_so_only_its_scale_is_ignored(
    cands: list[Cand], scale: float, alpha: float
) -> None:
    fusion = ConvexFusionReranker(alpha=alpha)
    scaled = [attrs.evolve(c, bm25_score=None if c.bm25_score is None else scale * c.bm25_score) for c in cands]
    for a, b in zip(fusion.rerank("q", cands), fusion.rerank("q", scaled), strict=True):
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


@PROPERTIES
@given(convex_fusions, candidates)
def test_an_exact_match_stays_above_every_other_candidate_with_a_bonus_of_one(fusion: Any, cands: list[Cand]) -> None:
    fusion = attrs.evolve(fusion, exact_bonus=1.0)
    scores = fusion.rerank("q", cands)
    named = [s for s, c in zip(scores, cands, strict=True) if c.exact_rank is not None]
    others = [s for s, c in zip(scores, cands, strict=True) if c.exact_rank is None]
    if named and others:
        assert min(named) >= max(others) - EPS


@PROPERTIES
@given(candidates)
def test_alpha_one_ranks_by_bm25_and_alpha_zero_by_the_dense_side(cands: list[Cand]) -> None:
    plain = [attrs.evolve(c, exact_rank=None) for c in cands]
    lexical = ConvexMinMaxFusion(alpha=1.0).rerank("q", plain)
    dense = ConvexMinMaxFusion(alpha=0.0).rerank("q", plain)
    for x, y, a, b in zip(plain, plain[1:], lexical, lexical[1:], strict=False):
        if (x.bm25_score or 0.0) > (y.bm25_score or 0.0) and x.bm25_score is not None:
            assert a >= b - EPS
    for x, y, a, b in zip(plain, plain[1:], dense, dense[1:], strict=False):
        if None not in (x.dense_similarity, y.dense_similarity) and x.dense_similarity > y.dense_similarity:  # type: ignore[operator]
            assert a >= b - EPS


@PROPERTIES
@given(candidates, weights)
def test_with_full_resource_weight_every_unit_of_a_resource_scores_alike(cands: list[Cand], alpha: float) -> None:
    plain = [attrs.evolve(c, exact_rank=None) for c in cands]
    for fusion in (ConvexMinMaxFusion(alpha, 1.0, 1.0), DistributionFusion(alpha, 1.0, 1.0),
                   ConvexFusionReranker(alpha=alpha, resource_weight=1.0)):  # fmt: skip
        by_resource: dict[str, set[float]] = {}
        for c, s in zip(plain, fusion.rerank("q", plain), strict=True):
            by_resource.setdefault(c.resource_id, set()).add(round(s, 9))
        assert all(len(v) == 1 for v in by_resource.values())


@PROPERTIES
@given(candidates, weights, st.floats(0.01, 1.0))
def test_resource_evidence_lifts_a_unit_whose_resource_has_a_better_unit(
    cands: list[Cand], alpha: float, w: float
) -> None:
    """Each side of a unit moves from its own value towards the best of its resource's units, by ``w``."""
    alone = ConvexMinMaxFusion(alpha, 1.0, 0.0).components(cands)
    pooled = ConvexMinMaxFusion(alpha, 1.0, w).components(cands)
    for side in (0, 1):
        best: dict[str, float] = {}
        for c, v in zip(cands, alone[side], strict=True):
            best[c.resource_id] = max(best.get(c.resource_id, 0.0), v)
        for c, own, p in zip(cands, alone[side], pooled[side], strict=True):
            assert p == pytest.approx((1 - w) * own + w * best[c.resource_id])
            assert own - EPS <= p <= best[c.resource_id] + EPS


@PROPERTIES
@given(candidates)
def test_rrf_keeps_the_fusion_stages_order(cands: list[Cand]) -> None:
    assert RRFFusion().rerank("q", cands) == [c.rrf_score for c in cands]


def test_the_distribution_fusion_maps_three_sigmas_either_side_of_the_mean() -> None:
    cands = [Cand("a", float(v), 0.5) for v in (1, 2, 3, 4, 5)]  # mean 3, sigma sqrt(2)
    lexical, _, _ = DistributionFusion().components(cands)
    sigma = math.sqrt(2.0)
    expected = [(v - (3 - 3 * sigma)) / (6 * sigma) for v in (1, 2, 3, 4, 5)]
    assert lexical == pytest.approx(expected)
    assert lexical[2] == pytest.approx(0.5)


def test_the_convex_floor_fusion_is_the_default_reranker_as_before() -> None:
    assert ExportedConvex is ConvexFusionReranker
    assert DEFAULT_FUSION in FUSIONS
    old = ConvexFusionReranker()
    assert old.revision == "convex-fusion-v2(norm=max,alpha=0.35,exact=1,floor=0)"  # stored Runs name it
    cands = [Cand("a", 10.0, 0.5), Cand("b", 5.0, 0.9), Cand("c", None, 0.2, exact_rank=1)]
    assert old.rerank("q", cands) == pytest.approx([0.35 + 0.65 * 0.5, 0.35 * 0.5 + 0.65 * 0.9, 0.65 * 0.2 + 1.0])


# -- the registry ------------------------------------------------------------------------------
def test_the_registry_names_each_fusion_once_and_the_profile_takes_their_keys() -> None:
    assert set(FUSIONS) == {"rrf", "convex_floor", "convex_minmax", "dbsf"}
    assert all(FUSIONS[name].name == name for name in FUSIONS)
    assert set(FUSION_KEYS) == {"fusion", *FUSION_PARAMETERS}
    assert parameters_of("rrf") == ()
    assert "cosine_floor" in parameters_of("convex_floor") and "cosine_floor" not in parameters_of("dbsf")
    revisions = {FUSIONS[n]().revision for n in FUSIONS}
    assert len(revisions) == len(FUSIONS)
    assert all(is_fusion(FUSIONS[n]()) for n in FUSIONS) and not is_fusion(object()) and not is_fusion(None)


def test_settings_name_a_fusion_and_recreate_it() -> None:
    for name in FUSIONS:
        fusion = fusion_from_settings({"fusion": name})
        assert fusion.name == name
        assert fusion_from_settings(fusion.settings()) == fusion
    tuned = fusion_from_settings({"fusion": "dbsf", "alpha": 0.4, "resource_weight": 0.25})
    assert tuned == DistributionFusion(alpha=0.4, resource_weight=0.25)
    assert tuned.revision == "dbsf-v1(alpha=0.4,exact=1,resource=0.25)"


def test_parameters_left_out_keep_the_bases_only_for_the_same_fusion() -> None:
    base = ConvexFusionReranker(alpha=0.2, cosine_floor=0.1)
    assert fusion_from_settings({"alpha": 0.5}, base) == ConvexFusionReranker(alpha=0.5, cosine_floor=0.1)
    assert fusion_from_settings({"fusion": "convex_minmax"}, base) == ConvexMinMaxFusion()
    assert fusion_from_settings({}, None) == FUSIONS[DEFAULT_FUSION]()


@pytest.mark.parametrize(
    ("document", "key", "message"),
    [
        ({"fusion": "combsum"}, "fusion", "fusion must be one of rrf, convex_floor, convex_minmax, dbsf"),
        ({"fusion": 3}, "fusion", "fusion must be one of"),
        ({"fusion": "rrf", "alpha": 0.5}, "alpha", "fusion rrf does not take alpha; it takes no parameters"),
        ({"fusion": "dbsf", "cosine_floor": 0.1}, "cosine_floor", "fusion dbsf does not take cosine_floor"),
        ({"fusion": "convex_minmax", "alpha": 1.5}, "alpha", r"alpha must be within \[0, 1\]"),
        ({"fusion": "dbsf", "resource_weight": -0.1}, "resource_weight", r"resource_weight must be within \[0, 1\]"),
        ({"fusion": "dbsf", "exact_bonus": 11}, "exact_bonus", "exact_bonus must be within"),
    ],
)
def test_a_bad_fusion_setting_is_refused_naming_its_key(document: dict[str, Any], key: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as refused:
        fusion_from_settings(document)
    assert refused.value.details.get("key", key) == key or key in refused.value.message


def test_a_profile_names_its_fusion_and_a_wrong_type_is_refused_before_the_registry() -> None:
    def scores(**fusion: Any) -> tuple[float, float]:
        return fusion_from_settings(fusion, ConvexFusionReranker()).score_range

    ranking = ranking_from_settings({"fusion": "rrf", "min_final_score": 0.5}, RankingProfile(), scores)
    assert ranking.fusion == {"fusion": "rrf"} and ranking.settings()["fusion"] == "rrf"
    with pytest.raises(InvalidRequest, match="fusion must be a string") as refused:
        ranking_from_settings({"fusion": ["rrf"]}, RankingProfile(), scores)
    assert refused.value.details["key"] == "fusion"
    with pytest.raises(InvalidRequest, match=r"min_final_score must be within \[0, 1\]"):  # rrf scores within [0, 1]
        ranking_from_settings({"fusion": "rrf", "min_final_score": 1.5}, RankingProfile(), scores)


@attrs.frozen
class WholeCand(Cand):
    """A candidate that carries its resource's whole-text BM25 (the offline resource-level list)."""

    resource_bm25_score: float | None = None


def test_whole_resource_bm25_blends_into_the_lexical_side_divided_by_the_windows_best() -> None:
    cands = [
        WholeCand("a", 10.0, 0.5, resource_bm25_score=4.0),
        WholeCand("b", 5.0, 0.5, resource_bm25_score=8.0),
        WholeCand("c", None, 0.5, resource_bm25_score=None),  # the resource list did not rank it
    ]
    fusion = ConvexFusionReranker(alpha=1.0, resource_bm25=0.5)
    assert fusion.rerank("q", cands) == pytest.approx([0.5 * 1.0 + 0.5 * 0.5, 0.5 * 0.5 + 0.5 * 1.0, 0.0])
    assert fusion.revision.endswith(",resource_bm25=0.5)")
    # Full weight: units rank by their resource's whole-text score alone.
    assert ConvexFusionReranker(alpha=1.0, resource_bm25=1.0).rerank("q", cands) == pytest.approx([0.5, 1.0, 0.0])


@PROPERTIES
@given(convex_fusions, candidates, weights)
def test_without_resource_scores_the_whole_resource_weight_changes_nothing(
    fusion: Any, cands: list[Cand], weight: float
) -> None:
    assert attrs.evolve(fusion, resource_bm25=weight).rerank("q", cands) == fusion.rerank("q", cands)


def test_the_whole_resource_weight_is_offline_only_so_no_profile_sets_it() -> None:
    assert "resource_bm25" in parameters_of("convex_floor") and "resource_bm25" not in FUSION_PARAMETERS
    assert fusion_from_settings({"resource_bm25": 0.5}).settings()["resource_bm25"] == 0.5
    with pytest.raises(InvalidRequest, match="unknown profile setting"):
        ranking_from_settings({"resource_bm25": 0.5})
    with pytest.raises(InvalidRequest, match="resource_bm25"):
        fusion_from_settings({"resource_bm25": 1.5})
