"""Ways to split a span of text that is over the token limit, coarse to fine: paragraphs (fenced
code kept whole), list items and table rows, sentences, lines, words, grapheme clusters, code points."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from memory_core.retrieval.markdown import EOL, Fence, Span, is_blank, line_spans

# A sentence ends at . ! ? or an ellipsis (then closing quotes or brackets) before whitespace,
# or at a CJK full stop, which needs no space after it.
_SENTENCE_END = re.compile(r"[.!?\u2026]+[)\]\"'\u2019\u201d\u00bb]*\s+|[\u3002\uff01\uff1f]+[\u300d\u300f)]*\s*")
_WHITESPACE = re.compile(r"\s+")
_BACKTICKS = re.compile(r"`+")
# A line that starts a list item (bullet or number, any indent) or a table row.
_ITEM_START = re.compile(r"[ \t]*(?:[-+*]|\d{1,9}[.)])[ \t]| {0,3}\|")
_ZWJ = "\u200d"


def _trim(text: str, start: int, end: int) -> Span | None:
    """The span without surrounding whitespace, or None when nothing is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def split_blocks(text: str, start: int, end: int, *, fences: bool) -> list[Span]:
    """Blank-line separated paragraphs; with ``fences``, a fenced code block is never cut."""
    out: list[Span] = []
    fence = Fence()
    block_start: int | None = None
    block_end = start
    for line_start, content_end, _ in line_spans(text, start, end):
        in_fence = fences and fence.feed(text[line_start:content_end])
        if not in_fence and is_blank(text, line_start, content_end):
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
    cuts = [a for a, b, _ in line_spans(text, start, end) if a > start and _ITEM_START.match(text, a, b)]
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
    return _cut(text, start, end, EOL)


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


_Splitter = Callable[[str, int, int], list[Span]]
# Finer and finer ways to split a span that is over the token limit; code points only cut a
# combining sequence that is over the limit by itself.
REFINERS: tuple[_Splitter, ...] = (_items, _sentences, _line_pieces, _words, _clusters, _code_points)
# Refiners below this index cut at boundaries good enough to end a unit early on: a paragraph
# that fits alone may still be cut there (items, sentences, lines) to fill the unit before it.
SOFT_LEVELS = 3
