"""Exact identity stage: query terms that name a unit rank it first (brief §4.2).

Identity keys come from what names a unit, never from its body: the resource path, the file
name, identifiers in the path, title or headings (``ADR-0042``, ``snake_case``, ``CamelCase``,
``deploy/values.yaml``), and multi-word title and heading slugs. Keys must be specific enough
never to fire on ordinary words or bare numbers, so a bare file stem such as ``5`` or
``rollback`` is not a key, identifiers need an upper-case prefix (``ADR-``) or an inner
separator, and slugs and title or heading identifiers need one resource (a title, heading or
identifier that several resources share there identifies none of them; an identifier in a
resource's own path always names it).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

import attrs

from memory_core.domain.model import Unit

# Specificity weights: a more specific key ranks its units higher.
PATH, FILE_NAME, IDENTIFIER, SLUG = 5, 4, 3, 2

_TICKET = re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b")  # ADR-0042, INC-7 (upper-case prefix only)
_SNAKE = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b")
_CAMEL = re.compile(r"\b[A-Za-z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b[A-Z]{2,}[a-z]+[A-Za-z0-9]*\b")
_PATHLIKE = re.compile(r"[A-Za-z0-9_][\w-]*(?:[/.][\w-]+)+")
_WORD = re.compile(r"[0-9a-z]+")
_QUERY_TOKEN = re.compile(r"[^\s`'\"()\[\]{}<>,;!?]+")
MIN_SLUG_WORDS = 3
MAX_SLUG_WORDS = 12

REVISION = "exact-identity-v3"  # v2: a slug several resources share is no key; v3: nor is an identifier
# The kinds of key that several resources sharing in a title or heading is no key of any of them (a
# path or file name is one resource's alone by construction; an identifier in a path stays its own).
_SHARED_IS_NO_KEY = (IDENTIFIER, SLUG)


def slug_words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _identifiers(text: str) -> set[str]:
    found = {m.group(0) for pattern in (_TICKET, _SNAKE, _CAMEL) for m in pattern.finditer(text)}
    found |= {m.group(0).strip("./-") for m in _PATHLIKE.finditer(text) if re.search(r"[A-Za-z]", m.group(0))}
    return {f.casefold() for f in found if len(f) >= 3}


def _file_name_keys(resource_id: str) -> set[str]:
    name = resource_id.rsplit("/", 1)[-1]
    keys = {name.casefold()} if "." in name else set()
    stem = name.rsplit(".", 1)[0]
    # A bare stem is a key only when it cannot be an ordinary word or a number.
    if re.search(r"[-_]", stem) and re.search(r"[A-Za-z]", stem) or _identifiers(stem):
        keys.add(stem.casefold())
    return keys


@attrs.frozen
class ExactMatch:
    unit_id: str
    score: float


class ExactIndex:
    """Identity keys of a generation's units, looked up per query term and n-gram."""

    def __init__(self, units: Sequence[Unit]) -> None:
        self._order = {u.unit_id: i for i, u in enumerate(units)}
        self._keys: dict[str, list[tuple[str, int]]] = defaultdict(list)
        by_resource: dict[str, list[Unit]] = defaultdict(list)
        # Resources holding a key as a slug or identifier, and the entries sharing removes (those
        # not from the resource's own path).
        carriers: dict[str, set[str]] = defaultdict(set)
        shareable: set[tuple[str, str]] = set()
        for unit in units:
            by_resource[unit.resource_id].append(unit)
        for resource_id, resource_units in by_resource.items():
            title = next((u.heading_path[0] for u in resource_units if u.heading_path), "")
            resource_keys: dict[str, int] = {}
            path = resource_id.casefold()
            resource_keys[path] = PATH
            if "/" in path and "." in path.rsplit("/", 1)[-1]:
                resource_keys.setdefault(path.rsplit(".", 1)[0], PATH)
            for key in _file_name_keys(resource_id):
                resource_keys.setdefault(key, FILE_NAME)
            for key in _identifiers(resource_id) | _identifiers(title):
                resource_keys.setdefault(key, IDENTIFIER)
            # An identifier in the resource's own path names it however many share it: the files of
            # ``incidents/INC-7/`` are INC-7's, and ``ADR-0042-use-postgres.md`` stays ADR-0042's
            # when a meeting note's heading mentions it.
            own = {key for key in _identifiers(resource_id) if resource_keys[key] == IDENTIFIER}
            title_words = slug_words(title)
            if MIN_SLUG_WORDS <= len(title_words) <= MAX_SLUG_WORDS:
                resource_keys.setdefault("-".join(title_words), SLUG)
            for unit in resource_units:
                unit_keys = dict(resource_keys)
                for heading in unit.heading_path[1:]:
                    for key in _identifiers(heading):
                        unit_keys.setdefault(key, IDENTIFIER)
                    words = slug_words(heading)
                    if MIN_SLUG_WORDS <= len(words) <= MAX_SLUG_WORDS:
                        unit_keys.setdefault("-".join(words), SLUG)
                for key, weight in unit_keys.items():
                    self._keys[key].append((unit.unit_id, weight))
                    if weight in _SHARED_IS_NO_KEY:
                        carriers[key].add(resource_id)
                        if key not in own:
                            shareable.add((key, unit.unit_id))
        # A title or heading that several resources share ("Information Retrieval Systems",
        # "How to run the tests") names none of them: its slug is no key there. On CISI such
        # slugs put 29 units first for 8 queries, 1 of them relevant. The same holds for an
        # identifier in several titles or headings: SciFact's "PD-1", "HIV-1" or "IL-6" put about 10
        # units first for 75 of 809 claims, most of them not relevant (docs/ranking.md).
        for key, resources in carriers.items():
            if len(resources) > 1:
                kept = [(unit_id, weight) for unit_id, weight in self._keys[key] if (key, unit_id) not in shareable]
                if kept:
                    self._keys[key] = kept
                else:
                    del self._keys[key]

    def _query_keys(self, query: str) -> set[str]:
        keys = set()
        for token in _QUERY_TOKEN.findall(query):
            token = token.strip(".:-/").casefold()
            if token:
                keys.add(token)
        keys |= _identifiers(query)
        words = slug_words(query)
        for n in range(MIN_SLUG_WORDS, min(MAX_SLUG_WORDS, len(words)) + 1):
            for i in range(len(words) - n + 1):
                keys.add("-".join(words[i : i + n]))
        return keys

    def search(self, query: str) -> list[ExactMatch]:
        """Matching units, most specific first; ties by the number of keys, then unit order."""
        best: dict[str, tuple[int, int]] = {}
        for key in self._query_keys(query):
            for unit_id, weight in self._keys.get(key, ()):
                top, count = best.get(unit_id, (0, 0))
                best[unit_id] = (max(top, weight), count + 1)
        ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], -kv[1][1], self._order[kv[0]]))
        return [ExactMatch(unit_id, weight + min(count, 99) / 100) for unit_id, (weight, count) in ranked]
