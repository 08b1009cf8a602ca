"""The offline default reranker: a convex combination of normalised lexical and dense scores.

No extra weights and no transformer pass per candidate: the dense similarity of every reranked
unit is read from its stored vector. Following the analysis of fusion functions for hybrid
retrieval (Bruch, Gai and Ingber, 2023), a normalised-score convex combination uses the score
magnitudes that RRF throws away::

    score = alpha * lexical + (1 - alpha) * dense  (+ exact_bonus for identity matches)

- ``lexical``: BM25 normalised over the rerank window. ``"max"`` (the default) divides by the
  window's best score, i.e. min-max with BM25's theoretical minimum 0 (their TM2C2), so the
  value of a unit does not depend on how deep the window reaches; ``"minmax"`` uses the
  window's observed minimum. A unit the lexical stage did not rank gets 0.
- ``dense``: cosine rescaled from ``[cosine_floor, 1]`` to ``[0, 1]``, clipped at 0.

Both parts lie in [0, 1], so a unit named by the exact identity stage (bonus 1) stays on top.
The defaults were tuned on Cranfield's odd queries and checked on the even ones
(``benchmarks/cranfield_quality.py``, docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from memory_core.domain.errors import InvalidRequest
from memory_core.retrieval.pipeline import RerankInput

MAX, MINMAX = "max", "minmax"
NORMALISATIONS = (MAX, MINMAX)
# A bonus of 1 already puts every exact match above every other unit; a larger one changes no
# order, a negative one would punish naming the unit.
MAX_EXACT_BONUS = 10.0


@attrs.frozen
class ConvexFusionReranker:
    alpha: float = 0.35  # weight of the lexical side; 1 - alpha goes to the dense side
    exact_bonus: float = 1.0
    cosine_floor: float = 0.0
    normalisation: str = MAX  # of BM25 over the window: one of NORMALISATIONS

    def __attrs_post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise InvalidRequest(f"alpha must be within [0, 1], got {self.alpha!r}", alpha=self.alpha)
        if not 0.0 <= self.exact_bonus <= MAX_EXACT_BONUS:
            raise InvalidRequest(
                f"exact_bonus must be within [0, {MAX_EXACT_BONUS:g}], got {self.exact_bonus!r}",
                exact_bonus=self.exact_bonus,
            )
        if not -1.0 <= self.cosine_floor < 1.0:
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
            f"exact={self.exact_bonus:g},floor={self.cosine_floor:g})"
        )

    @property
    def score_range(self) -> tuple[float, float]:
        """Every score it gives lies here: both parts in [0, 1] (up to rounding), plus the bonus."""
        return 0.0, 1.0 + self.exact_bonus

    def _lexical_range(self, candidates: Sequence[RerankInput]) -> tuple[float, float]:
        lexical = [c.bm25_score for c in candidates if c.bm25_score is not None]
        if not lexical:
            return 0.0, 0.0
        hi = max(lexical)
        lo = min(lexical) if self.normalisation == MINMAX else min(0.0, min(lexical))
        return lo, hi

    def components(self, candidates: Sequence[RerankInput]) -> tuple[list[float], list[float], list[float]]:
        """Each candidate's normalised lexical part, rescaled dense part and exact bonus."""
        lo, hi = self._lexical_range(candidates)
        span = hi - lo
        lexical, dense, bonus = [], [], []
        for c in candidates:
            if c.bm25_score is None:
                lexical.append(0.0)
            else:
                lexical.append((c.bm25_score - lo) / span if span > 0 else 1.0)
            cos = c.dense_similarity if c.dense_similarity is not None else self.cosine_floor
            dense.append(min(1.0, max(0.0, (cos - self.cosine_floor) / (1.0 - self.cosine_floor))))
            bonus.append(self.exact_bonus if c.exact_rank is not None else 0.0)
        return lexical, dense, bonus

    @staticmethod
    def combine(alpha: Any, lexical: Any, dense: Any, bonus: Any) -> Any:
        """The fused score; numbers or numpy arrays alike (tuning scores many alphas at once)."""
        return alpha * lexical + (1.0 - alpha) * dense + bonus

    def rerank(self, query: str, candidates: Sequence[RerankInput]) -> list[float]:
        lexical, dense, bonus = self.components(candidates)
        return [float(self.combine(self.alpha, x, d, b)) for x, d, b in zip(lexical, dense, bonus, strict=True)]
