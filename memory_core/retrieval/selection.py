"""Budgeted selection with delta actions against the activation state (brief §4.7).

Walk the final order; take a unit when every limit allows, otherwise give it exactly one
exclusion code (the first that applies, in ``pipeline.EXCLUSION_CODES`` order) and go on.

How reused fragments count: a ``reuse`` fragment carries no text, so it costs nothing against
the token budget; it does count against the fragment limit and the per-resource limit, since
the agent is told to keep using it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import attrs

from memory_core.retrieval.activation_state import ActivationState
from memory_core.retrieval.pipeline import (
    ADD,
    BELOW_SCORE_THRESHOLD,
    DUPLICATE_CONTENT,
    EXCLUDED,
    FRAGMENT_LIMIT_REACHED,
    OUTSIDE_RERANK_WINDOW,
    REPLACE,
    RESOURCE_LIMIT_REACHED,
    REUSE,
    SELECTED,
    TOKEN_BUDGET_EXHAUSTED,
    Candidate,
)


@attrs.frozen
class Limits:
    token_budget: int
    max_fragments: int
    per_resource_limit: int
    min_final_score: float


@attrs.frozen
class SelectionTotals:
    selected: int
    tokens: int
    reused: int


def delta_action(candidate: Candidate, held: dict[str, str]) -> str:
    held_hash = held.get(candidate.unit.unit_id)
    if held_hash is None:
        return ADD
    return REUSE if held_hash == candidate.unit.unit_hash else REPLACE


def select(final_order: Sequence[Candidate], limits: Limits, state: ActivationState) -> SelectionTotals:
    held = state.as_dict()
    chosen_content: set[str] = set()
    per_resource: Counter[str] = Counter()
    selected = tokens = reused = 0
    for c in final_order:
        action = delta_action(c, held)
        cost = 0 if action == REUSE else c.unit.token_count
        code = None
        if c.unit.duplicate_key in chosen_content:
            code = DUPLICATE_CONTENT
        elif per_resource[c.unit.resource_id] >= limits.per_resource_limit:
            code = RESOURCE_LIMIT_REACHED
        elif selected >= limits.max_fragments:
            code = FRAGMENT_LIMIT_REACHED
        elif tokens + cost > limits.token_budget:
            code = TOKEN_BUDGET_EXHAUSTED
        elif c.rerank_rank is not None and c.final_score < limits.min_final_score:
            # The floor is on the reranker's scores: past the window the final score only orders
            # the tail (it may lie below any floor), and such a unit stays outside_rerank_window.
            code = BELOW_SCORE_THRESHOLD
        elif c.rerank_rank is None:
            code = OUTSIDE_RERANK_WINDOW
        if code is not None:
            c.disposition, c.exclusion_code, c.delta_action = EXCLUDED, code, None
            continue
        c.disposition, c.exclusion_code, c.delta_action = SELECTED, None, action
        chosen_content.add(c.unit.duplicate_key)
        per_resource[c.unit.resource_id] += 1
        selected += 1
        tokens += cost
        reused += action == REUSE
    return SelectionTotals(selected=selected, tokens=tokens, reused=reused)
