"""The one check of a ranking settings document (``ranking_from_settings``, issue 30 item 8), as
properties: a name holding a control character or a bidirectional control is refused, every
other short name is kept as given; every numeric setting is kept only within its range (the
floor within the scores the reranker gives), anything else is ``InvalidRequest`` naming the key;
no document raises anything else."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.text_rules import BIDI_CONTROLS, label_problem
from memory_core.retrieval.fusion import fusion_from_settings
from memory_core.retrieval.profile import (
    MAX_BUDGET,
    MAX_DEPTH,
    MAX_NAME_CHARS,
    MAX_RERANK_TOKENS,
    MIN_RERANK_TOKENS,
    PROFILE_KEYS,
    SETTING_KEYS,
    ProjectRanking,
    RankingProfile,
    ranking_from_settings,
)
from memory_core.retrieval.rerankers import MAX_EXACT_BONUS, ConvexFusionReranker

PROPERTIES = settings(max_examples=300, deadline=None, derandomize=True)
RERANKER = ConvexFusionReranker()


def parse(document: object) -> ProjectRanking:
    """As a project's profile is checked (``ProjectProfiles.ranking_of``) with the default reranker."""
    return ranking_from_settings(document, RankingProfile(), lambda **f: fusion_from_settings(f, RERANKER).score_range)


# Inclusive ranges of every numeric setting; the floor's upper end is 1 + exact_bonus (below).
RANGES: dict[str, tuple[float, float]] = {
    "lexical_depth": (1, MAX_DEPTH), "dense_depth": (1, MAX_DEPTH), "rrf_k": (1, 10_000),
    "rerank_depth": (0, MAX_DEPTH), "token_budget": (1, MAX_BUDGET), "max_fragments": (1, MAX_DEPTH),
    "per_resource_limit": (1, MAX_DEPTH), "alpha": (0.0, 1.0), "cosine_floor": (-1.0, 1.0),
    "exact_bonus": (0.0, MAX_EXACT_BONUS), "resource_weight": (0.0, 1.0),
    "rerank_batch": (1, MAX_DEPTH), "rerank_max_tokens": (MIN_RERANK_TOKENS, MAX_RERANK_TOKENS),
}  # fmt: skip
INTEGERS = {"lexical_depth", "dense_depth", "rrf_k", "rerank_depth", "token_budget", "max_fragments",
            "per_resource_limit", "rerank_batch", "rerank_max_tokens"}  # fmt: skip
NULLABLE = {"rerank_batch", "rerank_max_tokens"}

refused_char = st.sampled_from(sorted(BIDI_CONTROLS)) | st.characters(categories=["Cc", "Zl", "Zp"])
safe_char = st.characters(categories=["L", "N", "P", "S", "Zs"], exclude_characters="@")
safe_text = st.text(safe_char, max_size=MAX_NAME_CHARS)
numbers = (
    st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(
        [1e300, -1e300, 1e-300, 0, 0.0, -0.0, 1, 2, 7, 8, 1000, 1001, 8192, 8193, 10_000, 10_001, 100_000, 100_001]
    )
)


@PROPERTIES
@given(safe_text, refused_char, st.data())
def test_a_name_with_a_control_or_bidi_character_is_refused(name: str, bad: str, data: st.DataObject) -> None:
    at = data.draw(st.integers(0, len(name)))
    hostile = (name[:at] + bad + name[at:])[:MAX_NAME_CHARS]
    if bad not in hostile:  # cut off by the length limit: put it last
        hostile = hostile[:-1] + bad
    with pytest.raises(InvalidRequest) as refused:
        parse({"name": hostile})
    assert refused.value.details["key"] == "name"
    assert bad not in refused.value.message  # the message shows it escaped, never raw


@PROPERTIES
@given(safe_text.filter(lambda s: s.strip() != ""))
def test_every_other_short_name_is_kept_as_given(name: str) -> None:
    assert label_problem(name) is None
    assert parse({"name": name}).profile.name == name


def test_the_refused_characters_are_named_in_the_message() -> None:
    for name, shown in (("gate\x00", "U+0000"), ("abc\u202etxt", "U+202E"), ("a\u2066b", "U+2066"),
                        ("line\nbreak", "U+000A"), ("\x1b[31mred", "U+001B"), ("a\u2028b", "U+2028")):  # fmt: skip
        with pytest.raises(InvalidRequest, match=f"name holds a .*{re.escape(shown)}"):
            parse({"name": name})


def _within(key: str, value: Any, exact_bonus: float) -> bool:
    if key in NULLABLE and value is None:
        return True  # the cross-encoder's own batch or length
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    if key in INTEGERS and not isinstance(value, int):
        return False
    lo, hi = (0.0, 1.0 + exact_bonus) if key == "min_final_score" else RANGES[key]
    if key == "cosine_floor":
        return lo <= value < hi  # 1 would divide by zero: the rescaling is from [floor, 1]
    return lo <= value <= hi


NOT_NUMERIC = ("name", "normalisation", "fusion", "learned_model")


@PROPERTIES
@given(st.sampled_from([k for k in SETTING_KEYS if k not in NOT_NUMERIC]), numbers,
       st.floats(0.0, MAX_EXACT_BONUS))  # fmt: skip
def test_a_numeric_setting_is_kept_only_within_its_range(key: str, value: Any, exact_bonus: float) -> None:
    document = {key: value} if key == "exact_bonus" else {key: value, "exact_bonus": exact_bonus}
    if _within(key, value, exact_bonus):
        ranking = parse(document)
        kept = getattr(ranking.profile, key) if key in PROFILE_KEYS else ranking.fusion[key]
        assert kept == value
    else:
        with pytest.raises(InvalidRequest) as refused:
            parse(document)
        assert key in refused.value.message


@PROPERTIES
@given(st.floats(0.0, MAX_EXACT_BONUS), st.floats(0.0, 1.0))
def test_the_floor_is_bounded_by_the_exact_bonus_it_is_set_with(exact_bonus: float, over: float) -> None:
    """The floor's top is the best score the reranker can give, with the bonus of the same document."""
    top = 1.0 + exact_bonus
    assert parse({"exact_bonus": exact_bonus, "min_final_score": top}).profile.min_final_score == top
    with pytest.raises(InvalidRequest, match="min_final_score must be within") as refused:
        parse({"exact_bonus": exact_bonus, "min_final_score": math.nextafter(top, math.inf) + over})
    assert refused.value.details["key"] == "min_final_score"


@pytest.mark.parametrize(
    ("settings_", "message"),
    [
        ({"min_final_score": 1e300}, r"min_final_score must be within \[0, 2\].*would return nothing"),
        ({"min_final_score": -0.5}, r"min_final_score must be within \[0, 2\]"),
        ({"min_final_score": 2.5, "exact_bonus": 1.0}, r"min_final_score must be within \[0, 2\]"),
        ({"exact_bonus": 1e300}, r"exact_bonus must be within \[0, 10\]"),
        ({"exact_bonus": -1}, r"exact_bonus must be within \[0, 10\]"),
        ({"rrf_k": 10**12}, r"rrf_k must be within"),
        ({"token_budget": 0}, r"token_budget must be within"),
    ],
)
def test_out_of_range_settings_name_their_key(settings_: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        parse(settings_)
    assert parse({"min_final_score": 1.5}).profile.min_final_score == 1.5  # only exact matches pass it


def test_without_a_fusion_reranker_the_floor_keeps_the_profiles_own_bound() -> None:
    """A cross-encoder scores in logits: no range to ask, the floor stays within ±MAX_SCORE_FLOOR."""
    assert ranking_from_settings({"min_final_score": -7.5}).profile.min_final_score == -7.5
    with pytest.raises(InvalidRequest, match="min_final_score must be within"):
        ranking_from_settings({"min_final_score": 1e300})


json_values = st.recursive(
    st.none() | st.booleans() | numbers | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@PROPERTIES
@given(st.dictionaries(st.sampled_from([*SETTING_KEYS, "other"]), json_values, max_size=6) | json_values)
def test_any_document_is_a_ranking_or_invalid_request(document: Any) -> None:
    try:
        ranking = parse(document)
    except InvalidRequest:
        return
    assert set(document) <= set(SETTING_KEYS)
    for key in PROFILE_KEYS:
        top = fusion_from_settings(ranking.fusion, RERANKER).score_range[1]  # 1 + the fusion's exact bonus
        assert _within(key, getattr(ranking.profile, key), top - 1.0)
    assert label_problem(ranking.profile.name) is None
