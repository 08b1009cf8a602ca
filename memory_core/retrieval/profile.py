"""The ranking profile: every knob of the pipeline, versioned by a hash of its settings."""

from __future__ import annotations

from typing import Any

import attrs

from memory_core.domain.canonical import hash_json

MAX_QUERY_CHARS = 2_000
MIN_BUDGET = 1
MAX_BUDGET = 100_000


@attrs.frozen
class RankingProfile:
    name: str = "default"
    lexical_depth: int = 100
    dense_depth: int = 100
    rrf_k: int = 60
    rerank_depth: int = 50
    token_budget: int = 1_200
    max_fragments: int = 8
    per_resource_limit: int = 2
    # Final-score floor for selection; the default fusion reranker scores in [0, 1.x].
    min_final_score: float = 0.0
    bm25_k1: float = 0.9
    bm25_b: float = 0.4

    def settings(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @property
    def revision(self) -> str:
        return f"{self.name}@{hash_json(self.settings())[:12]}"
