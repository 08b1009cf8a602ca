"""Evaluation metrics: trec_eval parity (pytrec_eval), properties, and fixed examples (the statistics
beneath the reports: test_metric_statistics.py)."""

from __future__ import annotations

import math
import random

import pytest
import pytrec_eval
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.domain.errors import InvalidRequest
from memory_core.evaluation.metrics import (
    Graded,
    Judgments,
    MetricLevel,
    RankedItem,
    ScopeStatus,
    earned_gains,
    grade,
    grade_resources,
    grade_units,
    ideal_gains,
    mrr,
    ndcg_at,
    recall_at,
    resource_diversity_at,
    resource_of_unit,
    resource_ranking,
    scope_status,
    scope_violation_at,
    stale_result_at,
)
from memory_core.evaluation.statistics import summarize

TREC_MEASURES = {"recall_20", "ndcg_cut_10", "recip_rank"}
PARITY = settings(max_examples=350, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# What ``cases`` draws: a ranking, its judgments and a frozen corpus (resource id -> hash).
Case = tuple[list[RankedItem], Judgments, dict[str, str]]


# --- generators --------------------------------------------------------------------------------


def item(unit_id: str, resource_hash: str | None = None) -> RankedItem:
    return RankedItem(unit_id=unit_id, resource_id=resource_of_unit(unit_id), resource_hash=resource_hash)


@st.composite
def universes(draw: st.DrawFn) -> tuple[list[str], dict[str, list[str]]]:
    """Resources (one id holds a '#', as a path may) and their units ``<resource_id>#<ordinal>``."""
    n_resources = draw(st.integers(1, 9))
    resources = [f"docs/r{i}.md" if i else "notes/a#b.md" for i in range(n_resources)]
    units = {r: [f"{r}#{j}" for j in range(draw(st.integers(1, 5)))] for r in resources}
    return resources, units


@st.composite
def cases(draw: st.DrawFn, *, unit_only: bool = False, duplicates: bool = False) -> Case:
    """A ranking, judgments and a frozen corpus over one random universe."""
    resources, units = draw(universes())
    all_units = [u for r in resources for u in units[r]]
    order = draw(st.permutations(all_units))
    ranked_ids = list(order[: draw(st.integers(0, len(order)))])
    if duplicates and ranked_ids:
        extra = draw(st.lists(st.sampled_from(ranked_ids), max_size=3))
        for unit_id in extra:
            ranked_ids.insert(draw(st.integers(0, len(ranked_ids))), unit_id)
    relevance = st.integers(0, 3)
    unit_j = draw(st.dictionaries(st.sampled_from(all_units), relevance, max_size=len(all_units)))
    resource_j: dict[str, int] = {}
    if not unit_only:
        # "missed/..." resources are judged but never ranked (missed evidence).
        pool = [*resources, "missed/x.md", "missed/y.md"]
        resource_j = draw(st.dictionaries(st.sampled_from(pool), relevance, max_size=len(pool)))
    corpus = {r: f"h-{r}" for r in resources if draw(st.integers(0, 4))}
    ranking = []
    for unit_id in ranked_ids:
        rid = resource_of_unit(unit_id)
        recorded = draw(st.sampled_from([f"h-{rid}", "h-other", None]))
        ranking.append(RankedItem(unit_id=unit_id, resource_id=rid, resource_hash=recorded))
    return ranking, Judgments.of(units=unit_j, resources=resource_j), corpus


def trec(qrels: dict[str, int], run_ids: list[str]) -> dict[str, float]:
    """pytrec_eval on one query; strictly decreasing scores so trec_eval keeps our order."""
    evaluator = pytrec_eval.RelevanceEvaluator({"q": dict(qrels)}, TREC_MEASURES)
    run = {doc: float(len(run_ids) - i) for i, doc in enumerate(run_ids)}
    result: dict[str, float] = evaluator.evaluate({"q": run})["q"]
    return result


def our_figures(graded: Graded) -> dict[str, float | None]:
    return {"recall_20": recall_at(graded, 20), "ndcg_cut_10": ndcg_at(graded, 10), "recip_rank": mrr(graded)}


def assert_parity(ours: dict[str, float | None], theirs: dict[str, float]) -> None:
    for name in TREC_MEASURES:
        value = ours[name]
        assert value is not None
        assert value == pytest.approx(theirs[name], abs=1e-9, rel=0), name


# --- parity with trec_eval ---------------------------------------------------------------------


@PARITY
@given(cases(unit_only=True))
def test_unit_level_equals_trec_eval_with_unit_judgments_only(case: Case) -> None:
    ranking, judgments, _ = case
    graded = grade_units(ranking, judgments)
    if not any(rel >= 1 for rel in judgments.units.values()):
        assert our_figures(graded) == {name: None for name in TREC_MEASURES}
        return
    assert_parity(our_figures(graded), trec(dict(judgments.units), [i.unit_id for i in ranking]))


@PARITY
@given(cases())
def test_resource_level_equals_trec_eval_on_the_document_run(case: Case) -> None:
    ranking, judgments, _ = case
    # qrels built here, independently: the larger of the resource's and its units' judgments.
    qrels = dict(judgments.resources)
    for unit_id, rel in judgments.units.items():
        rid = unit_id.rpartition("#")[0]
        qrels[rid] = max(qrels.get(rid, 0), rel)
    run_ids: list[str] = []
    for ranked in ranking:
        if ranked.resource_id not in run_ids:
            run_ids.append(ranked.resource_id)
    graded = grade_resources(ranking, judgments)
    if not any(rel >= 1 for rel in qrels.values()):
        assert our_figures(graded) == {name: None for name in TREC_MEASURES}
        return
    assert_parity(our_figures(graded), trec(qrels, run_ids))


FIXED_UNIT_CASES = [
    # (ranked unit ids, unit judgments)
    (["a#0", "b#0", "c#0"], {"b#0": 2}),
    (["x#0", "a#0", "b#0", "d#0"], {"a#0": 2, "b#0": 0, "c#0": 3, "d#0": 1}),
    ([f"r{i}#0" for i in range(30)], {"r0#0": 1, "r12#0": 3, "r25#0": 2, "missing#0": 3}),
    (["a#0", "a#1", "a#2"], {"a#2": 3, "a#1": 1}),
    (["z#0"], {"a#0": 1}),
    ([], {"a#0": 2}),
]


@pytest.mark.parametrize(("ranked", "qrels"), FIXED_UNIT_CASES)
def test_fixed_unit_examples_equal_trec_eval(ranked: list[str], qrels: dict[str, int]) -> None:
    graded = grade_units([item(u) for u in ranked], Judgments.of(units=qrels))
    assert_parity(our_figures(graded), trec(qrels, ranked))


def test_fixed_example_by_hand() -> None:
    graded = grade_units(
        [item(u) for u in ["x#0", "a#0", "b#0", "d#0"]],
        Judgments.of(
            units={
                "a#0": 2,
                "b#0": 0,
                "c#0": 3,
                "d#0": 1,
            }
        ),
    )
    assert graded.gains == (0, 2, 0, 1)
    assert recall_at(graded, 20) == pytest.approx(2 / 3)
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    ideal = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at(graded, 10) == pytest.approx(dcg / ideal)
    assert mrr(graded) == 0.5
    assert recall_at(graded, 2) == pytest.approx(1 / 3)


def test_fixed_resource_example_equals_trec_eval() -> None:
    ranking = [item(u) for u in ["a#1", "b#0", "a#0", "c#2", "d#0", "c#0"]]
    judgments = Judgments.of(units={"a#0": 3, "c#0": 1, "e#4": 2}, resources={"b": 0, "c": 2, "f": 1})
    graded = grade_resources(ranking, judgments)
    assert [i.resource_id for i in resource_ranking(ranking)] == ["a", "b", "c", "d"]
    assert graded.gains == (3, 0, 2, 0)
    qrels = {"a": 3, "b": 0, "c": 2, "e": 2, "f": 1}
    assert_parity(our_figures(graded), trec(qrels, ["a", "b", "c", "d"]))


def test_a_case_without_relevant_items_is_none_where_trec_eval_says_zero() -> None:
    qrels = {"a#0": 0}
    graded = grade_units([item("a#0")], Judgments.of(units=qrels))
    assert our_figures(graded) == {name: None for name in TREC_MEASURES}
    assert trec(qrels, ["a#0"]) == {name: 0.0 for name in TREC_MEASURES}
    assert summarize([recall_at(graded, 20), 1.0]).excluded == 1


# --- unit-level earning ------------------------------------------------------------------------


def test_resource_judgment_is_earned_once_by_the_first_unjudged_unit() -> None:
    j = Judgments.of(resources={"r": 2})
    assert earned_gains([item("r#0"), item("r#1"), item("r#2")], j) == [2, 0, 0]


def test_a_unit_with_its_own_judgment_earns_it_and_leaves_the_resource_judgment() -> None:
    j = Judgments.of(units={"r#0": 0, "r#3": 1}, resources={"r": 2})
    assert earned_gains([item("r#0"), item("r#3"), item("r#1"), item("r#2")], j) == [0, 1, 2, 0]


def test_no_unit_earns_twice() -> None:
    j = Judgments.of(units={"a#0": 3}, resources={"b": 2})
    assert earned_gains([item("a#0"), item("a#0"), item("b#0"), item("b#0")], j) == [3, 0, 2, 0]


def test_evidence_items_and_a_covered_resource_judgment() -> None:
    # r is judged 2 but its unit r#1 has its own 3: r is no evidence item, yet an unjudged unit of
    # r still earns its judgment (MRR and nDCG see it, recall does not).
    j = Judgments.of(units={"r#1": 3, "s#0": 0}, resources={"r": 2, "s": 1, "t": 0})
    assert j.evidence_resources() == frozenset({"s"})
    assert ideal_gains(j) == [3, 2, 1, 0, 0]
    graded = grade_units([item("r#0"), item("r#1")], j)
    assert graded.gains == (2, 3)
    assert graded.hits == (False, True)
    assert graded.relevant == 2
    assert recall_at(graded, 20) == 0.5
    assert mrr(graded) == 1.0
    ndcg = ndcg_at(graded, 10)
    assert ndcg is not None and 0 < ndcg < 1


def test_unit_to_resource_mapping_wins_over_the_id() -> None:
    j = Judgments.of(units={"odd-unit": 2}, resources={"r": 1}, unit_resources={"odd-unit": "r"})
    assert j.evidence_resources() == frozenset()
    assert j.resource_relevance() == {"r": 2}


@PROPS
@given(cases(duplicates=True))
def test_each_resource_judgment_is_earned_at_most_once(case: Case) -> None:
    ranking, judgments, _ = case
    gains = earned_gains(ranking, judgments)
    for rid, rel in judgments.resources.items():
        # Ranks whose unit has no own judgment, so whatever they earn comes from the resource.
        ranks = [i for i, it in enumerate(ranking) if it.resource_id == rid and it.unit_id not in judgments.units]
        earned = [gains[i] for i in ranks]
        assert earned == ([rel] + [0] * (len(ranks) - 1) if ranks else [])
    # Nothing is earned beyond the judged items, so the ideal bounds every ranking.
    pool = sorted(ideal_gains(judgments), reverse=True)
    got = sorted((g for g in gains if g), reverse=True)
    assert len(got) <= len(pool)
    assert all(g <= p for g, p in zip(got, pool, strict=False))


# --- properties --------------------------------------------------------------------------------


@PROPS
@given(cases(duplicates=True), st.integers(1, 25))
def test_every_metric_is_within_unit_interval(case: Case, k: int) -> None:
    ranking, judgments, corpus = case
    for level in MetricLevel:
        graded = grade(ranking, judgments, level)
        values = [recall_at(graded, k), ndcg_at(graded, k), mrr(graded)]
        if graded.has_relevant:
            assert all(v is not None and 0.0 <= v <= 1.0 + 1e-12 for v in values)
        else:
            assert values == [None, None, None]
    for value in (
        resource_diversity_at(ranking, k),
        scope_violation_at(ranking, corpus, k),
        stale_result_at(ranking, corpus, k),
    ):
        assert (value is None) == (not ranking)
        assert value is None or 0.0 <= value <= 1.0


@PROPS
@given(cases(duplicates=True))
def test_scope_violation_and_stale_never_count_the_same_item(case: Case) -> None:
    ranking, _, corpus = case
    for it in ranking[:20]:
        absent = it.resource_id not in corpus
        stale = not absent and it.resource_hash is not None and it.resource_hash != corpus[it.resource_id]
        assert not (absent and stale)
        assert scope_status(it, corpus) is (
            ScopeStatus.SCOPE_VIOLATION if absent else ScopeStatus.STALE if stale else ScopeStatus.IN_SCOPE
        )
    scope, stale_share = scope_violation_at(ranking, corpus), stale_result_at(ranking, corpus)
    if ranking:
        assert scope is not None and stale_share is not None
        assert scope + stale_share <= 1.0 + 1e-12
        top = ranking[:20]
        assert scope * len(top) == pytest.approx(sum(it.resource_id not in corpus for it in top))


@PROPS
@given(cases(duplicates=True), st.integers(1, 12), st.randoms(use_true_random=False))
def test_order_below_the_cutoff_does_not_matter(case: Case, k: int, rnd: random.Random) -> None:
    ranking, judgments, _ = case
    # The cutoff applies to each level's own ranking: units, or the first unit of each resource.
    for level, ranked in ((MetricLevel.UNIT, ranking), (MetricLevel.RESOURCE, resource_ranking(ranking))):
        tail = ranked[k:]
        rnd.shuffle(tail)
        shuffled = ranked[:k] + tail
        before, after = grade(ranked, judgments, level), grade(shuffled, judgments, level)
        assert recall_at(before, k) == recall_at(after, k)
        assert ndcg_at(before, k) == ndcg_at(after, k)


@PROPS
@given(cases(duplicates=True), st.randoms(use_true_random=False))
def test_unit_metrics_ignore_the_order_of_unjudged_items(case: Case, rnd: random.Random) -> None:
    ranking, judgments, _ = case

    def unjudged(it: RankedItem) -> bool:
        return it.unit_id not in judgments.units and it.resource_id not in judgments.resources

    slots = [i for i, it in enumerate(ranking) if unjudged(it)]
    moved = [ranking[i] for i in slots]
    rnd.shuffle(moved)
    shuffled = list(ranking)
    for i, it in zip(slots, moved, strict=True):
        shuffled[i] = it
    before, after = grade_units(ranking, judgments), grade_units(shuffled, judgments)
    assert before == after
    assert (recall_at(before, 20), ndcg_at(before, 10), mrr(before)) == (
        recall_at(after, 20),
        ndcg_at(after, 10),
        mrr(after),
    )


@PROPS
@given(cases(), st.integers(1, 30))
def test_ideal_ranking_has_ndcg_one(case: Case, k: int) -> None:
    _, judgments, _ = case
    # Unit level: each judged unit, and for each judged resource a fresh unjudged unit of it.
    earners = [(rel, item(u)) for u, rel in judgments.units.items()]
    earners += [(rel, RankedItem(f"{r}#999", r)) for r, rel in judgments.resources.items()]
    ideal_units = [it for _, it in sorted(earners, key=lambda pair: -pair[0])]
    unit_graded = grade_units(ideal_units, judgments)
    # Resource level: one unit per resource, by resource relevance.
    relevance = judgments.resource_relevance()
    ideal_resources = [RankedItem(f"{r}#999", r) for r in sorted(relevance, key=lambda r: -relevance[r])]
    resource_graded = grade_resources(ideal_resources, judgments)
    for graded in (unit_graded, resource_graded):
        if graded.has_relevant:
            assert ndcg_at(graded, k) == pytest.approx(1.0, abs=1e-12)
            assert mrr(graded) == 1.0
            assert recall_at(graded, len(ideal_units) + len(ideal_resources)) == 1.0
        else:
            assert ndcg_at(graded, k) is None


@PROPS
@given(cases(duplicates=True))
def test_recall_is_monotone_in_k(case: Case) -> None:
    ranking, judgments, _ = case
    for level in MetricLevel:
        graded = grade(ranking, judgments, level)
        if not graded.has_relevant:
            continue
        figures = [recall_at(graded, k) for k in range(1, len(ranking) + 3)]
        assert all(a is not None and b is not None and a <= b for a, b in zip(figures, figures[1:], strict=False))


# --- ranking-shape metrics ---------------------------------------------------------------------


def test_resource_diversity() -> None:
    ranking = [item(u) for u in ["a#0", "a#1", "b#0", "c#0"]]
    assert resource_diversity_at(ranking, 10) == 0.75
    assert resource_diversity_at(ranking, 2) == 0.5
    assert resource_diversity_at([], 10) is None
    many = [item(f"r{i % 5}#{i}") for i in range(30)]
    assert resource_diversity_at(many) == 0.5  # top 10 only


def test_scope_violation_and_stale_result() -> None:
    corpus = {"a": "h1", "b": "h2"}
    ranking = [
        RankedItem("a#0", "a", "h1"),
        RankedItem("b#0", "b", "old"),
        RankedItem("z#0", "z", "h9"),
        RankedItem("b#1", "b", None),
    ]
    assert scope_violation_at(ranking, corpus) == 0.25
    assert stale_result_at(ranking, corpus) == 0.25
    assert scope_violation_at([], corpus) is None
    beyond = [RankedItem(f"a#{i}", "a", "h1") for i in range(20)] + [RankedItem("z#0", "z")]
    assert scope_violation_at(beyond, corpus) == 0.0  # rank 21 is outside the top 20


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(InvalidRequest):
        Judgments.of(units={"a#0": 4})
    with pytest.raises(InvalidRequest):
        Judgments.of(resources={"a": True})
    with pytest.raises(InvalidRequest):
        Judgments.of(units={"no-ordinal": 1}).evidence_resources()
    with pytest.raises(InvalidRequest):
        recall_at(grade_units([], Judgments.of(units={"a#0": 1})), 0)
