"""What a judge reads: each candidate's text, cut from its case's frozen corpus by its span and
checked against its unit hash (``eval case show``, the case page), and the passages of a
resource's text that hold a search match (the missed-evidence picker).

A candidate's text is shown only when it is provably the text that was ranked: the frozen body's
code points ``[start, end)`` hash, with the span, to the candidate's ``unit_hash`` (brief §3).
Otherwise its passage says why, and shows no text rather than text that merely sits at the same
offsets: the Run was recorded before candidates kept their span, the resource is not in the frozen
corpus (deleted before the Run), the frozen body holds other text there (the resource changed after
the generation that ranked it was built), or the body cannot be read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from memory_core.domain.errors import BlobCorrupted, BlobNotFound
from memory_core.domain.model import unit_hash_of
from memory_core.retrieval.markdown import Section, is_markdown, markdown_sections
from memory_core.retrieval.splitting import split_blocks
from memory_core.runs.records import CandidateRecord

SHOWN, NO_SPAN, NOT_IN_CORPUS, TEXT_CHANGED, BODY_UNREADABLE = (
    "shown",
    "no_span",
    "not_in_corpus",
    "text_changed",
    "body_unreadable",
)
PASSAGE_STATUSES = (SHOWN, NO_SPAN, NOT_IN_CORPUS, TEXT_CHANGED, BODY_UNREADABLE)
# What a judge is told instead of the text; the CLI and the case page show these words.
NOTES: Mapping[str, str] = {
    NO_SPAN: "text not shown: this Run was recorded before candidates kept their span",
    NOT_IN_CORPUS: "text not shown: the resource is not in the frozen corpus (deleted before the Run)",
    TEXT_CHANGED: "text not shown: the frozen corpus holds other text at this span "
    "(the resource changed after it was indexed)",
    BODY_UNREADABLE: "text not shown: the resource's frozen body cannot be read",
}

PASSAGE_CONTEXT_CHARS = 300  # a search passage: at most this much either side of its match
MAX_PASSAGES_PER_RESOURCE = 3

ReadBody = Callable[[str], bytes]  # a frozen body by its resource hash, verified (BlobStore.get)


# The values below are also the daemon's wire types (the OpenAPI document describes their
# fields), so they carry comments, not docstrings, which would become component descriptions.
@attrs.frozen
class CandidatePassage:
    # One candidate of a case's trace, in final order: its text as the frozen corpus holds it
    # (``status`` "shown") or, with ``text`` None, the ``note`` a judge reads instead.
    unit_id: str
    resource_id: str
    heading_path: tuple[str, ...]
    start: int | None
    end: int | None
    status: str  # one of PASSAGE_STATUSES
    text: str | None
    note: str | None

    @classmethod
    def of(cls, c: CandidateRecord, status: str, text: str | None = None) -> CandidatePassage:
        return cls(c.unit_id, c.resource_id, c.heading_path, c.start, c.end, status, text, NOTES.get(status))


def candidate_passages(
    candidates: Sequence[CandidateRecord],
    corpus_hashes: Mapping[str, str],
    read_body: ReadBody,
    cut: CutTexts | None = None,
) -> tuple[CandidatePassage, ...]:
    """Every candidate's passage, in the given order. ``corpus_hashes``: the frozen corpus's
    resource_id -> resource_hash; ``read_body``: a body by its hash, verified (the blob store's
    ``get``: ``BlobNotFound`` or ``BlobCorrupted`` make the body unreadable, not the call fail).
    ``cut``: texts already cut (``cut_texts``) over cases that hold these candidates, shared by
    them; without it, these candidates' own."""
    if cut is None:
        cut = cut_texts([(candidates, corpus_hashes)], read_body)
    return tuple(_passage(c, corpus_hashes, cut) for c in candidates)


# A unit's text is known by its frozen body and what it claims to be there: the body's resource
# hash, the unit hash and the span (the hash covers the span, the span is kept for exactness).
TextKey = tuple[str, str, int, int]


@attrs.frozen
class CutTexts:
    """Candidates' texts cut from their frozen bodies (``cut_texts``): a text by its ``TextKey``
    (None: the body holds other text there), and the bodies that could not be read."""

    texts: Mapping[TextKey, str | None]
    unreadable: frozenset[str]


def cut_texts(cases: Iterable[tuple[Sequence[CandidateRecord], Mapping[str, str]]], read_body: ReadBody) -> CutTexts:
    """The texts of the candidates of ``cases`` (each its candidates and frozen corpus hashes),
    each distinct one cut and held once however many cases hold it, each body read and decoded
    once and let go when its units are cut (a learning's cases share most of their units)."""
    wanted: dict[str, set[tuple[str, int, int]]] = {}  # body hash -> (unit hash, start, end)
    for candidates, corpus_hashes in cases:
        for c in candidates:
            digest = corpus_hashes.get(c.resource_id)
            if c.start is not None and c.end is not None and digest is not None:
                wanted.setdefault(digest, set()).add((c.unit_hash, c.start, c.end))
    texts: dict[TextKey, str | None] = {}
    unreadable = set()
    for digest, units in wanted.items():
        try:
            body = read_body(digest).decode("utf-8")
        except (BlobNotFound, BlobCorrupted, UnicodeDecodeError):
            unreadable.add(digest)
            continue
        for unit_hash, start, end in units:
            texts[(digest, unit_hash, start, end)] = cut_unit(body, start, end, unit_hash)
    return CutTexts(texts, frozenset(unreadable))


def _passage(c: CandidateRecord, corpus_hashes: Mapping[str, str], cut: CutTexts) -> CandidatePassage:
    if c.start is None or c.end is None:
        return CandidatePassage.of(c, NO_SPAN)
    digest = corpus_hashes.get(c.resource_id)
    if digest is None:
        return CandidatePassage.of(c, NOT_IN_CORPUS)
    if digest in cut.unreadable:
        return CandidatePassage.of(c, BODY_UNREADABLE)
    text = cut.texts.get((digest, c.unit_hash, c.start, c.end))
    return CandidatePassage.of(c, TEXT_CHANGED) if text is None else CandidatePassage.of(c, SHOWN, text)


def cut_unit(body: str, start: int, end: int, unit_hash: str) -> str | None:
    """``body[start:end]`` when it is the unit ``unit_hash`` names (its text and span hash to it),
    else None. The one check of a unit against a body: the case page's and fixture import's."""
    if not 0 <= start <= end <= len(body):
        return None
    text = body[start:end]
    return text if unit_hash_of(text, start, end) == unit_hash else None


# -- search passages ------------------------------------------------------------------------------


@attrs.frozen
class TextPassage:
    # A part of a resource's text holding a match: the paragraph around it (at most
    # PASSAGE_CONTEXT_CHARS either side of the match), as code-point offsets into the text like a
    # unit's span, with the heading path of the markdown section it is in.
    start: int
    end: int
    heading_path: tuple[str, ...]
    text: str
    match_start: int
    match_end: int


def text_passages(
    text: str, media_type: str, pattern: re.Pattern[str], limit: int = MAX_PASSAGES_PER_RESOURCE
) -> tuple[TextPassage, ...]:
    """The passages of ``text`` holding a match of ``pattern``, in document order, at most
    ``limit``; a match inside an earlier passage adds none."""
    out: list[TextPassage] = []
    markdown = is_markdown(media_type)
    sections: list[Section] | None = None
    for hit in pattern.finditer(text):
        if len(out) >= limit:
            break
        if out and hit.start() < out[-1].end:
            continue
        if sections is None:  # only for a text that matches
            sections = _sections(text, markdown)
        section = _holding(sections, hit.start())
        lo, hi = _paragraph(text, section, hit.start(), hit.end(), fences=markdown)
        lo = max(lo, hit.start() - PASSAGE_CONTEXT_CHARS)
        hi = min(hi, hit.end() + PASSAGE_CONTEXT_CHARS)
        out.append(TextPassage(lo, hi, section.heading_path, text[lo:hi], hit.start(), hit.end()))
    return tuple(out)


def _sections(text: str, markdown: bool) -> list[Section]:
    whole = [Section(0, len(text), (), 0, 0)]  # plain text has no headings
    return (markdown_sections(text) or whole) if markdown else whole


def _holding(sections: Iterable[Section], position: int) -> Section:
    found = None
    for s in sections:
        if s.start <= position:
            found = s
    assert found is not None  # the sections partition the text from 0
    return found


def _paragraph(text: str, section: Section, start: int, end: int, *, fences: bool) -> tuple[int, int]:
    """The blank-line separated block of ``section`` holding ``[start, end)`` (markdown's fenced
    code whole, as the chunker keeps it), or just the match when it spans blocks."""
    for lo, hi in split_blocks(text, section.start, section.end, fences=fences):
        if lo <= start and end <= hi:
            return lo, hi
    return start, end
