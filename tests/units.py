"""Units, and the candidates a reranker reads, for the tests that build them by hand."""

from __future__ import annotations

import attrs

from memory_core.domain.model import Unit, unit_hash_of, unit_id_for


def whole_text_unit(
    resource_id: str, ordinal: int, text: str, heading_path: tuple[str, ...] = (), resource_hash: str = ""
) -> Unit:
    """A unit spanning all of ``text``, hashed as the chunker hashes one, one token a word."""
    return Unit(
        unit_id=unit_id_for(resource_id, ordinal),
        resource_id=resource_id,
        ordinal=ordinal,
        start=0,
        end=len(text),
        heading_path=heading_path,
        text=text,
        token_count=len(text.split()),
        unit_hash=unit_hash_of(text, 0, len(text)),
        resource_hash=resource_hash,
    )


@attrs.frozen
class RerankCandidate:
    """What a fusion or reranker reads of a candidate (``RerankInput`` in ``memory_core.ports``)."""

    resource_id: str
    bm25_score: float | None
    dense_similarity: float | None
    exact_rank: int | None = None
    rrf_score: float = 0.0
    text: str = ""
    heading_path: tuple[str, ...] = ()


def text_candidate(text: str) -> RerankCandidate:
    """A candidate a cross-encoder reads only the text of (no lexical or dense evidence)."""
    return RerankCandidate("r", None, 0.0, text=text)
