"""Evaluation Sets: frozen corpora, cases from Runs, versioned judgments, reports (seed
"Evaluation Case"; brief §3, §7).

A Case freezes a succeeded Run: its query and project, its Effective Memory manifest (the live
sources at activation, which may differ from the generation that ranked the candidates: that lag
is what Stale Result and Scope Violation measure) as an immutable Corpus (``corpus_id`` = the
manifest hash, so equal manifests share one Corpus) whose bodies stay in the blob store, and a
copy of its candidate trace; the Run is pinned. Judgments
are replaced as a whole under ``expected_judgment_version`` (compare-and-set); every version is
kept. ``reviewed_version`` records which judgment version a person reviewed: replacing the
judgments makes a reviewed case unreviewed again, since only reviewed cases may gate (seed).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from memory_core.domain.canonical import OMIT_NONE, hash_json, is_utf8_text, plain
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.evaluation_errors import EvaluationJudgmentConflict, InvalidJudgments
from memory_core.domain.model import ManifestEntry, manifest_hash
from memory_core.evaluation.metrics import MAX_RELEVANCE, Judgments
from memory_core.evaluation.passages import CandidatePassage
from memory_core.evaluation.report import CaseMetrics, MissedEvidence
from memory_core.runs.records import CandidateRecord, RunDetail

RUN, BEIR_IMPORT, FIXTURE_IMPORT = "run", "beir_import", "fixture_import"
PROVENANCES = (RUN, BEIR_IMPORT, FIXTURE_IMPORT)
MAX_JUDGMENTS = 10_000
MAX_NOTE_CHARS = 2_000
CASE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")

CorpusResource = ManifestEntry  # a frozen corpus row is a manifest entry


def validate_case_id(case_id: object) -> str:
    if not isinstance(case_id, str) or not CASE_ID_RE.match(case_id):
        raise InvalidRequest(
            f"invalid case id {case_id!r}: 1-128 letters, digits, '.', '_', ':' or '-'", case_id=case_id
        )
    return case_id


# -- values ---------------------------------------------------------------------------------------


@attrs.frozen
class Corpus:
    """An immutable, deduplicated frozen manifest; its bodies are blobs named by resource hash."""

    corpus_id: str
    resources: tuple[ManifestEntry, ...]

    @classmethod
    def of(cls, entries: Iterable[ManifestEntry]) -> Corpus:
        resources = tuple(entries)
        return cls(manifest_hash(resources), resources)

    def hashes(self) -> dict[str, str]:
        """resource_id -> frozen resource hash."""
        return {e.resource_id: e.resource_hash for e in self.resources}

    def digests(self) -> list[str]:
        return sorted({e.resource_hash for e in self.resources})


@attrs.frozen
class SourceTrace:
    """A frozen copy of the source Run's trace: it outlives the Run and travels in fixtures."""

    run_id: str
    project_id: str
    query: str
    started_at: str
    finished_at: str | None
    state_fingerprint: str
    token_budget: int
    effective_memory_hash: str
    index_revision: str | None
    revisions: Mapping[str, str]
    latency_ms: Mapping[str, float]
    warm: bool
    fragment_count: int
    token_count: int
    candidates: tuple[CandidateRecord, ...]

    @classmethod
    def from_run(cls, run: RunDetail) -> SourceTrace:
        s = run.summary
        assert s.effective_memory_hash is not None  # a succeeded Run always has one
        return cls(
            run_id=s.run_id,
            project_id=s.project_id,
            query=s.query,
            started_at=s.started_at,
            finished_at=s.finished_at,
            state_fingerprint=s.state_fingerprint,
            token_budget=s.token_budget,
            effective_memory_hash=s.effective_memory_hash,
            index_revision=s.index_revision,
            revisions=dict(run.revisions),
            latency_ms=dict(run.latency_ms),
            warm=bool(s.warm),
            fragment_count=s.fragment_count,
            token_count=s.token_count,
            candidates=tuple(sorted(run.candidates, key=lambda c: c.final_rank)),
        )

    @property
    def trace_hash(self) -> str:
        return hash_json(plain(self))

    def unit_resources(self) -> dict[str, str]:
        return {c.unit_id: c.resource_id for c in self.candidates}


@attrs.frozen
class Case:
    """A versioned (query, project, corpus) referring to its pinned source Run."""

    case_id: str
    project_id: str
    query: str
    corpus_id: str
    source_run_id: str
    provenance: str  # how it entered this home: run | beir_import | fixture_import
    original_provenance: str  # how it was first made (a fixture carries this one)
    judgment_version: int
    reviewed_version: int | None
    created_at: str
    trace_hash: str

    @property
    def reviewed(self) -> bool:
        """A person reviewed the current judgments (only reviewed cases may gate)."""
        return self.reviewed_version is not None and self.reviewed_version == self.judgment_version


@attrs.frozen
class Judgment:
    """Relevance 0-3 of one unit of the source trace or one resource of the frozen corpus."""

    relevance: int
    # A judgment names one target, and a note only when given: its plain form omits the others.
    unit_id: str | None = attrs.field(default=None, metadata=OMIT_NONE)
    resource_id: str | None = attrs.field(default=None, metadata=OMIT_NONE)
    note: str | None = attrs.field(default=None, metadata=OMIT_NONE)

    @classmethod
    def unit(cls, unit_id: str, relevance: int, note: str | None = None) -> Judgment:
        return cls(relevance=relevance, unit_id=unit_id, note=note)

    @classmethod
    def resource(cls, resource_id: str, relevance: int, note: str | None = None) -> Judgment:
        return cls(relevance=relevance, resource_id=resource_id, note=note)

    @property
    def target(self) -> tuple[str, str]:
        if self.unit_id is not None:
            return ("unit_id", self.unit_id)
        assert self.resource_id is not None
        return ("resource_id", self.resource_id)


@attrs.frozen
class JudgmentSet:
    """One version of a case's judgments; version 0 is "none yet"."""

    case_id: str
    version: int
    judgments: tuple[Judgment, ...]
    created_at: str | None

    def to_metric_judgments(self, unit_resources: Mapping[str, str]) -> Judgments:
        units = {j.unit_id: j.relevance for j in self.judgments if j.unit_id is not None}
        resources = {j.resource_id: j.relevance for j in self.judgments if j.resource_id is not None}
        return Judgments.of(units, resources, {u: unit_resources[u] for u in units if u in unit_resources})


_JUDGMENT_FIELDS = {"unit_id", "resource_id", "relevance", "note"}


def _stored_text(value: object, *, nonempty: bool = False) -> bool:
    """A string the database can store: a lone surrogate is valid JSON but not UTF-8."""
    return isinstance(value, str) and (bool(value) or not nonempty) and is_utf8_text(value)


def parse_judgments(raw: object) -> tuple[Judgment, ...]:
    """A judgment file ``{"judgments": [...]}`` (or its list) into judgments, strictly.

    Every problem is collected; any problem rejects the whole request (``InvalidJudgments``).
    Targets are checked against a case by ``EvaluationService``.
    """
    if isinstance(raw, Mapping):
        extra = set(raw) - {"judgments"}
        if extra or "judgments" not in raw:
            shape = [{"index": None, "field": str(k), "reason": "unknown field"} for k in sorted(extra, key=str)]
            if "judgments" not in raw:
                shape.append({"index": None, "field": "judgments", "reason": "missing"})
            raise InvalidJudgments('a judgment file is {"judgments": [...]}', problems=shape)
        raw = raw["judgments"]
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
        raise InvalidJudgments(
            "judgments must be a list", problems=[{"index": None, "field": "judgments", "reason": "not a list"}]
        )
    if len(raw) > MAX_JUDGMENTS:
        raise InvalidJudgments(
            f"at most {MAX_JUDGMENTS} judgments per case",
            problems=[{"index": None, "field": "judgments", "reason": "too many"}],
        )
    problems: list[dict[str, Any]] = []
    out: list[Judgment] = []
    for index, item in enumerate(raw):
        if isinstance(item, Judgment):
            out.append(item)
            continue
        if not isinstance(item, Mapping):
            problems.append({"index": index, "field": None, "reason": "not an object"})
            continue
        before = len(problems)
        for key in sorted(set(item) - _JUDGMENT_FIELDS, key=str):
            problems.append({"index": index, "field": str(key), "reason": "unknown field"})
        has_unit, has_resource = "unit_id" in item, "resource_id" in item
        if has_unit == has_resource:
            problems.append({"index": index, "field": "unit_id", "reason": "give exactly one of unit_id, resource_id"})
        for key in ("unit_id", "resource_id"):
            if key in item and not _stored_text(item[key], nonempty=True):
                problems.append({"index": index, "field": key, "reason": "must be a non-empty UTF-8 string"})
        relevance = item.get("relevance")
        if type(relevance) is not int or not 0 <= relevance <= MAX_RELEVANCE:
            problems.append({"index": index, "field": "relevance", "reason": f"must be an integer 0-{MAX_RELEVANCE}"})
        note = item.get("note")
        if note is not None and (not _stored_text(note) or len(note) > MAX_NOTE_CHARS):
            problems.append(
                {"index": index, "field": "note", "reason": f"must be a UTF-8 string of <= {MAX_NOTE_CHARS}"}
            )
        if len(problems) == before and type(relevance) is int:
            out.append(Judgment(relevance, item.get("unit_id"), item.get("resource_id"), note))
    if problems:
        raise InvalidJudgments(f"{len(problems)} invalid judgment(s); nothing was written", problems=problems)
    return tuple(out)


def target_problems(judgments: Sequence[Judgment], trace: SourceTrace, corpus: Corpus) -> list[dict[str, Any]]:
    """Problems of judgments against one case: unknown targets, bad grades, duplicates."""
    units = trace.unit_resources()
    resources = corpus.hashes()
    seen: set[tuple[str, str]] = set()
    problems: list[dict[str, Any]] = []
    for index, j in enumerate(judgments):
        if (j.unit_id is None) == (j.resource_id is None):
            problems.append({"index": index, "field": "unit_id", "reason": "give exactly one of unit_id, resource_id"})
            continue
        kind, target = j.target
        if type(j.relevance) is not int or not 0 <= j.relevance <= MAX_RELEVANCE:
            problems.append({"index": index, "field": "relevance", "reason": f"must be an integer 0-{MAX_RELEVANCE}"})
        if kind == "unit_id" and target not in units:
            problems.append({"index": index, "field": kind, "reason": f"unit {target!r} is not in the source trace"})
        if kind == "resource_id" and target not in resources:
            problems.append(
                {"index": index, "field": kind, "reason": f"resource {target!r} is not in the frozen corpus"}
            )
        if (kind, target) in seen:
            problems.append({"index": index, "field": kind, "reason": f"duplicate judgment of {target!r}"})
        seen.add((kind, target))
    return problems


@attrs.frozen
class CaseRecord:
    """A whole case as stored or moved: the case, its frozen trace and judgment versions."""

    case: Case
    trace: SourceTrace
    judgment_sets: tuple[JudgmentSet, ...]  # ascending versions; the last is current (if any)


@attrs.frozen
class CaseDetail:
    """What ``eval case show`` needs: the case, its trace, judgments, metrics, missed evidence
    and what a judge reads: each candidate's text from the frozen corpus (``passages``)."""

    case: Case
    trace: SourceTrace
    judgments: JudgmentSet
    corpus_resources: int
    metrics: CaseMetrics
    missed: tuple[MissedEvidence, ...]
    passages: tuple[CandidatePassage, ...]  # the trace's candidates, in its order


def check_judgment_version(case: Case, expected: int) -> Case:
    """``case``, if its judgments are at version ``expected``; else the stale-version error (the
    service's early check and the stores' compare-and-set)."""
    current = case.judgment_version
    if current != expected:
        raise EvaluationJudgmentConflict(
            f"judgments of case {case.case_id!r} are at version {current}, not {expected}: reload and retry",
            case_id=case.case_id,
            expected_version=expected,
            current_version=current,
        )
    return case
