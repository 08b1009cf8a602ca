"""Properties of fusion, reranking order, selection and delta actions (hypothesis)."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.domain.model import Unit, content_key, unit_hash_of
from memory_core.retrieval.activation_state import ActivationState, HeldUnit
from memory_core.retrieval.exact import ExactMatch
from memory_core.retrieval.pipeline import (
    ADD,
    DELTA_ACTIONS,
    EXCLUDED,
    EXCLUSION_CODES,
    REPLACE,
    REUSE,
    SELECTED,
    apply_rerank,
    fuse,
    lexical_list,
)
from memory_core.retrieval.selection import Limits, select


def make_units(n: int, texts: list[str]) -> dict[str, Unit]:
    units = {}
    for i in range(n):
        rid = f"r{i % 5}.md"
        text = texts[i % len(texts)]
        uid = f"{rid}#{i}"
        units[uid] = Unit(uid, rid, i, 0, len(text), ("T",), text, 1 + (i * 7) % 40, unit_hash_of(text, 0, i))
    return units


@st.composite
def ranked_inputs(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(1, 40))
    texts = draw(st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta beta"]), min_size=1, max_size=4))
    units = make_units(n, texts)
    ids = list(units)
    exact_ids = draw(st.lists(st.sampled_from(ids), unique=True, max_size=3))
    bm25_ids = draw(st.lists(st.sampled_from(ids), unique=True, max_size=n))
    dense_ids = draw(st.lists(st.sampled_from(ids), unique=True, max_size=n))
    if not (exact_ids or bm25_ids or dense_ids):
        dense_ids = [ids[0]]
    exact = [ExactMatch(u, 3.0) for u in exact_ids]
    bm25 = [(u, float(len(bm25_ids) - i)) for i, u in enumerate(bm25_ids)]
    dense = [(u, 1.0 - i / 100) for i, u in enumerate(dense_ids)]
    return units, exact, bm25, dense


@st.composite
def states(draw, units):  # type: ignore[no-untyped-def]
    held = []
    for uid in draw(st.lists(st.sampled_from(sorted(units)), unique=True, max_size=8)):
        same = draw(st.booleans())
        h = units[uid].unit_hash if same else hashlib.sha256(uid.encode()).hexdigest()
        held.append(HeldUnit(uid, h))
    return ActivationState(tuple(sorted(held, key=lambda h: h.unit_id)))


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    inputs=ranked_inputs(),
    k=st.integers(1, 100),
    window=st.integers(0, 50),
    budget=st.integers(1, 200),
    max_frag=st.integers(0, 10),
    per_res=st.integers(0, 4),
)
def test_pipeline_properties(data, inputs, k, window, budget, max_frag, per_res):  # type: ignore[no-untyped-def]
    units, exact, bm25, dense = inputs
    fused = fuse(units, exact, bm25, dense, k)
    # The fused recall set is the union, each unit once.
    union = {m.unit_id for m in exact} | {u for u, _ in bm25} | {u for u, _ in dense}
    assert {c.unit.unit_id for c in fused} == union and len(fused) == len(union)
    lex = lexical_list(exact, bm25)
    for c in fused:
        # RRF follows the formula over the lexical and dense lists.
        expected = sum(1 / (k + r) for r in (c.lexical_rank, c.dense_rank) if r is not None)
        assert abs(c.rrf_score - expected) < 1e-12
        if c.lexical_rank is not None:
            assert lex[c.lexical_rank - 1] == c.unit.unit_id
    assert [c.rrf_rank for c in fused] == list(range(1, len(fused) + 1))
    assert all(a.rrf_score >= b.rrf_score for a, b in zip(fused, fused[1:], strict=False))

    scores = [float((i * 37) % 11) for i in range(min(window, len(fused)))]
    final = apply_rerank(fused, window, scores)
    assert [c.final_rank for c in final] == list(range(1, len(final) + 1))

    state = data.draw(states(units))
    totals = select(final, Limits(budget, max_frag, per_res, 0.0), state)
    held = state.as_dict()
    spent = 0
    for c in final:
        assert c.disposition in (SELECTED, EXCLUDED)
        if c.disposition == SELECTED:
            assert c.exclusion_code is None and c.delta_action in DELTA_ACTIONS
            want = (
                ADD if c.unit.unit_id not in held else (REUSE if held[c.unit.unit_id] == c.unit.unit_hash else REPLACE)
            )
            assert c.delta_action == want
            assert c.rerank_rank is not None
            spent += 0 if c.delta_action == REUSE else c.unit.token_count
        else:
            assert c.delta_action is None and c.exclusion_code in EXCLUSION_CODES
    assert spent == totals.tokens <= budget
    chosen = [c for c in final if c.disposition == SELECTED]
    assert len(chosen) <= max_frag
    for rid in {c.unit.resource_id for c in chosen}:
        assert sum(c.unit.resource_id == rid for c in chosen) <= per_res


@settings(max_examples=100, deadline=None)
@given(inputs=ranked_inputs())
def test_identical_inputs_give_identical_rankings(inputs):  # type: ignore[no-untyped-def]
    units, exact, bm25, dense = inputs
    a = fuse(units, exact, bm25, dense, 60)
    b = fuse(units, list(exact), list(bm25), list(dense), 60)
    assert [c.unit.unit_id for c in a] == [c.unit.unit_id for c in b]


def test_exclusion_precedence_duplicate_first() -> None:
    text = "same words"
    units = {
        "a.md#0": Unit("a.md#0", "a.md", 0, 0, 10, (), text, 5, unit_hash_of(text, 0, 10)),
        "b.md#0": Unit("b.md#0", "b.md", 0, 0, 10, (), text, 500, unit_hash_of(text, 0, 11)),
    }
    final = apply_rerank(fuse(units, [], [("a.md#0", 2.0), ("b.md#0", 1.0)], [], 60), 1, [1.0])
    select(final, Limits(10, 1, 1, 0.0), ActivationState.empty())
    # b is a duplicate, over the fragment limit, over budget and outside the window: duplicate wins.
    assert final[1].exclusion_code == "duplicate_content"


@given(st.text(max_size=40), st.text(alphabet=" \t\n", min_size=1, max_size=3), st.booleans())
def test_duplicate_key_is_content_key_computed_once(text, gap, upper):  # type: ignore[no-untyped-def]
    """Selection reads ``Unit.duplicate_key`` (cached per Unit) for the rule ``content_key``
    states: the same words, whatever the spacing or case, are one content."""
    unit = Unit("a.md#0", "a.md", 0, 0, len(text), (), text, 1, unit_hash_of(text, 0, len(text)))
    assert unit.duplicate_key == content_key(text)
    assert unit.duplicate_key is unit.duplicate_key  # cached, not recomputed
    respaced = gap + gap.join(text.split()) + gap
    other = Unit("b.md#0", "b.md", 0, 0, len(respaced), (), respaced.upper() if upper else respaced, 1, "h")
    if not upper or text.upper().casefold() == text.casefold():
        assert other.duplicate_key == unit.duplicate_key
