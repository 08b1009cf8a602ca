"""What the daemon answers where the engine has no value of its own (most methods answer the
engine's values: ``ProjectInfo``, ``IndexReport``, ``RunPage``…), and the corpus search's page,
the use case's own values (``memory_core.services.corpus_search``)."""

from __future__ import annotations

import attrs

from memory_core.domain.jobs import JobInfo
from memory_core.entrypoints.bootstrap import ProjectHealth
from memory_core.evaluation.cases import Case, Corpus, JudgmentSet, SourceTrace
from memory_core.evaluation.learning import LearnResult
from memory_core.evaluation.passages import CandidatePassage
from memory_core.evaluation.report import (
    JUDGED_METRICS,
    REPORT_VERSION,
    LatencyReport,
    LevelReport,
    MissedEvidence,
    MissedEvidenceSummary,
    Report,
)
from memory_core.evaluation.tuning import TuneResult
from memory_core.services.corpus_search import MATCH_KINDS, CorpusResourceMatch, CorpusResourcePage
from memory_core.services.engine import ProjectInfo

__all__ = ["MATCH_KINDS", "CorpusResourceMatch", "CorpusResourcePage"]  # re-exported for ``api``


# -- Evaluation Sets -------------------------------------------------------------------------
@attrs.frozen
class EvaluationCaseList:
    cases: tuple[Case, ...]


CaseMetricsWire = dict[str, dict[str, dict[str, float | None]]]  # level -> variant -> metric -> value


@attrs.frozen
class EvaluationCaseDetail:
    """A case with what a reviewer needs: trace, frozen corpus manifest, judgments, history, metrics."""

    case: Case
    trace: SourceTrace
    corpus: Corpus = attrs.field(
        metadata={"schema": {"description": "the frozen manifest (bodies: search_corpus_resources)"}}
    )
    judgments: JudgmentSet = attrs.field(metadata={"schema": {"description": "the current version (0: none yet)"}})
    judgment_history: tuple[JudgmentSet, ...] = attrs.field(
        metadata={"schema": {"description": "every stored version, ascending (the last is the current one)"}}
    )
    metrics: CaseMetricsWire = attrs.field(
        metadata={"schema": {"description": "level (unit, resource) -> variant (b1_bm25 .. b4_reranked) -> metric"}}
    )
    missed_evidence: tuple[MissedEvidence, ...]
    passages: tuple[CandidatePassage, ...] = attrs.field(
        metadata={"schema": {"description": "each candidate of the trace, in its order: its text cut from the "
                             "frozen corpus by its span and checked against its unit_hash, or why not"}}
    )


@attrs.frozen
class EvaluationReport:
    """The B1-B4 report: the document ``Report.to_dict`` writes, typed."""

    report_version: int = attrs.field(metadata={"schema": {"const": REPORT_VERSION}})
    project_id: str | None
    cases: int
    reviewed_cases: int
    levels: dict[str, LevelReport] = attrs.field(metadata={"schema": {"description": "unit and resource level"}})
    latency_ms: LatencyReport
    missed_evidence: MissedEvidenceSummary
    per_case: dict[str, CaseMetricsWire] = attrs.field(
        # The judged metrics, as the registry names them (evaluation/metric_registry.py).
        metadata={"schema": {"description": "case id -> level -> variant -> " + ", ".join(JUDGED_METRICS)}}
    )

    @classmethod
    def of(cls, report: Report) -> EvaluationReport:
        return cls(**attrs.asdict(report, recurse=False))  # the same fields

    def to_report(self) -> Report:
        """The engine's value."""
        return Report(**attrs.asdict(self, recurse=False))


# -- the daemon's own -----------------------------------------------------------------------
@attrs.frozen
class RuntimeStatus:
    service: str
    version: str
    api_version: str
    pid: int
    home: str
    socket: str | None
    started_at: str
    uptime_seconds: float
    engine_busy: bool = attrs.field(metadata={"schema": {"description": "an engine call is running"}})
    in_flight: int = attrs.field(metadata={"schema": {"description": "engine calls running or queued"}})
    watching: bool = attrs.field(
        default=False, metadata={"schema": {"description": "the daemon follows its projects' sources"}}
    )
    projects: tuple[ProjectHealth, ...] = attrs.field(
        default=(), metadata={"schema": {"description": "each project's watch and re-index health"}}
    )
    on_demand: bool = attrs.field(
        default=False,
        metadata={"schema": {"description": "started by a client (memcore mcp, memcore ui), not by memcore serve"}},
    )
    idle_exit_seconds: float | None = attrs.field(
        default=None,
        metadata={"schema": {"description": "it stops after this long idle (no request, client or re-index); "
                             "null: it runs until stopped"}},
    )


@attrs.frozen
class ProjectList:
    projects: tuple[ProjectInfo, ...]


@attrs.frozen
class TuningList:
    """A project's tunings, newest first."""

    tunings: tuple[TuneResult, ...]


@attrs.frozen
class LearningList:
    """A project's learnings (`memcore eval learn`), newest first."""

    learnings: tuple[LearnResult, ...]


@attrs.frozen
class JobList:
    """Running jobs (oldest first), then those ended lately (newest first)."""

    jobs: tuple[JobInfo, ...]
