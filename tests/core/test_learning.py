"""The learned ranker's pure parts (issue 32, item 2): feature extraction, the model envelope and
the cross-validation guard, property-based where a property says more than an example."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.domain.evaluation_errors import LearnedModelRefused
from memory_core.domain.model import Unit, unit_hash_of
from memory_core.evaluation.learning import (
    CASES_USUALLY_NEEDED,
    FEATURE_NAMES,
    FEATURE_REVISION,
    KEEP_CURRENT_LABEL,
    SETTINGS,
    FeatureInput,
    FittedModel,
    LearnedModel,
    LearnedReranker,
    LearnerSetting,
    LearningCase,
    RankingData,
    choose_setting,
    few_cases_note,
    fold_groups,
    group_by_separator,
    importances_of,
    learn,
    learning_cases,
    ranking_data,
    read_model,
    reordered,
    setting_label,
    squashed,
    stages_of,
    training_work,
    window_features,
)
from memory_core.evaluation.learning import learning_case as learning_case_of
from memory_core.evaluation.metrics import Judgments, MetricLevel
from memory_core.evaluation.report import CaseInput
from memory_core.evaluation.text_features import (
    CLUSTER_FEATURES,
    CLUSTER_TOP,
    STOPWORDS,
    TEXT_FEATURES,
    cluster_rows,
    query_stems,
    text_rows,
)
from memory_core.retrieval.pipeline import Candidate
from memory_core.runs.records import CandidateRecord

maybe_rank = st.none() | st.integers(1, 1000)
maybe_score = st.none() | st.floats(-50, 50, allow_nan=False)
words = st.sampled_from(["wing", "lift", "drag", "flow", "heat", "the", "of", "Boundary", "layer", "X"])
# A unit's text ("": not known), with words that match the queries' stems and words that do not.
text_words = ["wing", "wings", "Lifting", "lift.", "drag", "boundaries", "the", "of", "layer", "x", "\n", "stall"]
texts = st.just("") | st.lists(st.sampled_from(text_words), min_size=1, max_size=30).map(" ".join)
TEXT_COLUMNS = [FEATURE_NAMES.index(n) for n in TEXT_FEATURES]
CLUSTER_COLUMNS = [FEATURE_NAMES.index(n) for n in CLUSTER_FEATURES]


@st.composite
def feature_inputs(draw: st.DrawFn, resource: str | None = None) -> FeatureInput:
    resource_id = resource or draw(st.sampled_from(["a.md", "b.md", "dir/c_d.md"]))
    ordinal = draw(st.integers(0, 30))
    return FeatureInput(
        unit_id=f"{resource_id}#{ordinal}",
        resource_id=resource_id,
        heading_path=tuple(draw(st.lists(st.lists(words, max_size=4).map(" ".join), max_size=3))),
        token_count=draw(st.integers(0, 5000)),
        start=draw(st.none() | st.integers(0, 10**7)),
        exact_rank=draw(maybe_rank),
        exact_score=draw(maybe_score),
        bm25_rank=draw(maybe_rank),
        bm25_score=draw(st.none() | st.floats(0, 80, allow_nan=False)),
        lexical_rank=draw(maybe_rank),
        dense_rank=draw(maybe_rank),
        dense_similarity=draw(st.none() | st.floats(-1, 1, allow_nan=False)),
        rrf_score=draw(st.floats(0, 1, allow_nan=False)),
        text=draw(texts),
    )


windows = st.lists(feature_inputs(), max_size=25)
queries = st.lists(words, max_size=8).map(" ".join)


@given(queries, windows)
@settings(max_examples=200, deadline=None)
def test_every_unit_gets_one_row_of_every_feature_each_finite_or_missing(
    query: str, window: list[FeatureInput]
) -> None:
    rows = window_features(query, window)
    assert len(rows) == len(window)
    for row in rows:
        assert len(row) == len(FEATURE_NAMES)
        assert all(math.isfinite(v) or math.isnan(v) for v in row)
    names = {n: i for i, n in enumerate(FEATURE_NAMES)}
    for row, c in zip(rows, window, strict=True):
        assert row[names["exact"]] == (c.exact_rank is not None)
        assert math.isnan(row[names["dense_similarity"]]) == (c.dense_similarity is None)
        assert 0.0 <= row[names["heading_match"]] <= 1.0 and 0.0 <= row[names["title_match"]] <= 1.0
        assert row[names["resource_units"]] == sum(u.resource_id == c.resource_id for u in window)
        # A unit whose text is not known has every text and cluster column missing, and only such a unit.
        columns = TEXT_COLUMNS + CLUSTER_COLUMNS
        assert [math.isnan(row[i]) for i in columns] == [c.text == ""] * len(columns)
        if c.text:
            assert row[names["text_bm25_window"]] >= 0.0 and row[names["text_match_density"]] >= 0.0
            assert 0.0 <= row[names["text_first_match"]] <= 1.0
            # Cosines of non-negative tf-idf vectors; a resource's best is at least its unit's own.
            assert all(-1e-9 <= row[i] <= 1 + 1e-9 for i in CLUSTER_COLUMNS)
            assert row[names["resource_best_top_cosine"]] >= row[names["cluster_top_cosine"]]


@given(queries, windows)
@settings(max_examples=100, deadline=None)
def test_the_features_depend_on_the_query_terms_not_their_case_or_punctuation(
    query: str, window: list[FeatureInput]
) -> None:
    assert _same(window_features(query, window), window_features(f"  {query.upper()}?!", window))


@given(windows, queries)
@settings(max_examples=100, deadline=None)
def test_a_trace_record_and_a_live_candidate_give_the_same_rows(window: list[FeatureInput], query: str) -> None:
    window = [attrs.evolve(c, start=c.start or 0) for c in window]
    live = [_candidate(c) for c in window]
    assert [FeatureInput.of(c) for c in live] == window
    assert _same(window_features(query, [FeatureInput.of(c) for c in live]), window_features(query, window))


# -- the text columns (ltr-features-v3), by hand -------------------------------------------------
def test_the_text_columns_of_a_small_window_by_hand() -> None:
    # Stems of "Wings lifting the cat?": "wings" and "lifti" (cut to five characters: any word
    # starting so matches), "cat" (three characters: only "cat" matches), "the" a stopword.
    assert query_stems("Wings lifting the cat?") == ("wings", "lifti", "cat")
    window = [
        "Lifting wings lift a cat",  # lifting@0, wings@8, cat@21 ("lift" is not "lifti"); 24 chars, 5 words
        "The catalog of wingspans",  # wingspans@15 ("catalog" is not "cat"); 24 chars, 4 words
        "No match here.\nAt all",  # no match; 21 chars
        "",  # a text not known: missing, and no part of the window's IDF or average length
    ]
    # n = 3 known units, average length 23; df: wings 2, lifti 1, cat 1, so idf(wings) = ln(4 / 2.5)
    # and idf(lifti) = idf(cat) = ln(4 / 1.5); a 24-char unit's norm = 1.2 * (0.25 + 0.75 * 24 / 23).
    # BM25 of one match of each: (ln 1.6 + 2 ln(8/3)) * 2.2 / (1 + norm) = 2.38917; of wings alone 0.46179.
    first, second, none, unknown = text_rows("Wings lifting the cat?", window)
    assert first == pytest.approx((2.389167, 3 / 5, 0.0), abs=1e-6)
    assert second == pytest.approx((0.461790, 1 / 4, 15 / 24), abs=1e-6)
    assert none == (0.0, 0.0, 1.0) and unknown is None
    # Through window_features: the text columns, NaN for the unit whose text is not known.
    inputs = [attrs.evolve(_case(1, 100).window[i], text=t) for i, t in enumerate(window)]
    rows = window_features("Wings lifting the cat?", inputs)
    assert [FEATURE_NAMES[i] for i in TEXT_COLUMNS] == list(TEXT_FEATURES) == list(FEATURE_NAMES[-6:-3])
    assert FEATURE_NAMES.index("fusion_prior") == TEXT_COLUMNS[0] - 1
    assert [rows[0][i] for i in TEXT_COLUMNS] == pytest.approx(list(first), abs=1e-12)
    assert [rows[2][i] for i in TEXT_COLUMNS] == [0.0, 0.0, 1.0]
    assert all(math.isnan(rows[3][i]) for i in TEXT_COLUMNS)


# -- the cluster columns (ltr-features-v4), by hand ----------------------------------------------
def test_the_cluster_columns_of_a_small_window_by_hand() -> None:
    # Stems (stoplist, 5 characters): "wing lift" -> wing, lift; "drag flow" -> drag, flow;
    # "wing lift drag" -> wing, lift, drag. n = 3 known units, df: wing 2, lift 2, drag 2, flow 1:
    # idf ln(4/2.5) for the first three, ln(4/1.5) for flow; every tf is 1, so a weight is its idf.
    texts = ["wing lift", "drag flow", "", "wing lift drag"]
    priors = [0.9, 0.1, 5.0, 0.5]  # the unknown unit's prior counts for nothing
    a, b = math.log(4 / 2.5), math.log(4 / 1.5)
    u0 = {"wing": a, "lift": a}
    u1 = {"drag": a, "flow": b}
    u3 = {"wing": a, "lift": a, "drag": a}

    def unit(v: dict[str, float]) -> dict[str, float]:
        norm = math.sqrt(sum(x * x for x in v.values()))
        return {k: x / norm for k, x in v.items()}

    def cos(v: dict[str, float], w: dict[str, float]) -> float:
        v, w = unit(v), unit(w)
        return sum(x * w.get(k, 0.0) for k, x in v.items())

    def plus(*vs: dict[str, float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for v in vs:
            for k, x in unit(v).items():
                out[k] = out.get(k, 0.0) + x
        return out

    # CLUSTER_TOP is 5, so all three known units are the top: each is compared with the other two.
    assert CLUSTER_TOP >= 3
    rows = cluster_rows(texts, priors, ["a.md", "b.md", "c.md", "a.md"])
    assert rows[2] is None
    expected = [
        (cos(u0, plus(u1, u3)), (cos(u0, u1) + cos(u0, u3)) / 2),
        (cos(u1, plus(u0, u3)), (cos(u1, u0) + cos(u1, u3)) / 2),
        (cos(u3, plus(u0, u1)), (cos(u3, u0) + cos(u3, u1)) / 2),
    ]
    for row, (top, mean) in zip([rows[0], rows[1], rows[3]], expected, strict=True):
        assert row is not None and row[:2] == pytest.approx((top, mean), abs=1e-12)
    # a.md's best top cosine is the better of its two units'.
    assert rows[0][2] == rows[3][2] == pytest.approx(max(expected[0][0], expected[2][0]), abs=1e-12)
    assert rows[1][2] == pytest.approx(expected[1][0], abs=1e-12)


def test_the_cluster_top_is_the_default_fusions_best_units_and_a_lone_text_has_nothing_to_resemble() -> None:
    # Seven units: the top five by prior are the "wing" ones; a "drag" unit outside the top is
    # compared with all five, and resembles none of them.
    texts = ["wing lift"] * 5 + ["drag flow", "wing drag"]
    priors = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    rows = cluster_rows(texts, priors, [f"r{i}" for i in range(7)])
    assert rows[5] is not None and rows[5][0] == 0.0
    assert all(r is not None and r[0] == pytest.approx(1.0) for r in rows[:5])  # each like the other four
    assert rows[6] is not None and 0.0 < rows[6][0] < 1.0
    # Ties in the prior: the earlier in the window is in the top (the unit itself left out).
    tied = cluster_rows(["wing"] * 5 + ["drag"], [1.0] * 6, ["r"] * 6)
    assert tied[5] is not None and tied[5][0] == 0.0 and tied[0] is not None and tied[0][0] == pytest.approx(1.0)
    # One known text: no other unit, so nothing to resemble; none known: no row.
    assert cluster_rows(["wing lift", ""], [0.1, 0.9], ["a", "b"]) == [(0.0, 0.0, 0.0), None]
    assert cluster_rows(["", ""], [0.0, 0.0], ["a", "b"]) == [None, None] and cluster_rows([], [], []) == []
    # Only stopwords and short words: a known text with no stems is like nothing.
    assert cluster_rows(["the of a", "wing"], [1.0, 0.5], ["a", "b"]) == [(0.0, 0.0, 0.0), (0.0, 0.0, 0.0)]


def test_the_cluster_top_follows_the_fusion_prior_not_the_window_order_and_takes_five() -> None:
    # Window order (RRF) puts three "drag" units first, but the default fusion's score (an exact
    # match, then the cosine) puts the six "wing" units above them: the top is five "wing" units.
    texts = ["drag flow"] * 3 + ["wing wing lift"] * 6
    window = [
        FeatureInput(f"r{i}.md#0", f"r{i}.md", (), 10, 0, 1 if i == 8 else None, 1.0 if i == 8 else None,
                     i + 1, 10.0, i + 1, i + 1, 0.1 if i < 3 else 0.9 - i / 100, 1 / (61 + i), text=t)
        for i, t in enumerate(texts)
    ]  # fmt: skip
    rows = window_features("wing", window)
    prior = FEATURE_NAMES.index("fusion_prior")
    priors = [r[prior] for r in rows]
    assert sorted(range(9), key=lambda i: -priors[i])[:5] == [8, 3, 4, 5, 6]  # not the window's first five
    clusters = cluster_rows(texts, priors, [c.resource_id for c in window])
    assert [[r[i] for i in CLUSTER_COLUMNS] for r in rows] == [list(c) for c in clusters if c is not None]
    # The "drag" units are in no top: like nothing there. The sixth "wing" unit (r7, outside the
    # top of five) is compared with all five, each top unit with the other four: all alike.
    assert all(r[CLUSTER_COLUMNS[0]] == 0.0 for r in rows[:3])
    assert all(r[CLUSTER_COLUMNS[0]] == pytest.approx(1.0) for r in rows[3:])
    # The top is five: by prior four "wing", a "lift", a "drag", then another "drag" and "lift".
    # The last "lift" resembles the top only if the fifth is in it, the last "drag" only if the sixth is.
    texts = ["wing"] * 4 + ["lift", "drag", "drag", "lift"]
    sized = cluster_rows(texts, [8, 7, 6, 5, 4, 3, 2, 1], list("abcdefgh"))
    assert sized[7] is not None and sized[7][0] > 0.0 and sized[6] is not None and sized[6][0] == 0.0


def test_a_repeated_word_weighs_one_plus_the_log_of_its_count() -> None:
    # "wing wing wing lift" against "wing" alone: weights (1 + ln 3) idf(wing) and idf(lift),
    # df: wing 3, lift 1, drag 1 over n = 3, idf = ln(4 / (df + 0.5)).
    texts = ["wing wing wing lift", "wing", "wing drag"]
    iw, il, idr = math.log(4 / 3.5), math.log(4 / 1.5), math.log(4 / 1.5)
    a = [(1 + math.log(3)) * iw, il]
    cos_ab = a[0] * iw / (math.hypot(*a) * iw)
    rows = cluster_rows(texts, [1.0, 0.5, 0.1], ["a", "b", "c"])
    cos_ac = a[0] * iw / (math.hypot(*a) * math.hypot(iw, idr))
    assert rows[0] is not None and rows[0][1] == pytest.approx((cos_ab + cos_ac) / 2, abs=1e-12)


@given(windows)
@settings(max_examples=100, deadline=None)
def test_the_cluster_columns_do_not_depend_on_unknown_units_or_case(window: list[FeatureInput]) -> None:
    texts = [c.text for c in window]
    priors = [float(i % 7) for i in range(len(window))]
    resources = [c.resource_id for c in window]
    rows = cluster_rows(texts, priors, resources)
    # Dropping the units whose text is not known changes no other unit's row.
    kept = [i for i, t in enumerate(texts) if t]
    alone = cluster_rows([texts[i] for i in kept], [priors[i] for i in kept], [resources[i] for i in kept])
    assert [rows[i] for i in kept] == alone
    assert cluster_rows([t.upper() for t in texts], priors, resources) == rows


def test_a_short_stem_matches_only_its_own_word_and_a_stopword_query_matches_nothing() -> None:
    # "data" and "cat" are kept whole: "database" and "cats" are other words; "datab" (from
    # "databases") matches "database" but not "data".
    assert text_rows("data", ["database data Data.", "databases"]) == [
        (pytest.approx(math.log(3 / 1.5) * 2.2 * 2 / (2 + 1.2 * (0.25 + 0.75 * 19 / 14))), 2 / 3, 9 / 19),
        (0.0, 0.0, 1.0),
    ]
    assert text_rows("databases", ["database data", "cats"])[0] == pytest.approx(
        (math.log(3 / 1.5) * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 13 / 8.5)), 1 / 2, 0.0))  # fmt: skip
    # Only stopwords (and words under three characters): no stem, every known text unmatched.
    assert {"what", "which", "there", "about"} <= STOPWORDS and query_stems("What is there about it, of which?") == ()
    assert text_rows("What is there about it, of which?", ["what there is", "", "x"]) == [
        (0.0, 0.0, 1.0), None, (0.0, 0.0, 1.0)]  # fmt: skip
    assert text_rows("wing", []) == [] and text_rows("wing", ["", ""]) == [None, None]


def test_a_cases_window_carries_its_frozen_texts_giving_the_live_rows_and_an_unshowable_text_is_missing() -> None:
    bodies = {"h-a": "# Wings\n\nLifting wings lift a cat.\n\nDrag and flow.", "h-b": "The catalog of wingspans.",
              "h-c": "Stall of a wing."}  # fmt: skip
    spans = [("a.md", "h-a", 0, 34), ("b.md", "h-b", 0, 25), ("a.md", "h-a", 36, 50), ("c.md", "h-c", 0, 16)]
    live = []
    for i, (resource, digest, start, end) in enumerate(spans):
        text = bodies[digest][start:end]
        unit = Unit(f"{resource}#{i}", resource, i, start, end, ("Wings",) if resource == "a.md" else (), text,
                    len(text.split()), unit_hash_of(text, start, end), digest)  # fmt: skip
        live.append(Candidate(unit, bm25_score=10.0 - i, bm25_rank=i + 1, dense_similarity=0.5, rrf_rank=i + 1,
                              rrf_score=1 / (61 + i), rerank_rank=i + 1 if i < 3 else None))  # fmt: skip
    corpus = {"a.md": "h-a", "b.md": "h-b", "c.md": "h-c"}
    trace = CaseInput("case", tuple(CandidateRecord.from_candidate(c) for c in live), {}, False,
                      Judgments.of(resources={"a.md": 2}), corpus)  # fmt: skip
    case = learning_case_of(trace, "wing lift", lambda digest: bodies[digest].encode())
    window = [FeatureInput.of(c) for c in live[:3]]
    assert case.window == tuple(window) and [c.text for c in case.window][:2] == [
        "# Wings\n\nLifting wings lift a cat.", "The catalog of wingspans."]  # fmt: skip
    assert [c.text for c in case.tail] == [""]  # never featured
    assert _same(window_features("wing lift", case.window), window_features("wing lift", window))
    # b.md deleted before the Run (not in the corpus), a.md's frozen body holding other text: their
    # units' text columns are missing, the rest of their rows as before.
    changed = {**bodies, "h-a": bodies["h-a"].replace("Lifting", "Floating")}
    trace = attrs.evolve(trace, corpus_hashes={"a.md": "h-a", "c.md": "h-c"})
    case = learning_case_of(trace, "wing lift", lambda digest: changed[digest].encode())
    assert [c.text for c in case.window] == ["", "", ""]
    for trace_row, live_row in zip(window_features("wing lift", case.window), window_features("wing lift", window),
                                   strict=True):  # fmt: skip
        assert all(math.isnan(trace_row[i]) for i in TEXT_COLUMNS)
        assert _same([trace_row[: TEXT_COLUMNS[0]]], [live_row[: TEXT_COLUMNS[0]]])


def _traced_cases(bodies: dict[str, str], relevant: list[bool]) -> list[CaseInput]:
    """Cases whose traces all hold the same window: a.md's two units and b.md's one, then a unit
    of c.md the Run did not rerank; a case of ``relevant`` False judges nothing relevant."""
    spans = [("a.md", "h-a", 0, 19), ("a.md", "h-a", 21, 35), ("b.md", "h-b", 0, 25), ("c.md", "h-c", 0, 4)]
    records = []
    for i, (resource, digest, start, end) in enumerate(spans):
        text = bodies[digest][start:end]
        unit = Unit(f"{resource}#{i}", resource, i, start, end, (), text, len(text.split()),
                    unit_hash_of(text, start, end), digest)  # fmt: skip
        records.append(CandidateRecord.from_candidate(Candidate(
            unit, bm25_score=5.0 - i, bm25_rank=i + 1, rrf_rank=i + 1, rrf_score=1 / (61 + i),
            rerank_rank=i + 1 if i < 3 else None)))  # fmt: skip
    corpus = {"a.md": "h-a", "b.md": "h-b", "c.md": "h-c"}
    return [CaseInput(f"case-{n}", tuple(records), {}, False, Judgments.of(resources={"a.md": 2} if judged else {}),
                      corpus) for n, judged in enumerate(relevant)]  # fmt: skip


def test_learning_cases_are_refused_over_the_row_bound_before_any_body_is_read_and_share_each_units_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import memory_core.evaluation.learning as learning
    from memory_core.domain.errors import InvalidRequest

    bodies = {"h-a": "Lifting wings lift.\n\nDrag and flow.", "h-b": "The catalog of wingspans.", "h-c": "Stall"}
    reads: list[str] = []

    def read(digest: str) -> bytes:  # counts every body read
        reads.append(digest)
        return bodies[digest].encode()

    monkeypatch.setattr(learning, "MAX_TRAINING_ROWS", 11)
    # Four cases of three window units each are twelve rows: refused on the traces' counts alone.
    with pytest.raises(InvalidRequest, match="4 cases hold 12 window units") as caught:
        learning_cases(_traced_cases(bodies, [True] * 4), ["wing lift"] * 4, read)
    assert caught.value.details["rows"] == 12 and reads == []
    # A case without a relevant item is not learned from, so not counted: nine rows are within the
    # bound. Each body is read once (c.md's unit is outside every window: never read), and a unit in
    # every window of the cases learned from is one text, the same as each case cut alone; the case
    # not learned from gets no text.
    traced = _traced_cases(bodies, [True, True, False, True])
    cases = learning_cases(traced, ["wing lift"] * 4, read)
    assert sorted(reads) == ["h-a", "h-b"]
    assert [c.text for c in cases[0].window] == ["Lifting wings lift.", "Drag and flow.", "The catalog of wingspans."]
    learned = [cases[i] for i in (0, 1, 3)]
    assert all(a.text is b.text for case in learned[1:] for a, b in zip(cases[0].window, case.window, strict=True))
    assert learned == [learning_case_of(traced[i], "wing lift", read) for i in (0, 1, 3)]
    assert [c.text for c in cases[2].window] == ["", "", ""]


def test_learning_cases_read_no_body_for_the_cases_not_learned_from() -> None:
    # The row bound counts only the cases learned from, so the bodies read must be theirs alone:
    # an unjudged case whose window lies on bodies no judged case uses (a later import of a.md and
    # b.md) must not have them read, however many such cases there are.
    bodies = {"h-a": "Lifting wings lift.\n\nDrag and flow.", "h-b": "The catalog of wingspans.", "h-c": "Stall"}
    bodies |= {"h-a2": bodies["h-a"], "h-b2": bodies["h-b"]}
    reads: list[str] = []

    def read(digest: str) -> bytes:  # counts every body read
        reads.append(digest)
        return bodies[digest].encode()

    [judged] = _traced_cases(bodies, [True])
    unjudged = [attrs.evolve(t, case_id=f"unjudged-{n}", corpus_hashes={"a.md": "h-a2", "b.md": "h-b2", "c.md": "h-c"})
                for n, t in enumerate(_traced_cases(bodies, [False] * 3))]  # fmt: skip
    cases = learning_cases([judged, *unjudged], ["wing lift"] * 4, read)
    assert sorted(reads) == ["h-a", "h-b"]
    assert [u.text for u in cases[0].window] == ["Lifting wings lift.", "Drag and flow.", "The catalog of wingspans."]
    assert all(u.text == "" for case in cases[1:] for u in case.window)


def test_a_learning_counts_the_window_units_that_had_their_text_and_the_cli_warns_when_a_model_had_too_few() -> None:
    from memory_core.entrypoints.cli.profile_commands import _learn_lines

    bodies = {"h-a": "Lifting wings lift.\n\nDrag and flow.", "h-b": "The catalog of wingspans.", "h-c": "Stall"}

    def learned(traced: list[CaseInput], grid: Sequence[LearnerSetting | None] = (LearnerSetting(),)) -> Any:
        cases = learning_cases(traced, ["wing lift"] * len(traced), lambda digest: bodies[digest].encode())
        result, _ = learn(cases, fit=lambda data, setting: _fit_signal(data), load=_load_signal, current=_current,
                          current_revision="c", trainer=lambda s: "t", learn_id="L", project_id="p",
                          created_at="now", settings=grid, resamples=200)  # fmt: skip
        return result

    # Recorded before candidates kept their span: no unit's text can be shown.
    before = [attrs.evolve(t, candidates=tuple(attrs.evolve(c, start=None, end=None) for c in t.candidates))
              for t in _traced_cases(bodies, [True] * 6)]  # fmt: skip
    result = learned(before)
    assert (result.training_rows, result.text_units, result.text_share) == (18, 0, 0.0)
    said = "\n".join(_learn_lines(result, None))
    assert result.model_digest is not None and "text columns: 0 of 18 window units had their text (0.0%)" in said
    assert "warning: only 0.0% of the window units learned from had their text" in said
    assert "no span recorded" in said and "the model was trained with their text columns missing" in said
    # Two cases of six recorded before: 12 of 18, still under the share; all recorded after: no warning.
    after = [attrs.evolve(t, case_id=f"after-{t.case_id}") for t in _traced_cases(bodies, [True] * 4)]
    result = learned([*before[:2], *after])
    said = "\n".join(_learn_lines(result, None))
    assert result.model_digest is not None and result.text_units == 12
    assert "warning: only 66.7% of the window units" in said
    result = learned(_traced_cases(bodies, [True] * 6))
    said = "\n".join(_learn_lines(result, None))
    assert result.text_units == 18 and "18 of 18 window units had their text (100.0%)" in said and "warning" not in said
    # No model trained (too few judged cases; the final choice keeps the current ranking): the count
    # is said, but nothing was trained without the text columns, so no warning.
    for result in (learned(before[:3]), learned(before, grid=(None,))):
        said = "\n".join(_learn_lines(result, None))
        assert result.model_digest is None and "window units had their text (0.0%)" in said and "warning" not in said
    # A learning kept before the count says nothing of it.
    assert "text columns" not in "\n".join(_learn_lines(attrs.evolve(result, text_units=None), None))


@given(windows, st.randoms(use_true_random=False))
@settings(max_examples=100, deadline=None)
def test_a_resources_aggregates_do_not_depend_on_the_order_of_its_units(window: list[FeatureInput], rnd) -> None:  # type: ignore[no-untyped-def]
    shuffled = list(window)
    rnd.shuffle(shuffled)
    aggregate = [
        FEATURE_NAMES.index(n)
        for n in ("resource_units", "resource_best_bm25_relative", "resource_best_dense", "resource_best_by_bm25")
    ]
    before = {
        id(c): [r[i] for i in aggregate] for c, r in zip(window, window_features("wing lift", window), strict=True)
    }
    after = {
        id(c): [r[i] for i in aggregate] for c, r in zip(shuffled, window_features("wing lift", shuffled), strict=True)
    }
    assert all(_same([before[k]], [after[k]]) for k in before)


@given(st.lists(st.sampled_from("abcdefghij"), min_size=1, max_size=60), st.integers(2, 10))
def test_folds_partition_the_cases_and_never_split_a_group(groups: list[str], k: int) -> None:
    folds = fold_groups(groups, k)
    assert len(folds) == k
    assert sorted(i for f in folds for i in f) == list(range(len(groups)))
    fold_of = {i: n for n, f in enumerate(folds) for i in f}
    assert all(
        fold_of[i] == fold_of[j] for i in range(len(groups)) for j in range(len(groups)) if groups[i] == groups[j]
    )
    assert fold_groups(groups, k) == folds  # the seed is fixed


@given(st.floats(-1000, 1000, allow_nan=False), st.floats(-1000, 1000, allow_nan=False))
def test_squashing_keeps_the_order_within_zero_and_one(a: float, b: float) -> None:
    assert 0.0 <= squashed(a) <= 1.0
    if a < b:
        assert squashed(a) <= squashed(b)


def test_a_model_round_trips_and_a_corrupt_or_foreign_one_is_refused_with_its_reason() -> None:
    model = LearnedModel(trainer="t", model="tree text")
    data = model.to_bytes()
    assert read_model(data, model.digest) == model
    with pytest.raises(LearnedModelRefused) as caught:
        read_model(data[:-3], model.digest)
    assert caught.value.code == "learned_model_refused" and caught.value.details["reason"] == "digest_mismatch"
    with pytest.raises(LearnedModelRefused) as caught:
        read_model(b"\x00not json")
    assert caught.value.details["reason"] == "unreadable"
    foreign = attrs.evolve(model, feature_revision="ltr-features-v0")
    with pytest.raises(LearnedModelRefused, match="trained on features 'ltr-features-v0'") as caught:
        read_model(foreign.to_bytes(), foreign.digest)
    assert caught.value.details["reason"] == "feature_revision"
    # Models of the columns before the text ones (ltr-features-v2) and before the cluster ones
    # (ltr-features-v3) are of another revision now.
    for revision, columns in (("ltr-features-v2", FEATURE_NAMES[:-6]), ("ltr-features-v3", FEATURE_NAMES[:-3])):
        before = attrs.evolve(model, feature_revision=revision, feature_names=columns)
        with pytest.raises(LearnedModelRefused, match=f"trained on features '{revision}'"):
            read_model(before.to_bytes(), before.digest)
    renamed = json.loads(data)
    renamed["feature_names"] = list(reversed(renamed["feature_names"]))
    with pytest.raises(LearnedModelRefused):
        read_model(json.dumps(renamed).encode())


# -- the guard, with a transparent learner ----------------------------------------------------
SIGNAL = FEATURE_NAMES.index("unit_tokens")


def _fit_signal(data: RankingData) -> FittedModel:
    """A 'model' that scores by one feature, with the sign that fits the training labels."""
    pos = [r[SIGNAL] for r, y in zip(data.rows, data.labels, strict=True) if y > 0]
    neg = [r[SIGNAL] for r, y in zip(data.rows, data.labels, strict=True) if y == 0]
    sign = 1.0 if pos and neg and sum(pos) / len(pos) >= sum(neg) / len(neg) else -1.0
    return FittedModel(
        json.dumps({"sign": sign, "rows": len(data.rows)}),
        importances_of(FEATURE_NAMES, [1.0 if i == SIGNAL else 0.0 for i in range(len(FEATURE_NAMES))]),
    )


def _load_signal(model: str) -> object:
    sign = json.loads(model)["sign"]
    return lambda rows: [sign * r[SIGNAL] for r in rows]


def _case(n: int, relevant_tokens: int, group: str | None = None, at: int = 9) -> LearningCase:
    """Ten units of ten resources in fused order; the relevant one is at ``at`` with ``relevant_tokens``."""
    window = tuple(
        FeatureInput(
            f"r{n}-{i}.md#0",
            f"r{n}-{i}.md",
            (),
            relevant_tokens if i == at else 100,
            n,
            None,
            None,
            i + 1,
            10.0 - i,
            i + 1,
            i + 1,
            0.5,
            1.0 / (60 + i),
        )
        for i in range(10)
    )
    return LearningCase(
        f"case-{n:03d}", group or f"case-{n:03d}", "wing", window, (), Judgments.of(resources={f"r{n}-{at}.md": 2})
    )


def _current(query: str, window: Sequence[FeatureInput]) -> list[float]:
    return [-float(i) for i in range(len(window))]  # the fused order


def _learn(cases: Sequence[LearningCase], **kwargs: object) -> tuple[object, object]:
    return learn(
        cases,
        fit=lambda data, setting: _fit_signal(data),
        load=_load_signal,
        current=_current,
        current_revision="fused",  # type: ignore[arg-type]
        trainer=lambda setting: f"signal({setting.label})",
        learn_id="L1",
        project_id="p",
        created_at="now",
        resamples=500,
        **kwargs,
    )


def test_a_ranker_that_generalises_is_proposed_with_its_gain_and_importances() -> None:
    result, model = _learn([_case(n, 900) for n in range(30)])
    assert result.proposed and result.gain_low > 0 and result.verdict.startswith("proposed:")  # type: ignore[attr-defined]
    assert result.cross_validated.ndcg_at_10 == pytest.approx(1.0)  # type: ignore[attr-defined]
    assert result.gain == pytest.approx(result.cross_validated.ndcg_at_10 - result.current_metrics.ndcg_at_10)  # type: ignore[attr-defined]
    assert result.importances[0].feature == FEATURE_NAMES[SIGNAL] and result.importances[0].share == 1.0  # type: ignore[attr-defined]
    assert isinstance(model, LearnedModel) and result.model_digest == model.digest  # type: ignore[attr-defined]
    assert model.feature_revision == FEATURE_REVISION and json.loads(model.model)["rows"] == 300
    # Every setting of the signal learner ranks alike: each choice is the first model (the
    # current ranking loses), and the model's trainer names that setting.
    first = setting_label(SETTINGS[1])
    assert result.fold_settings == (first,) * 5 and result.chosen_setting == first  # type: ignore[attr-defined]
    assert result.settings == tuple(setting_label(s) for s in SETTINGS) and model.trainer == f"signal({first})"  # type: ignore[attr-defined]


def test_a_ranker_that_does_not_generalise_is_not_proposed_and_says_so() -> None:
    # Half the cases reward long units that the fused order put last, half short ones it put
    # first: whatever sign a fold learns loses on one half what it gains on the other. With a
    # model as the only setting, its model is kept for inspection, never applied without a proposal.
    cases = [_case(n, 900) if n % 2 else _case(n, 10, at=0) for n in range(30)]
    result, model = _learn(cases, settings=(LearnerSetting(),))
    assert not result.proposed and result.verdict.startswith("no proposal: the interval")  # type: ignore[attr-defined]
    assert model is not None and result.fold_settings == (LearnerSetting().label,) * 5  # type: ignore[attr-defined]
    # 30 judged cases: the verdict says that declining is usual with so few, and how many helped elsewhere.
    assert result.verdict.endswith(few_cases_note(30)) and "with 30 judged cases that is usual" in result.verdict  # type: ignore[attr-defined]


def test_no_fit_of_an_outer_fold_ever_sees_its_held_out_group_not_even_an_inner_one() -> None:
    seen: list[tuple[set[str], LearnerSetting]] = []
    cases = [_case(n, 900, group=f"conv{n % 4}") for n in range(24)]
    start = FEATURE_NAMES.index("unit_start")  # the case's number, in every row of the case
    group_of = {math.log1p(n): c.group for n, c in enumerate(cases)}
    grid = (None, LearnerSetting(), LearnerSetting(rounds=50))

    def fit(data: RankingData, setting: LearnerSetting) -> FittedModel:
        seen.append(({group_of[r[start]] for r in data.rows}, setting))
        return _fit_signal(data)

    result, _ = learn(
        cases,
        fit=fit,
        load=_load_signal,
        current=_current,
        current_revision="fused",
        trainer=lambda s: "s",
        learn_id="L",
        project_id="p",
        created_at="now",
        folds=4,
        settings=grid,
        resamples=200,
    )
    # Per outer fold: two settings x three inner folds, then the chosen setting on the training
    # folds; then two settings x four folds over all cases, then the final model.
    block = 2 * 3 + 1
    assert result.groups == 4 and len(seen) == 4 * block + 2 * 4 + 1  # type: ignore[attr-defined]
    held_out = set()
    for f in range(4):
        training = seen[f * block + block - 1][0]
        assert len(training) == 3  # the outer fold's model: every group but the held-out one
        held_out |= set(group_of.values()) - training
        for groups, _ in seen[f * block : f * block + block - 1]:
            assert len(groups) == 2 and groups < training  # an inner fit: never the held-out group
    assert held_out == set(group_of.values())  # each group was held out once
    assert sorted(len(g) for g, _ in seen[4 * block : -1]) == [3] * 8 and seen[-1][0] == set(group_of.values())
    assert result.fold_settings == (LearnerSetting().label,) * 4  # type: ignore[attr-defined]


def test_the_current_ranking_is_kept_when_no_setting_beats_it_and_nothing_is_proposed() -> None:
    position = FEATURE_NAMES.index("window_position")
    fitted: list[LearnerSetting] = []

    def fit(data: RankingData, setting: LearnerSetting) -> FittedModel:
        fitted.append(setting)
        return FittedModel("reversed", ())

    cases = [_case(n, 900, at=n % 3) for n in range(30)]  # the relevant unit near the top of the fused order
    result, model = learn(cases, fit=fit, load=lambda _: lambda rows: [r[position] for r in rows],  # worst first
                          current=_current, current_revision="fused", trainer=lambda s: "t", learn_id="L",
                          project_id="p", created_at="now", resamples=200)  # fmt: skip
    assert model is None and not result.proposed and result.model_digest is None
    assert result.chosen_setting == KEEP_CURRENT_LABEL and result.fold_settings == (KEEP_CURRENT_LABEL,) * 5
    assert "keeps the current ranking" in result.verdict and result.verdict.startswith("no proposal")
    assert result.verdict.endswith(few_cases_note(30))
    assert result.gain == 0.0 and result.cross_validated == result.current_metrics  # every fold kept it
    assert fitted and set(fitted) == {s for s in SETTINGS if s is not None}  # every setting was tried


def test_only_short_labels_keep_their_terms_never_a_query() -> None:
    # A daemon featuring windows for its lifetime keeps the terms of the units' labels (headings,
    # resource ids), which recur; a query (up to 2,000 characters) would fill the cache with text.
    from memory_core.evaluation import text_features

    window = list(_case(1, 900).window)
    labels = {" ".join(c.heading_path) for c in window} | {c.resource_id.replace("_", " ").replace("-", " ")
                                                            for c in window}  # fmt: skip
    text_features._kept_terms.cache_clear()
    assert window_features("which wing flap adds lift " * 70, window)  # a 1,750-character query
    assert text_features._kept_terms.cache_info().currsize == len(labels)  # the labels, not the query
    long_label = "Wing " * 60
    assert text_features.label_terms(long_label) == frozenset({"wing"})
    assert text_features._kept_terms.cache_info().currsize == len(labels)


def test_the_few_cases_note_names_the_count_below_the_usual_need_and_is_silent_from_it() -> None:
    assert few_cases_note(CASES_USUALLY_NEEDED) == "" and few_cases_note(5_000) == ""
    note = few_cases_note(CASES_USUALLY_NEEDED - 1)
    assert note.startswith(f"; with {CASES_USUALLY_NEEDED - 1} judged cases that is usual")
    assert "about 200 (conversations)" in note and f"{CASES_USUALLY_NEEDED} (scientific claims)" in note


def test_a_tie_between_settings_keeps_the_earlier_whatever_order_its_cases_sum_in() -> None:
    # The model's grades are the current ranking's with two cases swapped: a tie, so the current
    # ranking (the earlier setting) is kept. Summed left to right, the model's came out 4e-16
    # higher (Python 3.11; 3.12's compensated sum gives a tie), and the model was chosen.
    now_values = [0.238, 0.544, 0.37, 0.604, 0.626, 0.066]
    model_values = [0.238, 0.544, 0.37, 0.066, 0.626, 0.604]

    class Swapped:
        def grades(self, cases: Any, train: Any, part: Sequence[int], setting: Any) -> list[tuple[float, ...]]:
            return [(model_values[i], 0.0, 0.0) for i in part]

    cases = [_case(n, 900) for n in range(6)]
    now = [(v, 0.0, 0.0) for v in now_values]
    best, means = choose_setting(cases, range(6), now, (None, LearnerSetting()), Swapped(), 3)  # type: ignore[arg-type]
    assert best == 0 and means[0] == means[1]


def test_group_by_a_separator_names_a_group_for_every_case_even_one_with_nothing_named() -> None:
    group = group_by_separator("-")
    judged = _case(26, 900)  # judges r26-9.md
    assert group(judged) == "r26"
    unjudged = attrs.evolve(judged, judgments=Judgments.of())
    assert group(unjudged) == "r26"  # the first resource its Run ranked
    empty = attrs.evolve(unjudged, window=(), tail=())  # a reviewed case with no judgments of an empty Run
    assert group(empty) == empty.case_id == "case-026"
    assert group_by_separator("/")(judged) == "r26-9.md"  # no separator: the whole id


def test_too_few_cases_or_groups_propose_nothing_and_say_why() -> None:
    result, model = _learn([_case(n, 900) for n in range(4)])
    assert not result.proposed and model is None and "too few judged cases" in result.verdict  # type: ignore[attr-defined]
    assert result.verdict.endswith(few_cases_note(result.cases))  # type: ignore[attr-defined]
    grouped = [_case(n, 900, group=f"g{n % 2}") for n in range(20)]
    result, model = _learn(grouped)
    assert model is None and "in 2 group(s)" in result.verdict  # type: ignore[attr-defined]


def test_the_learned_reranker_scores_live_candidates_in_zero_one_and_names_its_model() -> None:
    window = _case(1, 900).window
    reranker = LearnedReranker("ab" * 32, lambda rows: [r[SIGNAL] / 1000 for r in rows])
    scores = reranker.rerank("wing", [_candidate(c) for c in window])
    assert all(0 < s < 1 for s in scores) and scores.index(max(scores)) == 9
    assert [i.unit_id for i in reordered(_case(1, 900), scores)][0] == window[9].unit_id
    assert reranker.revision == f"learned-ranker(model={'ab' * 6},features={FEATURE_REVISION})"


def _candidate(c: FeatureInput) -> Candidate:
    start = c.start if c.start is not None else 0  # a live unit always has its span
    unit = Unit(
        unit_id=c.unit_id,
        resource_id=c.resource_id,
        ordinal=0,
        start=start,
        end=start + 1,
        heading_path=c.heading_path,
        text=c.text,
        token_count=c.token_count,
        unit_hash="h",
        resource_hash=c.resource_hash,
    )
    return Candidate(unit, **stages_of(c))


def _same(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all((math.isnan(u) and math.isnan(v)) or u == v for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True)
    )


@st.composite
def judged_cases(draw: st.DrawFn) -> list[LearningCase]:
    """Cases of random windows, each with at least one relevant resource among its units."""
    cases = []
    for n in range(draw(st.integers(0, 14))):
        window = tuple(
            attrs.evolve(c, unit_id=f"{c.resource_id}#{i}")
            for i, c in enumerate(draw(st.lists(feature_inputs(), min_size=1, max_size=8)))
        )
        relevant = {c.resource_id: draw(st.integers(1, 3)) for c in window if draw(st.booleans())}
        relevant = relevant or {window[0].resource_id: 1}
        group = draw(st.sampled_from(["g1", "g2", "g3", f"own{n}"]))
        cases.append(LearningCase(f"c{n:02d}", group, "wing lift", window, (), Judgments.of(resources=relevant)))
    return cases


@given(judged_cases(), st.integers(2, 5))
@settings(max_examples=60, deadline=None)
def test_a_model_that_ranks_as_the_current_ranking_gains_nothing_and_is_never_proposed(
    cases: list[LearningCase], folds: int
) -> None:
    position = FEATURE_NAMES.index("window_position")

    def fit(data: RankingData, setting: LearnerSetting) -> FittedModel:
        return FittedModel("fused", importances_of(FEATURE_NAMES, [0.0] * len(FEATURE_NAMES)))

    result, model = learn(
        cases,
        fit=fit,
        load=lambda _: lambda rows: [-r[position] for r in rows],
        current=_current,
        current_revision="fused",
        trainer=lambda s: "t",
        learn_id="L",
        project_id="p",
        created_at="now",
        folds=folds,
        resamples=100,
    )
    assert not result.proposed and result.cases == len(cases) and result.excluded_cases == 0
    if result.gain is None:
        assert result.verdict.startswith("too few judged cases") and model is None
    else:
        # Every setting ties the current ranking, and a tie keeps it: no model at all.
        assert model is None and result.chosen_setting == KEEP_CURRENT_LABEL
        assert result.gain == 0.0 and result.gain_low == 0.0 and result.gain_high == 0.0
        assert result.cross_validated == result.current_metrics and result.verdict.startswith("no proposal")
        assert result.groups == len({c.group for c in cases}) >= folds and result.training_rows == sum(
            len(c.window) for c in cases
        )


def test_a_learning_over_the_row_bound_is_refused_before_any_training(monkeypatch: pytest.MonkeyPatch) -> None:
    import memory_core.evaluation.learning as learning
    from memory_core.domain.errors import InvalidRequest

    monkeypatch.setattr(learning, "MAX_TRAINING_ROWS", 99)
    fitted: list[int] = []

    def fit(data: RankingData, setting: LearnerSetting) -> FittedModel:
        fitted.append(len(data.rows))
        return _fit_signal(data)

    with pytest.raises(InvalidRequest, match="more than the 99 one training takes"):
        learn([_case(n, 900) for n in range(10)], fit=fit, load=_load_signal, current=_current,  # type: ignore[arg-type]
              current_revision="c", trainer=lambda s: "t", learn_id="L", project_id="p", created_at="now")  # fmt: skip
    assert fitted == []
    result, _ = learn([_case(n, 900) for n in range(9)], fit=fit, load=_load_signal, current=_current,  # type: ignore[arg-type]
                      current_revision="c", trainer=lambda s: "t", learn_id="L", project_id="p", created_at="now",
                      resamples=50)  # fmt: skip
    assert result.training_rows == 90 and fitted


def test_the_grids_training_work_is_what_the_training_does_and_is_bounded_once_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import memory_core.evaluation.learning as learning
    from memory_core.domain.errors import InvalidRequest

    # Cases of uneven windows in groups of two, so folds differ in rows; every setting has the same
    # rounds, so the bound's "chosen setting at the grid's most rounds" is exact and the count must
    # equal the rows x rounds of the fits the learning makes.
    cases = [attrs.evolve(_case(n, 900, group=f"g{n // 2}"), window=_case(n, 900).window[: 4 + n % 7])
             for n in range(24)]  # fmt: skip
    unjudged = [attrs.evolve(_case(100 + n, 900), judgments=Judgments.of()) for n in range(5)]
    grid = (LearnerSetting(rounds=10), LearnerSetting(rounds=10, leaves=3))
    done: list[int] = []

    def fit(data: RankingData, setting: LearnerSetting) -> FittedModel:
        done.append(len(data.rows) * setting.rounds)
        return _fit_signal(data)

    def run(among: list[LearningCase] = cases, setting_grid: object = grid, **kwargs: object) -> object:
        return learn(among + unjudged, fit=fit, load=_load_signal, current=_current,  # type: ignore[arg-type]
                     current_revision="c", trainer=lambda s: "t", learn_id="L", project_id="p", created_at="now",
                     settings=setting_grid, resamples=50, **kwargs)  # fmt: skip

    work = training_work(cases, grid, 5)
    run()
    assert sum(done) == work  # the cases without a judgment are not trained on, nor counted
    # The plan's edges, where its rule decides what is fit: a single setting leaves nothing for the
    # inner folds to choose (no inner fits); 3 groups in 3 folds leave each outer fold's training
    # cases 2 groups, so its inner cross-validation has 2 folds, not 3.
    done.clear()
    run(setting_grid=grid[:1])
    assert sum(done) == training_work(cases, grid[:1], 5) and len(done) == 5 + 1
    threes = [attrs.evolve(c, group=f"t{n // 8}") for n, c in enumerate(cases)]
    done.clear()
    run(threes, folds=3)
    assert sum(done) == training_work(threes, grid, 3) and len(done) == len(grid) * (3 * 2 + 3) + 3 + 1
    # Fewer rows than "every fit at all rows": inner fits see (k - 1) / k of a fold's training rows.
    rows = sum(len(c.window) for c in cases)
    assert work < rows * 20 * (5 * 3 + 5 + 6)
    assert training_work(cases, (None,), 5) == 0 and training_work(cases, grid[:1], 5) < work
    assert training_work(cases, grid, 4) < work < training_work(cases, grid + (LearnerSetting(rounds=30),), 5)
    # Over the bound: refused before any fit, whatever the unjudged cases hold.
    done.clear()
    monkeypatch.setattr(learning, "MAX_TRAINING_WORK", work - 1)
    with pytest.raises(InvalidRequest, match="row-rounds of training") as caught:
        run()
    assert caught.value.details["work"] == work and caught.value.details["rows"] == rows and done == []
    run(folds=4)  # fewer folds, less work: within the bound
    assert sum(done) == training_work(cases, grid, 4)


def test_a_learning_computes_each_cases_features_once_and_learns_what_it_did_without_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import memory_core.evaluation.learning as learning

    cases = [_case(n, 900 if n % 3 else 100) for n in range(20)]
    unjudged = [attrs.evolve(_case(100 + n, 900), judgments=Judgments.of()) for n in range(3)]
    grid = (None, LearnerSetting(rounds=10), LearnerSetting(rounds=20))
    fits: list[RankingData] = []

    def fit(data: RankingData, setting: LearnerSetting) -> FittedModel:
        fits.append(data)
        return _fit_signal(data)

    computed: list[str] = []
    real = learning.case_rows

    def counted(case: LearningCase) -> tuple[tuple[float, ...], ...]:
        computed.append(case.case_id)
        return real(case)

    monkeypatch.setattr(learning, "case_rows", counted)
    result, model = learn(cases + unjudged, fit=fit, load=_load_signal, current=_current,  # type: ignore[arg-type]
                          current_revision="c", trainer=lambda s: "t", learn_id="L", project_id="p", created_at="now",
                          settings=grid, resamples=50)  # fmt: skip
    assert len(fits) > len(cases) and sorted(computed) == sorted(c.case_id for c in cases)
    # Every fit was given exactly the rows ``window_features`` computes for its cases, each
    # group beside that same case's labels (rows paired with another case's labels would fail).
    labelled = {
        (tuple(tuple(r) for r in window_features(c.query, c.window)), ranking_data([c], MetricLevel.RESOURCE).labels)
        for c in cases
    }
    for data in fits:
        start = 0
        for size in data.groups:
            assert (data.rows[start : start + size], data.labels[start : start + size]) in labelled
            start += size
    assert model is not None and result.model_digest == model.digest

    # The same learning without the cache (every fit computes its rows anew) learns the same.
    monkeypatch.setattr(learning.Trainer, "rows", lambda self, case: real(case))
    uncached, again = learn(cases + unjudged, fit=fit, load=_load_signal, current=_current,  # type: ignore[arg-type]
                            current_revision="c", trainer=lambda s: "t", learn_id="L", project_id="p",
                            created_at="now", settings=grid, resamples=50)  # fmt: skip
    assert again is not None and again.digest == model.digest
    assert attrs.evolve(uncached, seconds=result.seconds) == result  # all but the time it took


def test_the_row_cache_never_gives_a_case_another_cases_rows() -> None:
    from memory_core.evaluation.learning import Trainer, case_rows

    trainer = Trainer(_fit_signal, _load_signal)  # type: ignore[arg-type]
    # Cases made and dropped one after another: were a dropped case freed, the next would often get
    # its id (CPython reuses the memory), and a cache keyed by id alone would hand it the old rows.
    # Windows of different sizes and queries of different terms make every case's rows its own.
    for n in range(60):
        case = attrs.evolve(_case(n, 900), query=f"wing lift term{n}", window=_case(n, 900).window[: 1 + n % 9])
        assert trainer.rows(case) == case_rows(case)
        del case


def test_held_out_cases_are_graded_by_their_own_scores_when_scored_in_one_call() -> None:
    from memory_core.evaluation.learning import Trainer, graded
    from memory_core.evaluation.metrics import MetricLevel

    # Windows of different sizes, the relevant unit at different places: a score given to the
    # wrong case's unit would change some grade.
    whole = [_case(n, 900 if n % 2 else 50, at=n % 4) for n in range(12)]
    cases = [attrs.evolve(c, window=c.window[: 4 + n % 5]) for n, c in enumerate(whole)]
    calls: list[int] = []

    def load(model: str) -> object:
        scorer = _load_signal(model)

        def score(rows: Sequence[Sequence[float]]) -> list[float]:
            calls.append(len(rows))
            return scorer(rows)  # type: ignore[operator, no-any-return]

        return score

    trainer = Trainer(lambda data, setting: _fit_signal(data), load)  # type: ignore[arg-type]
    test = [1, 4, 6, 7, 10]
    got = trainer.grades(cases, [0, 2, 3, 5, 8, 9, 11], test, LearnerSetting())
    scorer = _load_signal(_fit_signal(trainer.data([cases[i] for i in (0, 2, 3, 5, 8, 9, 11)])).model)
    expected = [graded(reordered(cases[i], scorer(window_features(cases[i].query, cases[i].window))),  # type: ignore[operator]
                       cases[i].judgments, MetricLevel.RESOURCE) for i in test]  # fmt: skip
    assert got == expected and calls == [sum(len(cases[i].window) for i in test)]
    assert len({g[0] for g in got}) > 1  # not all alike: the check can tell cases apart
