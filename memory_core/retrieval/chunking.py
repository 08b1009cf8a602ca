"""Markdown and plain-text chunking: heading-aware units with exact code-point spans.

Units are ``[start, end)`` spans of the decoded text, trimmed of surrounding whitespace, in
document order, never overlapping, and together holding every non-whitespace character of
the resource exactly once.

Markdown (``text/markdown``, ``text/x-markdown``):

- ATX headings (``#`` .. ``######`` then a space, a tab or the end of the line; up to three
  leading spaces) start sections. ``#hashtag`` is not a heading; lines inside fenced code
  (backticks or tildes, unclosed fences run to the end) are never headings.
- Setext headings (``Title`` then a ``===`` or ``---`` line) are supported when the title is a
  single-line paragraph; a multi-line paragraph followed by an underline stays plain text.
- A section is its heading line plus the body up to the next heading of any level. Its
  heading path is the titles of the enclosing headings and its own, closing ``#`` stripped.
- Text before the first heading is a section with the empty heading path.
- A bare heading (nothing but whitespace before the next heading) is merged into the next
  section when that section is its child (a deeper level): ``# A`` then ``## B`` gives one
  unit with path ``("A", "B")`` whose text starts at ``# A``. A bare heading followed by a
  sibling, a shallower heading or the end of the document is a small unit of its own. A unit
  always takes the heading path of the section holding its last character.

Plain text (every other media type): one unit per paragraph (blank-line separated).

A section or paragraph over ``max_tokens`` is packed greedily into units as full as possible.
It is cut at paragraphs (fenced code kept whole) first, then list items and table rows, then
sentences (not at a period inside inline code or after a list number), then lines, then
whitespace-separated words and, last, characters (never inside a combining sequence when
avoidable), so every unit fits unless one character alone does not. A paragraph that does
not fit in the current unit fills it with its leading items, sentences or lines (the first
of these that splits it) before a new unit starts. A segment cut at words or characters
anyway fills the current unit when that is under half full. A unit holding only heading
lines is never closed while a piece of its body can join it (the one exception: a fenced
block that fits whole on its own but not after the heading). Units with fewer than
``min_chars`` visible characters fold into a neighbour when the result fits.

Line endings may be ``\n``, ``\r\n`` or ``\r``; offsets count every code point, ``\r`` included.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from memory_core.domain.model import Unit, unit_hash_of, unit_id_for

PARSER_REVISION = "md-parser-v1"
CHUNKER_REVISION = "md-units-v2"

MARKDOWN_MEDIA_TYPES = frozenset({"text/markdown", "text/x-markdown"})

Span = tuple[int, int]

_EOL = re.compile(r"\r\n|\r|\n")
_ATX = re.compile(r" {0,3}(#{1,6})(?=[ \t]|$)")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)$")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r" {0,3}(=+|-+)[ \t]*$")
# Lines that open another block kind, so an underline below them is not a setext heading.
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[-+*][ \t]|\d{1,9}[.)][ \t]|>)| {4}|\t")
# A sentence ends at . ! ? or an ellipsis (then closing quotes or brackets) before whitespace,
# or at a CJK full stop, which needs no space after it.
_SENTENCE_END = re.compile(r"[.!?\u2026]+[)\]\"'\u2019\u201d\u00bb]*\s+|[\u3002\uff01\uff1f]+[\u300d\u300f)]*\s*")
_WHITESPACE = re.compile(r"\s+")
_BACKTICKS = re.compile(r"`+")
# A line that starts a list item (bullet or number, any indent) or a table row.
_ITEM_START = re.compile(r"[ \t]*(?:[-+*]|\d{1,9}[.)])[ \t]| {0,3}\|")
_ZWJ = "\u200d"


@attrs.frozen
class Section:
    """A markdown section: ``[start, end)`` covers its heading line(s) and body."""

    start: int
    end: int
    heading_path: tuple[str, ...]
    level: int  # 0 for text before the first heading
    body_start: int  # where the text after the heading line(s) begins


@attrs.frozen
class _Heading:
    start: int
    body_start: int
    level: int
    title: str


def markdown_sections(text: str) -> list[Section]:
    """Split markdown into heading sections that partition ``text`` (before bare-heading merging)."""
    headings = _headings(text)
    sections: list[Section] = []
    first = headings[0].start if headings else len(text)
    if first > 0:
        sections.append(Section(0, first, (), 0, 0))
    stack: list[_Heading] = []
    for i, h in enumerate(headings):
        while stack and stack[-1].level >= h.level:
            stack.pop()
        stack.append(h)
        end = headings[i + 1].start if i + 1 < len(headings) else len(text)
        sections.append(Section(h.start, end, tuple(s.title for s in stack), h.level, h.body_start))
    return sections


def _lines(text: str, start: int, end: int) -> list[tuple[int, int, int]]:
    """``(line start, content end, next line start)`` for each line in ``[start, end)``."""
    out: list[tuple[int, int, int]] = []
    pos = start
    while pos < end:
        m = _EOL.search(text, pos, end)
        if m is None:
            out.append((pos, end, end))
            break
        out.append((pos, m.start(), m.end()))
        pos = m.end()
    return out


def _is_blank(text: str, start: int, end: int) -> bool:
    return not text[start:end].strip()


class _Fence:
    """Tracks fenced code blocks line by line (CommonMark rules, minus list nesting)."""

    def __init__(self) -> None:
        self.marker: str | None = None

    def feed(self, line: str) -> bool:
        """True when ``line`` is part of a fence (opening, body or closing line)."""
        if self.marker is not None:
            m = _FENCE_CLOSE.match(line)
            if m and m.group(1)[0] == self.marker[0] and len(m.group(1)) >= len(self.marker):
                self.marker = None
            return True
        m = _FENCE_OPEN.match(line)
        if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            self.marker = m.group(1)
            return True
        return False


def _atx_title(line: str) -> tuple[int, str] | None:
    m = _ATX.match(line)
    if m is None:
        return None
    rest = _ATX_CLOSING.sub("", line[m.end() :].strip(" \t"))
    return len(m.group(1)), rest.strip()


def _headings(text: str) -> list[_Heading]:
    headings: list[_Heading] = []
    fence = _Fence()
    # kinds of the previous two lines: "blank", "heading", "text", "fence" or None at the start
    prev: tuple[int, int, str | None] = (0, 0, None)
    prev2_kind: str | None = None
    for start, content_end, next_start in _lines(text, 0, len(text)):
        line = text[start:content_end]
        kind: str
        if fence.feed(line):
            kind = "fence"
        elif not line.strip():
            kind = "blank"
        elif (atx := _atx_title(line)) is not None:
            headings.append(_Heading(start, next_start, atx[0], atx[1]))
            kind = "heading"
        elif (
            (m := _SETEXT_UNDERLINE.match(line))
            and prev[2] == "text"
            and prev2_kind in (None, "blank", "heading")
            and not _NOT_PARAGRAPH.match(text[prev[0] : prev[1]])
        ):
            level = 1 if m.group(1)[0] == "=" else 2
            headings.append(_Heading(prev[0], next_start, level, text[prev[0] : prev[1]].strip()))
            prev = (prev[0], prev[1], "heading")
            kind = "heading"
        else:
            kind = "text"
        prev2_kind = prev[2]
        prev = (start, content_end, kind)
    return headings


def _trim(text: str, start: int, end: int) -> Span | None:
    """The span without surrounding whitespace, or None when nothing is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _blocks(text: str, start: int, end: int, *, fences: bool) -> list[Span]:
    """Blank-line separated paragraphs; with ``fences``, a fenced code block is never cut."""
    out: list[Span] = []
    fence = _Fence()
    block_start: int | None = None
    block_end = start
    for line_start, content_end, _ in _lines(text, start, end):
        in_fence = fences and fence.feed(text[line_start:content_end])
        if not in_fence and _is_blank(text, line_start, content_end):
            if block_start is not None:
                out.append((block_start, block_end))
                block_start = None
            continue
        if block_start is None:
            block_start = line_start
        block_end = content_end
    if block_start is not None:
        out.append((block_start, block_end))
    return [s for b in out if (s := _trim(text, *b)) is not None]


def _cut_at(text: str, start: int, end: int, cuts: list[int]) -> list[Span]:
    """Trimmed, non-empty pieces of ``[start, end)`` cut at each position in ``cuts``."""
    out: list[Span] = []
    prev = start
    for c in [*cuts, end]:
        if (s := _trim(text, prev, c)) is not None:
            out.append(s)
        prev = c
    return out


def _cut(text: str, start: int, end: int, pattern: re.Pattern[str]) -> list[Span]:
    """Trimmed, non-empty pieces of ``[start, end)`` cut after each match of ``pattern``."""
    return _cut_at(text, start, end, [m.end() for m in pattern.finditer(text, start, end)])


def _items(text: str, start: int, end: int) -> list[Span]:
    """List items and table rows: cut before each line that starts one."""
    cuts = [a for a, b, _ in _lines(text, start, end) if a > start and _ITEM_START.match(text, a, b)]
    return _cut_at(text, start, end, cuts)


def _sentences(text: str, start: int, end: int) -> list[Span]:
    cuts: list[int] = []
    pos, in_code = start, False
    for m in _SENTENCE_END.finditer(text, start, end):
        # Inline code (an odd number of backtick runs so far) and "4." list numbers hold
        # periods that end no sentence.
        in_code ^= len(_BACKTICKS.findall(text, pos, m.start())) % 2 == 1
        pos = m.start()
        if not in_code and not _is_list_number(text, start, m.start()):
            cuts.append(m.end())
    return _cut_at(text, start, end, cuts)


def _is_list_number(text: str, start: int, i: int) -> bool:
    """True when ``text[i]`` follows a line start, up to three spaces and 1-9 digits."""
    j = i
    while j > start and i - j < 9 and text[j - 1].isdigit():
        j -= 1
    if j == i:
        return False
    k = j
    while k > start and j - k < 3 and text[k - 1] in " \t":
        k -= 1
    return k == start or text[k - 1] in "\r\n"


def _line_pieces(text: str, start: int, end: int) -> list[Span]:
    return _cut(text, start, end, _EOL)


def _words(text: str, start: int, end: int) -> list[Span]:
    return _cut(text, start, end, _WHITESPACE)


def _clusters(text: str, start: int, end: int) -> list[Span]:
    """Code points with the combining marks and emoji sequences that continue them."""
    out: list[Span] = []
    for i in range(start, end):
        if text[i].isspace():
            continue
        if out and out[-1][1] == i and _joins_previous(text, i):
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def _code_points(text: str, start: int, end: int) -> list[Span]:
    return [(i, i + 1) for i in range(start, end) if not text[i].isspace()]


def _joins_previous(text: str, i: int) -> bool:
    """True when cutting before ``text[i]`` would split a combining sequence or emoji."""
    c = text[i]
    if text[i - 1] == _ZWJ or c == _ZWJ:
        return True
    if unicodedata.category(c) in ("Mn", "Mc", "Me"):
        return True
    cp = ord(c)
    return 0xFE00 <= cp <= 0xFE0F or 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F


def _has_fence(text: str, start: int, end: int) -> bool:
    fence = _Fence()
    return any(fence.feed(text[a:b]) for a, b, _ in _lines(text, start, end))


_Splitter = Callable[[str, int, int], list[Span]]
# Finer and finer ways to split a span that is over the token limit; code points only cut a
# combining sequence that is over the limit by itself.
_REFINERS: tuple[_Splitter, ...] = (_items, _sentences, _line_pieces, _words, _clusters, _code_points)
# Refiners below this index cut at boundaries good enough to end a unit early on: a paragraph
# that fits alone may still be cut there (items, sentences, lines) to fill the unit before it.
_SOFT_LEVELS = 3


class _Run:
    """Units packed so far and the open unit that the next segments may still extend."""

    def __init__(self, heading_end: int) -> None:
        self.out: list[Span] = []
        self.open: Span | None = None
        self.heading_end = heading_end  # an open unit ending here or before holds only headings

    def heading_only(self) -> bool:
        return self.open is not None and self.open[1] <= self.heading_end

    def flush(self) -> None:
        if self.open is not None:
            self.out.append(self.open)
            self.open = None


def _largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """Largest ``x`` in ``[lo, hi]`` with ``ok(x)``, given ``ok(lo)``; galloping, then bisecting."""
    good, step = lo, 1
    while True:
        probe = min(good + step, hi)
        if probe == good:
            return good
        if not ok(probe):
            bad = probe
            break
        good, step = probe, step * 2
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


class MarkdownChunker:
    """The ``Chunker`` port: heading-aware markdown units and paragraph units for plain text."""

    def __init__(self, token_counter: TokenCounter, max_tokens: int = 256, min_chars: int = 1) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        if min_chars < 1:
            raise ValueError(f"min_chars must be at least 1, got {min_chars}")
        self.token_counter = token_counter
        self.max_tokens = max_tokens
        self.min_chars = min_chars
        self.parser_revision: str = PARSER_REVISION
        self.revision: str = f"{CHUNKER_REVISION}+max{max_tokens}+min{min_chars}+{token_counter.revision}"

    def chunk(self, resource_id: str, resource_hash: str, text: str, media_type: str) -> list[Unit]:
        """The resource's units in document order (none for empty or blank text)."""
        spans = self.spans(text, media_type)
        units: list[Unit] = []
        for ordinal, (start, end, path) in enumerate(spans):
            body = text[start:end]
            units.append(
                Unit(
                    unit_id=unit_id_for(resource_id, ordinal),
                    resource_id=resource_id,
                    ordinal=ordinal,
                    start=start,
                    end=end,
                    heading_path=path,
                    text=body,
                    token_count=self.token_counter.count(body),
                    unit_hash=unit_hash_of(body, start, end),
                    resource_hash=resource_hash,
                )
            )
        return units

    def spans(self, text: str, media_type: str) -> list[tuple[int, int, tuple[str, ...]]]:
        """``(start, end, heading_path)`` of each unit, in document order."""
        if is_markdown(media_type):
            return self._markdown(text)
        pieces: list[Span] = []
        for a, b in _blocks(text, 0, len(text), fences=False):
            pieces.extend(self._fit(text, a, b))
        return [(s, e, ()) for s, e in self._merge_small(text, pieces)]

    def _markdown(self, text: str) -> list[tuple[int, int, tuple[str, ...]]]:
        out: list[tuple[int, int, tuple[str, ...]]] = []
        group: list[Section] = []  # bare parent headings waiting for their child, then the child
        sections = markdown_sections(text)
        for i, sec in enumerate(sections):
            group.append(sec)
            nxt = sections[i + 1] if i + 1 < len(sections) else None
            bare = sec.level > 0 and _is_blank(text, sec.body_start, sec.end)
            if bare and nxt is not None and nxt.level > sec.level:
                continue
            # Whole lines from the section start, so fence tracking matches the parser's.
            heading_end = sec.body_start if sec.level > 0 else sec.start
            blocks = _blocks(text, group[0].start, sec.end, fences=True)
            pieces = self._pack_blocks(text, blocks, heading_end)
            # A piece takes the path of the section its last character is in; headings stay
            # with their body, so a parent heading is alone only when the headings fill a unit.
            for s, e in self._merge_small(text, pieces):
                owner = next(g for g in reversed(group) if g.start < e)
                out.append((s, e, owner.heading_path))
            group = []
        return out

    def _fits(self, text: str, start: int, end: int) -> bool:
        return self.token_counter.count(text[start:end]) <= self.max_tokens

    def _longest(self, text: str, start: int, ends: Sequence[int], lo: int) -> int:
        """Largest ``k >= lo`` with ``text[start:ends[k]]`` fitting, given that ``ends[lo]`` fits."""
        return _largest(lo, len(ends) - 1, lambda k: self._fits(text, start, ends[k]))

    def _pack_blocks(self, text: str, blocks: list[Span], heading_end: int) -> list[Span]:
        if not blocks:
            return []
        if self._fits(text, blocks[0][0], blocks[-1][1]):
            return [(blocks[0][0], blocks[-1][1])]
        run = _Run(heading_end)
        self._feed(run, text, blocks, 0, blocks=True)
        run.flush()
        return run.out

    def _fit(self, text: str, start: int, end: int) -> list[Span]:
        """Split a trimmed span into the fullest pieces that fit."""
        run = _Run(start)
        self._feed(run, text, [(start, end)], 0, blocks=False)
        run.flush()
        return run.out

    def _refine(self, text: str, start: int, end: int, level: int) -> tuple[list[Span], int] | None:
        """The pieces of the first refiner from ``level`` on that splits the span, and its level."""
        for lvl in range(level, len(_REFINERS)):
            pieces = _REFINERS[lvl](text, start, end)
            if len(pieces) > 1:
                return pieces, lvl
        return None

    def _hungry(self, text: str, run: _Run) -> bool:
        return run.open is not None and 2 * self.token_counter.count(text[run.open[0] : run.open[1]]) < self.max_tokens

    def _feed(self, run: _Run, text: str, segments: list[Span], level: int, *, blocks: bool) -> None:
        """Greedily extend the open unit with consecutive segments. A segment that does not fit
        is refined from ``_REFINERS[level]`` on and its pieces fill the open unit when cutting
        there beats closing the unit first; ``blocks`` marks a section's paragraphs."""
        ends = [e for _, e in segments]
        i = 0
        while i < len(segments):
            a, b = segments[i]
            s = a if run.open is None else run.open[0]
            if self._fits(text, s, b):
                j = self._longest(text, s, ends, i)
                run.open = (s, ends[j])
                i = j + 1
                continue
            if run.open is not None and self._fits(text, a, b):
                # Whole on its own: cut it only to fill the unit at a sentence or line, or to
                # keep a heading with its body; a fenced block is never cut.
                refined = None
                if not (blocks and _has_fence(text, a, b)):
                    refined = self._refine(text, a, b, level)
                if refined is not None and (run.heading_only() or (blocks and refined[1] < _SOFT_LEVELS)):
                    self._feed(run, text, refined[0], refined[1] + 1, blocks=False)
                    i += 1
                else:
                    run.flush()  # the segment starts the next unit on the next pass
                continue
            # Over the limit alone, so it is cut anyway: its first pieces join the open unit
            # unless the unit is well filled and the cut would be finer than a line.
            refined = self._refine(text, a, b, level)
            if refined is None:
                run.flush()
                run.out.append((a, b))  # one code point over the limit: a unit of its own
                i += 1
                continue
            pieces, lvl = refined
            soft = blocks and lvl < _SOFT_LEVELS and not _has_fence(text, a, b)
            if not (soft or run.heading_only() or self._hungry(text, run)):
                run.flush()
            self._feed(run, text, pieces, lvl + 1, blocks=False)
            i += 1

    def _merge_small(self, text: str, pieces: list[Span]) -> list[Span]:
        """Fold pieces with fewer than ``min_chars`` visible characters into a neighbour when the
        result still fits. Markdown folds within a section only, so heading paths stay right;
        plain text folds across paragraphs (a lone ``*`` or ``---`` joins the one before it)."""
        if self.min_chars <= 1 or len(pieces) <= 1:
            return pieces

        def small(p: Span) -> bool:
            return _visible(text, p) < self.min_chars

        out: list[Span] = []
        for p in pieces:
            if out and (small(p) or small(out[-1])) and self._fits(text, out[-1][0], p[1]):
                out[-1] = (out[-1][0], p[1])
            else:
                out.append(p)
        return out


def _visible(text: str, span: Span) -> int:
    return sum(1 for c in text[span[0] : span[1]] if not c.isspace())


def is_markdown(media_type: str) -> bool:
    """True for markdown media types (parameters such as ``charset`` ignored)."""
    return media_type.split(";", 1)[0].strip().lower() in MARKDOWN_MEDIA_TYPES




class TokenCounter(Protocol):
    @property
    def revision(self) -> str: ...

    def count(self, text: str) -> int: ...
