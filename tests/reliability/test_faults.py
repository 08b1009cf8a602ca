"""Faults (issue 8 item 4): a full or read-only database under history writes, a corrupted blob,
a corrupted generation (vectors, units and real Lucene files) and models that raise.

Real adapters throughout, in process: SQLITE_FULL comes from a connection whose
``max_page_count`` is the database's current size, read-only from a connection opened with
``SQLITE_OPEN_READONLY`` (chmod means nothing to root), corruption from flipping one byte.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import apsw
import pytest

from memory_core.adapters.files.blob_store import FileBlobStore
from memory_core.adapters.in_memory.vectors import HashingEmbedder
from memory_core.adapters.sqlite.catalog import SqliteCatalog
from memory_core.adapters.sqlite.runs import SqliteRunStore
from memory_core.domain.canonical import plain
from memory_core.domain.errors import (
    BlobCorrupted,
    GenerationCorrupted,
    InvalidRequest,
    RetrievalFailed,
    StorageUnavailable,
)
from memory_core.domain.model import Source
from memory_core.evaluation.cases import Case
from memory_core.runs.records import FAILED, MAX_ERROR_SUMMARY, RunFailure, RunStart, RunTrace
from memory_core.services.activation import STAGE_ERROR, ActivationResponse
from memory_core.services.engine import Engine
from memory_core.services.fixtures import evaluation_set
from memory_core.services.indexing import LEXICAL_DIR, VECTOR_DIR

from .harness import (
    PROJECT,
    QUERIES,
    BrokenEmbedder,
    activations_still_work,
    engine_for,
    raw_integrity,
    restart_and_verify,
    rows,
    write_memory,
)

QUERY = QUERIES[1]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home with project ``proj`` indexed and one Run; the engine that made it is closed."""
    engine = engine_for(tmp_path / "home")
    engine.add_project(PROJECT, [Source(str(write_memory(tmp_path / "memory", 0)))])
    engine.index(PROJECT)
    assert engine.activate(PROJECT, QUERIES[0]).response.run_id
    engine.close()
    return tmp_path / "home"


def answer(response: ActivationResponse) -> tuple[object, ...]:
    """What the agent receives, without the Run id and timings."""
    fragments = tuple(
        (f.unit_id, f.unit_hash, f.text, f.delta_action, f.final_rank, f.final_score) for f in response.fragments
    )
    return fragments, plain(response.activation_state), response.state_fingerprint, dict(response.totals)


def flip_byte(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0x01
    path.write_bytes(bytes(data))


def run_count(home: Path) -> int:
    conn = apsw.Connection(str(home / "local.db"))
    conn.set_busy_timeout(10_000)  # a trace may be being written behind the answer
    try:
        return int(conn.execute("SELECT count(*) FROM retrieval_runs").fetchall()[0][0])
    finally:
        conn.close()


# -- a full or read-only database under history writes -----------------------------------------------


class FullDisk(apsw.VFS):
    """The default VFS, except that while ``armed`` every write fails with SQLITE_FULL."""

    NAME = "reliability-full-disk"

    def __init__(self) -> None:
        self.armed = False
        super().__init__(self.NAME, base="")

    def xOpen(self, name: object, flags: list[int]) -> apsw.VFSFile:  # noqa: N802 (apsw's name)
        return _FullDiskFile(self, name, flags)


class _FullDiskFile(apsw.VFSFile):
    def __init__(self, vfs: FullDisk, name: object, flags: list[int]) -> None:
        self.vfs = vfs
        super().__init__("", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:  # noqa: N802
        if self.vfs.armed:
            raise apsw.FullError("database or disk is full (injected)")
        super().xWrite(data, offset)


DISK = FullDisk()  # registered once, for the whole session


@pytest.fixture
def disk() -> Iterator[FullDisk]:
    DISK.armed = False
    yield DISK
    DISK.armed = False


def on_disk(db: Path) -> apsw.Connection:
    """A connection like ``open_database``'s, through the VFS whose disk can fill up."""
    conn = apsw.Connection(str(db), vfs=FullDisk.NAME)
    conn.setbusytimeout(5000)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


class FullDuringCompletion:
    """The real run store; the disk is full exactly while a Run's completion is written (for a
    store writing behind the answer: until that write has landed, or failed)."""

    def __init__(self, store: SqliteRunStore, disk: FullDisk) -> None:
        self.store = store
        self.disk = disk

    def start(self, run: RunStart) -> str:
        run_id = self.store.start(run)
        self.store.close()  # the `running` row is written before the disk fills
        return run_id

    def complete(self, run_id: str, trace: RunTrace) -> None:
        self.disk.armed = True
        try:
            self.store.complete(run_id, trace)
            self.store.settle()
        finally:
            self.disk.armed = False

    def fail(self, run_id: str, failure: RunFailure) -> None:
        self.store.fail(run_id, failure)


def _blobs(home: Path) -> FileBlobStore:
    return FileBlobStore(home / "evaluation-corpora" / "blobs")


def test_a_full_disk_during_history_writes_leaves_the_answer_unchanged(
    home: Path, disk: FullDisk, caplog: pytest.LogCaptureFixture
) -> None:
    expected = engine_for(home).activate(PROJECT, QUERY).response
    before = run_count(home)
    engine = engine_for(home, history=SqliteRunStore(on_disk(home / "local.db"), _blobs(home)))
    disk.armed = True
    with caplog.at_level(logging.ERROR):
        response = engine.activate(PROJECT, QUERY).response
    disk.armed = False
    assert response.run_id is None
    assert answer(response) == answer(expected)
    # The store inserts the `running` row while the pipeline ranks; the completion reports
    # that insert's failure, and nothing about the Run is stored.
    assert "cannot start Retrieval Run: database or disk is full" in caplog.text
    assert run_count(home) == before
    restart_and_verify(home)


def test_a_full_disk_during_run_completion_leaves_the_answer_unchanged_and_no_partial_run(
    home: Path, disk: FullDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """Written inline (write_behind=False): the agent gets ``run_id`` null, the Run is failed."""
    expected = engine_for(home).activate(PROJECT, QUERY).response
    store = SqliteRunStore(on_disk(home / "local.db"), _blobs(home), write_behind=False)
    engine = engine_for(home, history=store, recorder=FullDuringCompletion(store, disk))
    with caplog.at_level(logging.ERROR):
        response = engine.activate(PROJECT, QUERY).response
    assert response.run_id is None
    assert answer(response) == answer(expected)
    assert "could not record Retrieval Run" in caplog.text
    # The completion rolled back whole: the Run it started holds no candidate, and it was
    # marked failed (history_write_failed) rather than left running (B7, fixed).
    started = rows(engine, "SELECT run_id, status, candidate_count FROM retrieval_runs ORDER BY started_at DESC")[0]
    assert started[1:] == ("failed", 0)
    assert rows(engine, "SELECT count(*) FROM retrieval_run_candidates WHERE run_id = ?", (started[0],)) == [(0,)]
    raw_integrity(home)


def test_a_full_disk_behind_the_answer_leaves_it_unchanged_and_the_next_write_fails_the_run(
    home: Path, disk: FullDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """Written behind the answer (the default): the agent already has its answer and the Run's
    id; the trace cannot land, nor can the failure while the disk is full, so the Run reads
    ``running`` with no candidate until the store's next write, which marks it failed."""
    expected = engine_for(home).activate(PROJECT, QUERY).response
    store = SqliteRunStore(on_disk(home / "local.db"), _blobs(home))
    engine = engine_for(home, history=store, recorder=FullDuringCompletion(store, disk))
    with caplog.at_level(logging.WARNING):
        response = engine.activate(PROJECT, QUERY).response
    assert response.run_id is not None  # it names a Run that exists
    assert answer(response) == answer(expected)
    assert "could not record Retrieval Run" in caplog.text and "stays running" in caplog.text
    run = engine.get_run(response.run_id)
    assert (run.summary.status, run.candidates) == ("running", ())
    # The disk has room again: the next activation's writes fail the Run first.
    engine.recorder = store
    assert engine.activate(PROJECT, QUERIES[0]).response.run_id
    s = engine.get_run(response.run_id).summary
    assert (s.status, s.error_stage, s.error_code, s.candidate_count) == ("failed", "record", "history_write_failed", 0)
    assert rows(engine, "SELECT count(*) FROM retrieval_run_candidates WHERE run_id = ?", (response.run_id,)) == [(0,)]
    raw_integrity(home)


@pytest.mark.parametrize("write_behind", [False, True])
def test_a_run_whose_completion_could_not_be_written_does_not_stay_running(
    home: Path, disk: FullDisk, write_behind: bool
) -> None:
    store = SqliteRunStore(on_disk(home / "local.db"), _blobs(home), write_behind=write_behind)
    engine = engine_for(home, history=store, recorder=FullDuringCompletion(store, disk))
    run_id = engine.activate(PROJECT, QUERY).response.run_id
    assert (run_id is None) == (not write_behind)
    if write_behind:  # its failure lands with the store's next write
        engine.recorder = store
        engine.activate(PROJECT, QUERIES[0])
        store.settle()  # and that one's trace too, before reading the table directly
    assert rows(engine, "SELECT count(*) FROM retrieval_runs WHERE status = 'running'") == [(0,)]


def test_a_read_only_database_leaves_the_answer_unchanged_and_records_nothing(home: Path) -> None:
    expected = engine_for(home).activate(PROJECT, QUERY).response
    before = run_count(home)
    read_only = apsw.Connection(str(home / "local.db"), flags=apsw.SQLITE_OPEN_READONLY)
    engine = engine_for(home, history=SqliteRunStore(read_only), recover=False)
    response = engine.activate(PROJECT, QUERY).response
    assert response.run_id is None
    assert answer(response) == answer(expected)
    assert run_count(home) == before


def test_a_full_disk_during_indexing_is_a_typed_error_and_the_previous_generation_stays(
    home: Path, tmp_path: Path, disk: FullDisk
) -> None:
    before = engine_for(home).show_project(PROJECT).generation
    write_memory(tmp_path / "memory", 1)
    db = home / "local.db"
    engine = engine_for(home, catalog=SqliteCatalog(on_disk(db)), history=SqliteRunStore(on_disk(db), _blobs(home)))
    disk.armed = True
    with pytest.raises(StorageUnavailable):
        engine.index(PROJECT)
    disk.armed = False
    engine = restart_and_verify(home)
    assert engine.show_project(PROJECT).generation == before
    activations_still_work(engine)
    assert engine.index(PROJECT).status == "built"


# -- a corrupted blob ----------------------------------------------------------------------------------


def _a_case_and_its_first_blob(home: Path) -> tuple[Engine, Case, bytes, FileBlobStore, str, bytes]:
    """An engine with one case exported: (engine, case, fixture, blobs, a corpus digest, its body)."""
    engine = engine_for(home)
    run_id = engine.activate(PROJECT, QUERY).response.run_id
    assert run_id
    case = engine.create_evaluation_case(run_id)
    fixture = engine.export_evaluation_set()
    blobs = engine.evaluations().blobs
    assert isinstance(blobs, FileBlobStore)
    digest = engine.evaluations().get_corpus(case.corpus_id).digests()[0]
    return engine, case, fixture, blobs, digest, blobs.get(digest)


def test_a_corrupted_blob_is_detected_on_read_and_export_and_never_served(home: Path) -> None:
    engine, case, fixture, blobs, digest, original = _a_case_and_its_first_blob(home)
    service = engine.evaluations()
    flip_byte(blobs.path_of(digest))
    with pytest.raises(BlobCorrupted) as read:
        blobs.get(digest)
    assert read.value.code == "blob_corrupted" and read.value.details["digest"] == digest
    with pytest.raises(BlobCorrupted):
        engine.export_evaluation_set()  # never a fixture carrying the damaged body
    with pytest.raises(BlobCorrupted):
        evaluation_set(service)  # the replay gate reads bodies the same way
    # Putting the good bytes again (the next index build, an import) repairs it.
    assert blobs.put(original) == digest
    assert blobs.get(digest) == original
    assert engine.export_evaluation_set() != b"" and fixture


def test_importing_a_fixture_repairs_a_corrupted_blob(home: Path) -> None:
    """B8, fixed: a blob that fails verification is rewritten from the fixture's body, like a missing one."""
    engine, case, fixture, blobs, digest, original = _a_case_and_its_first_blob(home)
    engine.evaluations().delete_case(case.case_id)
    flip_byte(blobs.path_of(digest))
    result = engine.import_evaluation_set(fixture)
    assert result.cases_added == (case.case_id,) and result.blobs_written == 1  # only the damaged one
    assert blobs.get(digest) == original
    assert engine.export_evaluation_set()  # reads every body verified: exportable again


# -- a corrupted generation ----------------------------------------------------------------------------


def _current_dir(home: Path) -> Path:
    generation = engine_for(home).show_project(PROJECT).generation
    assert generation is not None
    return Path(generation.directory)


def _damaged_generation_fails_clearly_then_index_rebuilds(home: Path, damaged: Path, lucene: bool = False) -> None:
    flip_byte(damaged)
    engine = engine_for(home, lucene=lucene)  # a restart: nothing warm
    with pytest.raises(RetrievalFailed) as failure:
        engine.activate(PROJECT, QUERY)
    err = failure.value
    assert (err.stage, err.error_code) == ("load", GenerationCorrupted.code)
    assert "memcore index proj" in err.message
    assert err.run_id
    summary = engine.get_run(err.run_id).summary
    assert (summary.status, summary.error_stage, summary.error_code) == (FAILED, "load", GenerationCorrupted.code)
    report = engine.index(PROJECT)  # unchanged sources, yet the damaged generation is rebuilt
    assert report.status == "built"
    activations_still_work(engine)
    restart_and_verify(home, lucene=lucene)


@pytest.mark.parametrize("file", [f"{VECTOR_DIR}/vectors.npy", f"{VECTOR_DIR}/unit_ids.json", "units.jsonl"])
def test_a_corrupted_generation_file_is_a_clear_error_and_the_next_index_rebuilds_it(home: Path, file: str) -> None:
    _damaged_generation_fails_clearly_then_index_rebuilds(home, _current_dir(home) / file)


@pytest.mark.slow
def test_a_corrupted_lucene_file_is_a_clear_error_and_the_next_index_rebuilds_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    engine = engine_for(home, lucene=True)
    engine.add_project(PROJECT, [Source(str(write_memory(tmp_path / "memory", 0)))])
    engine.index(PROJECT)
    engine.close()
    lexical = _current_dir(home) / LEXICAL_DIR
    segment = max((p for p in lexical.iterdir() if p.name.startswith("_")), key=lambda p: p.stat().st_size)
    _damaged_generation_fails_clearly_then_index_rebuilds(home, segment, lucene=True)


# -- models that raise -----------------------------------------------------------------------------------


class BrokenReranker:
    revision = "broken-reranker/1"

    def rerank(self, query: str, candidates: Sequence[object]) -> list[float]:
        raise MemoryError("the reranker ran out of memory (injected) " + "x" * 2000)


class WrongDimensions(HashingEmbedder):
    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("overrides", "stage", "code"),
    [
        ({"embedder": BrokenEmbedder()}, "embed_query", STAGE_ERROR),  # a RuntimeError: not typed
        ({"embedder": WrongDimensions()}, "dense", InvalidRequest.code),  # the vector index's typed error
        ({"reranker": BrokenReranker()}, "rerank", STAGE_ERROR),  # a MemoryError
    ],
    ids=["embedder-raises", "embedder-wrong-dimensions", "reranker-raises"],
)
def test_a_model_that_fails_makes_a_failed_run_with_its_stage(
    home: Path, overrides: dict[str, object], stage: str, code: str
) -> None:
    engine: Engine = engine_for(home, **overrides)
    with pytest.raises(RetrievalFailed) as failure:
        engine.activate(PROJECT, QUERY)
    err = failure.value
    assert err.stage == stage and err.run_id
    summary = engine.get_run(err.run_id).summary
    assert (summary.status, summary.error_stage) == (FAILED, stage)
    assert summary.error_code == err.error_code == code and summary.error_summary  # one code in both places
    assert len(summary.error_summary) <= MAX_ERROR_SUMMARY
    assert engine.get_run(err.run_id).candidates == ()
    restart_and_verify(home)


def test_a_model_that_raises_while_indexing_keeps_the_previous_generation(home: Path, tmp_path: Path) -> None:
    class FailingDocuments(HashingEmbedder):
        def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
            raise RuntimeError("the embedding model failed (injected)")

    before = engine_for(home).show_project(PROJECT).generation
    assert before is not None
    write_memory(tmp_path / "memory", 1)
    with pytest.raises(RuntimeError, match="injected"):
        engine_for(home, embedder=FailingDocuments()).index(PROJECT)
    engine = restart_and_verify(home)
    assert engine.show_project(PROJECT).generation == before
    staging = [p.name for p in Path(before.directory).parent.iterdir() if p.name.startswith(".staging-")]
    assert staging == []  # the build's staging directory was discarded
    activations_still_work(engine)
