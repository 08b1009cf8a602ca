"""The learned ranker's text features (``ltr-features-v3``): what the query's words do in each
unit's own text, computed from the query and the window's unit texts alone, so a trace's window
(its texts cut from the case's frozen corpus) and a live one (``Unit.text``) give the same values.

Query stems: the query's terms (``query_terms``' words, lowercased, of ``MIN_TERM_CHARS`` or more)
less ``STOPWORDS``, each cut to its first ``STEM_CHARS`` characters, in query order, once each. A
unit word matches a stem when its first ``STEM_CHARS`` characters equal it; a stem shorter than
that (a 3-4 character term) matches only the same word. One compiled regex scans each lowercased
unit text once. The window IDF of a stem is ``ln((n + 1) / (df + 0.5))``, ``df`` the window's
units holding it, ``n`` the window's units with a known text.

Measured before it shipped (docs/ranking.md, "The learned ranker on Cranfield and CISI"): these
three, of eleven text features tried, carried the gain; the other eight gave none beyond theirs,
at 2-3x their cost.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

_TERM = re.compile(r"\w+")
MIN_TERM_CHARS = 3  # shorter tokens ("of", "a", "is") match everywhere and say nothing
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
        bm25 = sum((idf[s] * f * (BM25_K1 + 1) / (f + norm) for s, f in sorted(tf.items())), 0.0)
        rows[i] = (bm25, sum(tf.values()) / words, first / length if first >= 0 else 1.0)
    return rows
