"""Retrieval quality on Cranfield 1400 through the real pipeline, and the default reranker's contract.

The Cranfield tests (``slow``: indexing 1,400 documents with MiniLM takes a minute or two on two
cores) build one project in a module fixture, exactly as ``benchmarks/cranfield_quality.py`` does,
and check at document level over all 225 queries: the final order (B4) ranks better than RRF (B3)
with the evaluation profile (every fused candidate reranked) and with the default profile (rerank
depth 50), RRF reaches the data set's reference, and the exact identity stage stays out of the way
on a collection without identifiers. The reranker tests are fast and synthetic.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.cranfield_quality import (
    BARE_NUMBER_QUERIES,
    DEFAULT_PROFILE,
    EVAL_PROFILE,
    PROJECT,
    Cranfield,
    TrecEval,
    activate_all,
    cross_check,
    document_ranking,
    evaluate_variants,
    exact_matches,
    means,
    plain_bm25,
)
from memory_core.domain.errors import InvalidRequest
from memory_core.evaluation.statistics import paired_bootstrap
from memory_core.ports import Reranker
from memory_core.retrieval.exact import slug_words
from memory_core.retrieval.fusion import DEFAULT_FUSION, FUSIONS
from memory_core.retrieval.rerankers import MAX, MINMAX, ConvexFusionReranker
from memory_core.services.activation import Activation
from tests.units import RerankCandidate as Input  # what it reads of a candidate

RRF_FLOOR = 0.54  # the data README's RRF is 0.555
BM25_NOISE = 0.01


@attrs.frozen
class Measured:
    cranfield: Cranfield
    evaluation: Mapping[str, Activation]  # every fused candidate reranked
    shipped: Mapping[str, Activation]  # the default profile (rerank depth 50)
    probes: Mapping[str, Activation]
    per_query: Mapping[str, Mapping[str, Mapping[str, float]]]
    per_query_shipped: Mapping[str, Mapping[str, Mapping[str, float]]]
    plain_bm25: Mapping[str, Mapping[str, float]]
    trec: TrecEval

    def ndcg10(self, variant: str, *, shipped: bool = False, qids: list[str] | None = None) -> float:
        per_query = (self.per_query_shipped if shipped else self.per_query)[variant]
        return means(per_query, qids)["ndcg_cut_10"]


@pytest.fixture(scope="module")
def measured(cranfield_engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Measured]:  # type: ignore[no-untyped-def]
    # The session's Cranfield project (tests/conftest.py) is the benchmark's: same files, same id.
    cranfield = Cranfield.load()
    root = tmp_path_factory.mktemp("cranfield")
    engine = cranfield_engine
    shared_profile = engine.profile
    try:
        engine.profile = EVAL_PROFILE
        evaluation = activate_all(engine, cranfield.queries, warmup=0)
        engine.profile = DEFAULT_PROFILE
        shipped = activate_all(engine, cranfield.queries, warmup=0)
        probes = {text: engine.activate(PROJECT, text) for text in BARE_NUMBER_QUERIES}
    finally:
        engine.profile = shared_profile
    trec = TrecEval(cranfield.qrels)
    yield Measured(
        cranfield=cranfield,
        evaluation=evaluation,
        shipped=shipped,
        probes=probes,
        per_query=evaluate_variants(cranfield, evaluation, trec),
        per_query_shipped=evaluate_variants(cranfield, shipped, trec),
        plain_bm25=trec.per_query(plain_bm25(cranfield, root / "plain-bm25")),
        trec=trec,
    )


@pytest.mark.slow
def test_every_query_is_evaluated_at_document_level(measured: Measured) -> None:
    assert len(measured.cranfield.documents) == 1400
    for variant in ("B1", "B2", "B3", "B4"):
        assert len(measured.per_query[variant]) == 225


@pytest.mark.slow
def test_final_order_ranks_better_than_rrf(measured: Measured) -> None:
    b3, b4 = measured.ndcg10("B3"), measured.ndcg10("B4")
    print(f"\nCranfield nDCG@10, all 225: B3 RRF {b3:.4f}, B4 {b4:.4f}")
    assert b4 >= b3  # the hard requirement
    assert b4 > b3  # brief §4.6: better than RRF, not merely equal


@pytest.mark.slow
def test_final_order_ranks_better_than_rrf_with_the_default_profile(measured: Measured) -> None:
    b3, b4 = measured.ndcg10("B3", shipped=True), measured.ndcg10("B4", shipped=True)
    print(f"\nCranfield nDCG@10, default profile: B3 RRF {b3:.4f}, B4 {b4:.4f}")
    assert b4 > b3


@pytest.mark.slow
def test_final_order_ranks_better_than_rrf_on_the_held_out_half(measured: Measured) -> None:
    _, even = measured.cranfield.halves()
    assert measured.ndcg10("B4", qids=even) > measured.ndcg10("B3", qids=even)


@pytest.mark.slow
def test_rrf_reaches_the_reference(measured: Measured) -> None:
    assert measured.ndcg10("B3") >= RRF_FLOOR


@pytest.mark.slow
def test_lexical_list_stays_within_noise_of_plain_bm25(measured: Measured) -> None:
    b1 = measured.ndcg10("B1")
    plain = means(measured.plain_bm25)["ndcg_cut_10"]
    print(f"\nCranfield nDCG@10: B1 {b1:.4f}, plain BM25 {plain:.4f}, unit BM25 {measured.ndcg10('bm25_units'):.4f}")
    assert abs(b1 - plain) <= BM25_NOISE
    # Against the same BM25 list without the exact stage, the difference is the exact stage alone.
    assert abs(b1 - measured.ndcg10("bm25_units")) <= 0.001


@pytest.mark.slow
def test_exact_stage_never_fires_on_bare_numbers(measured: Measured) -> None:
    for text, activation in measured.probes.items():
        assert [c.unit.unit_id for c in activation.candidates if c.exact_rank is not None] == [], text


@pytest.mark.slow
def test_exact_stage_fires_only_on_quoted_titles(measured: Measured) -> None:
    """Cranfield has no identifiers, file names are bare numbers, so the only keys a query can hit
    are multi-word title slugs. Two queries quote a title verbatim (34: "tunnel interference
    effects", 194: "the buckling strength of a uniform circular cylinder loaded in axial
    compression"): those are genuine identity matches, not false positives."""
    fired = exact_matches(measured.evaluation)
    assert len(fired) <= 5
    for query_id, matches in fired.items():
        query = "-".join(slug_words(measured.cranfield.queries[query_id]))
        for match in matches:
            title = slug_words(match["title"])
            assert len(title) >= 3
            assert "-".join(title) in query, (query_id, match)


@pytest.mark.slow
def test_trec_eval_and_core_metrics_agree(measured: Measured) -> None:
    assert cross_check(measured.cranfield, measured.evaluation, measured.trec) < 1e-9


def fusion_rankings(fusion: Reranker, activations: Mapping[str, Activation], window: int) -> dict[str, list[str]]:
    """A registered fusion applied to recorded candidates as ``apply_rerank`` applies it: the top
    ``window`` by RRF re-scored (ties in RRF order), then the rest in RRF order; document level."""
    out = {}
    for qid, activation in activations.items():
        fused = sorted(activation.candidates, key=lambda c: c.rrf_rank)
        head, tail = fused[:window], fused[window:]
        scores = fusion.rerank("", head)
        out[qid] = document_ranking([head[i] for i in sorted(range(len(head)), key=lambda i: -scores[i])] + tail)
    return out


@pytest.mark.slow
def test_every_registered_fusion_beats_both_lists_and_none_is_significantly_above_the_default(
    measured: Measured,
) -> None:
    """Issue 32: each fusion at its defaults, on the real candidates of the evaluation pass (each
    with its cosine) in the default window. The default (``DEFAULT_FUSION``) was chosen over the
    four development collections; on Cranfield no other fusion may beat it with an interval above 0."""
    window = DEFAULT_PROFILE.rerank_depth
    ndcg = {name: [v["ndcg_cut_10"] for v in measured.trec.per_query(
        fusion_rankings(FUSIONS[name](), measured.evaluation, window)).values()] for name in FUSIONS}  # fmt: skip
    default = ndcg[DEFAULT_FUSION]
    for name, values in ndcg.items():
        mean = sum(values) / len(values)
        print(f"\nCranfield nDCG@10, fusion {name}: {mean:.4f}")
        assert mean > max(measured.ndcg10("B1"), measured.ndcg10("B2")), name
        assert paired_bootstrap(values, default).low <= 0.0, name
    # The default fusion on these candidates is what the product returns with the default profile.
    assert sum(default) / len(default) == pytest.approx(measured.ndcg10("B4", shipped=True), abs=1e-9)


# -- the default reranker (fast, synthetic) ---------------------------------------------------
scores_ = st.one_of(st.none(), st.floats(0, 50, allow_nan=False))
cosines = st.floats(-1, 1, allow_nan=False)
one_resource = st.just("one.md")
inputs = st.lists(
    st.builds(Input, one_resource, scores_, cosines, st.one_of(st.none(), st.integers(1, 5))), min_size=1, max_size=30
)
rerankers = st.builds(
    ConvexFusionReranker,
    alpha=st.floats(0, 1),
    cosine_floor=st.floats(-1, 0.9),
    normalisation=st.sampled_from([MAX, MINMAX]),
)


@given(rerankers, inputs)
def test_exact_matches_stay_on_top(reranker: ConvexFusionReranker, candidates: list[Input]) -> None:
    scores = reranker.rerank("q", candidates)
    assert len(scores) == len(candidates)
    exact = [s for s, c in zip(scores, candidates, strict=True) if c.exact_rank is not None]
    other = [s for s, c in zip(scores, candidates, strict=True) if c.exact_rank is None]
    assert all(0.0 <= s <= 1.0 + 1e-12 for s in other)
    if exact and other:
        assert min(exact) >= max(other)


@given(st.floats(0, 1), st.lists(st.tuples(st.floats(0.01, 50), cosines), min_size=2, max_size=30), st.data())
def test_max_normalisation_does_not_depend_on_the_window_depth(
    alpha: float, pairs: list[tuple[float, float]], data: st.DataObject
) -> None:
    """With BM25's theoretical minimum, a unit's score is the same in any window holding the best."""
    candidates = sorted((Input("one.md", b, d) for b, d in pairs), key=lambda c: -(c.bm25_score or 0.0))
    depth = data.draw(st.integers(1, len(candidates)))
    reranker = ConvexFusionReranker(alpha=alpha, normalisation=MAX)
    assert reranker.rerank("q", candidates[:depth]) == reranker.rerank("q", candidates)[:depth]


def test_scores_combine_normalised_bm25_and_cosine() -> None:
    candidates = [Input("one.md", 10.0, 0.5), Input("one.md", 5.0, 0.9), Input("one.md", None, 0.2)]
    assert ConvexFusionReranker(alpha=0.4, normalisation=MAX).rerank("q", candidates) == pytest.approx(
        [0.4 * 1.0 + 0.6 * 0.5, 0.4 * 0.5 + 0.6 * 0.9, 0.6 * 0.2]
    )
    assert ConvexFusionReranker(alpha=0.4, normalisation=MINMAX).rerank("q", candidates) == pytest.approx(
        [0.4 * 1.0 + 0.6 * 0.5, 0.6 * 0.9, 0.6 * 0.2]
    )
    assert ConvexFusionReranker(alpha=0.0, cosine_floor=0.5).rerank("q", candidates) == pytest.approx([0.0, 0.8, 0.0])


@pytest.mark.parametrize(
    "params", [{"alpha": -0.1}, {"alpha": 1.5}, {"cosine_floor": 1.0}, {"cosine_floor": -2.0}, {"normalisation": "z"}]
)
def test_bad_parameters_are_rejected(params: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest):
        ConvexFusionReranker(**params)  # type: ignore[arg-type]


def test_revision_names_every_parameter() -> None:
    base = ConvexFusionReranker()
    variants = [
        attrs.evolve(base, alpha=0.5),
        attrs.evolve(base, exact_bonus=2.0),
        attrs.evolve(base, cosine_floor=0.2),
        attrs.evolve(base, normalisation=MINMAX),
    ]
    revisions = {base.revision, *(v.revision for v in variants)}
    assert len(revisions) == 1 + len(variants)
