"""The metrics of what the agent was given (issue 18 item 5): wasted tokens, relevant items per
1,000 returned tokens, reuse that skipped a changed unit. Properties against a direct reading of
each definition (docs/evaluation.md), and fixed examples."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.evaluation.metrics import (
    Judgments,
    MetricLevel,
    ReturnedFragment,
    changed_unit_reuse,
    grade,
    relevant_per_1k_tokens,
    returned_tokens,
    wasted_tokens,
)

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LEVELS = st.sampled_from(list(MetricLevel))
ACTIONS = ("add", "replace", "reuse")
# What ``returned`` draws: the fragments, their judgments and a frozen corpus (resource id -> hash).
Returned = tuple[list[ReturnedFragment], Judgments, dict[str, str]]


def fragment(unit_id: str, tokens: int, action: str = "add", resource_hash: str | None = "h") -> ReturnedFragment:
    resource_id = unit_id.rpartition("#")[0]
    return ReturnedFragment(unit_id, resource_id, f"u:{unit_id}", resource_hash, tokens, action)


@st.composite
def returned(draw: st.DrawFn) -> Returned:
    """Returned fragments (distinct units, final order), judgments and a frozen corpus."""
    resources = [f"r{i}.md" for i in range(draw(st.integers(1, 5)))]
    units = [f"{r}#{j}" for r in resources for j in range(draw(st.integers(1, 3)))]
    chosen = draw(st.lists(st.sampled_from(units), unique=True, max_size=len(units)))
    # One generation ranked them all: the units of a resource recorded one resource hash.
    recorded = {r: draw(st.sampled_from(("h", "other", None))) for r in resources}
    fragments = [
        ReturnedFragment(
            u,
            u.rpartition("#")[0],
            f"u:{u}",
            recorded[u.rpartition("#")[0]],
            draw(st.integers(0, 400)),
            draw(st.sampled_from(ACTIONS)),
        )
        for u in chosen
    ]
    relevance = st.integers(0, 3)
    judgments = Judgments.of(
        draw(st.dictionaries(st.sampled_from(units), relevance, max_size=len(units))),
        draw(st.dictionaries(st.sampled_from(resources), relevance, max_size=len(resources))),
    )
    # Some resources are frozen under the recorded hash "h", some under another, some are gone.
    corpus = {r: draw(st.sampled_from(["h", "changed"])) for r in resources if draw(st.booleans())}
    return fragments, judgments, corpus


def unit_relevance(f: ReturnedFragment, judgments: Judgments) -> int | None:
    if f.unit_id in judgments.units:
        return judgments.units[f.unit_id]
    return judgments.resources.get(f.resource_id)


# -- wasted tokens --------------------------------------------------------------------------------


@PROPS
@given(returned(), LEVELS)
def test_wasted_tokens_are_the_tokens_returned_on_units_judged_zero(case: Returned, level: MetricLevel) -> None:
    fragments, judgments, _ = case
    got = wasted_tokens(fragments, judgments, level)
    if not (judgments.units or judgments.resources):
        assert got is None
        return
    if level is MetricLevel.UNIT:
        expected = sum(f.tokens for f in fragments if unit_relevance(f, judgments) == 0)
    else:
        relevance = judgments.resource_relevance()
        expected = sum(f.tokens for f in fragments if relevance.get(f.resource_id) == 0)
    assert got == expected
    assert 0 <= got <= returned_tokens(fragments)
    # A sum over fragments: order does not matter, and it adds up fragment by fragment.
    assert wasted_tokens(fragments[::-1], judgments, level) == got
    assert sum(wasted_tokens([f], judgments, level) or 0 for f in fragments) == got


@PROPS
@given(returned(), LEVELS)
def test_reuse_and_unjudged_units_waste_nothing(case: Returned, level: MetricLevel) -> None:
    fragments, judgments, _ = case
    for f in fragments:
        if f.delta_action == "reuse":
            assert wasted_tokens([f], judgments, level) in (0, None)
    unjudged = Judgments.of({"elsewhere.md#0": 0})
    assert wasted_tokens([f for f in fragments if f.resource_id != "elsewhere.md"], unjudged, level) == 0


def test_wasted_tokens_examples() -> None:
    frags = [fragment("a.md#0", 100), fragment("a.md#1", 40), fragment("b.md#0", 30, "reuse"), fragment("c.md#0", 7)]
    judgments = Judgments.of({"a.md#0": 0, "b.md#0": 0}, {"a.md": 2, "c.md": 0})
    # Unit level: a.md#0's own 0 wins over its resource's 2; a.md#1 has no own judgment and earns
    # a.md's 2; b.md#0 is judged 0 but reused (0 tokens); c.md#0 takes c.md's 0.
    assert wasted_tokens(frags, judgments, MetricLevel.UNIT) == 107
    # Resource level: a.md is relevant (max 2, 0), b.md and c.md are 0.
    assert wasted_tokens(frags, judgments, MetricLevel.RESOURCE) == 7
    assert wasted_tokens([], judgments) == 0
    assert wasted_tokens(frags, Judgments.of()) is None


# -- relevant items per 1,000 returned tokens -----------------------------------------------------


@PROPS
@given(returned(), LEVELS)
def test_relevant_per_1k_tokens_is_earned_relevant_items_over_returned_tokens(
    case: Returned, level: MetricLevel
) -> None:
    fragments, judgments, _ = case
    got = relevant_per_1k_tokens(fragments, judgments, level)
    text = [f for f in fragments if f.delta_action != "reuse"]
    tokens = sum(f.token_count for f in text)
    graded = grade([f.ranked() for f in text], judgments, level)
    if graded.relevant == 0 or tokens == 0:
        assert got is None
        return
    assert got is not None
    assert got == 1000.0 * sum(graded.hits) / tokens
    assert 0.0 <= got <= 1000.0 * len(text) / tokens
    # Twice the tokens for the same fragments: half the density.
    doubled = [ReturnedFragment(f.unit_id, f.resource_id, f.unit_hash, f.resource_hash, 2 * f.token_count,
                                f.delta_action) for f in fragments]  # fmt: skip
    halved = relevant_per_1k_tokens(doubled, judgments, level)
    assert halved is not None and abs(halved - got / 2) <= 1e-12 * max(1.0, got)
    # Reused fragments change neither side.
    assert relevant_per_1k_tokens(text, judgments, level) == got


def test_relevant_per_1k_tokens_examples() -> None:
    judgments = Judgments.of({"a.md#0": 3, "b.md#0": 0}, {"c.md": 1})
    frags = [fragment("a.md#0", 200), fragment("b.md#0", 300), fragment("c.md#0", 250), fragment("c.md#1", 250)]
    # a.md#0 and c.md (earned once, by c.md#0) are relevant items: 2 in 1,000 tokens.
    assert relevant_per_1k_tokens(frags, judgments) == 2.0
    assert relevant_per_1k_tokens(frags, judgments, MetricLevel.RESOURCE) == 2.0
    # Nothing returned, only reuse returned, or no relevant item: None.
    assert relevant_per_1k_tokens([], judgments) is None
    assert relevant_per_1k_tokens([fragment("a.md#0", 200, "reuse")], judgments) is None
    assert relevant_per_1k_tokens(frags, Judgments.of({"a.md#0": 0})) is None
    assert relevant_per_1k_tokens(frags, Judgments.of()) is None
    # A relevant item the Run did not return still makes the case count: 0 per 1,000.
    assert relevant_per_1k_tokens([fragment("b.md#0", 300)], judgments) == 0.0


# -- reuse that skipped a changed unit ------------------------------------------------------------


@PROPS
@given(returned())
def test_changed_unit_reuse_counts_reuses_whose_resource_the_corpus_no_longer_holds_as_recorded(case: Returned) -> None:
    fragments, _, corpus = case
    got = changed_unit_reuse(fragments, corpus)
    expected = sum(
        1
        for f in fragments
        if f.delta_action == "reuse"
        and (f.resource_id not in corpus or (f.resource_hash is not None and f.resource_hash != corpus[f.resource_id]))
    )
    assert got == expected
    assert 0 <= got <= sum(f.delta_action == "reuse" for f in fragments)
    # A corpus holding every resource as recorded: no reuse skipped anything.
    current = {f.resource_id: f.resource_hash or "h" for f in fragments}
    assert changed_unit_reuse(fragments, current) == 0
    # Fragments that carried text never count, whatever the corpus.
    assert changed_unit_reuse([f for f in fragments if f.delta_action != "reuse"], {}) == 0


def test_changed_unit_reuse_examples() -> None:
    frags = [
        fragment("a.md#0", 10, "reuse"),  # a.md edited since the index: its frozen hash differs
        fragment("b.md#0", 10, "reuse"),  # b.md unchanged
        fragment("c.md#0", 10, "reuse"),  # c.md deleted: absent from the frozen corpus
        fragment("d.md#0", 10, "replace"),  # carried the new text: nothing skipped
    ]
    assert changed_unit_reuse(frags, {"a.md": "new", "b.md": "h", "d.md": "new"}) == 2
    assert changed_unit_reuse([], {}) == 0
