"""The offline default reranker, ``ConvexFusionReranker``: a convex combination of normalised
lexical and dense scores. It is one of the registered fusion functions and lives with them in
``memory_core.retrieval.fusion`` (issue 32); this module keeps the names it has always exported."""

from __future__ import annotations

from memory_core.retrieval.fusion import MAX, MAX_EXACT_BONUS, MINMAX, NORMALISATIONS, ConvexFusionReranker

__all__ = ["MAX", "MAX_EXACT_BONUS", "MINMAX", "NORMALISATIONS", "ConvexFusionReranker"]
