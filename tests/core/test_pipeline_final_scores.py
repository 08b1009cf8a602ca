"""Every candidate has a final rank and a final score, and the final order follows the score
(issue 18 item 4; the rule in memory_core/retrieval/pipeline.py and docs/ranking.md)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.domain.model import Unit, unit_hash_of
from memory_core.retrieval.activation_state import ActivationState
from memory_core.retrieval.pipeline import (
    BELOW_SCORE_THRESHOLD,
    OUTSIDE_RERANK_WINDOW,
    SELECTED,
    apply_rerank,
    fuse,
)
from memory_core.retrieval.rerankers import ConvexFusionReranker
from memory_core.retrieval.selection import Limits, select
from tests.core.test_pipeline_properties import ranked_inputs

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), inputs=ranked_inputs(), k=st.integers(1, 100), window=st.integers(0, 50))
def test_every_candidate_has_a_final_score_and_the_order_follows_it(data, inputs, k, window):  # type: ignore[no-untyped-def]
    units, exact, bm25, dense = inputs
    fused = fuse(units, exact, bm25, dense, k)
    head_size = min(window, len(fused))
    scores = data.draw(st.lists(finite, min_size=head_size, max_size=head_size))
    final = apply_rerank(fused, window, scores)

    assert [c.final_rank for c in final] == list(range(1, len(final) + 1))
    assert all(isinstance(c.final_score, float) and math.isfinite(c.final_score) for c in final)
    # Final order == final score order: never increasing along the final ranks.
    assert all(a.final_score >= b.final_score for a, b in zip(final, final[1:], strict=False))
    assert sorted(final, key=lambda c: (-c.final_score, c.final_rank)) == final

    head, tail = final[:head_size], final[head_size:]
    assert [c.final_score for c in head] == [c.rerank_score for c in head]
    assert sorted(c.final_score for c in head) == sorted(scores)
    # The tail keeps its RRF order, and no score past the window reaches one inside it.
    assert [c.rrf_rank for c in tail] == sorted(c.rrf_rank for c in tail)
    assert all(c.rerank_rank is None and c.rerank_score is None for c in tail)
    if not head:
        assert [c.final_score for c in tail] == [c.rrf_score for c in tail]
    else:
        lowest = min(scores)
        assert all(c.final_score < lowest for c in tail)
        # The documented value: the RRF score on a floor 1 below the window's lowest score.
        for c in tail:
            assert c.final_score == min(lowest - 1.0 + c.rrf_score, math.nextafter(lowest, -math.inf))
            assert lowest - 1.0 < c.final_score


@settings(max_examples=100, deadline=None)
@given(inputs=ranked_inputs(), window=st.integers(1, 50), big=st.sampled_from([1e17, -1e17, 1e300]))
def test_scores_too_large_for_the_gap_still_never_cross_the_window(inputs, window, big):  # type: ignore[no-untyped-def]
    units, exact, bm25, dense = inputs
    fused = fuse(units, exact, bm25, dense, 60)
    head_size = min(window, len(fused))
    final = apply_rerank(fused, window, [big] * head_size)
    assert all(c.final_score < big for c in final[head_size:])
    assert all(a.final_score >= b.final_score for a, b in zip(final, final[1:], strict=False))


@settings(max_examples=100, deadline=None)
@given(inputs=ranked_inputs(), window=st.integers(0, 50), k=st.integers(0, 3))
def test_small_rrf_k_never_lets_the_tail_reach_the_window(inputs, window, k):  # type: ignore[no-untyped-def]
    # With k = 0 an RRF score reaches 1.5, above the gap of 1: the tail ties just below instead.
    units, exact, bm25, dense = inputs
    fused = fuse(units, exact, bm25, dense, k)
    head_size = min(window, len(fused))
    final = apply_rerank(fused, window, [0.0] * head_size)
    if head_size:
        assert all(c.final_score < 0.0 for c in final[head_size:])
    assert all(a.final_score >= b.final_score for a, b in zip(final, final[1:], strict=False))


def _units(n: int) -> dict[str, Unit]:
    out = {}
    for i in range(n):
        text = f"text {i}"
        uid = f"r{i}.md#0"
        out[uid] = Unit(uid, f"r{i}.md", 0, 0, len(text), (), text, 1, unit_hash_of(text, 0, len(text)))
    return out


def test_the_score_floor_applies_to_reranked_units_only() -> None:
    units = _units(4)
    bm25 = [(uid, 4.0 - i) for i, uid in enumerate(units)]
    final = apply_rerank(fuse(units, [], bm25, [], 60), 2, [0.9, 0.3])
    assert [c.final_score < 0.3 for c in final] == [False, False, True, True]
    select(final, Limits(1_000, 10, 10, 0.5), ActivationState.empty())
    # Past the window the final score only orders the tail: the code stays outside_rerank_window.
    assert [c.exclusion_code for c in final] == [None, BELOW_SCORE_THRESHOLD, OUTSIDE_RERANK_WINDOW] + [
        OUTSIDE_RERANK_WINDOW
    ]
    assert final[0].disposition == SELECTED


def test_default_reranker_window_and_tail_are_on_one_scale() -> None:
    units = _units(6)
    bm25 = [(uid, 6.0 - i) for i, uid in enumerate(units)]
    fused = fuse(units, [], bm25, [], 60)
    for c in fused:
        c.dense_similarity = 0.5
    window = fused[:3]
    final = apply_rerank(fused, 3, ConvexFusionReranker().rerank("q", window))
    scores = [c.final_score for c in final]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)
    assert final[3].final_score == final[2].final_score - 1.0 + final[3].rrf_score
