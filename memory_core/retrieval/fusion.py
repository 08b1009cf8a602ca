"""Fusion functions: how a candidate's lexical and dense evidence become one score (issue 32).

Each fusion is a registered component (``FUSIONS``), named by a ranking profile's ``fusion``
setting, and is itself a ``Reranker``: it scores the rerank window from what the pipeline
recorded of each candidate (BM25 score, stored-vector cosine, exact match, RRF score, resource).
Every one is also a variant of the evaluation reports beside B1-B4 (``benchmarks/dev_collections``).

- ``rrf``: the RRF score the fusion stage computed (Cormack et al. 2009); the window keeps B3's order.
- ``convex_floor``: ``ConvexFusionReranker``, the default until issue 32: BM25 divided by the
  window's best (min-max with BM25's theoretical minimum 0, Bruch et al.'s TM2C2) or min-max,
  cosine rescaled from a floor, ``alpha`` weighting the lexical side.
- ``convex_minmax``: both sides min-max normalised over the window, convex weight ``alpha``
  (Bruch, Gai and Ingber, *An Analysis of Fusion Functions for Hybrid Retrieval*, 2023): the
  afternoon peer's fusion.
- ``dbsf``: distribution-based score fusion: each side normalised from mean - 3 sigma to
  mean + 3 sigma of its scores over the window, clipped to [0, 1] (Mazzeschi 2023, Qdrant's DBSF).

The convex fusions and ``dbsf`` also rank resources (``resource_weight``): a unit's lexical and
dense parts become ``(1 - w) * its own + w * the best of its resource's units in the window``,
so a resource whose other units match lifts each of its units. With ``resource_bm25`` b, the
lexical part becomes ``(1 - b) * its own + b * the unit's resource's whole-text BM25`` (a second,
resource-level lexical list; divided by the window's best, so no list depth enters), for
candidates that carry it. The lexical index has no resource field yet, so no live candidate
carries that score: ``resource_bm25`` is an offline parameter (``OFFLINE``), measured by
``benchmarks/dev_collections.py`` over a whole-resource Lucene index, and no profile may set it
(docs/ranking.md: what it measured and why it is not built into the index). Every part lies in [0, 1], so
the exact identity stage's bonus (1 by default) keeps a named unit on top.

``fusion_from_settings`` is the one place a settings document's fusion keys are checked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol, cast

import attrs

from memory_core.domain.errors import InvalidRequest
from memory_core.retrieval.pipeline import RerankInput

MAX, MINMAX = "max", "minmax"
NORMALISATIONS = (MAX, MINMAX)
# A bonus of 1 already puts every exact match above every other unit; a larger one changes no
# order, a negative one would punish naming the unit.
MAX_EXACT_BONUS = 10.0
SIGMAS = 3.0  # dbsf: the normalised range is mean +- 3 standard deviations
# A parameter only an offline evaluation can use (its evidence is not in the index): no profile key.
OFFLINE = {"offline": True}


class Fusion(Protocol):
    """A registered fusion function: a ``Reranker`` that can say its settings and score range."""

    name: ClassVar[str]

    @property
    def revision(self) -> str: ...

    @property
    def score_range(self) -> tuple[float, float]: ...

    def settings(self) -> dict[str, Any]: ...

    def rerank(self, query: str, candidates: Sequence[RerankInput]) -> list[float]: ...


# -- checks shared by the fusions --------------------------------------------------------------
def _check_weight(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise InvalidRequest(f"{name} must be within [0, 1], got {value!r}", **{name: value})


def _check_bonus(value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= MAX_EXACT_BONUS:
        raise InvalidRequest(f"exact_bonus must be within [0, {MAX_EXACT_BONUS:g}], got {value!r}", exact_bonus=value)


# -- normalisations (each maps present scores into [0, 1]; a side a unit lacks gives 0) ---------
def _scaled(values: Sequence[float | None], lo: float, hi: float) -> list[float]:
    span = hi - lo
    out = []
    for v in values:
        if v is None:
            out.append(0.0)
        else:
            out.append(min(1.0, max(0.0, (v - lo) / span)) if span > 0 else 1.0)
    return out


def divide_by_max(values: Sequence[float | None]) -> list[float]:
    """Min-max with the theoretical minimum 0 (BM25 is never negative): does not depend on how deep the list reaches."""
    present = [v for v in values if v is not None]
    if not present:
        return [0.0] * len(values)
    return _scaled(values, min(0.0, min(present)), max(present))


def min_max(values: Sequence[float | None]) -> list[float]:
    """Min-max over the scores present (Bruch et al.'s MM)."""
    present = [v for v in values if v is not None]
    if not present:
        return [0.0] * len(values)
    return _scaled(values, min(present), max(present))


def three_sigma(values: Sequence[float | None]) -> list[float]:
    """Distribution-based: mean - 3 sigma maps to 0, mean + 3 sigma to 1, clipped."""
    present = [v for v in values if v is not None]
    if not present:
        return [0.0] * len(values)
    mean = math.fsum(present) / len(present)
    sigma = math.sqrt(math.fsum((v - mean) ** 2 for v in present) / len(present))
    return _scaled(values, mean - SIGMAS * sigma, mean + SIGMAS * sigma)


def from_floor(values: Sequence[float | None], floor: float) -> list[float]:
    """A cosine rescaled from ``[floor, 1]`` to ``[0, 1]``, clipped (absolute: no list statistic)."""
    return [0.0 if v is None else min(1.0, max(0.0, (v - floor) / (1.0 - floor))) for v in values]


def with_resource(parts: Sequence[float], resources: Sequence[str], weight: float) -> list[float]:
    """``(1 - weight) * part + weight * the best part among the same resource's units``."""
    if weight == 0.0:
        return list(parts)
    best: dict[str, float] = {}
    for part, resource in zip(parts, resources, strict=True):
        best[resource] = max(best.get(resource, 0.0), part)
    return [(1.0 - weight) * p + weight * best[r] for p, r in zip(parts, resources, strict=True)]


def with_whole_resource(parts: Sequence[float], candidates: Sequence[RerankInput], weight: float) -> list[float]:
    """``(1 - weight) * part + weight * the resource's whole-text BM25 / the window's best``.

    Candidates without a resource score (a lexical index without the resource field) leave the
    parts as they are: the fusion then ranks as it would without it, never on a half-filled side."""
    # Not part of RerankInput: only a live Candidate over an index with the resource field carries
    # it; a stored trace's inputs (tuning, learning, replay) do not record it.
    whole = [getattr(c, "resource_bm25_score", None) for c in candidates]
    if all(v is None for v in whole):
        return list(parts)
    scaled = divide_by_max(whole)
    return [(1.0 - weight) * p + weight * r for p, r in zip(parts, scaled, strict=True)]


def combine(alpha: Any, lexical: Any, dense: Any, bonus: Any) -> Any:
    """The convex fused score; numbers or numpy arrays alike (tuning scores many alphas at once)."""
    return alpha * lexical + (1.0 - alpha) * dense + bonus


def _resources(candidates: Sequence[RerankInput]) -> list[str]:
    return [c.resource_id for c in candidates]


@attrs.frozen
class _Convex:
    """What the convex fusions and dbsf share: ``alpha`` on the lexical side, the exact bonus,
    resource evidence; a subclass says how each side is normalised (``sides``)."""

    alpha: float = 0.5
    exact_bonus: float = 1.0
    resource_weight: float = 0.0
    resource_bm25: float = attrs.field(default=0.0, metadata=OFFLINE)

    def __attrs_post_init__(self) -> None:
        _check_weight("alpha", self.alpha)
        _check_bonus(self.exact_bonus)
        _check_weight("resource_weight", self.resource_weight)
        _check_weight("resource_bm25", self.resource_bm25)

    @property
    def score_range(self) -> tuple[float, float]:
        """Both parts lie in [0, 1] (up to rounding), plus the bonus."""
        return 0.0, 1.0 + self.exact_bonus

    def settings(self) -> dict[str, Any]:
        """The fusion as a profile names it. An offline parameter at its default is left out: a
        profile document cannot name one (module doc), so a tuning's proposal must not either."""
        return {"fusion": self.name, **{  # type: ignore[attr-defined]
            a.name: getattr(self, a.name) for a in attrs.fields(type(self))
            if not (a.metadata.get("offline") and getattr(self, a.name) == a.default)
        }}  # fmt: skip

    def sides(self, candidates: Sequence[RerankInput]) -> tuple[list[float], list[float]]:
        raise NotImplementedError

    def components(self, candidates: Sequence[RerankInput]) -> tuple[list[float], list[float], list[float]]:
        """Each candidate's normalised lexical part, dense part (resource evidence included) and exact bonus."""
        lexical, dense = self.sides(candidates)
        if self.resource_bm25:
            lexical = with_whole_resource(lexical, candidates, self.resource_bm25)
        if self.resource_weight:
            resources = _resources(candidates)
            lexical = with_resource(lexical, resources, self.resource_weight)
            dense = with_resource(dense, resources, self.resource_weight)
        bonus = [self.exact_bonus if c.exact_rank is not None else 0.0 for c in candidates]
        return lexical, dense, bonus

    combine = staticmethod(combine)

    def rerank(self, query: str, candidates: Sequence[RerankInput]) -> list[float]:
        lexical, dense, bonus = self.components(candidates)
        return [float(combine(self.alpha, x, d, b)) for x, d, b in zip(lexical, dense, bonus, strict=True)]

    def _resource_suffix(self) -> str:
        suffix = f",resource={self.resource_weight:g}" if self.resource_weight else ""
        return suffix + (f",resource_bm25={self.resource_bm25:g}" if self.resource_bm25 else "")


@attrs.frozen
class ConvexFusionReranker(_Convex):
    """``convex_floor``: BM25 by the window's best (``max``) or min-max, cosine from ``cosine_floor``."""

    name: ClassVar[str] = "convex_floor"
    alpha: float = 0.35  # weight of the lexical side; 1 - alpha goes to the dense side
    exact_bonus: float = 1.0
    cosine_floor: float = 0.0
    normalisation: str = MAX  # of BM25 over the window: one of NORMALISATIONS
    resource_weight: float = 0.0
    resource_bm25: float = attrs.field(default=0.0, metadata=OFFLINE)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if isinstance(self.cosine_floor, bool) or not -1.0 <= self.cosine_floor < 1.0:
            raise InvalidRequest(
                f"cosine_floor must be within [-1, 1), got {self.cosine_floor!r}", cosine_floor=self.cosine_floor
            )
        if self.normalisation not in NORMALISATIONS:
            raise InvalidRequest(
                f"normalisation must be one of {', '.join(NORMALISATIONS)}, got {self.normalisation!r}",
                normalisation=self.normalisation,
            )

    @property
    def revision(self) -> str:
        return (
            f"convex-fusion-v2(norm={self.normalisation},alpha={self.alpha:g},"
            f"exact={self.exact_bonus:g},floor={self.cosine_floor:g}{self._resource_suffix()})"
        )

    def sides(self, candidates: Sequence[RerankInput]) -> tuple[list[float], list[float]]:
        bm25 = [c.bm25_score for c in candidates]
        lexical = divide_by_max(bm25) if self.normalisation == MAX else min_max(bm25)
        cosines = [self.cosine_floor if c.dense_similarity is None else c.dense_similarity for c in candidates]
        return lexical, from_floor(cosines, self.cosine_floor)


@attrs.frozen
class _BothSidesAlike(_Convex):
    """A convex fusion with no settings of its own that normalises both sides the same way over
    the window (``normalise``); its revision is that way's versioned name (``version``) with
    the shared settings."""

    version: ClassVar[str]

    @staticmethod
    def normalise(values: Sequence[float | None]) -> list[float]:
        raise NotImplementedError

    @property
    def revision(self) -> str:
        return f"{self.version}(alpha={self.alpha:g},exact={self.exact_bonus:g}{self._resource_suffix()})"

    def sides(self, candidates: Sequence[RerankInput]) -> tuple[list[float], list[float]]:
        bm25, cosines = [c.bm25_score for c in candidates], [c.dense_similarity for c in candidates]
        return self.normalise(bm25), self.normalise(cosines)


@attrs.frozen
class ConvexMinMaxFusion(_BothSidesAlike):
    """``convex_minmax``: both sides min-max over the window (Bruch et al. 2023's convex MM)."""

    name: ClassVar[str] = "convex_minmax"
    version: ClassVar[str] = "convex-minmax-v1"
    normalise = staticmethod(min_max)


@attrs.frozen
class DistributionFusion(_BothSidesAlike):
    """``dbsf``: both sides from mean - 3 sigma to mean + 3 sigma over the window."""

    name: ClassVar[str] = "dbsf"
    version: ClassVar[str] = "dbsf-v1"
    normalise = staticmethod(three_sigma)


@attrs.frozen
class RRFFusion:
    """``rrf``: the window keeps the fusion stage's RRF order (its score, ``rrf_k`` from the profile)."""

    name: ClassVar[str] = "rrf"

    @property
    def revision(self) -> str:
        return "rrf-v1"

    @property
    def score_range(self) -> tuple[float, float]:
        return 0.0, 1.0  # two reciprocal ranks, each at most 1 / (rrf_k + 1) <= 1/2

    def settings(self) -> dict[str, Any]:
        return {"fusion": self.name}

    def rerank(self, query: str, candidates: Sequence[RerankInput]) -> list[float]:
        return [c.rrf_score for c in candidates]


FUSIONS: Mapping[str, type[Any]] = {
    f.name: f for f in (RRFFusion, ConvexFusionReranker, ConvexMinMaxFusion, DistributionFusion)
}
# The default's name; its parameters are the class's defaults (docs/ranking.md: how it was chosen).
DEFAULT_FUSION = ConvexFusionReranker.name
FUSION_SETTING = "fusion"
# Every parameter some fusion takes and a profile may set: the profile's fusion keys besides FUSION_SETTING.
FUSION_PARAMETERS = tuple(
    dict.fromkeys(a.name for f in FUSIONS.values() for a in attrs.fields(f) if not a.metadata.get("offline"))
)


def is_fusion(reranker: object) -> bool:
    """Whether ``reranker`` is one of the registered fusions (so the profile's fusion keys apply to it)."""
    return type(reranker) in FUSIONS.values()


def parameters_of(name: str) -> tuple[str, ...]:
    return tuple(a.name for a in attrs.fields(FUSIONS[name]))


def fusion_from_settings(settings: Mapping[str, Any], base: object | None = None) -> Fusion:
    """The fusion a settings document names (``{"fusion": "convex_minmax", "alpha": 0.4}``).

    Without ``fusion`` it is ``base``'s (when ``base`` is a registered fusion) else the default;
    parameters left out keep ``base``'s values when it is the same fusion, else the fusion's
    defaults. An unknown fusion, a parameter the fusion does not take, or a bad value is
    ``InvalidRequest`` naming the key."""
    base_name = str(cast(Any, base).name) if is_fusion(base) else DEFAULT_FUSION
    name = settings.get(FUSION_SETTING, base_name)
    if not isinstance(name, str) or name not in FUSIONS:
        raise InvalidRequest(
            f"fusion must be one of {', '.join(FUSIONS)}, got {name!r}", key=FUSION_SETTING, known=list(FUSIONS)
        )
    params = {k: v for k, v in settings.items() if k != FUSION_SETTING}
    takes = parameters_of(name)
    foreign = sorted(k for k in params if k not in takes)
    if foreign:
        raise InvalidRequest(
            f"fusion {name} does not take {', '.join(foreign)}; it takes {', '.join(takes) or 'no parameters'}",
            key=foreign[0], fusion=name,
        )  # fmt: skip
    if is_fusion(base) and base_name == name:
        return cast(Fusion, attrs.evolve(cast(Any, base), **params))
    fusion: Fusion = FUSIONS[name](**params)
    return fusion
