"""Evaluation Sets on disk: the schema 3 -> latest migration, pinned Runs and corpus blobs through
Clear History and GC, restart reuse, concurrent judgment editors, the fixture round trip between
two homes, tampered fixtures writing nothing, and owner-only files."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import apsw
import attrs
import pytest

from memory_core.adapters.files.blob_store import FileBlobStore
from memory_core.adapters.files.evaluation_sources import FolderSources
from memory_core.adapters.sqlite import SqliteCatalog, open_database
from memory_core.adapters.sqlite.evaluation import SqliteEvaluationStore
from memory_core.adapters.sqlite.runs import SqliteRunStore
from memory_core.domain.canonical import sha256_hex
from memory_core.domain.errors import InvalidRequest, RunNotFound
from memory_core.domain.evaluation_errors import EvaluationJudgmentConflict, FixtureHashMismatch
from memory_core.domain.model import Project, Source
from memory_core.entrypoints.bootstrap import bootstrap_in_memory, utc_now
from memory_core.evaluation import fixture
from memory_core.evaluation.cases import Judgment
from memory_core.runs.records import RunFilter
from memory_core.services import fixtures
from memory_core.services.evaluation import EvaluationService
from tests.adapters.recording_before_spans import recording_before_spans
from tests.adapters.test_database import dump
from tests.adapters.test_run_store_sqlite import count, index, real_memory, reopen_migrated
from tests.contracts.test_run_store import failure, ranked, run_start, trace_of, ts

SCHEMA = Path(__file__).resolve().parents[2] / "contracts" / "evaluation-fixture.schema.json"
EVALUATION_TABLES = (
    "evaluation_corpora",
    "evaluation_corpus_resources",
    "evaluation_cases",
    "evaluation_judgment_sets",
    "evaluation_judgments",
)
V3_TABLES = {
    "projects": "project_id, created_at",
    "generations": "project_id, index_revision, effective_memory_hash, manifest_hash",
    "manifests": "manifest_hash, entries_json",
    "retrieval_runs": "run_id, project_id, query, status, started_at, finished_at, effective_memory_hash, "
    "latency_json, revisions_json, warm, candidate_count, error_code, error_summary, pinned, owner_pid",
    "retrieval_run_candidates": "run_id, final_rank, unit_id, resource_id, unit_hash, resource_hash, "
    "heading_path_json, lexical_rank, dense_rank, rrf_rank, rrf_score, rerank_rank, final_score, disposition, "
    "exclusion_code, delta_action",
    "retrieval_run_resources": "manifest_hash, ordinal, resource_id, resource_hash",
    "retrieval_corpus_blobs": "sha256, byte_size, media_type, first_seen_at",
}


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# -- migration ------------------------------------------------------------------------------------


def test_populated_v3_database_migrates_to_latest_without_losing_rows(tmp_path: Path) -> None:
    path = tmp_path / "local.db"
    blobs = FileBlobStore(tmp_path / "evaluation-corpora" / "blobs")
    conn = open_database(path, target_version=3)
    catalog, runs = SqliteCatalog(conn), SqliteRunStore(conn, blobs)
    run_ids = []
    with recording_before_spans():  # a schema 3 database has no span columns
        for p in range(4):
            project = f"project-{p}"
            catalog.add_project(Project(project, (Source(f"/src/{p}"),), ts(p)))
            memory = real_memory(blobs, f"p{p}", 3, project)
            runs.record_manifest(memory)
            index(catalog, project, f"rev{p}", memory)
            for i in range(5):
                run_id = runs.start(run_start(project, f"query {i}", i))
                if i == 4:
                    runs.fail(run_id, failure())
                else:
                    runs.complete(run_id, trace_of(ranked(i + p), memory.hash, i))
                run_ids.append(run_id)
            runs.pin(run_ids[-2])
        runs.settle()  # every write landed while the store still wrote the old rows
    before = dump(conn, V3_TABLES)
    assert len(before["retrieval_runs"]) == 20 and len(before["retrieval_run_candidates"]) > 100
    assert not conn.execute("SELECT name FROM sqlite_master WHERE name = 'evaluation_cases'").fetchall()
    conn.close()

    conn = reopen_migrated(path, V3_TABLES, before, EVALUATION_TABLES, at_least=4)
    # A migrated Run becomes a case; Clear History then keeps it and the pinned ones.
    runs = SqliteRunStore(conn, blobs, blob_grace_s=0)
    service = EvaluationService(SqliteEvaluationStore(conn), runs, blobs, now=utc_now)
    case = service.create_case(run_ids[0])
    assert service.get_trace(case.case_id).candidates == runs.get_run(run_ids[0]).candidates
    report = runs.clear()
    assert (report.deleted_runs, report.kept_pinned) == (15, 5)
    assert {r.run_id for r in runs.list_runs(RunFilter()).runs} == {run_ids[0], *run_ids[3::5]}
    conn.close()


# -- a home -----------------------------------------------------------------------------------------


@attrs.define
class Home:
    root: Path
    conns: list[apsw.Connection]
    engine: object
    service: EvaluationService
    runs: SqliteRunStore
    blobs: FileBlobStore

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


def open_home(root: Path, *, docs: int = 12) -> Home:
    """SQLite catalog, Runs and Evaluation Sets, a real blob store; in-memory indexes and models."""
    db = root / "local.db"
    conns = [open_database(db) for _ in range(3)]
    blobs = FileBlobStore(root / "evaluation-corpora" / "blobs")
    runs = SqliteRunStore(conns[1], blobs, blob_grace_s=0)
    engine = bootstrap_in_memory(catalog=SqliteCatalog(conns[0]), blobs=blobs, history=runs)
    service = EvaluationService(SqliteEvaluationStore(conns[2]), runs, blobs, now=utc_now)
    if docs:
        for i in range(docs):
            engine.indexer.scanner.write("/m", f"n{i}.md", note(i))
        engine.add_project("notes", [Source("/m")])
        engine.index("notes")
    return Home(root, conns, engine, service, runs, blobs)


def note(i: int, version: int = 0) -> bytes:
    words = ["deploy", "rollback", "locks", "review", "oncall", "backups"]
    return f"# Note {i}\n\nAbout {words[i % 6]} and {words[(i + 2) % 6]}, v{version}.\n".encode()


@pytest.fixture
def home(tmp_path: Path):  # type: ignore[no-untyped-def]
    h = open_home(tmp_path / "home")
    yield h
    h.close()


def judged_cases(h: Home, queries=("deploy", "locks review", "oncall backups")) -> list[str]:  # type: ignore[no-untyped-def]
    ids = []
    for q in queries:
        case = h.service.create_case(h.engine.activate("notes", q).response.run_id)  # type: ignore[attr-defined]
        unit = h.service.get_trace(case.case_id).candidates[0].unit_id
        h.service.replace_judgments(case.case_id, 0, [Judgment.unit(unit, 3), Judgment.resource("n5.md", 1, "é")])
        ids.append(case.case_id)
    return ids


def test_pinned_runs_survive_clear_history_and_corpus_blobs_survive_gc(home: Home) -> None:
    case_id = judged_cases(home, ("deploy",))[0]
    case = home.service.get_case(case_id)
    loose = home.engine.activate("notes", "rollback").response.run_id  # type: ignore[attr-defined]
    report = home.runs.clear()
    assert (report.deleted_runs, report.kept_pinned) == (1, 1)
    with pytest.raises(RunNotFound):
        home.runs.get_run(loose)
    assert home.runs.get_run(case.source_run_id).summary.pinned
    old = home.service.get_corpus(case.corpus_id).hashes()["n0.md"]
    for version in (1, 2, 3):  # n0.md's first body falls out of the current/previous generations
        home.engine.indexer.scanner.write("/m", "n0.md", note(0, version))  # type: ignore[attr-defined]
        home.engine.index("notes")  # type: ignore[attr-defined]
    home.runs.unpin(case.source_run_id)  # now only the evaluation corpus names the old body
    home.runs.clear()
    assert home.blobs.get(old) == note(0, 0)
    assert not home.blobs.exists(sha256_hex(note(0, 1)))
    assert old in {d for (d,) in home.conns[1].execute("SELECT sha256 FROM retrieval_corpus_blobs")}
    fixture.load_fixture(fixtures.export_fixture(home.service))  # the frozen corpus is still whole


def test_cases_survive_a_restart(tmp_path: Path) -> None:
    first = open_home(tmp_path / "home")
    ids = judged_cases(first)
    before = fixtures.export_fixture(first.service, with_history=True, exported_at="x")
    first.close()
    again = open_home(tmp_path / "home", docs=0)
    assert [c.case_id for c in again.service.list_cases()] == ids
    assert fixtures.export_fixture(again.service, with_history=True, exported_at="x") == before
    again.close()


def test_two_connections_racing_on_one_version_let_exactly_one_win(home: Home) -> None:
    case_id = judged_cases(home, ("deploy",))[0]
    services = [
        EvaluationService(SqliteEvaluationStore(open_database(home.root / "local.db")), home.runs, home.blobs,
                          now=utc_now)
        for _ in range(4)
    ]  # fmt: skip
    outcomes: list[object] = []
    barrier = threading.Barrier(len(services))

    def edit(service: EvaluationService, relevance: int) -> None:
        barrier.wait()
        try:
            outcomes.append(service.replace_judgments(case_id, 1, [Judgment.resource("n1.md", relevance)]).version)
        except EvaluationJudgmentConflict as exc:
            outcomes.append(("conflict", exc.current_version))

    threads = [threading.Thread(target=edit, args=(s, i)) for i, s in enumerate(services)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes, key=str) == sorted([2, *[("conflict", 2)] * 3], key=str)
    assert [s.version for s in home.service.judgment_history(case_id)] == [1, 2]


def test_the_database_rejects_what_the_service_would(home: Home) -> None:
    judged_cases(home, ("deploy",))
    conn = home.conns[2]
    case_id = conn.execute("SELECT case_id FROM evaluation_cases").fetchall()[0][0]
    for bad in (
        "INSERT INTO evaluation_judgments VALUES (?, 1, 9, NULL, 'n1.md', 4, NULL)",
        "INSERT INTO evaluation_judgments VALUES (?, 1, 9, NULL, 'n1.md', 2.5, NULL)",
        "INSERT INTO evaluation_judgments VALUES (?, 1, 9, 'n1.md#0', 'n1.md', 1, NULL)",
        "INSERT INTO evaluation_judgments VALUES (?, 7, 0, NULL, 'n1.md', 1, NULL)",
        "UPDATE evaluation_cases SET reviewed_version = 5 WHERE case_id = ?",
        "UPDATE evaluation_cases SET provenance = 'guess' WHERE case_id = ?",
    ):
        with pytest.raises(apsw.ConstraintError):
            conn.execute(bad, (case_id,))
    with pytest.raises(apsw.ConstraintError):
        conn.execute("DELETE FROM evaluation_corpora")  # cases still refer to it


# -- fixtures ---------------------------------------------------------------------------------------


def test_export_import_export_between_homes_is_byte_identical(home: Home, tmp_path: Path) -> None:
    import jsonschema

    judged_cases(home)
    case_id = home.service.list_cases()[0].case_id
    home.service.mark_reviewed(case_id, 1)
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    for history in (False, True):
        first = fixtures.export_fixture(home.service, with_history=history)
        validator.validate(json.loads(first))
        other = open_home(tmp_path / f"other-{history}", docs=0)
        try:
            fixtures.import_fixture(other.service, first)
            again = fixtures.export_fixture(other.service, with_history=history)
            a, b = json.loads(first), json.loads(again)
            assert a.pop("exported_at") and b.pop("exported_at")
            assert a == b
            stamp = json.loads(first)["exported_at"]
            assert fixtures.export_fixture(other.service, with_history=history, exported_at=stamp) == first
            assert other.service.get_case(case_id).reviewed
            for digest in (e.resource_hash for e in other.service.get_corpus(a["corpora"][0]["corpus_id"]).resources):
                assert mode(other.blobs.path_of(digest)) == 0o600
        finally:
            other.close()


@pytest.mark.parametrize("what", ["body", "hash", "trace"])
def test_import_rejects_a_tampered_fixture_and_writes_nothing(home: Home, tmp_path: Path, what: str) -> None:
    judged_cases(home)
    document = json.loads(fixtures.export_fixture(home.service))
    if what == "body":
        document["bodies"][3]["content"] = document["bodies"][3]["content"].replace("About", "Abort")
    elif what == "hash":
        document["bodies"][3]["sha256"] = "0" * 64
    else:
        document["cases"][1]["trace"]["candidates"][0]["rrf_rank"] += 100
    other = open_home(tmp_path / "other", docs=0)
    try:
        with pytest.raises((FixtureHashMismatch, InvalidRequest)):
            fixtures.import_fixture(other.service, json.dumps(document).encode())
        for table in EVALUATION_TABLES:
            assert count(other.conns[2], table) == 0
        assert list(other.blobs.digests()) == []
    finally:
        other.close()


def test_folder_sources_write_owner_only_files_and_mirror_the_set(tmp_path: Path) -> None:
    os.umask(0o022)  # even with a loose umask
    try:
        sources = FolderSources(tmp_path / "sources")
        source = sources("beir", {"a.md": b"# A\n", "sub/b.md": b"# B\n"})
        folder = Path(source.path)
        assert mode(folder) == 0o700 and mode(folder / "sub") == 0o700
        assert mode(folder / "a.md") == 0o600 and mode(folder / "sub" / "b.md") == 0o600
        before = (folder / "a.md").stat().st_mtime_ns
        sources("beir", {"a.md": b"# A\n", "c.md": b"# C\n"})
        assert (folder / "a.md").stat().st_mtime_ns == before  # unchanged files are left alone
        assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == ["a.md", "c.md"]
        for bad in ("../x.md", "/etc/x.md", "a/../../x.md", ""):
            with pytest.raises(InvalidRequest):
                sources("beir", {bad: b"x"})
    finally:
        os.umask(0o077)
