"""Pure-Python twins of the vector, embedder, token-counter and embedding-cache adapters.

They implement the same ports as the real adapters and pass the same contract suites, so core
tests run without numpy, torch or files.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from memory_core.domain.errors import GenerationCorrupted, InvalidRequest
from memory_core.domain.model import Hit, Vector
from memory_core.domain.storage_rules import validate_build_input

_WORD = re.compile(r"\w+")


def _normalised(vector: Sequence[float]) -> tuple[float, ...]:
    values = tuple(float(x) for x in vector)
    if not all(math.isfinite(x) for x in values):
        raise InvalidRequest("vector holds a NaN or infinite value")
    norm = math.sqrt(math.fsum(x * x for x in values))
    # A zero vector stays zero: its cosine with anything is 0, never a division error.
    return values if norm == 0.0 else tuple(x / norm for x in values)


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def rank_hits(scores: Sequence[float], unit_ids: Sequence[str], depth: int) -> list[Hit]:
    """Best first: score descending, then stored unit order (deterministic ties)."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return [(unit_ids[i], scores[i]) for i in order[: max(depth, 0)]]


class InMemoryVectorSearcher:
    def __init__(self, unit_ids: tuple[str, ...], vectors: tuple[tuple[float, ...], ...], dims: int) -> None:
        self._unit_ids = unit_ids
        self._vectors = vectors
        self._dims = dims
        self._rows = {unit_id: row for row, unit_id in enumerate(unit_ids)}

    def _query(self, query_vector: Vector) -> tuple[float, ...]:
        if self._unit_ids and len(query_vector) != self._dims:
            raise InvalidRequest(
                f"query vector has {len(query_vector)} dimensions, the index {self._dims}",
                expected=self._dims,
                actual=len(query_vector),
            )
        return _normalised(query_vector)

    def search(self, query_vector: Vector, depth: int) -> list[Hit]:
        query = self._query(query_vector)
        scores = [_dot(query, v) for v in self._vectors]
        return rank_hits(scores, self._unit_ids, depth)

    def similarities(self, query_vector: Vector, unit_ids: Sequence[str]) -> list[float]:
        query = self._query(query_vector)
        missing = [u for u in unit_ids if u not in self._rows]
        if missing:
            raise GenerationCorrupted("unit ids absent from the vector index", unit_ids=missing[:10])
        return [_dot(query, self._vectors[self._rows[u]]) for u in unit_ids]

    def close(self) -> None:
        pass


class InMemoryVectorIndexFactory:
    """Brute-force cosine over normalised vectors, kept in a dict keyed by directory."""

    revision = "in-memory-cosine/1"

    def __init__(self) -> None:
        self._built: dict[str, InMemoryVectorSearcher] = {}

    def build(self, directory: Path, unit_ids: Sequence[str], vectors: Sequence[Vector]) -> None:
        ids = tuple(unit_ids)
        rows = tuple(_normalised(v) for v in vectors)
        dims = validate_build_input(ids, [len(r) for r in rows])
        self._built[str(directory)] = InMemoryVectorSearcher(ids, rows, dims)

    def relocate(self, old: Path, new: Path) -> None:
        """Follow a directory rename (an in-memory generation store publishing a staging dir)."""
        old_key, new_key = str(old), str(new)
        for key in [k for k in self._built if k == old_key or k.startswith(old_key + "/")]:
            self._built[new_key + key[len(old_key) :]] = self._built.pop(key)

    def open(self, directory: Path) -> InMemoryVectorSearcher:
        try:
            return self._built[str(directory)]
        except KeyError:
            raise GenerationCorrupted(f"no vector index built at {directory}", directory=str(directory)) from None


class HashingEmbedder:
    """Deterministic bag-of-words hashing: each lowercased word adds ±1 to one bucket.

    Texts that share words score higher, which is all core tests need; stable across processes
    (blake2b, not Python's salted ``hash``).
    """

    def __init__(self, dimensions: int = 64) -> None:
        if dimensions < 2:
            raise InvalidRequest("a hashing embedder needs at least two dimensions")
        self.dimensions = dimensions
        self.revision = f"hashing-bow-{dimensions}/1"

    def _embed(self, text: str) -> list[float]:
        # A text without words still gets a unit vector, so every embedding has norm 1.
        words = _WORD.findall(text.casefold()) or ["\x00empty"]
        vector = [0.0] * self.dimensions
        for word in words:
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "big")
            vector[value % self.dimensions] += 1.0 if (value >> 63) & 1 else -1.0
        norm = math.sqrt(math.fsum(x * x for x in vector))
        if norm == 0.0:  # words cancelled out exactly: fall back to a fixed bucket
            vector[0], norm = 1.0, 1.0
        return [x / norm for x in vector]

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


class WhitespaceTokenCounter:
    """Tokens = whitespace-separated words; a stand-in for the model tokenizer in core tests."""

    revision = "whitespace/1"

    def count(self, text: str) -> int:
        return len(text.split())


class InMemoryEmbeddingCache:
    def __init__(self) -> None:
        self._vectors: dict[tuple[str, str], tuple[float, ...]] = {}

    def get_many(self, model_revision: str, unit_hashes: Iterable[str]) -> dict[str, Vector]:
        found: dict[str, Vector] = {}
        for unit_hash in unit_hashes:
            vector = self._vectors.get((model_revision, unit_hash))
            if vector is not None:
                found[unit_hash] = vector
        return found

    def put_many(self, model_revision: str, vectors: dict[str, Vector]) -> None:
        for unit_hash, vector in vectors.items():
            self._vectors[(model_revision, unit_hash)] = tuple(float(x) for x in vector)

    def close(self) -> None:
        pass
