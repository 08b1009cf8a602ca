"""RunStore contract: SqliteRunStore and InMemoryRunStore behave the same (seed "Status and
recovery", brief §5-§6).

Retention, as decided: at most MAX_RUNS_PER_PROJECT *unpinned* Runs per project; pinned Runs are
neither counted nor pruned, and a ``running`` Run is never pruned (its owner is about to write it).
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
from collections.abc import Iterator

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.adapters.files.blob_store import FileBlobStore
from memory_core.adapters.in_memory.runs import FailingRecorder, InMemoryRunStore
from memory_core.adapters.in_memory.storage import InMemoryBlobStore, InMemoryCatalog
from memory_core.adapters.sqlite import SqliteCatalog, open_database
from memory_core.adapters.sqlite.runs import SqliteRunStore
from memory_core.domain.errors import InvalidRequest, RunNotFound, StorageUnavailable
from memory_core.domain.model import (
    EffectiveMemory,
    Generation,
    Layer,
    ManifestEntry,
    Project,
    Source,
    Unit,
    unit_hash_of,
)
from memory_core.retrieval.activation_state import ActivationState, HeldUnit
from memory_core.retrieval.exact import ExactMatch
from memory_core.retrieval.pipeline import SELECTED, Candidate, apply_rerank, fuse
from memory_core.retrieval.selection import Limits, select
from memory_core.runs.owners import Owner, current_boot_id
from memory_core.runs.records import (
    FAILED,
    MAX_ERROR_SUMMARY,
    MAX_RUNS_PER_PROJECT,
    RUNNING,
    SUCCEEDED,
    CandidateRecord,
    RunFailure,
    RunFilter,
    RunStart,
    RunTrace,
)
from memory_core.runs.rules import INTERRUPTED
from tests.contracts.test_catalog import REVISIONS

FINGERPRINT = "f" * 64


def ts(i: int) -> str:
    """Distinct, sortable ISO timestamps, one second apart."""
    return f"2025-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000Z"


def run_start(project: str = "alpha", query: str = "how do we deploy", i: int = 0) -> RunStart:
    return RunStart(project, query, FINGERPRINT, 1200, ts(i))


def ranked(seed: int, n_units: int | None = None) -> list[Candidate]:
    """A real fused, reranked and selected candidate list over random units."""
    rnd = random.Random(seed)
    n = n_units or rnd.randint(1, 40)
    units: dict[str, Unit] = {}
    for i in range(n):
        rid = f"docs/r{i % 6}.md"
        text = rnd.choice(["alpha beta", "gamma", "delta epsilon zeta", "deploy runbook"]) + f" {i % 9}"
        uid = f"{rid}#{i}"
        units[uid] = Unit(
            uid, rid, i, 0, len(text), ("Guide", f"Part {i % 3}")[: rnd.randint(0, 2)], text,
            rnd.randint(1, 300), unit_hash_of(text, 0, len(text)), f"{i % 6:02x}" * 32,
        )  # fmt: skip
    ids = list(units)
    exact = [ExactMatch(u, 3.0 - k) for k, u in enumerate(rnd.sample(ids, min(len(ids), rnd.randint(0, 2))))]
    bm25_ids = rnd.sample(ids, rnd.randint(0, n))
    dense_ids = rnd.sample(ids, rnd.randint(1, n))
    bm25 = [(u, 12.5 - k * 0.37) for k, u in enumerate(bm25_ids)]
    dense = [(u, 0.93 - k / 97) for k, u in enumerate(dense_ids)]
    fused = fuse(units, exact, bm25, dense, 60)
    window = rnd.randint(0, len(fused))
    final = apply_rerank(fused, window, [rnd.uniform(-1, 2) for _ in range(window)])
    held = rnd.sample(ids, rnd.randint(0, min(4, n)))
    state = ActivationState(
        tuple(HeldUnit(u, units[u].unit_hash if rnd.random() < 0.5 else "0" * 64) for u in sorted(held))
    )
    select(final, Limits(rnd.randint(50, 1500), rnd.randint(1, 8), rnd.randint(1, 3), 0.0), state)
    return final


def trace_of(candidates: list[Candidate], manifest_hash: str = "e" * 64, i: int = 1) -> RunTrace:
    selected = [c for c in candidates if c.disposition == SELECTED]
    return RunTrace(
        effective_memory_hash=manifest_hash,
        index_revision="rev0123456789abc",
        revisions={"parser": "p1", "chunker": "c1", "embedding_model": "e1", "ranking_profile": "default@x"},
        candidates=candidates,
        latency_ms={"bm25": 1.25, "dense": 0.5, "total": 3.75},
        warm=True,
        fragment_count=len(selected),
        token_count=sum(c.unit.token_count for c in selected if c.delta_action != "reuse"),
        finished_at=ts(i),
    )


def failure(summary: str = "ValueError: boom", **extra: object) -> RunFailure:
    fields: dict[str, object] = {
        "error_stage": "dense",
        "error_code": "stage_error",
        "latency_ms": {"load": 2.0, "total": 4.5},
        "warm": False,
        "finished_at": ts(2),
    }
    fields.update(extra)
    return RunFailure.bounded(error_summary=summary, **fields)


def manifest(tag: str, n: int) -> EffectiveMemory:
    entries = [
        ManifestEntry(
            i, f"{tag}/{i}.md", Layer.PROJECT, f"file:///{tag}/{i}.md", _digest(f"{tag}-{i}"), 10 + i, "text/markdown"
        )
        for i in range(n)
    ]
    return EffectiveMemory.from_entries("alpha", entries)


def _digest(label: str) -> str:
    import hashlib

    return hashlib.sha256(label.encode()).hexdigest()


def index(catalog: SqliteCatalog | InMemoryCatalog, project: str, revision: str, memory: EffectiveMemory) -> None:
    """What indexing leaves in the catalog: the manifest and a current generation."""
    catalog.put_manifest(memory)
    catalog.set_current_generation(
        Generation(project, revision, memory.hash, 1, len(memory.entries), REVISIONS, ts(0), f"/g/{revision}")
    )


def complete_runs(
    store: SqliteRunStore | InMemoryRunStore, manifests: dict[str, EffectiveMemory], seed: int
) -> dict[str, str]:
    """A succeeded Run of ``ranked(seed)`` over each named manifest, in order: name -> run id."""
    runs = {}
    for name, memory in manifests.items():
        runs[name] = store.start(run_start())
        store.complete(runs[name], trace_of(ranked(seed), memory.hash))
    return runs


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# -- the two implementations ---------------------------------------------------------------------


@attrs.define
class World:
    kind: str
    store: SqliteRunStore | InMemoryRunStore
    catalog: SqliteCatalog | InMemoryCatalog
    blobs: FileBlobStore | InMemoryBlobStore

    def with_owner(self, owner: Owner) -> SqliteRunStore | InMemoryRunStore:
        """A store whose new Runs belong to ``owner`` (another process's view of the same home
        for SQLite; the same store's data for the in-memory twin)."""
        if isinstance(self.store, SqliteRunStore):
            return _AnotherProcessStore(self.catalog.connection, self.blobs, owner=owner, blob_grace_s=0)
        self.store._owner = lambda: owner
        return self.store

    def index(self, project: str, revision: str, memory: EffectiveMemory) -> None:
        """What indexing leaves behind: blobs, the catalog manifest and a current generation."""
        for e in memory.entries:
            self.put_blob(e.resource_hash)
        index(self.catalog, project, revision, memory)

    def put_blob(self, digest: str) -> None:
        """Blobs whose names are our synthetic digests: write bytes that hash to them is impossible,
        so place them directly (file store: a file at the digest's path)."""
        if isinstance(self.blobs, InMemoryBlobStore):
            self.blobs.blobs[digest] = b"body"
            return
        path = self.blobs.path_of(digest)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)

    def digests(self) -> set[str]:
        return set(self.blobs.digests())


class _AnotherProcessStore(SqliteRunStore):
    """Its ``running`` rows are in the database when ``start`` returns, as another process's
    would be by the time this one looks (a store only waits for the inserts it started)."""

    def start(self, run: RunStart) -> str:
        run_id = super().start(run)
        self.close()
        return run_id


@pytest.fixture(params=["sqlite", "sqlite-sync", "memory"])
def world(request, tmp_path) -> Iterator[World]:
    if request.param.startswith("sqlite"):
        conn = open_database(tmp_path / "local.db")
        catalog = SqliteCatalog(conn)
        blobs = FileBlobStore(tmp_path / "blobs")
        behind = request.param == "sqlite"  # the default: a trace is written behind its answer
        store = SqliteRunStore(conn, blobs, blob_grace_s=0, write_behind=behind)
        yield World(request.param, store, catalog, blobs)
        store.close()
        conn.close()
    else:
        catalog = InMemoryCatalog()
        blobs = InMemoryBlobStore()
        yield World("memory", InMemoryRunStore(blobs, catalog=catalog, blob_grace_s=0), catalog, blobs)


@pytest.fixture
def store(world):
    return world.store


# -- lifecycle ------------------------------------------------------------------------------------


def test_a_started_run_is_running_with_no_trace(store):
    run_id = store.start(run_start())
    detail = store.get_run(run_id)
    s = detail.summary
    assert (s.run_id, s.project_id, s.query, s.status) == (run_id, "alpha", "how do we deploy", RUNNING)
    assert (s.started_at, s.finished_at, s.state_fingerprint, s.token_budget) == (ts(0), None, FINGERPRINT, 1200)
    assert (s.warm, s.total_ms, s.error_code, s.pinned, s.candidate_count) == (None, None, None, False, 0)
    assert detail.candidates == () and dict(detail.revisions) == {} and dict(detail.latency_ms) == {}


def test_start_then_complete_records_the_whole_trace(store):
    candidates = ranked(7, n_units=30)
    run_id = store.start(run_start())
    trace = trace_of(candidates)
    store.complete(run_id, trace)
    detail = store.get_run(run_id)
    s = detail.summary
    assert s.status == SUCCEEDED and s.finished_at == ts(1)
    assert (s.effective_memory_hash, s.index_revision, s.warm) == ("e" * 64, "rev0123456789abc", True)
    assert (s.candidate_count, s.fragment_count, s.token_count) == (
        len(candidates),
        trace.fragment_count,
        trace.token_count,
    )
    assert s.total_ms == 3.75 and s.error_stage is None and s.error_summary is None
    assert dict(detail.revisions) == dict(trace.revisions)
    assert dict(detail.latency_ms) == dict(trace.latency_ms)
    assert [c.final_rank for c in detail.candidates] == list(range(1, len(candidates) + 1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6))
def test_candidates_round_trip_field_by_field(store, seed):
    candidates = ranked(seed)
    run_id = store.start(run_start())
    store.complete(run_id, trace_of(candidates))
    stored = store.get_run(run_id).candidates
    expected = tuple(CandidateRecord.from_candidate(c) for c in candidates)
    for got, want in zip(stored, expected, strict=True):
        assert attrs.asdict(got) == attrs.asdict(want)
        assert type(got.heading_path) is tuple
    # The unit hash and the full-resource hash are stored separately.
    assert all(c.unit_hash != c.resource_hash for c in stored)
    # Identity: the selected candidates of the stored trace are the fragments returned.
    selected = [
        (c.unit_id, c.unit_hash, c.delta_action, c.final_rank, c.final_score)
        for c in stored
        if c.disposition == SELECTED
    ]
    returned = [
        (c.unit.unit_id, c.unit.unit_hash, c.delta_action, c.final_rank, c.final_score)
        for c in candidates
        if c.disposition == SELECTED
    ]
    assert selected == returned


def test_start_then_fail_records_a_bounded_error(store):
    run_id = store.start(run_start())
    store.fail(run_id, failure("x" * 2000, effective_memory_hash="e" * 64, index_revision="r1", revisions={"a": "b"}))
    detail = store.get_run(run_id)
    s = detail.summary
    assert (s.status, s.error_stage, s.error_code) == (FAILED, "dense", "stage_error")
    assert s.error_summary == "x" * MAX_ERROR_SUMMARY
    assert (s.effective_memory_hash, s.index_revision, s.warm, s.total_ms) == ("e" * 64, "r1", False, 4.5)
    assert (s.candidate_count, s.fragment_count, s.token_count) == (0, 0, 0)
    assert detail.candidates == () and dict(detail.revisions) == {"a": "b"}


def test_a_failure_before_the_generation_loaded_has_no_memory_hash(store):
    run_id = store.start(run_start())
    store.fail(run_id, failure(error_stage="load", error_code="project_not_indexed"))
    s = store.get_run(run_id).summary
    assert (s.status, s.error_code, s.effective_memory_hash, s.index_revision) == (
        FAILED, "project_not_indexed", None, None,
    )  # fmt: skip


def test_a_terminal_run_cannot_be_recorded_again(store):
    run_id = store.start(run_start())
    store.complete(run_id, trace_of(ranked(1)))
    with pytest.raises(InvalidRequest, match="already succeeded"):
        store.complete(run_id, trace_of(ranked(2)))
    with pytest.raises(InvalidRequest, match="already succeeded"):
        store.fail(run_id, failure())
    assert store.get_run(run_id).candidates == tuple(CandidateRecord.from_candidate(c) for c in ranked(1))


def test_unknown_runs_are_run_not_found(store):
    for call in (
        lambda: store.get_run("01NOSUCHRUN"),
        lambda: store.complete("01NOSUCHRUN", trace_of(ranked(1))),
        lambda: store.fail("01NOSUCHRUN", failure()),
        lambda: store.pin("01NOSUCHRUN"),
        lambda: store.unpin("01NOSUCHRUN"),
    ):
        with pytest.raises(RunNotFound) as info:
            call()
        assert info.value.code == "run_not_found"


def test_an_inconsistent_candidate_records_nothing(world):
    store = world.store
    candidates = ranked(3, n_units=10)
    bad = candidates[len(candidates) // 2]
    # Excluded with a code *and* a delta action breaks "exactly one of code or action".
    bad.disposition, bad.exclusion_code, bad.delta_action = "excluded", "token_budget_exhausted", "add"
    run_id = store.start(run_start())
    if world.kind == "sqlite":  # written behind the answer: the Run says the write failed
        store.complete(run_id, trace_of(candidates))
        detail = store.get_run(run_id)
        assert (detail.summary.status, detail.summary.error_code) == (FAILED, "history_write_failed")
    else:  # written inline: the caller hears of it, the Run stays running for the caller to fail
        with pytest.raises(Exception):  # noqa: B017 - each store raises its own constraint error
            store.complete(run_id, trace_of(candidates))
        detail = store.get_run(run_id)
        assert detail.summary.status == RUNNING
    assert detail.candidates == ()


def test_run_ids_are_unique_and_sortable_by_creation(store):
    ids = [store.start(run_start(i=0)) for _ in range(50)]
    assert len(set(ids)) == 50 and ids == sorted(ids)
    assert all(len(i) == 26 for i in ids)


# -- reading --------------------------------------------------------------------------------------


def _fill(store) -> dict[str, str]:
    """Runs across projects, statuses and times; returns run_id -> label."""
    made = {}
    for i, (project, query, outcome) in enumerate(
        [
            ("alpha", "deploy the API", "ok"),
            ("alpha", "100% coverage_rule", "fail"),
            ("beta", "Deploy checklist", "ok"),
            ("alpha", "rollback plan", "running"),
            ("beta", "100 percent", "ok"),
            ("alpha", "DEPLOY TO PROD", "ok"),
        ]
    ):
        run_id = store.start(run_start(project, query, i=i * 10))
        if outcome == "ok":
            store.complete(run_id, trace_of(ranked(i), i=i * 10 + 1))
        elif outcome == "fail":
            store.fail(run_id, failure())
        made[run_id] = query
    return made


def _queries(page) -> list[str]:
    return [r.query for r in page.runs]


def test_list_is_newest_first_and_filters(store):
    _fill(store)
    everything = store.list_runs(RunFilter())
    assert _queries(everything) == [
        "DEPLOY TO PROD", "100 percent", "rollback plan", "Deploy checklist", "100% coverage_rule", "deploy the API",
    ]  # fmt: skip
    assert everything.next_cursor is None
    assert _queries(store.list_runs(RunFilter(project_id="beta"))) == ["100 percent", "Deploy checklist"]
    assert _queries(store.list_runs(RunFilter(status=FAILED))) == ["100% coverage_rule"]
    assert _queries(store.list_runs(RunFilter(status=RUNNING))) == ["rollback plan"]
    assert _queries(store.list_runs(RunFilter(project_id="alpha", status=SUCCEEDED))) == [
        "DEPLOY TO PROD", "deploy the API",
    ]  # fmt: skip
    # since is inclusive, until exclusive.
    assert _queries(store.list_runs(RunFilter(since=ts(20), until=ts(40)))) == ["rollback plan", "Deploy checklist"]
    assert store.list_runs(RunFilter(project_id="nobody")).runs == ()


def test_query_filter_is_a_literal_ascii_case_insensitive_substring(store):
    _fill(store)
    assert _queries(store.list_runs(RunFilter(query_contains="deploy"))) == [
        "DEPLOY TO PROD", "Deploy checklist", "deploy the API",
    ]  # fmt: skip
    # % and _ are literal, not wildcards.
    assert _queries(store.list_runs(RunFilter(query_contains="100%"))) == ["100% coverage_rule"]
    assert _queries(store.list_runs(RunFilter(query_contains="e_r"))) == ["100% coverage_rule"]
    assert _queries(store.list_runs(RunFilter(query_contains="0 p"))) == ["100 percent"]
    assert store.list_runs(RunFilter(query_contains="\\")).runs == ()


def test_pages_neither_repeat_nor_skip_while_runs_are_inserted(store):
    rnd = random.Random(5)
    # Several Runs share a start time: the run id breaks the tie.
    existing = {store.start(run_start("alpha", f"q{i}", i=rnd.randint(0, 15))) for i in range(37)}
    seen: list[str] = []
    cursor = None
    inserted = 0
    while True:
        page = store.list_runs(RunFilter(project_id="alpha"), limit=5, cursor=cursor)
        assert len(page.runs) <= 5
        seen.extend(r.run_id for r in page.runs)
        # Concurrent activity: newer Runs, and one as old as anything already listed.
        store.start(run_start("alpha", "new", i=100 + inserted))
        store.start(run_start("alpha", "late", i=rnd.randint(0, 15)))
        inserted += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(set(seen))
    assert existing <= set(seen)
    keys = [(store.get_run(r).summary.started_at, r) for r in seen]
    assert keys == sorted(keys, reverse=True)


def test_an_exact_page_boundary_has_no_empty_last_page(store):
    for i in range(4):
        store.start(run_start(i=i))
    first = store.list_runs(RunFilter(), limit=2)
    second = store.list_runs(RunFilter(), limit=2, cursor=first.next_cursor)
    assert len(second.runs) == 2 and second.next_cursor is None


@pytest.mark.parametrize(
    ("run_filter", "limit", "cursor"),
    [
        (RunFilter(), 0, None),
        (RunFilter(), 501, None),
        (RunFilter(), True, None),
        (RunFilter(status="done"), 10, None),
        (RunFilter(), 10, "not a cursor!"),
        (RunFilter(), 10, "WzEsMl0"),  # base64 of [1,2]: well-formed, wrong shape
    ],
)
def test_bad_listing_arguments_are_invalid_requests(store, run_filter, limit, cursor):
    with pytest.raises(InvalidRequest):
        store.list_runs(run_filter, limit=limit, cursor=cursor)


# -- retention ------------------------------------------------------------------------------------


def test_the_501st_unpinned_run_prunes_the_oldest_and_pinned_runs_do_not_count(store):
    pinned = []
    for i in range(3):  # the oldest of all, pinned: never pruned, never counted
        run_id = store.start(run_start(i=i))
        store.fail(run_id, failure())
        store.pin(run_id)
        pinned.append(run_id)
    other = store.start(run_start("beta", i=0))
    store.fail(other, failure())
    ids = []
    for i in range(MAX_RUNS_PER_PROJECT):
        run_id = store.start(run_start(i=10 + i))
        store.fail(run_id, failure())
        ids.append(run_id)
    newest = store.start(run_start(i=10_000))
    with pytest.raises(RunNotFound):
        store.get_run(ids[0])
    for run_id in [*pinned, ids[1], newest, other]:
        store.get_run(run_id)
    unpinned = _all(store, RunFilter(project_id="alpha"))
    assert sum(not r.pinned for r in unpinned) == MAX_RUNS_PER_PROJECT
    assert sum(r.pinned for r in unpinned) == 3


def test_a_running_run_is_never_pruned(store):
    oldest = store.start(run_start(i=0))  # still running: its owner is about to write it
    ids = []
    for i in range(MAX_RUNS_PER_PROJECT):
        run_id = store.start(run_start(i=1 + i))
        store.fail(run_id, failure())
        ids.append(run_id)
    assert store.get_run(oldest).summary.status == RUNNING
    with pytest.raises(RunNotFound):
        store.get_run(ids[0])


def test_an_unpinned_run_counts_again(store):
    keep = store.start(run_start(i=0))
    store.fail(keep, failure())
    store.pin(keep)
    assert store.get_run(keep).summary.pinned
    store.unpin(keep)
    assert not store.get_run(keep).summary.pinned


def _all(store, run_filter: RunFilter) -> list:
    runs, cursor = [], None
    while True:
        page = store.list_runs(run_filter, limit=500, cursor=cursor)
        runs.extend(page.runs)
        cursor = page.next_cursor
        if cursor is None:
            return runs


# -- recovery -------------------------------------------------------------------------------------


def test_recovery_fails_only_runs_whose_owner_is_gone(world):
    me = Owner.current()
    assert me.is_alive()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # A live process other than us, with its real start time.
        other_live = Owner(sleeper.pid, _start_time(sleeper.pid), me.boot_id)
        cases = {
            "dead pid": (Owner(dead_pid(), "123", me.boot_id), True),
            "reused pid": (Owner(me.pid, "1", me.boot_id), True),  # our pid, another start time
            "other boot": (Owner(me.pid, me.started_at, "another-boot-id"), True),
            "us": (me, False),
            "another live process": (other_live, False),
        }
        started = {}
        for name, (owner, _) in cases.items():
            started[name] = world.with_owner(owner).start(run_start(query=name))
        done = world.with_owner(me).start(run_start(query="done"))
        world.store.complete(done, trace_of(ranked(1)))

        recovering = world.with_owner(me)
        assert recovering.recover_interrupted() == 3
        for name, (_, gone) in cases.items():
            s = recovering.get_run(started[name]).summary
            if gone:
                assert (s.status, s.error_code, s.error_stage) == (FAILED, INTERRUPTED, "unknown"), name
                assert s.finished_at is not None and s.error_summary and len(s.error_summary) <= MAX_ERROR_SUMMARY
            else:
                assert s.status == RUNNING, name
        assert recovering.get_run(done).summary.status == SUCCEEDED
        assert recovering.recover_interrupted() == 0
    finally:
        sleeper.kill()
        sleeper.wait()


def _start_time(pid: int) -> str | None:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[19]


def test_the_current_owner_knows_itself():
    me = Owner.current()
    assert me.pid == os.getpid() and me.boot_id == current_boot_id()
    assert me.started_at is not None and me.is_alive()
    assert not Owner(dead_pid(), None, None).is_alive()
    assert not Owner(0, None, None).is_alive()
    assert not Owner(2**40, None, None).is_alive()


# -- manifests, clearing and blobs -------------------------------------------------------------------


def test_a_recorded_manifest_is_shared_by_runs(store):
    memory = manifest("m", 5)
    assert store.record_manifest(memory) == memory.hash
    assert store.record_manifest(memory) == memory.hash  # once
    for _ in range(2):
        run_id = store.start(run_start())
        store.complete(run_id, trace_of(ranked(4), memory.hash))
    assert store.run_manifest(memory.hash) == memory.entries
    assert store.run_manifest("0" * 64) is None


def test_a_manifest_that_does_not_match_its_hash_is_refused(store):
    memory = manifest("m", 3)
    with pytest.raises(InvalidRequest):
        store.record_manifest(attrs.evolve(memory, hash="1" * 64))


def test_completing_copies_an_unrecorded_manifest_from_the_catalog(world):
    memory = manifest("idx", 4)
    world.catalog.put_manifest(memory)
    run_id = world.store.start(run_start())
    world.store.complete(run_id, trace_of(ranked(5), memory.hash))
    assert world.store.run_manifest(memory.hash) == memory.entries
    # An unknown manifest: the Run still records, by hash only.
    other = world.store.start(run_start())
    world.store.complete(other, trace_of(ranked(5), "9" * 64))
    assert world.store.get_run(other).summary.status == SUCCEEDED


def test_a_live_memory_no_generation_holds_is_stored_from_the_trace_once(world):
    live = manifest("live", 4)  # the sources at activation: in no catalog, recorded by no index
    run_id = world.store.start(run_start())
    world.store.complete(run_id, attrs.evolve(trace_of(ranked(6), live.hash), live_memory=live))
    assert world.store.get_run(run_id).summary.effective_memory_hash == live.hash
    assert world.store.run_manifest(live.hash) == live.entries
    again = world.store.start(run_start())
    world.store.complete(again, attrs.evolve(trace_of(ranked(6), live.hash), live_memory=live))
    assert world.store.run_manifest(live.hash) == live.entries  # shared, not duplicated
    # A live memory whose entries do not hash to its hash is refused, never stored under it.
    forged = attrs.evolve(manifest("forged", 2), hash="7" * 64)
    bad = world.store.start(run_start())
    with contextlib.suppress(InvalidRequest):  # raised inline; behind the answer the Run fails
        world.store.complete(bad, attrs.evolve(trace_of(ranked(6), "7" * 64), live_memory=forged))
    assert world.store.run_manifest("7" * 64) is None
    assert world.store.get_run(bad).summary.status != SUCCEEDED


def test_clear_one_project_keeps_pinned_runs_and_other_projects(world):
    store = world.store
    a1, a2, a_pinned = (store.start(run_start("alpha", i=i)) for i in range(3))
    for run_id in (a1, a2, a_pinned):
        store.complete(run_id, trace_of(ranked(1)))
    store.pin(a_pinned)
    b1 = store.start(run_start("beta", i=5))
    store.fail(b1, failure())
    report = store.clear("alpha")
    assert (report.deleted_runs, report.kept_pinned) == (2, 1)
    assert {r.run_id for r in _all(store, RunFilter())} == {a_pinned, b1}
    assert store.get_run(a_pinned).candidates  # a pinned Run keeps its whole trace
    report = store.clear()
    assert (report.deleted_runs, report.kept_pinned) == (1, 1)
    assert [r.run_id for r in _all(store, RunFilter())] == [a_pinned]
    assert store.clear("nobody").deleted_runs == 0


def test_clear_spares_a_run_in_flight_but_not_an_abandoned_one(world):
    me = Owner.current()
    in_flight = world.with_owner(me).start(run_start(i=1))
    abandoned = world.with_owner(Owner(dead_pid(), None, me.boot_id)).start(run_start(i=2))
    report = world.with_owner(me).clear()
    assert report.deleted_runs == 1
    assert world.store.get_run(in_flight).summary.status == RUNNING
    with pytest.raises(RunNotFound):
        world.store.get_run(abandoned)


def test_clear_collects_exactly_the_unreferenced_blobs(world):
    store = world.store
    generation = manifest("gen", 3)
    world.catalog.add_project(Project("alpha", (), ts(0)))
    world.index("alpha", "rev1", generation)
    old_run, pinned_run, shared = manifest("old", 3), manifest("pinned", 2), generation
    for memory in (old_run, pinned_run):
        for e in memory.entries:
            world.put_blob(e.resource_hash)
        store.record_manifest(memory)
    stray = _digest("stray")
    world.put_blob(stray)
    runs = complete_runs(store, {"old": old_run, "pinned": pinned_run, "shared": shared}, seed=2)
    store.pin(runs["pinned"])

    report = store.clear()
    assert report.deleted_runs == 2 and report.kept_pinned == 1
    expected_dead = {e.resource_hash for e in old_run.entries} | {stray}
    assert report.deleted_blobs == len(expected_dead)
    assert world.digests() == {e.resource_hash for e in (*generation.entries, *pinned_run.entries)}
    # The generation's manifest stays known; the cleared Run's is dropped.
    assert store.run_manifest(generation.hash) == generation.entries
    assert store.run_manifest(old_run.hash) is None
    assert store.run_manifest(pinned_run.hash) == pinned_run.entries
    assert store.clear().deleted_blobs == 0  # idempotent


def test_a_previous_generation_keeps_its_blobs(world):
    world.catalog.add_project(Project("alpha", (), ts(0)))
    first, second, third = manifest("one", 2), manifest("two", 2), manifest("three", 2)
    world.index("alpha", "rev1", first)
    world.index("alpha", "rev2", second)
    assert world.store.clear().deleted_blobs == 0
    world.index("alpha", "rev3", third)  # rev1 is neither current nor previous any more
    assert world.store.clear().deleted_blobs == 2
    assert world.digests() == {e.resource_hash for e in (*second.entries, *third.entries)}


# -- a store that fails on purpose ------------------------------------------------------------------


def test_failing_recorder_fails_on_the_chosen_methods_and_passes_the_rest(store):
    flaky = FailingRecorder(store, fail_on=("complete",))
    run_id = flaky.start(run_start())
    with pytest.raises(StorageUnavailable):
        flaky.complete(run_id, trace_of(ranked(1)))
    assert flaky.get_run(run_id).summary.status == RUNNING
    flaky.fail(run_id, failure())
    assert flaky.calls == ["start", "complete", "fail"]
    assert flaky.get_run(run_id).summary.status == FAILED
    with pytest.raises(ValueError):
        FailingRecorder(store, fail_on=("list_runs",))
    boom = FailingRecorder(store, fail_on=("start",), error=lambda: OSError("disk full"))
    with pytest.raises(OSError, match="disk full"):
        boom.start(run_start())


# -- through the engine: identity, failures, a store that fails on purpose ---------------------------

DOCS = {
    "/org": {
        "runbooks/deploy.md": b"# Deploy runbook\n\nDeploy with helm upgrade.\n\n## Rollback\n\nRun helm rollback.\n",
        "conventions/review.md": b"# Code review\n\nEvery change needs two approvals.\n",
    },
    "/proj": {
        "conventions/review.md": b"# Code review\n\nLedger changes need two approvals and a ledger owner.\n",
        "decisions/ADR-0004-locks.md": b"# ADR-0004: Advisory locks\n\nUse Postgres advisory locks for jobs.\n",
        "notes.md": b"# Notes\n\nCoffee is on the second floor.\n\n## Printer\n\nThe printer is broken.\n",
    },
}
WORDS = [
    "deploy", "helm", "rollback", "code", "review", "approvals", "ledger", "owner", "ADR-0004", "advisory", "locks",
    "coffee", "printer", "jobs",
]  # fmt: skip


def engine_with(recorder, **overrides):  # type: ignore[no-untyped-def]
    from memory_core.entrypoints.bootstrap import bootstrap_in_memory

    engine = bootstrap_in_memory(recorder=recorder, **overrides)
    for source, files in DOCS.items():
        for rel, data in files.items():
            engine.indexer.scanner.write(source, rel, data)
    engine.add_project("demo", [Source("/org", Layer.ORGANIZATION), Source("/proj", Layer.PROJECT)])
    engine.index("demo")
    return engine


def _fragment_view(f) -> tuple:  # type: ignore[no-untyped-def]
    return (f.unit_id, f.unit_hash, f.resource_id, f.heading_path, f.token_count, f.delta_action, f.final_rank,
            f.final_score)  # fmt: skip


def test_returned_fragments_equal_the_stored_selected_candidates(store):
    engine = engine_with(store)
    rnd = random.Random(11)
    state = None
    for _ in range(30):
        query = " ".join(rnd.sample(WORDS, rnd.randint(1, 4)))
        activation = engine.activate("demo", query, budget=rnd.choice([8, 20, 60, 400]), state=state)
        response = activation.response
        detail = store.get_run(response.run_id)
        assert detail.summary.status == SUCCEEDED and detail.summary.query == query
        assert detail.summary.state_fingerprint == response.state_fingerprint
        assert detail.candidates == tuple(CandidateRecord.from_candidate(c) for c in activation.candidates)
        selected = [c for c in detail.candidates if c.disposition == SELECTED]
        assert [_fragment_view(c) for c in selected] == [_fragment_view(f) for f in response.fragments]
        assert detail.summary.fragment_count == len(response.fragments)
        assert dict(detail.revisions) == dict(response.revisions)
        state = response.activation_state if rnd.random() < 0.6 else None
    engine.close()


def test_a_stage_failure_through_the_engine_is_a_failed_run(store):
    from memory_core.domain.errors import RetrievalFailed

    class Broken:
        revision = "broken"

        def rerank(self, query, candidates):  # type: ignore[no-untyped-def]
            raise RuntimeError("model exploded " * 100)

    engine = engine_with(store, reranker=Broken())
    with pytest.raises(RetrievalFailed) as info:
        engine.activate("demo", "deploy rollback")
    s = store.get_run(info.value.run_id).summary
    assert (s.status, s.error_stage) == (FAILED, "rerank")
    assert len(s.error_summary) <= MAX_ERROR_SUMMARY and s.effective_memory_hash is not None


@pytest.mark.parametrize("fail_on", [("start",), ("complete",), ("start", "complete", "fail")])
def test_a_failure_to_write_history_never_changes_the_answer(store, fail_on):
    healthy = engine_with(InMemoryRunStore())
    broken = engine_with(FailingRecorder(store, fail_on=fail_on))
    for query in ("code review approvals", "ADR-0004", "helm rollback printer"):
        good = healthy.activate("demo", query).response
        bad = broken.activate("demo", query).response
        assert bad.run_id is None and good.run_id is not None
        assert bad.fragments == good.fragments and bad.activation_state == good.activation_state
    # Nothing half-written is visible: no succeeded Run without its candidates.
    for run in _all(store, RunFilter()):
        # Started, never completed: the engine marks it failed at once (best effort; recovery
        # would fail it once we are gone), never a succeeded Run without its candidates.
        assert (run.status, run.error_code) == ("failed", "history_write_failed")
        assert store.get_run(run.run_id).candidates == ()
    assert store.recover_interrupted() == 0  # we are alive
