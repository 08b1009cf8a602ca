"""What a judge reads (issue 18 item 3), as pure rules: each candidate's text is cut from the frozen
body by its span and shown only when it hashes to the candidate's unit hash; otherwise the passage
says why. And the missed-evidence search's passages: the paragraph holding a match, its offsets
and its heading path. Units come from the real markdown chunker."""

from __future__ import annotations

import re

import attrs
import pytest

from memory_core.adapters.in_memory.vectors import WhitespaceTokenCounter
from memory_core.domain.canonical import sha256_hex
from memory_core.domain.errors import BlobCorrupted, BlobNotFound
from memory_core.domain.model import Unit
from memory_core.evaluation.passages import (
    BODY_UNREADABLE,
    NO_SPAN,
    NOT_IN_CORPUS,
    NOTES,
    PASSAGE_CONTEXT_CHARS,
    SHOWN,
    TEXT_CHANGED,
    candidate_passages,
    cut_unit,
    text_passages,
)
from memory_core.retrieval.chunking import MarkdownChunker
from memory_core.runs.records import CandidateRecord

GUIDE = (
    "# Deploy guide\n\nDeploy the ledger with helm upgrade.\n\n"
    "## Rollback\n\nRoll back with helm rollback, then replay the outbox.\n\n"
    "## Database\n\nPromote the replica. A rollback of the schema needs a migration.\n"
)
NOTES_TXT = "Coffee is on the second floor.\n\nThe printer is broken; roll it back to the shop.\n"
CHUNKER = MarkdownChunker(WhitespaceTokenCounter(), max_tokens=12)


def units(resource_id: str, body: str, media_type: str = "text/markdown") -> list[Unit]:
    return CHUNKER.chunk(resource_id, sha256_hex(body.encode()), body, media_type)


def record(unit: Unit, rank: int) -> CandidateRecord:
    """The candidate a Run records for ``unit`` (its stage fields do not matter here)."""
    return CandidateRecord(
        unit_id=unit.unit_id, resource_id=unit.resource_id, unit_hash=unit.unit_hash,
        resource_hash=unit.resource_hash, heading_path=unit.heading_path, token_count=unit.token_count,
        exact_rank=None, exact_score=None, bm25_rank=rank, bm25_score=1.0, lexical_rank=rank, dense_rank=None,
        dense_score=None, dense_similarity=None, rrf_rank=rank, rrf_score=0.01, rerank_rank=None,
        rerank_score=None, final_rank=rank, final_score=None, disposition="excluded", exclusion_code="budget",
        delta_action=None, start=unit.start, end=unit.end,
    )  # fmt: skip


class Bodies(dict[str, bytes]):
    """A blob store's ``get``: the body by its hash, or its typed errors."""

    def get_body(self, digest: str) -> bytes:
        if digest not in self:
            raise BlobNotFound(f"no blob {digest}")
        return self[digest]


def test_every_candidate_shows_its_own_text_with_its_heading_path() -> None:
    guide, notes = units("guide.md", GUIDE), units("notes.txt", NOTES_TXT, "text/plain")
    assert len(guide) >= 3 and len(notes) == 2  # the real chunker cut both
    candidates = [record(u, k + 1) for k, u in enumerate([*guide, *notes])]
    bodies = Bodies({sha256_hex(GUIDE.encode()): GUIDE.encode(), sha256_hex(NOTES_TXT.encode()): NOTES_TXT.encode()})
    hashes = {"guide.md": sha256_hex(GUIDE.encode()), "notes.txt": sha256_hex(NOTES_TXT.encode())}

    passages = candidate_passages(candidates, hashes, bodies.get_body)

    assert [p.unit_id for p in passages] == [c.unit_id for c in candidates]
    for p, u in zip(passages, [*guide, *notes], strict=True):
        assert (p.status, p.text, p.note) == (SHOWN, u.text, None)
        assert (p.start, p.end, p.heading_path) == (u.start, u.end, u.heading_path)
    rollback = next(p for p in passages if "helm rollback" in (p.text or ""))
    assert rollback.heading_path == ("Deploy guide", "Rollback")


def test_a_run_recorded_before_spans_says_so_instead_of_guessing() -> None:
    (unit, *_) = units("guide.md", GUIDE)
    old = attrs.evolve(record(unit, 1), start=None, end=None)
    bodies = Bodies({sha256_hex(GUIDE.encode()): GUIDE.encode()})
    (passage,) = candidate_passages([old], {"guide.md": sha256_hex(GUIDE.encode())}, bodies.get_body)
    assert (passage.status, passage.text, passage.start, passage.end) == (NO_SPAN, None, None, None)
    assert passage.note == NOTES[NO_SPAN] and "before candidates kept their span" in passage.note
    assert passage.heading_path == unit.heading_path  # still shown: it is recorded


def test_an_edited_resource_shows_the_units_it_still_holds_and_says_which_changed() -> None:
    before = units("guide.md", GUIDE)
    edited = GUIDE.replace("Promote the replica.", "Promote the standby replica.")
    hashes = {"guide.md": sha256_hex(edited.encode())}
    bodies = Bodies({sha256_hex(edited.encode()): edited.encode()})

    passages = candidate_passages([record(u, k + 1) for k, u in enumerate(before)], hashes, bodies.get_body)

    # Units before the edit are still there; the edited one and those after it (their offsets
    # moved, and a unit hash covers its span) are not what was ranked.
    edit_at = GUIDE.index("Promote")
    assert {p.unit_id: p.status for p in passages} == {
        u.unit_id: SHOWN if u.end <= edit_at else TEXT_CHANGED for u in before
    }
    assert {p.status for p in passages} == {SHOWN, TEXT_CHANGED}
    changed = next(p for p in passages if p.status == TEXT_CHANGED)
    assert changed.text is None and "changed after it was indexed" in (changed.note or "")


def test_a_resource_missing_from_the_corpus_or_unreadable_shows_no_text() -> None:
    (unit, *_) = units("guide.md", GUIDE)
    c = record(unit, 1)
    assert candidate_passages([c], {}, Bodies().get_body)[0].status == NOT_IN_CORPUS

    missing = candidate_passages([c], {"guide.md": "0" * 64}, Bodies().get_body)[0]
    assert (missing.status, missing.text) == (BODY_UNREADABLE, None)

    def corrupt(digest: str) -> bytes:
        raise BlobCorrupted(f"blob {digest} is corrupt")

    assert candidate_passages([c], {"guide.md": "0" * 64}, corrupt)[0].status == BODY_UNREADABLE
    latin1 = Bodies({"1" * 64: "Déploiement".encode("latin-1")})
    assert candidate_passages([c], {"guide.md": "1" * 64}, latin1.get_body)[0].status == BODY_UNREADABLE


@pytest.mark.parametrize("shift", [(1, 1), (0, 1), (0, -1)])
def test_cut_unit_accepts_only_the_exact_span(shift: tuple[int, int]) -> None:
    (unit, *_) = units("guide.md", GUIDE)
    assert cut_unit(GUIDE, unit.start, unit.end, unit.unit_hash) == unit.text
    start, end = unit.start + shift[0], unit.end + shift[1]
    assert cut_unit(GUIDE, start, end, unit.unit_hash) is None
    assert cut_unit(GUIDE, 0, len(GUIDE) + 1, unit.unit_hash) is None  # past the text


def test_search_passages_are_the_paragraphs_holding_a_match_with_offsets_and_headings() -> None:
    passages = text_passages(GUIDE, "text/markdown", re.compile("rollback", re.IGNORECASE))
    assert [p.heading_path for p in passages] == [("Deploy guide", "Rollback")] * 2 + [("Deploy guide", "Database")]
    for p in passages:
        assert GUIDE[p.start : p.end] == p.text and p.text.strip() == p.text
        assert GUIDE[p.match_start : p.match_end].lower() == "rollback"
        assert p.start <= p.match_start < p.match_end <= p.end
    assert passages[1].text == "Roll back with helm rollback, then replay the outbox."
    assert passages[0].text == "## Rollback"  # a heading line is a block of its own

    plain = text_passages(NOTES_TXT, "text/plain", re.compile("back"))
    assert [(p.text, p.heading_path) for p in plain] == [("The printer is broken; roll it back to the shop.", ())]
    # ``#`` opens no heading in plain text.
    assert text_passages("# not a heading\n\nback", "text/plain", re.compile("back"))[0].heading_path == ()


def test_search_passages_are_bounded() -> None:
    long = "word " * 400 + "needle " + "word " * 400
    (p,) = text_passages(long, "text/markdown", re.compile("needle"))
    assert p.end - p.start <= 2 * PASSAGE_CONTEXT_CHARS + len("needle")
    assert long[p.start : p.end] == p.text and "needle" in p.text
    many = "\n\n".join(f"needle {i}" for i in range(10))
    assert len(text_passages(many, "text/plain", re.compile("needle"))) == 3
    assert len(text_passages(many, "text/plain", re.compile("needle"), limit=5)) == 5
    # Two matches in one paragraph make one passage.
    assert len(text_passages("needle and needle", "text/plain", re.compile("needle"))) == 1
    assert text_passages("nothing here", "text/plain", re.compile("needle")) == ()
