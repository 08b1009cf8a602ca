"""In-memory twin of ``SqliteRunStore`` for fast core tests (same contract, ``tests/contracts``),
plus ``FailingRecorder``: a store that fails on purpose, to show history never changes an answer."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

import attrs

from memory_core.domain.clock import utc_now_iso
from memory_core.domain.errors import InvalidRequest, RunNotFound, StorageUnavailable
from memory_core.domain.model import EffectiveMemory, ManifestEntry
from memory_core.ports import BlobStore, Catalog
from memory_core.ports.runs import RunRecorder
from memory_core.runs.listing import check_listing, contains_ascii_nocase, decode_cursor, encode_cursor
from memory_core.runs.owners import Owner, OwnerOfThisProcess, current_boot_id
from memory_core.runs.records import (
    FAILED,
    MAX_ERROR_SUMMARY,
    MAX_RUNS_PER_PROJECT,
    RUNNING,
    SUCCEEDED,
    CandidateRecord,
    ClearReport,
    RunDetail,
    RunFailure,
    RunFilter,
    RunPage,
    RunStart,
    RunSummary,
    RunTrace,
)
from memory_core.runs.rules import (
    BLOB_GRACE_S,
    INTERRUPTED,
    INTERRUPTED_STAGE,
    MAX_ERROR_FIELD,
    bounded,
    check_manifest,
    collect_blobs,
    interrupted_summary,
    new_run_id,
    total_ms,
)


@attrs.define
class _Run:
    summary: RunSummary
    owner: Owner | None
    revisions: dict[str, str] = attrs.field(factory=dict)
    latency_ms: dict[str, float] = attrs.field(factory=dict)
    candidates: tuple[CandidateRecord, ...] = ()


class InMemoryRunStore:
    """``RunStore`` over dicts. ``catalog``: its current/previous generations' manifests keep
    blobs live and supply unknown manifests; ``corpus_references``: the digests
    evaluation corpora hold."""

    def __init__(
        self,
        blobs: BlobStore | None = None,
        owner: Owner | None = None,
        clock: object | None = None,
        *,
        catalog: Catalog | None = None,
        corpus_references: Callable[[], Iterable[str]] | None = None,
        blob_grace_s: float = BLOB_GRACE_S,
    ) -> None:
        self._blobs = blobs
        self._owner: Callable[[], Owner] = (lambda: owner) if owner is not None else OwnerOfThisProcess()
        self._now: Callable[[], str] = getattr(clock, "now_iso", None) or _utc_now
        self._catalog = catalog
        self._corpus_references = corpus_references or (lambda: ())
        self._grace = blob_grace_s
        self._runs: dict[str, _Run] = {}
        self._manifests: dict[str, tuple[ManifestEntry, ...]] = {}
        self._blob_meta: dict[str, tuple[int, str, str]] = {}
        self._lock = threading.RLock()

    # -- recording ------------------------------------------------------------------------------

    def start(self, run: RunStart) -> str:
        run_id = new_run_id()
        summary = RunSummary(
            run_id=run_id, project_id=run.project_id, query=run.query, status=RUNNING, started_at=run.started_at,
            finished_at=None, state_fingerprint=run.state_fingerprint, token_budget=run.token_budget,
            effective_memory_hash=None, index_revision=None, warm=None, candidate_count=0, fragment_count=0,
            token_count=0, total_ms=None, error_stage=None, error_code=None, error_summary=None, pinned=False,
        )  # fmt: skip
        with self._lock:
            self._runs[run_id] = _Run(summary, self._owner())
            self._prune(run.project_id)
        return run_id

    def _prune(self, project_id: str) -> None:
        unpinned = [
            r.summary for r in self._runs.values() if r.summary.project_id == project_id and not r.summary.pinned
        ]
        excess = len(unpinned) - MAX_RUNS_PER_PROJECT
        prunable = sorted((s for s in unpinned if s.status != RUNNING), key=lambda s: (s.started_at, s.run_id))
        for s in prunable[: max(excess, 0)]:
            del self._runs[s.run_id]

    def complete(self, run_id: str, trace: RunTrace) -> None:
        records = tuple(CandidateRecord.from_candidate(c) for c in trace.candidates)
        ranks = [r.final_rank for r in records]
        if len(set(ranks)) != len(ranks) or any(r < 1 for r in ranks):
            raise InvalidRequest("candidates must have distinct final ranks from 1", run_id=run_id)
        for r in records:
            _check_disposition(r)
            _check_span(r)
        latency = dict(trace.latency_ms)
        live = trace.live_memory
        if live is not None and (live.hash != trace.effective_memory_hash or live.hash in self._manifests):
            live = None  # not the Run's memory, or stored already
        if live is not None:
            check_manifest(live)  # before anything changes: a refused trace leaves the Run running
        with self._lock:
            run = self._running(run_id)
            run.summary = attrs.evolve(
                run.summary, status=SUCCEEDED, finished_at=trace.finished_at,
                effective_memory_hash=trace.effective_memory_hash, index_revision=trace.index_revision,
                warm=bool(trace.warm), candidate_count=len(records), fragment_count=trace.fragment_count,
                token_count=trace.token_count, total_ms=total_ms(latency),
            )  # fmt: skip
            run.revisions, run.latency_ms = dict(trace.revisions), latency
            run.candidates = tuple(sorted(records, key=lambda r: r.final_rank))
            if live is not None:
                self._store_manifest(live.hash, tuple(live.entries))
            self._ensure_manifest(trace.effective_memory_hash)

    def fail(self, run_id: str, failure: RunFailure) -> None:
        latency = dict(failure.latency_ms)
        with self._lock:
            run = self._running(run_id)
            run.summary = attrs.evolve(
                run.summary, status=FAILED, finished_at=failure.finished_at,
                effective_memory_hash=failure.effective_memory_hash, index_revision=failure.index_revision,
                warm=bool(failure.warm), total_ms=total_ms(latency),
                error_stage=bounded(failure.error_stage, MAX_ERROR_FIELD),
                error_code=bounded(failure.error_code, MAX_ERROR_FIELD),
                error_summary=bounded(failure.error_summary, MAX_ERROR_SUMMARY),
            )  # fmt: skip
            run.revisions, run.latency_ms = dict(failure.revisions), latency
            if failure.effective_memory_hash:
                self._ensure_manifest(failure.effective_memory_hash)

    def _running(self, run_id: str) -> _Run:
        run = self._get(run_id)
        if run.summary.status != RUNNING:
            raise InvalidRequest(
                f"Retrieval Run {run_id!r} is already {run.summary.status}", run_id=run_id, status=run.summary.status
            )
        return run

    def _get(self, run_id: str) -> _Run:
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunNotFound(f"no Retrieval Run {run_id!r}", run_id=run_id) from None

    def _ensure_manifest(self, manifest_hash: str) -> None:
        if manifest_hash in self._manifests:
            return
        entries = self._catalog.get_manifest(manifest_hash) if self._catalog is not None else None
        if entries is not None:
            self._store_manifest(manifest_hash, entries)

    def _store_manifest(self, manifest_hash: str, entries: tuple[ManifestEntry, ...]) -> None:
        self._manifests[manifest_hash] = entries
        now = self._now()
        for e in entries:
            self._blob_meta.setdefault(e.resource_hash, (e.byte_size, e.media_type, now))

    def record_manifest(self, effective_memory: EffectiveMemory) -> str:
        with self._lock:
            if effective_memory.hash not in self._manifests:
                self._store_manifest(check_manifest(effective_memory), tuple(effective_memory.entries))
        return effective_memory.hash

    def record_blob(self, sha256: str, byte_size: int, media_type: str) -> None:
        with self._lock:
            self._blob_meta.setdefault(sha256, (byte_size, media_type, self._now()))

    def run_manifest(self, manifest_hash: str) -> tuple[ManifestEntry, ...] | None:
        with self._lock:
            return self._manifests.get(manifest_hash)

    def blob_metadata(self) -> dict[str, tuple[int, str, str]]:
        """``{sha256: (byte_size, media_type, first_seen_at)}``, for tests."""
        with self._lock:
            return dict(self._blob_meta)

    # -- pinning ----------------------------------------------------------------------------------

    def pin(self, run_id: str) -> None:
        self._set_pinned(run_id, True)

    def unpin(self, run_id: str) -> None:
        self._set_pinned(run_id, False)

    def _set_pinned(self, run_id: str, pinned: bool) -> None:
        with self._lock:
            run = self._get(run_id)
            run.summary = attrs.evolve(run.summary, pinned=pinned)

    # -- reading ----------------------------------------------------------------------------------

    def list_runs(self, run_filter: RunFilter, *, limit: int = 50, cursor: str | None = None) -> RunPage:
        check_listing(run_filter, limit)
        after = decode_cursor(cursor) if cursor is not None else None
        with self._lock:
            summaries = [r.summary for r in self._runs.values()]
        matching = sorted(
            (s for s in summaries if _matches(s, run_filter) and (after is None or (s.started_at, s.run_id) < after)),
            key=lambda s: (s.started_at, s.run_id),
            reverse=True,
        )
        page = tuple(matching[:limit])
        more = len(matching) > limit
        return RunPage(page, encode_cursor(page[-1].started_at, page[-1].run_id) if more else None)

    def get_run(self, run_id: str) -> RunDetail:
        with self._lock:
            run = self._get(run_id)
            return RunDetail(run.summary, dict(run.revisions), dict(run.latency_ms), run.candidates)

    # -- recovery and clearing -------------------------------------------------------------------

    def recover_interrupted(self) -> int:
        boot = current_boot_id()
        failed = 0
        with self._lock:
            for run in self._runs.values():
                s = run.summary
                if s.status != RUNNING or (run.owner is not None and run.owner.is_alive(boot)):
                    continue
                run.summary = attrs.evolve(
                    s, status=FAILED, finished_at=self._now(), error_stage=INTERRUPTED_STAGE, error_code=INTERRUPTED,
                    error_summary=interrupted_summary(run.owner.pid if run.owner else None),
                )  # fmt: skip
                failed += 1
        return failed

    def settle(self) -> None:
        """Nothing pending: every write is done inline."""

    def close(self) -> None:
        """Nothing pending: every write is done inline."""

    def clear(self, project_id: str | None = None) -> ClearReport:
        boot = current_boot_id()
        with self._lock:
            scoped = [r for r in self._runs.values() if project_id is None or r.summary.project_id == project_id]
            doomed = [
                r.summary.run_id
                for r in scoped
                if not r.summary.pinned
                and not (r.summary.status == RUNNING and r.owner is not None and r.owner.is_alive(boot))
            ]
            for run_id in doomed:
                del self._runs[run_id]
            kept = sum(1 for r in scoped if r.summary.pinned)
            keep_manifests = self._referenced_manifests() | self._generation_manifests()
            self._manifests = {h: e for h, e in self._manifests.items() if h in keep_manifests}
            live = self.live_blobs()
            self._blob_meta = {d: m for d, m in self._blob_meta.items() if d in live}
        deleted_blobs = collect_blobs(self._blobs, self.live_blobs, self._grace) if self._blobs is not None else 0
        return ClearReport(deleted_runs=len(doomed), kept_pinned=kept, deleted_blobs=deleted_blobs)

    def live_blobs(self) -> set[str]:
        with self._lock:
            live = {e.resource_hash for h in self._referenced_manifests() for e in self._manifests.get(h, ())}
            for h in self._generation_manifests():
                entries = self._catalog.get_manifest(h) if self._catalog is not None else None
                live.update(e.resource_hash for e in entries or self._manifests.get(h, ()))
            live.update(self._corpus_references())
            return live

    def _referenced_manifests(self) -> set[str]:
        return {r.summary.effective_memory_hash for r in self._runs.values() if r.summary.effective_memory_hash}

    def _generation_manifests(self) -> set[str]:
        catalog = self._catalog
        if catalog is None:
            return set()
        hashes = set()
        for project in catalog.list_projects():
            for which in (catalog.current_generation, catalog.previous_generation):
                generation = which(project.project_id)
                if generation is not None:
                    hashes.add(generation.effective_memory_hash)
        return hashes


def _check_disposition(r: CandidateRecord) -> None:
    # The same rule as the SQLite CHECK constraints: a selected unit has a delta action, an
    # excluded one an exclusion code, never both.
    ok = (
        r.disposition == "selected" and r.delta_action in ("add", "replace", "reuse") and r.exclusion_code is None
    ) or (r.disposition == "excluded" and r.exclusion_code is not None and r.delta_action is None)
    if not ok:
        raise InvalidRequest(f"candidate {r.unit_id!r} has an inconsistent disposition", unit_id=r.unit_id)


def _check_span(r: CandidateRecord) -> None:
    # The SQLite CHECK constraints of migration 7: a span has both ends, in order, or neither
    # (a Run recorded before spans were kept).
    if r.start is None and r.end is None:
        return
    if r.start is None or r.end is None or not 0 <= r.start <= r.end:
        raise InvalidRequest(f"candidate {r.unit_id!r} has an invalid span", unit_id=r.unit_id)


def _matches(s: RunSummary, f: RunFilter) -> bool:
    return (
        (f.project_id is None or s.project_id == f.project_id)
        and (f.status is None or s.status == f.status)
        and (f.since is None or s.started_at >= f.since)
        and (f.until is None or s.started_at < f.until)
        and (not f.query_contains or contains_ascii_nocase(s.query, f.query_contains))
    )


def _utc_now() -> str:
    return utc_now_iso()


class FailingRecorder:
    """Wraps a recorder and raises on the chosen methods: the history store "fails on purpose".

    ``fail_on`` names any of ``start``, ``complete``, ``fail``; ``error`` is what is raised
    (default: ``StorageUnavailable``, what a full disk or locked database gives). Calls that do not
    fail pass through to ``inner``, so a test can read back what was recorded.
    """

    def __init__(
        self,
        inner: RunRecorder,
        fail_on: Sequence[str] = ("start", "complete", "fail"),
        error: Callable[[], BaseException] | None = None,
    ) -> None:
        unknown = set(fail_on) - {"start", "complete", "fail"}
        if unknown:
            raise ValueError(f"unknown recorder methods: {sorted(unknown)}")
        self.inner = inner
        self.fail_on = frozenset(fail_on)
        self._error = error or (lambda: StorageUnavailable("history store failed on purpose"))
        self.calls: list[str] = []

    def _maybe_fail(self, method: str) -> None:
        self.calls.append(method)
        if method in self.fail_on:
            raise self._error()

    def start(self, run: RunStart) -> str:
        self._maybe_fail("start")
        return self.inner.start(run)

    def complete(self, run_id: str, trace: RunTrace) -> None:
        self._maybe_fail("complete")
        self.inner.complete(run_id, trace)

    def fail(self, run_id: str, failure: RunFailure) -> None:
        self._maybe_fail("fail")
        self.inner.fail(run_id, failure)

    def __getattr__(self, name: str) -> object:
        # The reading side (list_runs, get_run, ...) passes through untouched.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


__all__ = ["FailingRecorder", "InMemoryRunStore"]
