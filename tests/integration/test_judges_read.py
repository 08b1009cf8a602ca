"""Judges read what they judge (issue 18 item 3), through the product's composition root on a temp
home (SQLite, the file blob store, the real scanner and chunker; the cheap embedder and lexical
index): a Run keeps each candidate's span; ``eval case show`` and the daemon's case answer show
each candidate's text from the frozen corpus with its heading path, or say plainly why not; the
missed-evidence search answers passages; and a fixture carries the spans, import verifying every
unit hash against its text, refusing the whole file (nothing stored) when one does not match."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core.adapters.system.home import HomeLayout
from memory_core.domain.canonical import hash_json, sha256_hex
from memory_core.domain.evaluation_errors import FixtureHashMismatch, InvalidFixture
from memory_core.domain.model import Source, unit_hash_of
from memory_core.entrypoints.cli import eval_commands
from memory_core.entrypoints.cli.main import build_parser
from memory_core.entrypoints.daemon import api
from memory_core.evaluation.passages import NO_SPAN, NOTES, SHOWN, TEXT_CHANGED
from memory_core.operations.evaluation import get_evaluation_case, search_corpus_resources
from memory_core.services.engine import Engine
from tests.reliability.harness import engine_for

MEMORY = {
    "runbooks/deploy.md": "# Deploy runbook\n\nDeploy the ledger with helm upgrade --atomic.\n\n"
    "## Rollback\n\nRoll back with helm rollback ledger, then replay the outbox.\n\n"
    "## Verify\n\nCheck the ledger balance report after every deploy.\n",
    "decisions/ADR-0007-outbox.md": "# ADR-0007: Transactional outbox\n\n"
    "Publish ledger events through a transactional outbox table, replayed after a rollback.\n",
    "notes.txt": "Coffee is on the second floor.\n\nThe printer is broken.\n",
}
QUERY = "how do I roll back the ledger deploy?"


def write_memory(folder: Path) -> Path:
    for rel, text in MEMORY.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = engine_for(tmp_path / "home", sync_history=True)
    engine.add_project("ledger", [Source(str(write_memory(tmp_path / "memory")))])
    engine.index("ledger")
    yield engine
    engine.close()


def new_case(engine: Engine, query: str = QUERY) -> tuple[str, str]:
    run_id = engine.activate("ledger", query, budget=40).response.run_id
    assert run_id is not None
    return run_id, engine.create_evaluation_case(run_id).case_id


def show(engine: Engine, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    args: argparse.Namespace = build_parser().parse_args(["eval", "case", "show", *argv])
    assert eval_commands.handle(engine, args, Path("/nonexistent/home")) == 0
    return capsys.readouterr().out


def test_a_run_records_each_candidates_span_in_its_resource(engine: Engine) -> None:
    run_id, _ = new_case(engine)
    candidates = engine.get_run(run_id).candidates
    assert len(candidates) == 6  # every unit: three sections, one, two paragraphs
    for c in candidates:
        body = MEMORY[c.resource_id]
        assert c.start is not None and c.end is not None
        assert unit_hash_of(body[c.start : c.end], c.start, c.end) == c.unit_hash


def test_case_show_and_the_case_answer_show_every_candidates_text(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id, case_id = new_case(engine)
    detail = engine.evaluations().show_case(case_id)
    candidates = detail.trace.candidates
    assert [p.unit_id for p in detail.passages] == [c.unit_id for c in candidates]
    for p, c in zip(detail.passages, candidates, strict=True):
        assert (p.status, p.note, p.heading_path) == (SHOWN, None, c.heading_path)
        assert p.text == MEMORY[c.resource_id][c.start : c.end]  # type: ignore[misc]
    rollback = next(p for p in detail.passages if p.heading_path == ("Deploy runbook", "Rollback"))
    assert rollback.text == "## Rollback\n\nRoll back with helm rollback ledger, then replay the outbox."

    printed = show(engine, capsys, case_id)
    assert "Deploy runbook › Rollback" in printed
    assert "   │ Roll back with helm rollback ledger, then replay the outbox." in printed
    assert "   │ Coffee is on the second floor." in printed
    as_json = json.loads(show(engine, capsys, case_id, "--json"))
    assert [(p["unit_id"], p["status"], p["text"]) for p in as_json["passages"]] == [
        (p.unit_id, SHOWN, p.text) for p in detail.passages
    ]

    # The daemon's case answer (what the case page draws) carries the same passages.
    answer = get_evaluation_case.handler(engine, api.GetEvaluationCaseRequest(case_id))
    assert answer.passages == detail.passages
    conv = api.make_converter()
    assert api.unstructure(conv, answer)["passages"][0]["text"] == detail.passages[0].text


def test_an_edit_after_the_index_shows_what_is_still_there_and_says_what_changed(
    engine: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deploy = tmp_path / "memory" / "runbooks" / "deploy.md"
    deploy.write_text(MEMORY["runbooks/deploy.md"].replace("Check the ledger", "Always check the ledger"))
    _, case_id = new_case(engine)  # not re-indexed: the Run ranks the old units, the corpus is the edit
    detail = engine.evaluations().show_case(case_id)
    status = {p.unit_id: p.status for p in detail.passages}
    verify = next(c.unit_id for c in detail.trace.candidates if c.heading_path == ("Deploy runbook", "Verify"))
    assert status[verify] == TEXT_CHANGED
    assert all(s == SHOWN for u, s in status.items() if u != verify)  # the edit is the file's last unit
    printed = show(engine, capsys, case_id)
    assert NOTES[TEXT_CHANGED] in printed and "Always check" not in printed


def test_the_missed_evidence_search_answers_passages(engine: Engine) -> None:
    _, case_id = new_case(engine)
    page = search_corpus_resources.handler(engine, api.SearchCorpusResourcesRequest(case_id, "rollback", 10, None))
    matches = {m.resource.resource_id: m for m in page.resources}
    assert set(matches) == {"runbooks/deploy.md", "decisions/ADR-0007-outbox.md"}
    deploy = matches["runbooks/deploy.md"]
    body = MEMORY["runbooks/deploy.md"]
    assert [(p.heading_path, p.text) for p in deploy.passages] == [
        (("Deploy runbook", "Rollback"), "## Rollback"),
        (("Deploy runbook", "Rollback"), "Roll back with helm rollback ledger, then replay the outbox."),
    ]
    for p in deploy.passages:
        assert body[p.start : p.end] == p.text and body[p.match_start : p.match_end].lower() == "rollback"
    (adr,) = matches["decisions/ADR-0007-outbox.md"].passages
    assert adr.heading_path == ("ADR-0007: Transactional outbox",) and adr.text.endswith("replayed after a rollback.")
    # An id match reads no body: no passage.
    by_id = search_corpus_resources.handler(engine, api.SearchCorpusResourcesRequest(case_id, "notes", 10, None))
    assert [(m.matched_in, m.passages) for m in by_id.resources] == [("resource_id", ())]


# -- fixtures ---------------------------------------------------------------------------------------


def exported(engine: Engine) -> dict[str, Any]:
    new_case(engine)
    document = json.loads(engine.export_evaluation_set())
    (case,) = document["cases"]
    assert all("start" in c and "end" in c for c in case["trace"]["candidates"])  # the spans travel
    return document


def reseal(document: dict[str, Any]) -> dict[str, Any]:
    """Every trace hash recomputed, so that only the check under test can fail."""
    for case in document["cases"]:
        case["trace_hash"] = hash_json(case["trace"])
    return document


def stored_nothing(home: Path, engine: Engine) -> bool:
    blobs = HomeLayout.at(home).blobs_dir
    return engine.evaluations().list_cases() == [] and not any(p.is_file() for p in blobs.rglob("*"))


def test_a_fixture_carries_the_spans_and_its_import_shows_the_text(engine: Engine, tmp_path: Path) -> None:
    document = exported(engine)
    other = engine_for(tmp_path / "other", sync_history=True)
    try:
        result = other.import_evaluation_set(document)
        (case_id,) = result.cases_added
        passages = other.evaluations().show_case(case_id).passages
        assert passages and {p.status for p in passages} == {SHOWN}
    finally:
        other.close()


def test_a_unit_hash_that_does_not_match_its_span_refuses_the_whole_fixture(engine: Engine, tmp_path: Path) -> None:
    document = exported(engine)
    candidates = document["cases"][0]["trace"]["candidates"]
    k, victim = next((k, c) for k, c in enumerate(candidates) if c["resource_id"] == "runbooks/deploy.md")
    victim["start"] += 1  # the text at the new span is another text
    home = tmp_path / "other"
    other = engine_for(home, sync_history=True)
    try:
        with pytest.raises(FixtureHashMismatch) as refused:
            other.import_evaluation_set(reseal(document))
        assert refused.value.code == "evaluation_fixture_hash_mismatch"
        assert refused.value.details["unit_id"] == victim["unit_id"]
        assert refused.value.details["place"] == f"/cases/0/trace/candidates/{k}/unit_hash"
        assert victim["unit_id"] in refused.value.message
        assert stored_nothing(home, other)

        victim["start"] -= 1
        victim["end"] = len(MEMORY["runbooks/deploy.md"]) + 5  # past the text
        with pytest.raises(InvalidFixture) as past:
            other.import_evaluation_set(reseal(document))
        assert past.value.details["unit_id"] == victim["unit_id"] and "past the" in past.value.message
        del victim["end"]  # half a span
        with pytest.raises(InvalidFixture, match="both start and end"):
            other.import_evaluation_set(reseal(document))
        assert stored_nothing(home, other)
    finally:
        other.close()


def test_an_older_fixture_without_spans_is_accepted_and_says_the_text_is_unknown(
    engine: Engine, tmp_path: Path
) -> None:
    document = exported(engine)
    for c in document["cases"][0]["trace"]["candidates"]:
        del c["start"], c["end"]
    other = engine_for(tmp_path / "other", sync_history=True)
    try:
        (case_id,) = other.import_evaluation_set(reseal(document)).cases_added
        passages = other.evaluations().show_case(case_id).passages
        assert passages and {(p.status, p.text) for p in passages} == {(NO_SPAN, None)}
        # Exported again, it is still the older form: no span is made up.
        again = json.loads(other.export_evaluation_set())
        assert all("start" not in c for c in again["cases"][0]["trace"]["candidates"])
        assert again["cases"][0]["trace_hash"] == document["cases"][0]["trace_hash"]
    finally:
        other.close()


def test_a_stale_candidate_in_a_fixture_is_not_checked_against_another_body(engine: Engine, tmp_path: Path) -> None:
    """The corpus holds the edited body, the candidate names the old one: nothing to rehash."""
    deploy = tmp_path / "memory" / "runbooks" / "deploy.md"
    deploy.write_text("# Deploy runbook\n\nRewritten from scratch.\n")
    document = exported(engine)
    stale = [c for c in document["cases"][0]["trace"]["candidates"] if c["resource_id"] == "runbooks/deploy.md"]
    assert stale and all(c["resource_hash"] != sha256_hex(deploy.read_bytes()) for c in stale)
    other = engine_for(tmp_path / "other", sync_history=True)
    try:
        (case_id,) = other.import_evaluation_set(document).cases_added
        status = {p.resource_id: p.status for p in other.evaluations().show_case(case_id).passages}
        assert status["runbooks/deploy.md"] == TEXT_CHANGED and status["notes.txt"] == SHOWN
    finally:
        other.close()
