"""Retrieval Run recording: the port and the values it records (seed "Boundary", brief §5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from memory_core.pipeline import Candidate

RUNNING, SUCCEEDED, FAILED = "running", "succeeded", "failed"
MAX_ERROR_SUMMARY = 500


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


class RunRecorder(Protocol):
    def start(self, run: RunStart) -> str: ...

    def complete(self, run_id: str, trace: RunTrace) -> None: ...

    def fail(self, run_id: str, failure: RunFailure) -> None: ...


class NullRecorder:
    """Records nothing: for library use without history, and for overhead benchmarks."""

    def start(self, run: RunStart) -> str:
        return ""

    def complete(self, run_id: str, trace: RunTrace) -> None:
        return None

    def fail(self, run_id: str, failure: RunFailure) -> None:
        return None
