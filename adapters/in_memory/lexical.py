"""A pure-Python BM25 twin of the Lucene adapter, for fast core tests.

Analysis is deliberately plain: lowercase ``\\w+`` tokens, no stemming, no stopwords. Scoring
is Lucene's BM25 (idf ``log(1 + (N - df + 0.5) / (df + 0.5))``, no ``k1 + 1`` factor); a term
repeated in the query counts once per occurrence, as in Anserini's bag-of-words queries. Order:
score descending, then unit id ascending, like the Lucene adapter. Indexes live in the
factory, keyed by the absolute directory path; nothing touches the disk.
"""

from __future__ import annotations

import heapq
import math
import os
import re
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import attrs

from memory_core.domain.errors import GenerationCorrupted
from memory_core.domain.model import Hit, Unit
from memory_core.retrieval.profile import BM25_B, BM25_K1

_TOKEN = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


@attrs.frozen
class _Postings:
    """An immutable inverted index: term -> ((doc, tf), ...), with document lengths."""

    unit_ids: tuple[str, ...]
    lengths: tuple[int, ...]
    postings: dict[str, tuple[tuple[int, int], ...]]
    average_length: float

    @classmethod
    def of(cls, units: Sequence[Unit]) -> _Postings:
        ids = [u.unit_id for u in units]
        if len(set(ids)) != len(ids):
            duplicate = next(i for i, n in Counter(ids).items() if n > 1)
            raise ValueError(f"duplicate unit id {duplicate!r}")
        unit_ids: list[str] = []
        lengths: list[int] = []
        postings: dict[str, list[tuple[int, int]]] = {}
        for unit in sorted(units, key=lambda u: u.unit_id):
            tokens = tokenize(unit.search_text)
            if not tokens:  # as in Lucene, a document without terms does not count in N
                continue
            doc = len(unit_ids)
            unit_ids.append(unit.unit_id)
            lengths.append(len(tokens))
            for term, tf in Counter(tokens).items():
                postings.setdefault(term, []).append((doc, tf))
        average = sum(lengths) / len(lengths) if lengths else 0.0
        return cls(tuple(unit_ids), tuple(lengths), {t: tuple(p) for t, p in postings.items()}, average)


class InMemoryLexicalSearcher:
    def __init__(self, index: _Postings, k1: float, b: float) -> None:
        self._index = index
        self._k1 = k1
        self._b = b
        self._closed = False

    def search(self, query: str, depth: int) -> list[Hit]:
        if self._closed:
            raise RuntimeError("lexical searcher is closed")
        index = self._index
        if depth <= 0 or not index.unit_ids:
            return []
        n = len(index.unit_ids)
        scores: dict[int, float] = {}
        # Sorted terms: the same float additions in the same order on every call.
        for term, weight in sorted(Counter(tokenize(query)).items()):
            postings = index.postings.get(term)
            if not postings:
                continue
            idf = math.log(1 + (n - len(postings) + 0.5) / (len(postings) + 0.5))
            for doc, tf in postings:
                norm = self._k1 * (1 - self._b + self._b * index.lengths[doc] / index.average_length)
                scores[doc] = scores.get(doc, 0.0) + weight * idf * tf / (tf + norm)
        best = heapq.nsmallest(depth, scores.items(), key=lambda item: (-item[1], index.unit_ids[item[0]]))
        return [(index.unit_ids[doc], score) for doc, score in best]

    def close(self) -> None:
        self._closed = True


@attrs.frozen
class InMemoryLexicalIndexFactory:
    k1: float = BM25_K1
    b: float = BM25_B
    revision: str = attrs.field(init=False)
    _indexes: dict[str, _Postings] = attrs.field(factory=dict, init=False, eq=False, repr=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, eq=False, repr=False)

    @revision.default
    def _revision(self) -> str:
        return f"memory-bm25-k{self.k1:g}-b{self.b:g}-v1"

    def build(self, directory: Path, units: Sequence[Unit], *, previous: Path | None = None) -> None:
        index = _Postings.of(units)  # built whole: cheap in memory
        with self._lock:
            self._indexes[_key(directory)] = index

    def relocate(self, old: Path, new: Path) -> None:
        """Follow a directory rename (an in-memory generation store publishing a staging dir)."""
        old_key, new_key = _key(old), _key(new)
        with self._lock:
            for key in [k for k in self._indexes if k == old_key or k.startswith(old_key + os.sep)]:
                self._indexes[new_key + key[len(old_key) :]] = self._indexes.pop(key)

    def open(self, directory: Path) -> InMemoryLexicalSearcher:
        with self._lock:
            index = self._indexes.get(_key(directory))
        if index is None:
            raise GenerationCorrupted(f"no lexical index was built at {directory}", directory=str(directory))
        return InMemoryLexicalSearcher(index, self.k1, self.b)


def _key(directory: Path) -> str:
    return os.path.abspath(os.fspath(directory))
