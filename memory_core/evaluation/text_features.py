"""The learned ranker's text features: what the query's words do in each unit's own text
(``TEXT_FEATURES``, ``ltr-features-v3``), and how like the rest of the window each unit's text is
(``CLUSTER_FEATURES``, ``ltr-features-v4``), computed from the query, the window's unit texts and
the default fusion's scores alone, so a trace's window (its texts cut from the case's frozen
corpus) and a live one (``Unit.text``) give the same values.

Query stems: the query's terms (``query_terms``' words, lowercased, of ``MIN_TERM_CHARS`` or more)
less ``STOPWORDS``, each cut to its first ``STEM_CHARS`` characters, in query order, once each. A
unit word matches a stem when its first ``STEM_CHARS`` characters equal it; a stem shorter than
that (a 3-4 character term) matches only the same word. One compiled regex scans each lowercased
unit text once. The window IDF of a stem is ``ln((n + 1) / (df + 0.5))``, ``df`` the window's
units holding it, ``n`` the window's units with a known text.

The cluster columns (pseudo-relevance feedback inside the window, and the cluster hypothesis:
relevant units resemble each other): each known unit's stems (the same stoplist and cut, every
word of the unit, not only the query's) weighted ``(1 + ln tf) * idf`` with the window IDF and
L2-normalised; a unit's cosine to the sum of the ``CLUSTER_TOP`` units the default fusion scores
highest (``fusion_prior``; the unit itself left out of that sum), its mean cosine to the window's
other known units, and its resource's best of the first.

Measured before they shipped (docs/ranking.md, "The learned ranker on Cranfield and CISI"): the
three text columns, of eleven tried, carried the text's gain, the other eight none beyond theirs
at 2-3x their cost; the cluster columns gave Cranfield the significant gain no trace or text
column had, and scifact-train more (a fifth, each unit's mean cosine to its five nearest units,
needs every pair's cosine: too slow in pure Python, not shipped).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import re
from collections import Counter
from collections.abc import Sequence

_TERM = re.compile(r"\w+")
MIN_TERM_CHARS = 3  # shorter tokens ("of", "a", "is") match everywhere and say nothing
_LONG_TERM = re.compile(rf"\w{{{MIN_TERM_CHARS},}}")  # _TERM's words of MIN_TERM_CHARS or more
# Five characters: a crude stemmer that folds most suffixes (boundary/boundaries, compute/computation)
# with no model of morphology, in one regex; the learner weighs how much a match means.
STEM_CHARS = 5
# English function and question words of MIN_TERM_CHARS or more: they occur in nearly every unit,
# so their matches would swamp the density and first-match columns with noise.
STOPWORDS = frozenset((
    "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was", "one", "our", "out",
    "has", "him", "his", "how", "its", "may", "new", "now", "old", "see", "two", "way", "who", "did", "get", "let",
    "put", "say", "she", "too", "use", "that", "with", "have", "this", "will", "your", "from", "they", "know",
    "want", "been", "good", "much", "some", "time", "very", "when", "come", "here", "just", "like", "long", "make",
    "many", "more", "only", "over", "such", "take", "than", "them", "well", "were", "what", "which", "while", "whom",
    "whose", "why", "where", "there", "their", "these", "those", "then", "into", "also", "about", "after", "again",
    "against", "because", "before", "being", "below", "between", "both", "does", "doing", "down", "during", "each",
    "few", "further", "once", "other", "same", "should", "through", "under", "until", "upon", "would", "could",
    "shall", "must", "might", "within", "without", "among", "used", "using", "thereof", "therein", "whats", "give",
    "given", "find", "show", "shown",
))  # fmt: skip
BM25_K1 = 1.2
BM25_B = 0.75

TEXT_FEATURES = (
    "text_bm25_window",  # BM25 of the query stems, IDF and average length from the window's units
    "text_match_density",  # stem matches / the unit's words (spaces and newlines + 1)
    "text_first_match",  # character offset of the first match / the unit's length (1: no match)
)
TextRow = tuple[float, float, float]
NO_MATCH: TextRow = (0.0, 0.0, 1.0)  # a known text none of whose words is a query stem


def query_words(text: str) -> list[str]:
    """The lowercased words of ``text`` of ``MIN_TERM_CHARS`` or more, in order (repeats kept)."""
    return [t for t in _TERM.findall(text.lower()) if len(t) >= MIN_TERM_CHARS]


def query_terms(text: str) -> frozenset[str]:
    return frozenset(query_words(text))


LABEL_CACHE_CHARS = 256  # longer labels are rare; a query (up to 2,000 characters) is never kept


def label_terms(label: str) -> frozenset[str]:
    """``query_terms`` of a unit's heading path, first heading or resource id: these recur from
    window to window, so the 4,096 last asked of at most ``LABEL_CACHE_CHARS`` are kept (about a
    megabyte)."""
    return _kept_terms(label) if len(label) <= LABEL_CACHE_CHARS else query_terms(label)


@functools.lru_cache(maxsize=4096)
def _kept_terms(label: str) -> frozenset[str]:
    return query_terms(label)


def query_stems(query: str) -> tuple[str, ...]:
    """The query's stems (module docstring), in query order, once each."""
    return tuple(dict.fromkeys(w[:STEM_CHARS] for w in query_words(query) if w not in STOPWORDS))


def stem_pattern(stems: Sequence[str]) -> re.Pattern[str]:
    """A regex whose matches in a lowercased text are its words matching one of ``stems``."""
    alternatives = [re.escape(s) + (r"\w*" if len(s) >= STEM_CHARS else r"\b")
                    for s in sorted(stems, key=len, reverse=True)]  # fmt: skip
    return re.compile(r"\b(?:" + "|".join(alternatives) + ")")


def text_rows(query: str, texts: Sequence[str]) -> list[TextRow | None]:
    """One row of ``TEXT_FEATURES`` per unit text, in the window's order; None for a text that is
    not known (``""``: a unit is never empty), which also takes no part in the window's IDF and
    average length, so a unit's row never depends on text that was not read."""
    known = [i for i, t in enumerate(texts) if t]
    rows: list[TextRow | None] = [None] * len(texts)
    stems = query_stems(query)
    if not known or not stems:
        for i in known:
            rows[i] = NO_MATCH
        return rows
    index = {s: i for i, s in enumerate(stems)}
    pattern = stem_pattern(stems)
    df = [0] * len(stems)
    scans: list[tuple[int, dict[int, int], int, int, int]] = []  # unit, tf by stem, first match, length, words
    for i in known:
        low = texts[i].lower()
        tf: dict[int, int] = {}
        first = -1
        for m in pattern.finditer(low):
            stem = index[m.group()[:STEM_CHARS]]  # a short stem matched only itself: the whole word
            tf[stem] = tf.get(stem, 0) + 1
            if first < 0:
                first = m.start()
        for stem in tf:
            df[stem] += 1
        scans.append((i, tf, first, max(1, len(low)), max(1, low.count(" ") + low.count("\n") + 1)))
    n = len(known)
    idf = [math.log((n + 1) / (d + 0.5)) for d in df]
    average = sum(s[3] for s in scans) / n
    for i, tf, first, length, words in scans:
        norm = BM25_K1 * (1 - BM25_B + BM25_B * length / average)
        bm25 = math.fsum(idf[s] * f * (BM25_K1 + 1) / (f + norm) for s, f in sorted(tf.items()))
        rows[i] = (bm25, sum(tf.values()) / words, first / length if first >= 0 else 1.0)
    return rows


CLUSTER_FEATURES = (
    "cluster_top_cosine",  # tf-idf cosine to the sum of the default fusion's top units (itself left out)
    "cluster_mean_cosine",  # mean tf-idf cosine to the window's other known units
    "resource_best_top_cosine",  # the best cluster_top_cosine among its resource's units in the window
)
CLUSTER_TOP = 5  # the default fusion's top units a window's feedback is taken from
ClusterRow = tuple[float, float, float]
_Vector = dict[str, float]


def unit_stems(text: str) -> list[str]:
    """Every word of ``text`` as a stem (module docstring): lowercased, of ``MIN_TERM_CHARS`` or
    more, not a stopword, cut to ``STEM_CHARS``; in order, repeats kept."""
    return [w[:STEM_CHARS] for w in _LONG_TERM.findall(text.lower()) if w not in STOPWORDS]


# A unit's stems are a function of its text alone, and an activation's window mostly holds units
# earlier windows held: counted once, they are most of the cluster columns' cost (``cluster_rows``
# reads them, never changes them). Held as each stem's tf weight: Cranfield's 1,782 units take
# 8.5 MiB beside their texts, 2,048 units of 256 distinct stems each 52 MiB (tracemalloc).
STEM_CACHE_UNITS = 2048


@functools.lru_cache(maxsize=STEM_CACHE_UNITS)
def _log_tf(text: str) -> _Vector:
    """Each stem of ``text`` and its tf weight, 1 + ln tf (a function of the text alone)."""
    return {s: 1 + math.log(f) for s, f in Counter(unit_stems(text)).items()}


# ``math.fsum`` (in C over ``map``): exactly rounded, so the same window gives the same values on
# every Python (3.12's ``sum`` compensates float sums, 3.11's does not), trace or live.
def _dot(a: _Vector, b: _Vector) -> float:
    if len(b) < len(a):
        a, b = b, a
    return math.fsum(map(operator.mul, a.values(), map(b.get, a, itertools.repeat(0.0))))


def _norm(v: _Vector) -> float:
    return math.hypot(*v.values())


def _added(vectors: Sequence[_Vector]) -> _Vector:
    total: _Vector = {}
    for v in vectors:  # each stem's sum in the vectors' order: total + x, a vector at a time, in C
        total.update(zip(v, map(operator.add, map(total.get, v, itertools.repeat(0.0)), v.values()), strict=True))
    return total


def _squared(v: _Vector) -> float:
    return math.fsum(map(operator.mul, v.values(), v.values()))


def cluster_rows(texts: Sequence[str], priors: Sequence[float], resources: Sequence[str]) -> list[ClusterRow | None]:
    """One row of ``CLUSTER_FEATURES`` per unit text, in the window's order (``priors``: each unit's
    default fusion score, ``resources``: its resource); None for a text that is not known (``""``),
    which also takes no part in the window's IDF, its top units or another unit's mean. The top
    units are the ``CLUSTER_TOP`` known ones of highest prior, the earlier in the window on a tie."""
    known = [i for i, t in enumerate(texts) if t]
    rows: list[ClusterRow | None] = [None] * len(texts)
    if not known:
        return rows
    tfs = [_log_tf(texts[i]) for i in known]
    df: Counter[str] = Counter()
    for tf in tfs:
        df.update(tf.keys())  # counted in C: a window holds thousands of stems
    n = len(known)
    idf = {s: math.log((n + 1) / (d + 0.5)) for s, d in df.items()}  # > 0: df <= n
    vectors: list[_Vector] = []
    for tf in tfs:
        # The same products and quotients a comprehension would make, in C (map over the keys).
        weighted = dict(zip(tf, map(operator.mul, tf.values(), map(idf.__getitem__, tf)), strict=True))
        length = _norm(weighted)
        scaled = map(operator.truediv, weighted.values(), itertools.repeat(length))
        vectors.append(dict(zip(weighted, scaled, strict=True)) if length > 0 else {})
    # A known text with no stems ("Ok!") keeps its place in the top: the top is what the fusion
    # ranked highest, as measured; its empty vector adds nothing to the feedback.
    top = sorted(range(n), key=lambda j: (-priors[known[j]], j))[:CLUSTER_TOP]
    feedback = _added([vectors[j] for j in top])
    feedback_length = _norm(feedback)
    everyone = _added(vectors)
    own = [0.0] * n
    for j, v in enumerate(vectors):
        others, length = feedback, feedback_length
        if j in top:
            others = _added([vectors[k] for k in top if k != j])
            length = _norm(others)
        own[j] = _dot(v, others) / length if length > 0 else 0.0
    best: dict[str, float] = {}
    for j, i in enumerate(known):
        best[resources[i]] = max(best.get(resources[i], -math.inf), own[j])
    for j, i in enumerate(known):
        v = vectors[j]
        mean = (_dot(v, everyone) - _squared(v)) / (n - 1) if n > 1 else 0.0
        rows[i] = (own[j], mean, best[resources[i]])
    return rows
