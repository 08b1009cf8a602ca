"""The offline default reranker: a convex combination of normalised lexical and dense scores.

No extra weights and no transformer pass per candidate: the dense similarity of every reranked
unit is read from its stored vector. Following the analysis of fusion functions for hybrid
retrieval (Bruch, Gai and Ingber, 2023), a normalised-score convex combination uses the score
magnitudes that RRF throws away. BM25 is min-max normalised over the rerank window (a unit the
lexical stage did not rank gets 0); cosine is normalised with its theoretical range. A unit
named by the exact identity stage gets a fixed bonus, so identity matches stay on top.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from memory_core.ports import RerankInput


@attrs.frozen
class ConvexFusionReranker:
    # alpha weighs the lexical side; tuned on Cranfield's odd queries (docs/performance.md).
    alpha: float = 0.5
    exact_bonus: float = 1.0
    cosine_floor: float = 0.0

    @property
    def revision(self) -> str:
        return f"convex-fusion-v1(alpha={self.alpha:g},exact={self.exact_bonus:g},floor={self.cosine_floor:g})"

    def rerank(self, query: str, candidates: Sequence[RerankInput]) -> list[float]:
        lexical = [c.bm25_score for c in candidates if c.bm25_score is not None]
        lo, hi = (min(lexical), max(lexical)) if lexical else (0.0, 0.0)
        span = hi - lo
        scores = []
        for c in candidates:
            if c.bm25_score is None:
                lex = 0.0
            else:
                lex = (c.bm25_score - lo) / span if span > 0 else 1.0
            cos = c.dense_similarity if c.dense_similarity is not None else self.cosine_floor
            dense = max(0.0, (cos - self.cosine_floor) / (1.0 - self.cosine_floor))
            bonus = self.exact_bonus if c.exact_rank is not None else 0.0
            scores.append(self.alpha * lex + (1.0 - self.alpha) * dense + bonus)
        return scores
