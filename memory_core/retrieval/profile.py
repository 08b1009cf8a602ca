"""The ranking profile: every knob of the pipeline, versioned by a hash of its settings.

A project may have its own (``ProjectRanking``: the profile and the default reranker's fusion
weights), set from a file or from a tuning (issue 18); ``ranking_from_settings`` is the one
place a settings document is checked: unknown keys, wrong types and out-of-range values are
``InvalidRequest`` naming the key, before anything is stored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from memory_core.domain.canonical import hash_json
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.text_rules import label_problem
from memory_core.retrieval.fusion import FUSION_PARAMETERS, FUSION_SETTING

MAX_QUERY_CHARS = 2_000
MIN_BUDGET = 1
MAX_BUDGET = 100_000
MAX_DEPTH = 1_000  # lexical, dense and rerank depths: a bound on the work one activation does
# No reranker scores beyond it (the fusion reranker within [0, 1 + exact_bonus], a cross-encoder's
# logits within tens): a floor past it would only ever empty the answer. A reranker that states its
# range bounds the floor more tightly (``ranking_from_settings``).
MAX_SCORE_FLOOR = 1_000.0


def _within(lo: float, hi: float, *, optional: bool = False) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if optional and value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
            also = " or null" if optional else ""
            raise InvalidRequest(f"{attribute.name} must be within [{lo:g}, {hi:g}]{also}, got {value!r}",
                                 key=attribute.name)  # fmt: skip

    return check


# A cross-encoder's maximum (query, text) pair length, in tokens: 8 leaves room for the special
# tokens and a word of each side; 8192 is beyond any BERT-family position table. A setting above
# the chosen model's own maximum is that maximum (``ModelRegistry.reranker_for``), so a profile
# stays valid across the project's choice of cross-encoder.
MIN_RERANK_TOKENS, MAX_RERANK_TOKENS = 8, 8_192


# BM25's k1 and b, the one place every lexical index takes them from: the conventional values
# (Lucene's BM25Similarity, Elasticsearch, SQLite FTS5). Against Anserini's 0.9/0.4 they lift the
# lexical list on both collections and the returned order a little (docs/ranking.md).
BM25_K1 = 1.2
BM25_B = 0.75


@attrs.frozen
class RankingProfile:
    name: str = "default"
    lexical_depth: int = attrs.field(default=100, validator=_within(1, MAX_DEPTH))
    dense_depth: int = attrs.field(default=100, validator=_within(1, MAX_DEPTH))
    rrf_k: int = attrs.field(default=60, validator=_within(1, 10_000))
    rerank_depth: int = attrs.field(default=50, validator=_within(0, MAX_DEPTH))
    token_budget: int = attrs.field(default=1_200, validator=_within(MIN_BUDGET, MAX_BUDGET))
    max_fragments: int = attrs.field(default=8, validator=_within(1, MAX_DEPTH))
    per_resource_limit: int = attrs.field(default=2, validator=_within(1, MAX_DEPTH))
    # Final-score floor for selection, on reranked units; the default fusion reranker scores in
    # [0, 1 + exact_bonus].
    min_final_score: float = attrs.field(default=0.0, validator=_within(-MAX_SCORE_FLOOR, MAX_SCORE_FLOOR))
    bm25_k1: float = BM25_K1
    bm25_b: float = BM25_B
    # The cross-encoder a project chose (issue 33): pairs per ONNX Runtime call, and the pair's
    # maximum length in tokens (None: the model's own). Without a cross-encoder neither applies.
    rerank_batch: int | None = attrs.field(default=None, validator=_within(1, MAX_DEPTH, optional=True))
    rerank_max_tokens: int | None = attrs.field(
        default=None, validator=_within(MIN_RERANK_TOKENS, MAX_RERANK_TOKENS, optional=True)
    )

    def settings(self) -> dict[str, Any]:
        """What the revision hashes: every setting that can change a score. The batch cannot (it
        only groups the pairs), and an unset cross-encoder key is left out, so every profile's
        revision is the one it had before these keys existed."""
        out = attrs.asdict(self)
        del out["rerank_batch"]
        if out["rerank_max_tokens"] is None:
            del out["rerank_max_tokens"]
        return out

    @property
    def revision(self) -> str:
        return f"{self.name}@{hash_json(self.settings())[:12]}"


# What a project's own profile may set. BM25's k1 and b are the lexical index's (not per project).
PROFILE_KEYS = (
    "lexical_depth", "dense_depth", "rrf_k", "rerank_depth", "token_budget", "max_fragments",
    "per_resource_limit", "min_final_score", "rerank_batch", "rerank_max_tokens",
)  # fmt: skip
# Keys whose null means "the model's own" (a document may say so explicitly).
_NULLABLE_KEYS = {"rerank_batch", "rerank_max_tokens"}
# The fusion function (``fusion``: a name in ``retrieval.fusion.FUSIONS``) and every parameter a
# registered fusion takes; which ones a given fusion accepts is checked by ``fusion_from_settings``.
FUSION_KEYS = (FUSION_SETTING, *FUSION_PARAMETERS)
# A learned ranking model (issue 32, item 2), named by the SHA-256 of its bytes: it reranks the
# window in place of the fusion (``services/profiles.py`` loads it; the fusion keys still give
# the ranking it falls back to when the model is refused).
LEARNED_MODEL = "learned_model"
SETTING_KEYS = ("name", *PROFILE_KEYS, *FUSION_KEYS, LEARNED_MODEL)
_INTEGER_KEYS = {"lexical_depth", "dense_depth", "rrf_k", "rerank_depth", "token_budget", "max_fragments",
                 "per_resource_limit", "rerank_batch", "rerank_max_tokens"}  # fmt: skip
MAX_NAME_CHARS = 64
_DIGEST = re.compile(r"[0-9a-f]{64}")


@attrs.frozen
class ProjectRanking:
    """How one project ranks: its profile and the fusion settings of the default reranker
    (``fusion`` holds only the keys it sets; an engine with another reranker ignores them)."""

    profile: RankingProfile
    fusion: Mapping[str, Any] = attrs.field(factory=dict)

    def settings(self) -> dict[str, Any]:
        """The document that recreates it (``ranking_from_settings``): only what differs is kept."""
        default = RankingProfile()
        out: dict[str, Any] = {"name": self.profile.name}
        changed = (k for k in PROFILE_KEYS if getattr(self.profile, k) != getattr(default, k))
        out.update({k: getattr(self.profile, k) for k in changed})
        out.update(self.fusion)
        return out


def check_setting_type(key: str, value: Any) -> None:
    """``InvalidRequest`` unless ``value`` has the type setting ``key`` takes (ranges: the values' own checks)."""
    if key == "name":
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_CHARS or "@" in value:
            raise InvalidRequest(f"name must be 1 to {MAX_NAME_CHARS} characters without '@', got {value!r}", key=key)
        # Every revision a Run, a response and the CLI show starts with it.
        problem = label_problem(value)
        if problem is not None:
            raise InvalidRequest(f"name {problem}: got {value!r}", key=key)
    elif key in ("normalisation", FUSION_SETTING):
        if not isinstance(value, str):
            raise InvalidRequest(f"{key} must be a string, got {value!r}", key=key)
    elif key in _NULLABLE_KEYS and value is None:
        return
    elif key in _INTEGER_KEYS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidRequest(f"{key} must be an integer, got {value!r}", key=key)
    elif key == LEARNED_MODEL:
        if not isinstance(value, str) or not _DIGEST.fullmatch(value):
            raise InvalidRequest(f"{key} must be a model's SHA-256 (64 lowercase hex digits), got {value!r}", key=key)
    elif isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRequest(f"{key} must be a finite number, got {value!r}", key=key)


def ranking_from_settings(
    document: object,
    base: RankingProfile | None = None,
    fusion_scores: Callable[..., tuple[float, float]] | None = None,
) -> ProjectRanking:
    """A project's ranking from its settings document (``{"name": ..., "rrf_k": 30, "alpha": 0.5}``;
    keys left out keep ``base``'s values, the engine's profile). ``fusion_scores(**fusion)``
    validates the fusion keys (the reranker's own constructor, so their ranges live with it) and
    gives the range of the scores that reranker gives: a ``min_final_score`` above it would empty
    every answer, below it would be no floor, so either is refused. None: no such reranker (the
    profile's own bounds apply)."""
    if not isinstance(document, Mapping):
        raise InvalidRequest("a ranking profile is a JSON object of settings")
    unknown = sorted(str(k) for k in document if k not in SETTING_KEYS)
    if unknown:
        raise InvalidRequest(
            f"unknown profile setting(s): {', '.join(unknown)}; known: {', '.join(SETTING_KEYS)}", unknown=unknown
        )
    for key, value in document.items():
        check_setting_type(key, value)
    base = base or RankingProfile()
    fusion = {k: document[k] for k in FUSION_KEYS if k in document}
    if fusion_scores is not None:  # before the profile's own, wider bound: this one says more
        lo, hi = fusion_scores(**fusion)
        floor = document.get("min_final_score", base.min_final_score)
        if not lo <= floor <= hi:
            raise InvalidRequest(
                f"min_final_score must be within [{lo:g}, {hi:g}], the scores the reranker gives (a higher "
                f"floor would return nothing), got {floor!r}",
                key="min_final_score",
            )
    profile = attrs.evolve(
        base, name=document.get("name", "project"), **{k: document[k] for k in PROFILE_KEYS if k in document}
    )
    return ProjectRanking(profile, fusion)


# Where a stored profile came from (``StoredProfile.source``).
FROM_FILE, FROM_TUNE, FROM_RESTORE = "file", "tune", "restore"


@attrs.frozen
class StoredProfile:
    """One version of a project's own ranking settings; the highest version is in use."""

    project_id: str
    version: int
    settings: Mapping[str, Any]  # what ``ranking_from_settings`` reads; {} means the engine's defaults
    source: str  # FROM_FILE, "tune:<tune_id>" or "restore:<version>"
    created_at: str
