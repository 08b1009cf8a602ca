"""Retrieval Run recording: the port and the values it records (seed "Boundary", brief §5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from memory_core.domain.canonical import OMIT_NONE
from memory_core.domain.model import EffectiveMemory, ManifestEntry
from memory_core.retrieval.pipeline import Candidate

RUNNING, SUCCEEDED, FAILED = "running", "succeeded", "failed"
MAX_ERROR_SUMMARY = 500
HISTORY_WRITE_FAILED = "history_write_failed"


@attrs.frozen
class RunStart:
    project_id: str
    query: str
    state_fingerprint: str
    token_budget: int
    started_at: str


@attrs.frozen
class RunTrace:
    """Everything a succeeded Run records, built from the same candidates as the response."""

    effective_memory_hash: str
    index_revision: str
    revisions: Mapping[str, str]
    candidates: Sequence[Candidate]
    latency_ms: Mapping[str, float]
    warm: bool
    fragment_count: int
    token_count: int
    finished_at: str
    # The live Effective Memory when it differs from the generation's (whose manifest is recorded
    # at index time): its manifest is stored once under ``effective_memory_hash``.
    live_memory: EffectiveMemory | None = None


@attrs.frozen
class RunFailure:
    error_stage: str
    error_code: str
    error_summary: str
    latency_ms: Mapping[str, float]
    warm: bool
    finished_at: str
    effective_memory_hash: str | None = None
    index_revision: str | None = None
    revisions: Mapping[str, str] = attrs.field(factory=dict)

    @classmethod
    def bounded(cls, *, error_summary: str, **fields: object) -> RunFailure:
        return cls(error_summary=error_summary[:MAX_ERROR_SUMMARY], **fields)  # type: ignore[arg-type]

    @classmethod
    def history_write_failed(cls, latency_ms: Mapping[str, float], warm: bool, finished_at: str) -> RunFailure:
        """The agent got its answer but the Run's trace could not be written."""
        return cls(
            error_stage="record",
            error_code=HISTORY_WRITE_FAILED,
            error_summary="the trace could not be written; the agent got its answer",
            latency_ms=latency_ms,
            warm=warm,
            finished_at=finished_at,
        )


@attrs.frozen
class CandidateRecord:
    """One stored candidate: every stage's rank and score, disposition, code or action."""

    unit_id: str
    resource_id: str
    unit_hash: str
    resource_hash: str
    heading_path: tuple[str, ...]
    token_count: int
    exact_rank: int | None
    exact_score: float | None
    bm25_rank: int | None
    bm25_score: float | None
    lexical_rank: int | None
    dense_rank: int | None
    dense_score: float | None
    dense_similarity: float | None
    rrf_rank: int
    rrf_score: float
    rerank_rank: int | None
    rerank_score: float | None
    final_rank: int
    final_score: float | None
    disposition: str
    exclusion_code: str | None
    delta_action: str | None
    # The unit's [start, end) code-point span in its resource's text (brief §3), so a judge can be
    # shown its text cut from the frozen corpus and checked against ``unit_hash``. None in Runs
    # recorded before spans were kept; left out of the plain form then, so that their frozen
    # traces (and older fixtures) keep the trace hashes they were recorded with.
    start: int | None = attrs.field(default=None, metadata=OMIT_NONE)
    end: int | None = attrs.field(default=None, metadata=OMIT_NONE)

    @classmethod
    def from_candidate(cls, c: Candidate) -> CandidateRecord:
        u = c.unit
        return cls(
            unit_id=u.unit_id,
            resource_id=u.resource_id,
            unit_hash=u.unit_hash,
            resource_hash=u.resource_hash,
            heading_path=u.heading_path,
            token_count=u.token_count,
            exact_rank=c.exact_rank,
            exact_score=c.exact_score,
            bm25_rank=c.bm25_rank,
            bm25_score=c.bm25_score,
            lexical_rank=c.lexical_rank,
            dense_rank=c.dense_rank,
            dense_score=c.dense_score,
            dense_similarity=c.dense_similarity,
            rrf_rank=c.rrf_rank,
            rrf_score=c.rrf_score,
            rerank_rank=c.rerank_rank,
            rerank_score=c.rerank_score,
            final_rank=c.final_rank,
            final_score=c.final_score,
            disposition=c.disposition,
            exclusion_code=c.exclusion_code,
            delta_action=c.delta_action,
            start=u.start,
            end=u.end,
        )


@attrs.frozen
class RunSummary:
    run_id: str
    project_id: str
    query: str
    status: str
    started_at: str
    finished_at: str | None
    state_fingerprint: str
    token_budget: int
    effective_memory_hash: str | None
    index_revision: str | None
    warm: bool | None
    candidate_count: int
    fragment_count: int
    token_count: int
    total_ms: float | None
    error_stage: str | None
    error_code: str | None
    error_summary: str | None
    pinned: bool


@attrs.frozen
class RunDetail:
    """A Run with its full trace: revisions, stage latencies and every candidate in final order."""

    summary: RunSummary
    revisions: Mapping[str, str]
    latency_ms: Mapping[str, float]
    candidates: tuple[CandidateRecord, ...]
    # On request: the Effective Memory manifest the Run saw (its ``effective_memory_hash``), to
    # compare with the candidates' resource hashes, which are the ranking generation's.
    manifest: tuple[ManifestEntry, ...] | None = None

    def lag(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(stale, missing): candidates' resources edited or deleted in the sources since the
        generation that ranked them was built, sorted; None without the manifest."""
        if self.manifest is None:
            return None
        live = {e.resource_id: e.resource_hash for e in self.manifest}
        stale = {c.resource_id for c in self.candidates if live.get(c.resource_id, c.resource_hash) != c.resource_hash}
        missing = {c.resource_id for c in self.candidates if c.resource_id not in live}
        return tuple(sorted(stale)), tuple(sorted(missing))


@attrs.frozen
class RunFilter:
    project_id: str | None = None
    status: str | None = None
    since: str | None = None  # ISO-8601, inclusive
    until: str | None = None  # ISO-8601, exclusive
    query_contains: str | None = None


@attrs.frozen
class RunPage:
    runs: tuple[RunSummary, ...]
    next_cursor: str | None


@attrs.frozen
class ClearReport:
    deleted_runs: int
    kept_pinned: int
    deleted_blobs: int


class NullRecorder:
    """Records nothing: for library use without history, and for overhead benchmarks."""

    def start(self, run: RunStart) -> str:
        return ""

    def complete(self, run_id: str, trace: RunTrace) -> None:
        return None

    def fail(self, run_id: str, failure: RunFailure) -> None:
        return None


MAX_RUNS_PER_PROJECT = 500  # unpinned Runs kept per project; the oldest are pruned on insert
MAX_PAGE = 500


