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

from collections.abc import Callable, Sequence
from typing import Protocol

from memory_core.domain.model import Unit, unit_hash_of, unit_id_for
from memory_core.retrieval.markdown import Section, Span, has_fence, is_blank, is_markdown, markdown_sections
from memory_core.retrieval.splitting import REFINERS, SOFT_LEVELS, split_blocks

PARSER_REVISION = "md-parser-v1"
CHUNKER_REVISION = "md-units-v2"


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
        for a, b in split_blocks(text, 0, len(text), fences=False):
            pieces.extend(self._fit(text, a, b))
        return [(s, e, ()) for s, e in self._merge_small(text, pieces)]

    def _markdown(self, text: str) -> list[tuple[int, int, tuple[str, ...]]]:
        out: list[tuple[int, int, tuple[str, ...]]] = []
        group: list[Section] = []  # bare parent headings waiting for their child, then the child
        sections = markdown_sections(text)
        for i, sec in enumerate(sections):
            group.append(sec)
            nxt = sections[i + 1] if i + 1 < len(sections) else None
            bare = sec.level > 0 and is_blank(text, sec.body_start, sec.end)
            if bare and nxt is not None and nxt.level > sec.level:
                continue
            # Whole lines from the section start, so fence tracking matches the parser's.
            heading_end = sec.body_start if sec.level > 0 else sec.start
            blocks = split_blocks(text, group[0].start, sec.end, fences=True)
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
        for lvl in range(level, len(REFINERS)):
            pieces = REFINERS[lvl](text, start, end)
            if len(pieces) > 1:
                return pieces, lvl
        return None

    def _hungry(self, text: str, run: _Run) -> bool:
        return run.open is not None and 2 * self.token_counter.count(text[run.open[0] : run.open[1]]) < self.max_tokens

    def _feed(self, run: _Run, text: str, segments: list[Span], level: int, *, blocks: bool) -> None:
        """Greedily extend the open unit with consecutive segments. A segment that does not fit
        is refined from ``REFINERS[level]`` on and its pieces fill the open unit when cutting
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
                if not (blocks and has_fence(text, a, b)):
                    refined = self._refine(text, a, b, level)
                if refined is not None and (run.heading_only() or (blocks and refined[1] < SOFT_LEVELS)):
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
            soft = blocks and lvl < SOFT_LEVELS and not has_fence(text, a, b)
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


class TokenCounter(Protocol):
    @property
    def revision(self) -> str: ...

    def count(self, text: str) -> int: ...
