"""Markdown structure: heading sections, fenced code and line spans (the rules are in
``memory_core.retrieval.chunking``'s docstring, which packs these sections into units)."""

from __future__ import annotations

import re

import attrs

MARKDOWN_MEDIA_TYPES = frozenset({"text/markdown", "text/x-markdown"})

Span = tuple[int, int]

EOL = re.compile(r"\r\n|\r|\n")
_ATX = re.compile(r" {0,3}(#{1,6})(?=[ \t]|$)")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)$")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r" {0,3}(=+|-+)[ \t]*$")
# Lines that open another block kind, so an underline below them is not a setext heading.
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[-+*][ \t]|\d{1,9}[.)][ \t]|>)| {4}|\t")


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


def line_spans(text: str, start: int, end: int) -> list[tuple[int, int, int]]:
    """``(line start, content end, next line start)`` for each line in ``[start, end)``."""
    out: list[tuple[int, int, int]] = []
    pos = start
    while pos < end:
        m = EOL.search(text, pos, end)
        if m is None:
            out.append((pos, end, end))
            break
        out.append((pos, m.start(), m.end()))
        pos = m.end()
    return out


def is_blank(text: str, start: int, end: int) -> bool:
    return not text[start:end].strip()


class Fence:
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
    fence = Fence()
    # kinds of the previous two lines: "blank", "heading", "text", "fence" or None at the start
    prev: tuple[int, int, str | None] = (0, 0, None)
    prev2_kind: str | None = None
    for start, content_end, next_start in line_spans(text, 0, len(text)):
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


def has_fence(text: str, start: int, end: int) -> bool:
    fence = Fence()
    return any(fence.feed(text[a:b]) for a, b, _ in line_spans(text, start, end))


def is_markdown(media_type: str) -> bool:
    """True for markdown media types (parameters such as ``charset`` ignored)."""
    return media_type.split(";", 1)[0].strip().lower() in MARKDOWN_MEDIA_TYPES
