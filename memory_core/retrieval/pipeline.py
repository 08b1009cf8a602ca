"""The ranking pipeline's candidates and stages (brief §4).

One ``Candidate`` per unit of the fused recall set, filled stage by stage. The response and the
recorded trace are both built from these same objects.

Tie rule (documented, so identical inputs give identical rankings): within a stage, higher score
first, then the better rank in the previous list, then ``unit_id`` in code-point order.

Final scores (``apply_rerank``; docs/ranking.md): every candidate gets one, and the final order
never increases in final score. Inside the rerank window the final score is the reranker's
score. Past the window it is ``floor + rrf_score`` with ``floor = min(window scores) - 1``: RRF
scores past the window are below 1 (for any ``rrf_k >= 1``: a candidate past rank 1 cannot be
first in both lists), so the tail keeps its RRF order and lies in ``(floor, min(window))``,
below every reranked candidate. With an empty window (``rerank_depth`` 0, or no scores) the final
score is the RRF score itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from memory_core.domain.model import Hit, Unit
from memory_core.retrieval.exact import ExactMatch

SELECTED = "selected"
EXCLUDED = "excluded"

# Exclusion codes, in precedence order: when several apply, the first wins (brief §4.7).
DUPLICATE_CONTENT = "duplicate_content"
RESOURCE_LIMIT_REACHED = "resource_limit_reached"
FRAGMENT_LIMIT_REACHED = "fragment_limit_reached"
TOKEN_BUDGET_EXHAUSTED = "token_budget_exhausted"
BELOW_SCORE_THRESHOLD = "below_score_threshold"
OUTSIDE_RERANK_WINDOW = "outside_rerank_window"
EXCLUSION_CODES = (
    DUPLICATE_CONTENT,
    RESOURCE_LIMIT_REACHED,
    FRAGMENT_LIMIT_REACHED,
    TOKEN_BUDGET_EXHAUSTED,
    BELOW_SCORE_THRESHOLD,
    OUTSIDE_RERANK_WINDOW,
)

ADD, REPLACE, REUSE = "add", "replace", "reuse"
DELTA_ACTIONS = (ADD, REPLACE, REUSE)

_NO_RANK = 1 << 30


@attrs.define(eq=False)
class Candidate:
    """One unit of the fused recall set with its rank (1-based) and score at every stage.

    Filled stage by stage while one activation ranks, and never changed once it has answered:
    its Run's trace becomes rows from these objects behind the answer (``SqliteRunStore.complete``)."""

    unit: Unit
    exact_rank: int | None = None
    exact_score: float | None = None
    bm25_rank: int | None = None
    bm25_score: float | None = None
    lexical_rank: int | None = None
    dense_rank: int | None = None
    dense_score: float | None = None
    dense_similarity: float | None = None
    rrf_rank: int = 0
    rrf_score: float = 0.0
    rerank_rank: int | None = None
    rerank_score: float | None = None
    final_rank: int = 0
    final_score: float = 0.0  # set for every candidate by apply_rerank (module docstring)
    disposition: str = EXCLUDED
    exclusion_code: str | None = None
    delta_action: str | None = None

    # The RerankInput view (memory_core.ports).
    @property
    def text(self) -> str:
        return self.unit.search_text

    @property
    def heading_path(self) -> tuple[str, ...]:
        return self.unit.heading_path

    @property
    def unit_id(self) -> str:
        return self.unit.unit_id

    @property
    def resource_id(self) -> str:
        return self.unit.resource_id


def lexical_list(exact: Sequence[ExactMatch], bm25: Sequence[Hit]) -> list[str]:
    """Exact matches ranked 1..E, then the BM25 list without them from E+1 (brief §4.5)."""
    seen = {m.unit_id for m in exact}
    return [m.unit_id for m in exact] + [unit_id for unit_id, _ in bm25 if unit_id not in seen]


def rrf_score(lexical_rank: int | None, dense_rank: int | None, rrf_k: int) -> float:
    """Reciprocal rank fusion of the lexical and dense lists (Cormack et al., 2009)."""
    return sum(1.0 / (rrf_k + r) for r in (lexical_rank, dense_rank) if r is not None)


def rrf_order(score: float, lexical_rank: int | None, dense_rank: int | None, unit_id: str) -> tuple[float, int, str]:
    """The sort key of the fused list: the tie rule of the module docstring."""
    return (-score, min(lexical_rank or _NO_RANK, dense_rank or _NO_RANK), unit_id)


def fuse(
    units: Mapping[str, Unit],
    exact: Sequence[ExactMatch],
    bm25: Sequence[Hit],
    dense: Sequence[Hit],
    rrf_k: int,
) -> list[Candidate]:
    """The fused recall set (the union), in RRF order with ``rrf_rank`` set."""
    candidates: dict[str, Candidate] = {}

    def candidate(unit_id: str) -> Candidate:
        if unit_id not in candidates:
            candidates[unit_id] = Candidate(units[unit_id])
        return candidates[unit_id]

    for rank, match in enumerate(exact, start=1):
        c = candidate(match.unit_id)
        c.exact_rank, c.exact_score = rank, match.score
    for rank, (unit_id, score) in enumerate(bm25, start=1):
        c = candidate(unit_id)
        c.bm25_rank, c.bm25_score = rank, score
    for rank, unit_id in enumerate(lexical_list(exact, bm25), start=1):
        candidates[unit_id].lexical_rank = rank
    for rank, (unit_id, score) in enumerate(dense, start=1):
        c = candidate(unit_id)
        c.dense_rank, c.dense_score, c.dense_similarity = rank, score, score
    for c in candidates.values():
        c.rrf_score = rrf_score(c.lexical_rank, c.dense_rank, rrf_k)
    ordered = sorted(candidates.values(), key=lambda c: rrf_order(c.rrf_score, c.lexical_rank, c.dense_rank, c.unit_id))
    for rank, c in enumerate(ordered, start=1):
        c.rrf_rank = rank
    return ordered


def apply_rerank(fused: Sequence[Candidate], window: int, scores: Sequence[float]) -> list[Candidate]:
    """Order the top ``window`` by reranker score, then the rest in RRF order; set every
    candidate's final rank and final score (the rule in the module docstring)."""
    head, tail = list(fused[:window]), list(fused[window:])
    if len(scores) != len(head):
        raise ValueError(f"reranker returned {len(scores)} scores for {len(head)} candidates")
    for c, score in zip(head, scores, strict=True):
        c.rerank_score = float(score)
    head.sort(key=lambda c: (-(c.rerank_score or 0.0), c.rrf_rank))
    for rank, c in enumerate(head, start=1):
        c.rerank_rank = rank
        c.final_score = float(c.rerank_score or 0.0)
    _tail_scores(head, tail)
    final = head + tail
    for rank, c in enumerate(final, start=1):
        c.final_rank = rank
    return final


def _tail_scores(head: Sequence[Candidate], tail: Sequence[Candidate]) -> None:
    """Final scores past the rerank window: the RRF score, shifted below the window's lowest."""
    if not head:
        for c in tail:
            c.final_score = c.rrf_score
        return
    lowest = min(c.final_score for c in head)
    floor = lowest - 1.0
    # Never equal to or above the window's lowest, even where rounding (huge reranker scores)
    # or an rrf_k below 1 would let floor + rrf_score reach it; the tail then ties just below.
    ceiling = math.nextafter(lowest, -math.inf)
    for c in tail:
        c.final_score = min(floor + c.rrf_score, ceiling)


class RerankInput(Protocol):
    """What a reranker sees of one candidate (a ``memory_core.retrieval.pipeline.Candidate``)."""

    @property
    def text(self) -> str: ...

    @property
    def heading_path(self) -> tuple[str, ...]: ...

    @property
    def exact_rank(self) -> int | None: ...

    @property
    def bm25_score(self) -> float | None: ...

    @property
    def dense_similarity(self) -> float | None:
        """Cosine of the query with the unit's stored vector, known for every reranked unit."""
        ...

    @property
    def rrf_score(self) -> float: ...

    @property
    def resource_id(self) -> str:
        """The resource the unit belongs to: fusions may rank resources by all their units' evidence."""
        ...
