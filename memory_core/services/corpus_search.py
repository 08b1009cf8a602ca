"""Searching a case's frozen corpus: the missed-evidence picker (``search_corpus_resources``).

A page of the corpus in manifest order: every resource, or those whose id or body contains a
text (any case). Bodies are read, verified, from the blob store, at most ``SEARCH_SCAN_BYTES``
a call, so a call stays bounded on any corpus and the cursor resumes where it stopped (a page
may hold fewer than ``limit`` matches while ``next_cursor`` is not null). A body match comes
with its passages (``evaluation.passages.text_passages``): the paragraphs holding the first
matches, with their offsets and heading path, so a judge reads the evidence before adding it.
"""

from __future__ import annotations

import re

import attrs

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.model import ManifestEntry
from memory_core.evaluation.passages import TextPassage, text_passages
from memory_core.ports import BlobStore
from memory_core.ports.evaluation import EvaluationStore

SEARCH_SCAN_BYTES = 32 << 20  # corpus bodies read per search call at most; the cursor resumes
SNIPPET_CHARS = 80  # either side of the first match
MAX_CORPUS_PAGE = 200
MAX_SEARCH_CHARS = 500
MATCH_KINDS = ("resource_id", "body")


@attrs.frozen
class CorpusQuery:
    """What to look for in case ``case_id``'s corpus; ``cursor`` is a previous page's ``next_cursor``."""

    case_id: str
    text: str | None = None
    limit: int = 20
    cursor: str | None = None


# The two values below are also the daemon's wire types (the OpenAPI document describes their
# fields), so they carry no docstring: it would become the contract's component description.
@attrs.frozen
class CorpusResourceMatch:
    resource: ManifestEntry
    matched_in: str | None  # one of MATCH_KINDS; None when no text was given
    snippet: str | None
    retrieved: bool  # a unit of it is in the source trace
    selected: bool  # the source Run selected a unit of it
    passages: tuple[TextPassage, ...]  # where the body matched; none for an id match


@attrs.frozen
class CorpusResourcePage:
    case_id: str
    corpus_id: str
    total_resources: int
    resources: tuple[CorpusResourceMatch, ...]
    next_cursor: str | None


def search_corpus(store: EvaluationStore, blobs: BlobStore, query: CorpusQuery) -> CorpusResourcePage:
    """One page of ``query``'s matches; raises ``InvalidRequest`` for a limit, text or cursor out
    of bounds, and the store's and blob store's typed errors."""
    if not 1 <= query.limit <= MAX_CORPUS_PAGE:
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_CORPUS_PAGE}", limit=query.limit)
    if query.text is not None and len(query.text) > MAX_SEARCH_CHARS:
        raise InvalidRequest(f"text is longer than {MAX_SEARCH_CHARS} characters")
    case = store.get_case(query.case_id)
    resources = store.get_corpus(case.corpus_id).resources
    position = _position(query.cursor, len(resources))
    candidates = store.get_trace(query.case_id).candidates
    retrieved = {c.resource_id for c in candidates}
    selected = {c.resource_id for c in candidates if c.disposition == "selected"}
    pattern = re.compile(re.escape(query.text), re.IGNORECASE) if query.text else None
    found: list[CorpusResourceMatch] = []
    scanned = 0
    while position < len(resources) and len(found) < query.limit and scanned < SEARCH_SCAN_BYTES:
        entry = resources[position]
        position += 1
        matched_in: str | None = None
        snippet: str | None = None
        passages: tuple[TextPassage, ...] = ()
        if pattern is not None:
            if pattern.search(entry.resource_id):
                matched_in = "resource_id"
            else:
                body = blobs.get(entry.resource_hash).decode("utf-8", errors="replace")
                scanned += entry.byte_size
                hit = pattern.search(body)
                if hit is None:
                    continue
                matched_in, snippet = "body", _snippet(body, hit.start(), hit.end())
                passages = text_passages(body, entry.media_type, pattern)
        rid = entry.resource_id
        found.append(CorpusResourceMatch(entry, matched_in, snippet, rid in retrieved, rid in selected, passages))
    return CorpusResourcePage(
        case_id=case.case_id,
        corpus_id=case.corpus_id,
        total_resources=len(resources),
        resources=tuple(found),
        next_cursor=str(position) if position < len(resources) else None,
    )


def _position(cursor: str | None, size: int) -> int:
    if cursor is None:
        return 0
    if not cursor.isascii() or not cursor.isdigit() or int(cursor) > size:
        raise InvalidRequest(f"invalid cursor {cursor!r}: pass next_cursor of the previous page", cursor=cursor)
    return int(cursor)


def _snippet(body: str, start: int, end: int) -> str:
    lo, hi = max(0, start - SNIPPET_CHARS), min(len(body), end + SNIPPET_CHARS)
    text = " ".join(body[lo:hi].split())
    return ("…" if lo > 0 else "") + text + ("…" if hi < len(body) else "")
