"""Migration 7 (each candidate keeps its unit's span) on a populated database, on disk with the
real blob store: Runs recorded before it keep their rows and load with no span, a case made from
one shows each candidate's heading path and says its text is unknown, and a Run recorded after it
keeps the spans a case page then cuts its verified text with (issue 18 item 3)."""

from __future__ import annotations

import io
from pathlib import Path

import apsw
import pytest
from rich.console import Console

from memory_core.adapters.files.blob_store import FileBlobStore
from memory_core.adapters.in_memory.vectors import WhitespaceTokenCounter
from memory_core.adapters.sqlite import SCHEMA_VERSION, open_database, schema_version
from memory_core.adapters.sqlite.evaluation import SqliteEvaluationStore
from memory_core.adapters.sqlite.migrations import MIGRATIONS, m007_candidate_spans, migration_number
from memory_core.adapters.sqlite.runs import SqliteRunStore
from memory_core.domain.model import EffectiveMemory, Layer, ManifestEntry, Unit
from memory_core.entrypoints.bootstrap import utc_now
from memory_core.entrypoints.cli import render
from memory_core.evaluation.passages import NO_SPAN, NOTES, SHOWN
from memory_core.retrieval.activation_state import ActivationState
from memory_core.retrieval.chunking import MarkdownChunker
from memory_core.retrieval.pipeline import Candidate, apply_rerank, fuse
from memory_core.retrieval.selection import Limits, select
from memory_core.services.evaluation import EvaluationService
from tests.adapters.recording_before_spans import recording_before_spans
from tests.adapters.test_run_store_sqlite import count
from tests.contracts.test_run_store import run_start, trace_of

BODIES = {
    "runbooks/deploy.md": "# Deploy runbook\n\nDeploy the ledger with helm upgrade --atomic.\n\n"
    "## Rollback\n\nRoll back with helm rollback ledger, then replay the outbox.\n",
    "notes.txt": "Coffee is on the second floor.\n\nThe printer is broken.\n",
}


def memory_and_units(blobs: FileBlobStore) -> tuple[EffectiveMemory, dict[str, Unit]]:
    """The bodies stored as blobs, their manifest, and the real chunker's units of them."""
    chunker = MarkdownChunker(WhitespaceTokenCounter(), max_tokens=64)
    entries, units = [], {}
    for ordinal, (rid, body) in enumerate(sorted(BODIES.items())):
        data = body.encode()
        digest = blobs.put(data)
        media = "text/markdown" if rid.endswith(".md") else "text/plain"
        entries.append(ManifestEntry(ordinal, rid, Layer.PROJECT, f"file:///m/{rid}", digest, len(data), media))
        units.update((u.unit_id, u) for u in chunker.chunk(rid, digest, body, media))
    return EffectiveMemory.from_entries("alpha", entries), units


def ranked(units: dict[str, Unit]) -> list[Candidate]:
    """Every unit through the real fusion, rerank and selection (a BM25 list in id order)."""
    fused = fuse(units, [], [(uid, 10.0 - k) for k, uid in enumerate(sorted(units))], [], 60)
    final = apply_rerank(fused, 0, [])
    select(final, Limits(20, 2, 1, 0.0), ActivationState())
    return final


def test_migration_7_is_the_candidates_span(tmp_path: Path) -> None:
    assert MIGRATIONS.index(m007_candidate_spans) + 1 == migration_number(m007_candidate_spans) == 7
    conn = open_database(tmp_path / "local.db")
    columns = [row[1] for row in conn.execute("PRAGMA table_info(retrieval_run_candidates)")]
    assert columns[-2:] == ["span_start", "span_end"]
    conn.close()


def test_runs_recorded_before_migration_7_load_without_spans_and_new_runs_keep_them(tmp_path: Path) -> None:
    path = tmp_path / "local.db"
    blobs = FileBlobStore(tmp_path / "blobs")
    memory, units = memory_and_units(blobs)
    candidates = ranked(units)
    conn = open_database(path, target_version=6)
    runs = SqliteRunStore(conn, blobs)
    runs.record_manifest(memory)
    with recording_before_spans():  # what a schema 6 store wrote
        old_run = runs.start(run_start("alpha", "how do I roll back?", 1))
        runs.complete(old_run, trace_of(candidates, memory.hash, 1))
        runs.settle()
    rows_before = count(conn, "retrieval_run_candidates")
    assert rows_before == len(units) == 4  # two sections, two paragraphs
    conn.close()

    conn = open_database(path)
    assert schema_version(conn) == SCHEMA_VERSION >= 7
    assert count(conn, "retrieval_run_candidates") == rows_before
    assert conn.execute("SELECT count(*) FROM retrieval_run_candidates WHERE span_start IS NULL AND span_end IS NULL"
                        ).fetchall() == [(rows_before,)]  # fmt: skip
    runs = SqliteRunStore(conn, blobs)
    old = runs.get_run(old_run)
    assert old.summary.status == "succeeded" and len(old.candidates) == 4
    assert {(c.start, c.end) for c in old.candidates} == {(None, None)}

    # A case from the old Run: the heading paths, and plainly no text.
    service = EvaluationService(SqliteEvaluationStore(conn), runs, blobs, now=utc_now)
    old_case = service.create_case(old_run)
    shown = service.show_case(old_case.case_id)
    assert [p.unit_id for p in shown.passages] == [c.unit_id for c in old.candidates]
    assert {(p.status, p.text, p.note) for p in shown.passages} == {(NO_SPAN, None, NOTES[NO_SPAN])}
    assert {p.unit_id: p.heading_path for p in shown.passages} == {u: units[u].heading_path for u in units}
    text = printed(render.case_detail(shown))
    assert text.count(NOTES[NO_SPAN]) == 4 and "Deploy runbook › Rollback" in text
    # The old trace (no span in its plain form) kept the hash it was frozen with.
    assert service.get_trace(old_case.case_id).trace_hash == old_case.trace_hash

    # A Run recorded now keeps each unit's span, and its case shows the verified text.
    new_run = runs.start(run_start("alpha", "where is the coffee?", 2))
    runs.complete(new_run, trace_of(candidates, memory.hash, 2))
    runs.settle()
    recorded = {c.unit_id: (c.start, c.end) for c in runs.get_run(new_run).candidates}
    assert recorded == {u.unit_id: (u.start, u.end) for u in units.values()}
    new_case = service.create_case(new_run)
    passages = service.show_case(new_case.case_id).passages
    assert {p.unit_id: (p.status, p.text) for p in passages} == {u.unit_id: (SHOWN, u.text) for u in units.values()}
    text = printed(render.case_detail(service.show_case(new_case.case_id)))
    assert "│ Roll back with helm rollback ledger, then replay the outbox." in text
    assert NOTES[NO_SPAN] not in text
    conn.close()


def test_a_half_or_reversed_span_is_refused_by_the_schema(tmp_path: Path) -> None:
    conn = open_database(tmp_path / "local.db")
    conn.execute(
        "INSERT INTO retrieval_runs(run_id, project_id, query, state_fingerprint, token_budget, status, started_at) "
        "VALUES ('r', 'p', 'q', 'f', 1, 'running', 't')"
    )
    insert = (
        "INSERT INTO retrieval_run_candidates(run_id, final_rank, unit_id, resource_id, unit_hash, resource_hash, "
        "heading_path_json, token_count, rrf_rank, rrf_score, disposition, exclusion_code, span_start, span_end) "
        "VALUES ('r', ?, 'u', 'r', 'h', 'h', '[]', 1, 1, 0.1, 'excluded', 'budget', ?, ?)"
    )
    for rank, (start, end) in enumerate([(0, None), (None, 4), (5, 4), (-1, 2)], start=1):
        with pytest.raises(apsw.ConstraintError):
            conn.execute(insert, (rank, start, end))
    conn.execute(insert, (1, 0, 4))
    conn.execute(insert, (2, None, None))
    conn.close()


def printed(items: list[object]) -> str:
    out = io.StringIO()
    console = Console(file=out, width=200)
    for item in items:
        console.print(item, highlight=False)
    return out.getvalue()
