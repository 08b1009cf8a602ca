"""MarkdownChunker: examples for the parser and splitter, hypothesis properties for spans,
coverage, token limits and identities."""

from __future__ import annotations

import math
import re
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.domain.model import Unit, unit_hash_of, unit_id_for
from memory_core.ports import Chunker
from memory_core.retrieval.chunking import CHUNKER_REVISION, MarkdownChunker, TokenCounter
from memory_core.retrieval.markdown import is_markdown, markdown_sections

MD = "text/markdown"
TXT = "text/plain"
PROPERTY_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class WordCounter:
    """One token per whitespace-separated word."""

    revision = "words-v1"

    def count(self, text: str) -> int:
        return len(text.split())


class SubwordCounter:
    """One token per started group of four characters of each word, like a subword tokenizer."""

    revision = "subwords-v1"

    def count(self, text: str) -> int:
        return sum(math.ceil(len(w) / 4) for w in text.split())


class CharCounter:
    """One token per non-whitespace code point."""

    revision = "chars-v1"

    def count(self, text: str) -> int:
        return sum(1 for c in text if not c.isspace())


def chunk(
    text: str, media_type: str = MD, max_tokens: int = 256, counter: TokenCounter | None = None, min_chars: int = 1
) -> list[Unit]:
    chunker = MarkdownChunker(counter or WordCounter(), max_tokens=max_tokens, min_chars=min_chars)
    return chunker.chunk("docs/a.md", "rh", text, media_type)


def visible(text: str) -> str:
    return "".join(c for c in text if not c.isspace())


def assert_invariants(text: str, units: list[Unit], resource_id: str = "docs/a.md") -> None:
    prev_end = 0
    for ordinal, u in enumerate(units):
        assert u.unit_id == unit_id_for(resource_id, ordinal) == f"{resource_id}#{ordinal}"
        assert u.ordinal == ordinal and u.resource_id == resource_id
        assert text[u.start : u.end] == u.text
        assert u.text and u.text == u.text.strip()
        # Ordered, non-overlapping, and only whitespace between units.
        assert prev_end <= u.start < u.end
        assert not text[prev_end : u.start].strip()
        assert u.unit_hash == unit_hash_of(u.text, u.start, u.end)
        prev_end = u.end
    assert not text[prev_end:].strip()
    assert "".join(visible(u.text) for u in units) == visible(text)


def heading_paths(text: str) -> list[tuple[str, ...]]:
    """The heading path of each unit ``text`` chunks into, once the units' invariants hold."""
    units = chunk(text)
    assert_invariants(text, units)
    return [u.heading_path for u in units]


# -- examples: headings ---------------------------------------------------------------------

RUNBOOK = """Preface before any heading.

# Deploy runbook

How we deploy.

## Rollback

Revert the release.

### Database

Restore the snapshot.

## Verify

Check the dashboards.

# Appendix ##

Links.
"""


def test_heading_paths_follow_nesting() -> None:
    units = chunk(RUNBOOK)
    assert [u.heading_path for u in units] == [
        (),
        ("Deploy runbook",),
        ("Deploy runbook", "Rollback"),
        ("Deploy runbook", "Rollback", "Database"),
        ("Deploy runbook", "Verify"),
        ("Appendix",),
    ]
    assert units[0].text == "Preface before any heading."
    assert units[2].text == "## Rollback\n\nRevert the release."
    assert units[5].text == "# Appendix ##\n\nLinks."
    assert_invariants(RUNBOOK, units)


def test_bare_heading_merges_into_its_child_only() -> None:
    text = "# Deploy runbook\n## Rollback\nRevert.\n# Empty\n# Next\nBody.\n## Last"
    units = chunk(text)
    assert [(u.heading_path, u.text) for u in units] == [
        (("Deploy runbook", "Rollback"), "# Deploy runbook\n## Rollback\nRevert."),
        (("Empty",), "# Empty"),
        (("Next",), "# Next\nBody."),
        (("Next", "Last"), "## Last"),
    ]


@pytest.mark.parametrize(
    ("line", "is_heading"),
    [
        ("# Title", True),
        ("###### Six", True),
        ("#\tTabbed", True),
        ("   # Three spaces", True),
        ("#hashtag", False),
        ("#5 is a number", False),
        ("####### Seven", False),
        ("    # Indented code", False),
        ("\t# Tab-indented code", False),
    ],
)
def test_atx_heading_rules(line: str, is_heading: bool) -> None:
    units = chunk(f"Intro.\n\n{line}\n\nBody.")
    paths = {u.heading_path for u in units}
    assert (len(paths) > 1) is is_heading


def test_heading_titles_are_stripped_of_markers() -> None:
    sections = markdown_sections("## Title with # inside ##  \n\n# Trailing#\n\n#\n\n### ###\n")
    assert [s.heading_path[-1] for s in sections] == ["Title with # inside", "Trailing#", "", ""]
    assert [s.level for s in sections] == [2, 1, 1, 3]


def test_unicode_titles_and_text() -> None:
    text = "# שלום עולם\n\nمرحبا بالعالم 👩‍💻\n\n## Cafe\u0301 ☕\n\nRésumé e\u0301\u0301.\n"
    assert heading_paths(text) == [("שלום עולם",), ("שלום עולם", "Cafe\u0301 ☕")]


def test_setext_headings() -> None:
    text = "Title\n=====\n\nBody.\n\nSub\n---\n\nMore.\n\nTwo line\nparagraph\n---\n\nTail.\n\n---\n\nAfter rule."
    units = chunk(text)
    assert [u.heading_path for u in units] == [("Title",), ("Title", "Sub")]
    assert units[1].text.startswith("Sub\n---")
    assert units[1].text.endswith("After rule.")
    # A list item or front matter above an underline is not a heading.
    assert {u.heading_path for u in chunk("- item\n---\n\ntext")} == {()}
    assert {u.heading_path for u in chunk("---\ntitle: x\n---\n\ntext")} == {()}


# -- examples: code fences ----------------------------------------------------------------


def test_headings_inside_fences_are_ignored() -> None:
    text = "# Real\n\n```bash\n# not a heading\n\necho hi\n```\n\n~~~\n## also not\n```\n~~~\n\n## Real child\n\ntext"
    assert heading_paths(text) == [("Real",), ("Real", "Real child")]


def test_unclosed_fence_runs_to_the_end() -> None:
    text = "# A\n\n````\n# hidden\n```\n# still hidden\n"
    assert [u.heading_path for u in chunk(text)] == [("A",)]


def test_longer_closing_fence_and_info_with_backtick() -> None:
    # ``` with a backtick in its info string is not a fence, so "# B" is a heading.
    assert [u.heading_path for u in chunk("```a`b\n# B\n")] == [(), ("B",)]
    assert [u.heading_path for u in chunk("```\n# x\n`````\n# B\nt")] == [(), ("B",)]


def test_document_of_only_code_fences() -> None:
    text = "```python\n# comment\n\nprint(1)\n```\n\n~~~\n# more\n~~~\n"
    units = chunk(text)
    assert [(u.heading_path, u.text) for u in units] == [((), text.strip())]


def test_fence_kept_whole_when_section_is_split() -> None:
    fence = "```\na b c\n\nd e f\n```"
    text = f"# S\n\none two three four five six\n\n{fence}\n\nseven eight nine ten eleven"
    units = chunk(text, max_tokens=8)
    assert fence in [u.text for u in units]
    assert_invariants(text, units)


# -- examples: splitting --------------------------------------------------------------------


def test_long_section_splits_at_paragraphs_first() -> None:
    paragraphs = ["alpha beta gamma delta.", "epsilon zeta eta theta.", "iota kappa lambda mu."]
    text = "## Section\n\n" + "\n\n".join(paragraphs)
    units = chunk(text, max_tokens=9)
    assert [u.text for u in units] == [
        "## Section\n\n" + paragraphs[0],
        paragraphs[1] + "\n\n" + paragraphs[2],
    ]
    assert all(u.heading_path == ("Section",) for u in units)
    assert all(u.token_count <= 9 for u in units)


def test_long_paragraph_splits_at_sentences_then_words() -> None:
    text = "One two three. Four five six seven! Eight nine ten eleven twelve thirteen fourteen? End."
    units = chunk(text, TXT, max_tokens=5)
    assert [u.text for u in units] == [
        "One two three.",
        "Four five six seven!",
        "Eight nine ten eleven twelve",
        "thirteen fourteen? End.",
    ]
    assert_invariants(text, units)


def test_lines_split_before_words() -> None:
    text = "- one two\n- three four\n- five six\n- seven eight"
    units = chunk(text, max_tokens=6)
    assert [u.text for u in units] == ["- one two\n- three four", "- five six\n- seven eight"]


def numbered_sentences(count: int, words: int = 5) -> str:
    """``count`` sentences of ``words`` words each, e.g. ``Sentence 3 says w w.``."""
    return " ".join(f"Sentence {k} says {' '.join(['w'] * (words - 3))}." for k in range(count))


def test_heading_is_packed_with_the_first_sentences_of_a_long_paragraph() -> None:
    text = "# Title\n\n" + numbered_sentences(30)
    units = chunk(text, max_tokens=32)
    assert len(units) > 1
    # 2 heading tokens + 6 sentences of 5 words: the first sentences join the heading.
    assert units[0].text == "# Title\n\n" + numbered_sentences(6)
    assert all(u.heading_path == ("Title",) and u.token_count <= 32 for u in units)
    assert all(u.text.endswith(".") for u in units)  # cut at sentence ends only
    assert_invariants(text, units)


def test_bare_parent_and_child_heading_stay_with_the_body() -> None:
    text = "# Parent\n\n## Child\n\n" + numbered_sentences(30)
    units = chunk(text, max_tokens=32, counter=SubwordCounter())
    assert units[0].text.startswith("# Parent\n\n## Child\n\nSentence 0 says")
    assert all(u.heading_path == ("Parent", "Child") and u.token_count <= 32 for u in units)
    assert_invariants(text, units)


def test_heading_keeps_the_first_words_of_an_overlong_sentence() -> None:
    sentence = " ".join(f"w{k}" for k in range(50)) + "."
    for text in (f"# Title\n\n{sentence}", f"# Title\n{sentence}", f"Title\n===\n\n{sentence}"):
        units = chunk(text, max_tokens=20)
        heading = text[: text.index("w0")]
        assert units[0].text == heading + " ".join(f"w{k}" for k in range(18)), text
        assert_invariants(text, units)


def test_paragraph_fills_the_unit_before_it_with_whole_sentences() -> None:
    text = "## S\n\nalpha beta.\n\none two three. four five six. seven eight nine."
    units = chunk(text, max_tokens=10)
    assert [u.text for u in units] == [
        "## S\n\nalpha beta.\n\none two three. four five six.",
        "seven eight nine.",
    ]


def test_long_paragraph_of_short_sentences_gives_full_units() -> None:
    text = "# Notes\n\n" + "\n\n".join(numbered_sentences(n, words=3 + n % 4) for n in (25, 7, 40, 3))
    for max_tokens in (12, 17, 30, 64):
        units = chunk(text, max_tokens=max_tokens)
        assert all(2 * u.token_count >= max_tokens for u in units[:-1]), max_tokens
        assert all(u.token_count <= max_tokens for u in units)
        assert_invariants(text, units)


def test_list_items_and_table_rows_split_before_sentences() -> None:
    text = "## L\n\n- Alpha one. Beta two three.\n- Gamma four. Delta five six.\n- Eps seven."
    assert [u.text for u in chunk(text, max_tokens=10)] == [
        "## L\n\n- Alpha one. Beta two three.",
        "- Gamma four. Delta five six.\n- Eps seven.",
    ]
    table = "| k | v |\n|---|---|\n| a. b | c |\n| d | e. f |"
    units = chunk(table, max_tokens=12)
    assert [u.text for u in units] == ["| k | v |\n|---|---|\n| a. b | c |", "| d | e. f |"]


def test_periods_in_inline_code_and_list_numbers_end_no_sentence() -> None:
    assert [u.text for u in chunk("Run `make x. y` now. Then go.", TXT, max_tokens=5)] == [
        "Run `make x. y` now.",
        "Then go.",
    ]
    assert [u.text for u in chunk("4. Restart the pod now please.", TXT, max_tokens=3)] == [
        "4. Restart the",
        "pod now please.",
    ]


def test_fence_that_fits_alone_is_not_cut_to_join_its_heading() -> None:
    fence = "```\na b c\n\nd e f\n```"
    units = chunk(f"# T\n\n{fence}\n\nafter.", max_tokens=8)
    assert [u.text for u in units] == ["# T", fence, "after."]


def test_huge_word_is_split_by_characters() -> None:
    word = "x" * 103
    units = chunk(f"# W\n\n{word}", max_tokens=5, counter=SubwordCounter())
    assert all(u.token_count <= 5 for u in units)
    # The heading keeps the first characters of its body rather than standing alone.
    assert units[0].text == "# W\n\n" + "x" * 12
    assert "".join(u.text for u in units[1:]) == "x" * 91
    assert [len(u.text) for u in units[1:]] == [20] * 4 + [11]
    assert_invariants(f"# W\n\n{word}", units)


def test_character_split_keeps_combining_sequences() -> None:
    word = "e\u0301" * 20 + "👩\u200d💻" * 5
    units = chunk(word, TXT, max_tokens=3, counter=CharCounter())
    assert len(units) > 1
    for u in units:
        assert unicodedata.category(u.text[0]) not in ("Mn", "Mc", "Me")
        assert not u.text.startswith("\u200d") and not u.text.endswith("\u200d")
    assert_invariants(word, units)


def test_single_character_over_the_limit_still_makes_progress() -> None:
    class Expensive:
        revision = "x"

        def count(self, text: str) -> int:
            return 10 * len(text)

    units = chunk("abc", TXT, max_tokens=1, counter=Expensive())
    assert [u.text for u in units] == ["a", "b", "c"]


# -- examples: plain text, line endings, edge cases ---------------------------------------


def test_plain_text_units_are_paragraphs() -> None:
    text = "First para\nstill first.\n\n# not a heading\n\n \t\nThird."
    units = chunk(text, TXT)
    assert [(u.text, u.heading_path) for u in units] == [
        ("First para\nstill first.", ()),
        ("# not a heading", ()),
        ("Third.", ()),
    ]


def test_crlf_gives_the_same_structure() -> None:
    lf = RUNBOOK + "\n```\n# fenced\n```\nTitle\n"
    crlf = lf.replace("\n", "\r\n")
    a, b = chunk(lf), chunk(crlf)
    assert [u.heading_path for u in a] == [u.heading_path for u in b]
    assert [u.text.replace("\r\n", "\n") for u in b] == [u.text for u in a]
    assert_invariants(crlf, b)
    assert_invariants("a\r\rb", chunk("a\r\rb", TXT))
    assert len(chunk("a\r\rb", TXT)) == 2


@pytest.mark.parametrize("text", ["", " ", "\n\n", "\r\n\t \u2003\n", "\u2028"])
@pytest.mark.parametrize("media_type", [MD, TXT])
def test_blank_text_has_no_units(text: str, media_type: str) -> None:
    assert chunk(text, media_type) == []


def test_media_type_parameters_and_unknown_types() -> None:
    assert is_markdown("text/markdown; charset=utf-8") and is_markdown("Text/X-Markdown")
    assert not is_markdown("text/plain")
    assert [u.heading_path for u in chunk("# H\n\nx", "text/markdown; charset=utf-8")] == [("H",)]
    assert [u.heading_path for u in chunk("# H\n\nx", "application/octet-stream")] == [(), ()]


def test_min_chars_folds_tiny_units_into_a_neighbour() -> None:
    text = "alpha beta\n\n*\n\ngamma delta"
    assert [u.text for u in chunk(text, TXT)] == ["alpha beta", "*", "gamma delta"]
    units = chunk(text, TXT, min_chars=2)
    assert [u.text for u in units] == ["alpha beta\n\n*", "gamma delta"]
    assert_invariants(text, units)
    # Folding never breaks the token limit, and markdown never folds across sections.
    assert [u.text for u in chunk(text, TXT, max_tokens=2, min_chars=2)] == ["alpha beta", "*", "gamma delta"]
    assert len(chunk("# A\n# B\n\ntext", min_chars=50)) == 2


def test_revisions_and_port() -> None:
    chunker: Chunker = MarkdownChunker(WordCounter(), max_tokens=128)
    assert chunker.parser_revision == "md-parser-v1"
    assert chunker.revision.startswith(f"{CHUNKER_REVISION}+") and CHUNKER_REVISION == "md-units-v2"
    assert "128" in chunker.revision and WordCounter.revision in chunker.revision
    others = {
        MarkdownChunker(WordCounter(), max_tokens=64).revision,
        MarkdownChunker(SubwordCounter(), max_tokens=128).revision,
        MarkdownChunker(WordCounter(), max_tokens=128, min_chars=5).revision,
    }
    assert chunker.revision not in others and len(others) == 3
    with pytest.raises(ValueError):
        MarkdownChunker(WordCounter(), max_tokens=0)


def test_units_carry_resource_hash_and_token_count() -> None:
    units = MarkdownChunker(WordCounter()).chunk("notes/x.md", "abc123", "# T\n\none two", MD)
    assert units == [
        Unit(
            unit_id="notes/x.md#0",
            resource_id="notes/x.md",
            ordinal=0,
            start=0,
            end=12,
            heading_path=("T",),
            text="# T\n\none two",
            token_count=4,
            unit_hash=unit_hash_of("# T\n\none two", 0, 12),
            resource_hash="abc123",
        )
    ]


DEMO = Path(__file__).resolve().parents[2] / "entrypoints" / "cli" / "demo_memory"


def test_demo_memory_documents() -> None:
    files = sorted(p for p in DEMO.rglob("*") if p.is_file() and p.suffix in (".md", ".txt"))
    assert files
    chunker = MarkdownChunker(SubwordCounter(), max_tokens=64)
    for path in files:
        text = path.read_text(encoding="utf-8")
        rid = path.relative_to(DEMO).as_posix()
        units = chunker.chunk(rid, "h", text, MD if path.suffix == ".md" else TXT)
        assert units, rid
        assert_invariants(text, units, rid)
        assert all(u.token_count <= 64 for u in units)


# -- properties -------------------------------------------------------------------------------

# Words that never form markdown structure by themselves (no '#', fences, underlines,
# list markers or whitespace), with combining marks, emoji and RTL scripts mixed in.
SAFE_WORD = st.one_of(
    st.sampled_from(
        ["deploy", "rollback", "ADR-0042", "e\u0301", "👩\u200d💻", "שלום", "مرحبا", "日本語", "snake_case"]
    ),
    st.text(
        alphabet=st.characters(categories=("L", "M", "N", "So"), exclude_characters="#`~=-+*>.)(\u3002\uff01\uff1f"),
        min_size=1,
        max_size=12,
    ),
    st.text(alphabet="abcdefghij", min_size=20, max_size=90),  # long words, for hard splits
)
TERMINATOR = st.sampled_from(["", ".", "!", "?", "…", "\u3002", ".\u201d"])
MARK = "FENCEDMARK"


@st.composite
def sentences(draw: st.DrawFn) -> str:
    return " ".join(draw(st.lists(SAFE_WORD, min_size=1, max_size=25))) + draw(TERMINATOR)


@st.composite
def paragraphs(draw: st.DrawFn, max_sentences: int = 6) -> str:
    joiner = draw(st.sampled_from([" ", "\n"]))
    return joiner.join(draw(st.lists(sentences(), min_size=1, max_size=max_sentences)))


@st.composite
def fences(draw: st.DrawFn, closed: bool = True) -> str:
    marker = draw(st.sampled_from(["```", "~~~", "````"]))
    body = draw(st.lists(st.sampled_from([f"# {MARK} one", f"## {MARK} two", "", "code() {", "  x = 1"]), max_size=8))
    lines = [marker + draw(st.sampled_from(["", "python", " sh"])), *body]
    if closed:
        lines.append(marker)
    return "\n".join(lines)


@st.composite
def markdown_docs(draw: st.DrawFn) -> tuple[str, list[tuple[int, int, str]]]:
    """A markdown document and its headings as ``(offset, level, title)``."""
    parts: list[str] = []
    headings: list[tuple[int, int, str]] = []
    offset = 0

    def add(piece: str) -> None:
        nonlocal offset
        parts.append(piece)
        offset += len(piece)

    for i in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["atx", "atx", "setext", "para", "para", "long", "fence", "hashtag"]))
        if i:
            # Setext titles must not continue a paragraph: a blank line always precedes them.
            add(draw(st.sampled_from(["\n\n", "\n\n\n", " \n\n"] + (["\n"] if kind != "setext" else []))))
        if kind == "atx":
            level = draw(st.integers(1, 6))
            title = " ".join(draw(st.lists(SAFE_WORD, max_size=4)))
            indent = draw(st.sampled_from(["", " ", "   "]))
            closing = draw(st.sampled_from(["", " #", " ###"]))
            headings.append((offset, level, title))
            add(indent + "#" * level + (f" {title}{closing}" if title else ""))
        elif kind == "setext":
            title = " ".join(draw(st.lists(SAFE_WORD, min_size=1, max_size=4)))
            underline = draw(st.sampled_from(["===", "=", "---", "-----"]))
            headings.append((offset, 1 if underline[0] == "=" else 2, title))
            add(f"{title}\n{underline}")
        elif kind == "para":
            add(draw(paragraphs()))
        elif kind == "long":
            add(draw(paragraphs(max_sentences=20)))
        elif kind == "fence":
            add(draw(fences()))
        else:
            add(f"#{draw(SAFE_WORD)} trailing words")
    if draw(st.booleans()):
        add("\n\n" + draw(fences(closed=False)))
    add(draw(st.sampled_from(["", "\n", "\n\n  \n"])))
    return "".join(parts), headings


def expected_path(headings: list[tuple[int, int, str]], position: int) -> tuple[str, ...]:
    stack: list[tuple[int, str]] = []
    for offset, level, title in headings:
        if offset > position:
            break
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
    return tuple(t for _, t in stack)


COUNTERS = st.sampled_from([WordCounter(), SubwordCounter()])


@PROPERTY_SETTINGS
@given(doc=markdown_docs(), max_tokens=st.integers(1, 40), counter=COUNTERS, crlf=st.booleans())
def test_markdown_spans_coverage_limits_and_paths(
    doc: tuple[str, list[tuple[int, int, str]]], max_tokens: int, counter: WordCounter, crlf: bool
) -> None:
    text, headings = doc
    if crlf:
        # Shift heading offsets by the '\r' inserted before each earlier newline.
        headings = [(o + text.count("\n", 0, o), lvl, t) for o, lvl, t in headings]
        text = text.replace("\n", "\r\n")
    units = chunk(text, MD, max_tokens=max_tokens, counter=counter)
    assert_invariants(text, units)
    for u in units:
        assert u.token_count == counter.count(u.text) <= max_tokens
        # A unit belongs to the section its last character is in (bare parents merge forward).
        assert u.heading_path == expected_path(headings, u.end - 1)
        assert not any(MARK in title for title in u.heading_path)


@PROPERTY_SETTINGS
@given(
    text=st.lists(paragraphs(), max_size=8).map("\n\n".join),
    max_tokens=st.integers(1, 30),
    counter=COUNTERS,
)
def test_plain_text_spans_coverage_and_limits(text: str, max_tokens: int, counter: WordCounter) -> None:
    units = chunk(text, TXT, max_tokens=max_tokens, counter=counter)
    assert_invariants(text, units)
    assert all(u.heading_path == () and u.token_count <= max_tokens for u in units)
    if all(counter.count(p) <= max_tokens for p in text.split("\n\n")):
        assert [u.text for u in units] == [p.strip() for p in text.split("\n\n") if p.strip()]


@PROPERTY_SETTINGS
@given(
    text=st.text(max_size=400),
    media_type=st.sampled_from([MD, TXT]),
    max_tokens=st.integers(1, 20),
    counter=st.sampled_from([WordCounter(), SubwordCounter(), CharCounter()]),
)
def test_arbitrary_text_keeps_invariants(text: str, media_type: str, max_tokens: int, counter: WordCounter) -> None:
    units = chunk(text, media_type, max_tokens=max_tokens, counter=counter)
    assert_invariants(text, units)
    assert all(u.token_count <= max_tokens for u in units)


@PROPERTY_SETTINGS
@given(doc=markdown_docs(), max_tokens=st.integers(1, 40))
def test_ids_and_hashes_are_stable_and_depend_on_text_and_span(
    doc: tuple[str, list[tuple[int, int, str]]], max_tokens: int
) -> None:
    text, _ = doc
    first = MarkdownChunker(WordCounter(), max_tokens).chunk("r/a.md", "h1", text, MD)
    again = MarkdownChunker(WordCounter(), max_tokens).chunk("r/a.md", "h1", text, MD)
    elsewhere = MarkdownChunker(WordCounter(), max_tokens).chunk("other/b.md", "h2", text, MD)
    assert first == again
    assert [(u.start, u.end, u.unit_hash) for u in first] == [(u.start, u.end, u.unit_hash) for u in elsewhere]
    assert [u.unit_id for u in elsewhere] == [f"other/b.md#{i}" for i in range(len(elsewhere))]
    assert all(u.unit_hash == unit_hash_of(u.text, u.start, u.end) for u in first)


def heading_only_units_with_body(text: str, units: list[Unit]) -> list[tuple[Unit, Unit]]:
    """Pairs ``(u, v)``: ``u`` holds nothing but heading lines and the next unit ``v`` starts
    in the body of the section ``u`` ends in."""
    sections = markdown_sections(text)
    heads = [(s.start, s.body_start) for s in sections if s.level > 0]

    def in_heading(i: int) -> bool:
        return any(a <= i < b for a, b in heads)

    pairs: list[tuple[Unit, Unit]] = []
    for u, v in zip(units, units[1:], strict=False):
        if not all(text[i].isspace() or in_heading(i) for i in range(u.start, u.end)):
            continue
        owner = [s for s in sections if s.start <= v.start][-1]
        if owner.start < u.end and v.start >= owner.body_start:
            pairs.append((u, v))
    return pairs


FENCE_START = re.compile(r"(`{3,}|~{3,})")


@PROPERTY_SETTINGS
@given(doc=markdown_docs(), max_tokens=st.integers(1, 40), counter=COUNTERS)
def test_headings_are_never_alone_when_body_could_join(
    doc: tuple[str, list[tuple[int, int, str]]], max_tokens: int, counter: WordCounter
) -> None:
    text, _ = doc
    units = chunk(text, MD, max_tokens=max_tokens, counter=counter)
    for u, v in heading_only_units_with_body(text, units):
        # Allowed only when not one more character fits, or before a block holding a fence (a
        # fence is never cut, so the paragraph it closes is packed whole).
        assert FENCE_START.search(v.text) or counter.count(text[u.start : v.start + 1]) > max_tokens


@PROPERTY_SETTINGS
@given(
    title=st.lists(SAFE_WORD, min_size=1, max_size=3).map(" ".join),
    parent=st.booleans(),
    body=st.lists(paragraphs(max_sentences=20), min_size=1, max_size=4).map("\n\n".join),
    max_tokens=st.integers(2, 40),
    counter=COUNTERS,
)
def test_section_with_body_has_no_heading_only_unit(
    title: str, parent: bool, body: str, max_tokens: int, counter: WordCounter
) -> None:
    heading = ("# Parent\n\n## " if parent else "# ") + title
    text = f"{heading}\n\n{body}"
    units = chunk(text, MD, max_tokens=max_tokens, counter=counter)
    assert_invariants(text, units)
    if counter.count(heading + " x") <= max_tokens:
        assert units[0].text != heading and units[0].end > len(heading)
        assert not heading_only_units_with_body(text, units)


SHORT_SENTENCE = st.builds(
    lambda words, end: " ".join(words) + end,
    st.lists(st.sampled_from(["deploy", "e\u0301", "שלום", "日本語", "ADR-0042", "x"]), min_size=1, max_size=5),
    st.sampled_from([".", "!", "?", "…", "\u3002", ".\u201d"]),
)


@PROPERTY_SETTINGS
@given(
    body=st.lists(
        st.tuples(st.sampled_from([" ", "\n"]), st.lists(SHORT_SENTENCE, min_size=1, max_size=30)).map(
            lambda p: p[0].join(p[1])
        ),
        min_size=1,
        max_size=5,
    ).map("\n\n".join),
    max_tokens=st.integers(10, 40),
)
def test_short_sentences_pack_into_half_full_units(body: str, max_tokens: int) -> None:
    text = f"# Notes\n\n{body}"
    units = chunk(text, MD, max_tokens=max_tokens)
    assert_invariants(text, units)
    # Every sentence has at most 5 <= max_tokens / 2 words, so a unit closes only when at least
    # half full.
    assert all(2 * u.token_count >= max_tokens for u in units[:-1])
    assert all(u.token_count <= max_tokens for u in units)
