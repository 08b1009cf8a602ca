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

import contextlib
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from memory_core.domain.canonical import hash_json, is_utf8_text
from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.domain.evaluation_errors import (
    EvaluationCorpusIncomplete,
    EvaluationJudgmentConflict,
    EvaluationRunNotSucceeded,
    InvalidJudgments,
)
from memory_core.domain.model import ManifestEntry, manifest_hash
from memory_core.evaluation.metrics import MAX_RELEVANCE, Judgments
from memory_core.evaluation.report import (
    CaseInput,
    CaseMetrics,
    MissedEvidence,
    Report,
    build_report,
    case_metrics,
    missed_evidence,
)
from memory_core.ports import BlobStore
from memory_core.runs.records import SUCCEEDED, CandidateRecord, RunDetail

if TYPE_CHECKING:
    from memory_core.evaluation.fixture import ImportResult

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

    def to_dict(self) -> dict[str, Any]:
        return {"corpus_id": self.corpus_id, "resources": [e.to_dict() for e in self.resources]}


_CANDIDATE_FIELDS = tuple(f.name for f in attrs.fields(CandidateRecord))


def candidate_to_dict(c: CandidateRecord) -> dict[str, Any]:
    out = {name: getattr(c, name) for name in _CANDIDATE_FIELDS}
    out["heading_path"] = list(c.heading_path)
    return out


def candidate_from_dict(raw: Mapping[str, Any]) -> CandidateRecord:
    values = {name: raw[name] for name in _CANDIDATE_FIELDS}
    values["heading_path"] = tuple(raw["heading_path"])
    return CandidateRecord(**values)


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "project_id": self.project_id,
            "query": self.query,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "state_fingerprint": self.state_fingerprint,
            "token_budget": self.token_budget,
            "effective_memory_hash": self.effective_memory_hash,
            "index_revision": self.index_revision,
            "revisions": dict(self.revisions),
            "latency_ms": dict(self.latency_ms),
            "warm": self.warm,
            "fragment_count": self.fragment_count,
            "token_count": self.token_count,
            "candidates": [candidate_to_dict(c) for c in self.candidates],
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SourceTrace:
        return cls(
            run_id=raw["run_id"],
            project_id=raw["project_id"],
            query=raw["query"],
            started_at=raw["started_at"],
            finished_at=raw["finished_at"],
            state_fingerprint=raw["state_fingerprint"],
            token_budget=raw["token_budget"],
            effective_memory_hash=raw["effective_memory_hash"],
            index_revision=raw["index_revision"],
            revisions=dict(raw["revisions"]),
            latency_ms=dict(raw["latency_ms"]),
            warm=raw["warm"],
            fragment_count=raw["fragment_count"],
            token_count=raw["token_count"],
            candidates=tuple(candidate_from_dict(c) for c in raw["candidates"]),
        )

    @property
    def trace_hash(self) -> str:
        return hash_json(self.to_dict())

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "case_id": self.case_id,
            "project_id": self.project_id,
            "query": self.query,
            "corpus_id": self.corpus_id,
            "source_run_id": self.source_run_id,
            "provenance": self.provenance,
            "original_provenance": self.original_provenance,
            "judgment_version": self.judgment_version,
            "reviewed_version": self.reviewed_version,
            "reviewed": self.reviewed,
            "created_at": self.created_at,
            "trace_hash": self.trace_hash,
        }


@attrs.frozen
class Judgment:
    """Relevance 0-3 of one unit of the source trace or one resource of the frozen corpus."""

    relevance: int
    unit_id: str | None = None
    resource_id: str | None = None
    note: str | None = None

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

    def to_dict(self) -> dict[str, Any]:
        kind, target = self.target
        out: dict[str, Any] = {kind: target, "relevance": self.relevance}
        if self.note is not None:
            out["note"] = self.note
        return out


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

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "judgments": [j.to_dict() for j in self.judgments]}


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
    """What ``eval case show`` needs: the case, its trace, judgments, metrics and missed evidence."""

    case: Case
    trace: SourceTrace
    judgments: JudgmentSet
    corpus_resources: int
    metrics: CaseMetrics
    missed: tuple[MissedEvidence, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case.to_dict(),
            "trace": self.trace.to_dict(),
            "judgments": self.judgments.to_dict(),
            "corpus_resources": self.corpus_resources,
            "metrics": self.metrics,
            "missed_evidence": [m.to_dict() for m in self.missed],
        }


# -- ports ----------------------------------------------------------------------------------------


class EvaluationStore(Protocol):
    """Evaluation corpora, cases and judgment versions (``local.db`` or memory)."""

    def has_corpus(self, corpus_id: str) -> bool: ...

    def get_corpus(self, corpus_id: str) -> Corpus:
        """EvaluationCorpusNotFound when absent."""
        ...

    def add_cases(self, corpora: Sequence[Corpus], records: Sequence[CaseRecord]) -> None:
        """Atomically store the corpora (an existing corpus_id is kept as is) and the new cases with
        their judgment versions; EvaluationCaseExists (nothing written) when a case id exists."""
        ...

    def get_case(self, case_id: str) -> Case:
        """EvaluationCaseNotFound when absent."""
        ...

    def get_trace(self, case_id: str) -> SourceTrace: ...

    def case_for_run(self, run_id: str, provenance: str) -> Case | None:
        """The oldest case of that provenance made from this Run, if any."""
        ...

    def list_cases(self, project_id: str | None = None, case_ids: Sequence[str] | None = None) -> list[Case]:
        """Ordered by ``created_at`` then ``case_id``; unknown ``case_ids`` are an error."""
        ...

    def judgments(self, case_id: str, version: int | None = None) -> JudgmentSet:
        """The current set (``version`` None) or an earlier one; version 0 is the empty set."""
        ...

    def judgment_history(self, case_id: str) -> list[JudgmentSet]:
        """Every stored version, ascending."""
        ...

    def replace_judgments(
        self, case_id: str, expected_version: int, judgments: Sequence[Judgment], created_at: str
    ) -> JudgmentSet:
        """Compare-and-set: store version ``expected_version + 1``; EvaluationJudgmentConflict
        (with the current version) when the current one differs."""
        ...

    def set_reviewed(self, case_id: str, expected_version: int, reviewed: bool) -> Case: ...

    def delete_case(self, case_id: str) -> None:
        """Delete the case, its judgments, and its corpus if no other case uses it."""
        ...

    def runs_of_cases(self) -> set[str]:
        """Source run ids of every case (to keep them pinned)."""
        ...

    def referenced_blobs(self) -> set[str]:
        """Resource hashes of every stored corpus: live blobs for GC."""
        ...


class RunSource(Protocol):
    """What the service needs of the RunStore (both stores have ``run_manifest``)."""

    def get_run(self, run_id: str) -> RunDetail: ...

    def run_manifest(self, manifest_hash: str) -> tuple[ManifestEntry, ...] | None: ...

    def pin(self, run_id: str) -> None: ...

    def unpin(self, run_id: str) -> None: ...


# -- ids ------------------------------------------------------------------------------------------

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_id_lock = threading.Lock()
_last: list[int] = [-1, 0]


def new_case_id() -> str:
    """A sortable 26-char ULID-like id (48-bit ms + 80 random bits, monotonic in a process)."""
    with _id_lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last[0]:
            ms, rand = _last[0], (_last[1] + 1) % (1 << 80)
        else:
            rand = secrets.randbits(80)
        _last[0], _last[1] = ms, rand
    value = (ms % (1 << 48)) << 80 | rand
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def _check_version(value: object, name: str = "expected_judgment_version") -> int:
    if type(value) is not int or value < 0:
        raise InvalidRequest(f"{name} must be a non-negative integer", **{name: value})
    return value


# -- the service ----------------------------------------------------------------------------------


class EvaluationService:
    """Cases, judgments and reports over an EvaluationStore, the RunStore and the blob store."""

    def __init__(
        self,
        store: EvaluationStore,
        runs: RunSource,
        blobs: BlobStore,
        *,
        now: Callable[[], str],
        new_id: Callable[[], str] = new_case_id,
    ) -> None:
        self.store = store
        self.runs = runs
        self.blobs = blobs
        self.now = now
        self._new_id = new_id

    # -- cases ------------------------------------------------------------------------------------

    def create_case(
        self,
        run_id: str,
        *,
        case_id: str | None = None,
        provenance: str = RUN,
        judgments: Sequence[Judgment] | None = None,
        reviewed: bool = False,
    ) -> Case:
        """Freeze a succeeded Run as a case and pin the Run. Creating a case again from the same
        Run (same provenance) returns the existing case. ``judgments`` (optional) become version 1."""
        if provenance not in (RUN, BEIR_IMPORT):
            raise InvalidRequest(f"provenance must be {RUN!r} or {BEIR_IMPORT!r}", provenance=provenance)
        run = self.runs.get_run(run_id)
        s = run.summary
        if s.status != SUCCEEDED or s.effective_memory_hash is None:
            raise EvaluationRunNotSucceeded(
                f"Retrieval Run {run_id!r} is {s.status}: only a succeeded Run can become an Evaluation Case",
                run_id=run_id,
                status=s.status,
            )
        existing = self.store.case_for_run(run_id, provenance)
        if existing is not None:
            return existing
        case_id = validate_case_id(case_id) if case_id is not None else self._new_id()
        corpus = self._freeze_corpus(s.effective_memory_hash, run_id)
        trace = SourceTrace.from_run(run)
        now = self.now()
        sets: tuple[JudgmentSet, ...] = ()
        if judgments is not None:
            judgments = parse_judgments(list(judgments))
            self._check_targets(judgments, trace, corpus, case_id)
            sets = (JudgmentSet(case_id, 1, tuple(judgments), now),)
        version = len(sets)
        case = Case(
            case_id=case_id,
            project_id=s.project_id,
            query=s.query,
            corpus_id=corpus.corpus_id,
            source_run_id=run_id,
            provenance=provenance,
            original_provenance=provenance,
            judgment_version=version,
            reviewed_version=version if reviewed else None,
            created_at=now,
            trace_hash=trace.trace_hash,
        )
        # Pin first: a pinned Run keeps its manifest and blobs live until the corpus refers to them.
        self.runs.pin(run_id)
        try:
            self.store.add_cases([corpus], [CaseRecord(case, trace, sets)])
        except BaseException:
            if run_id not in self.store.runs_of_cases():
                self.runs.unpin(run_id)
            raise
        return case

    def _freeze_corpus(self, manifest_hash: str, run_id: str) -> Corpus:
        if self.store.has_corpus(manifest_hash):
            return self.store.get_corpus(manifest_hash)
        entries = self.runs.run_manifest(manifest_hash)
        if entries is None:
            raise EvaluationCorpusIncomplete(
                f"the Effective Memory manifest {manifest_hash} of Run {run_id!r} is not recorded",
                run_id=run_id,
                manifest_hash=manifest_hash,
            )
        corpus = Corpus.of(entries)
        if corpus.corpus_id != manifest_hash:
            raise EvaluationCorpusIncomplete(
                f"the recorded manifest of Run {run_id!r} does not hash to {manifest_hash}",
                run_id=run_id,
                manifest_hash=manifest_hash,
            )
        missing = [e.resource_id for e in corpus.resources if not self.blobs.exists(e.resource_hash)]
        if missing:
            raise EvaluationCorpusIncomplete(
                f"{len(missing)} resource body(ies) of Run {run_id!r} are no longer stored (first: {missing[0]!r})",
                run_id=run_id,
                missing=missing[:20],
            )
        return corpus

    def get_case(self, case_id: str) -> Case:
        return self.store.get_case(case_id)

    def list_cases(self, project_id: str | None = None, case_ids: Sequence[str] | None = None) -> list[Case]:
        return self.store.list_cases(project_id, case_ids)

    def show_case(self, case_id: str) -> CaseDetail:
        case = self.store.get_case(case_id)
        trace = self.store.get_trace(case_id)
        current = self.store.judgments(case_id)
        corpus = self.store.get_corpus(case.corpus_id)
        data = self._case_input(case, trace, current, corpus.hashes())
        return CaseDetail(
            case=case,
            trace=trace,
            judgments=current,
            corpus_resources=len(corpus.resources),
            metrics=case_metrics(data),
            missed=tuple(missed_evidence(case_id, trace.candidates, data.judgments)),
        )

    def get_trace(self, case_id: str) -> SourceTrace:
        return self.store.get_trace(case_id)

    def get_corpus(self, corpus_id: str) -> Corpus:
        return self.store.get_corpus(corpus_id)

    def delete_case(self, case_id: str) -> None:
        """Delete a case (and its corpus when unused); its Run is unpinned when no case uses it."""
        case = self.store.get_case(case_id)
        self.store.delete_case(case_id)
        if case.source_run_id not in self.store.runs_of_cases():
            # An imported case's Run may not exist here: nothing to unpin then.
            with contextlib.suppress(MemoryCoreError):
                self.runs.unpin(case.source_run_id)

    # -- judgments --------------------------------------------------------------------------------

    def judgments(self, case_id: str, version: int | None = None) -> JudgmentSet:
        if version is not None:
            _check_version(version, "version")
        return self.store.judgments(case_id, version)

    def judgment_history(self, case_id: str) -> list[JudgmentSet]:
        return self.store.judgment_history(case_id)

    def replace_judgments(self, case_id: str, expected_judgment_version: int, judgments: object) -> JudgmentSet:
        """Replace the whole set atomically; returns the new version.

        ``judgments``: ``Judgment`` values, or a judgment file (``{"judgments": [...]}`` or its
        list). A stale ``expected_judgment_version`` gets ``EvaluationJudgmentConflict`` carrying the
        current version; any invalid judgment rejects the whole request.
        """
        expected = _check_version(expected_judgment_version)
        case = self.store.get_case(case_id)
        if case.judgment_version != expected:
            raise judgment_conflict(case_id, expected, case.judgment_version)
        parsed = parse_judgments(judgments)
        trace = self.store.get_trace(case_id)
        corpus = self.store.get_corpus(case.corpus_id)
        self._check_targets(parsed, trace, corpus, case_id)
        return self.store.replace_judgments(case_id, expected, parsed, self.now())

    @staticmethod
    def _check_targets(judgments: Sequence[Judgment], trace: SourceTrace, corpus: Corpus, case_id: str) -> None:
        problems = target_problems(judgments, trace, corpus)
        if problems:
            raise InvalidJudgments(
                f"{len(problems)} invalid judgment(s) for case {case_id!r}; nothing was written",
                problems=problems,
                case_id=case_id,
            )

    def mark_reviewed(self, case_id: str, expected_judgment_version: int, reviewed: bool = True) -> Case:
        """Record that a person reviewed (or un-reviewed) the current judgment version."""
        expected = _check_version(expected_judgment_version)
        return self.store.set_reviewed(case_id, expected, reviewed)

    # -- reports ----------------------------------------------------------------------------------

    def report(self, project_id: str | None = None, case_ids: Sequence[str] | None = None) -> Report:
        """B1-B4 at unit and resource level over a project's cases, chosen cases, or all."""
        cases = self.store.list_cases(project_id, case_ids)
        return build_report(
            self.case_inputs(cases),
            project_id=project_id,
            reviewed_cases=sum(1 for c in cases if c.reviewed),
        )

    # -- fixtures (memory_core.evaluation.fixture; imported here lazily, it builds on this module) -------------

    def export_fixture(
        self,
        *,
        project_id: str | None = None,
        case_ids: Sequence[str] | None = None,
        with_history: bool = False,
        with_uris: bool = False,
    ) -> bytes:
        """The self-contained JSON fixture of a project's cases, chosen cases, or all
        (``with_uris``: keep each resource's ``file:///`` URI; otherwise its resource id)."""
        from memory_core.evaluation.fixture import export_fixture

        return export_fixture(
            self, project_id=project_id, case_ids=case_ids, with_history=with_history, with_uris=with_uris
        )

    def import_fixture(self, data: bytes | str | Mapping[str, Any]) -> ImportResult:
        """Verify a fixture whole, then store what is new (nothing on any problem)."""
        from memory_core.evaluation.fixture import import_fixture

        return import_fixture(self, data)

    def case_inputs(self, cases: Sequence[Case]) -> list[CaseInput]:
        corpora: dict[str, dict[str, str]] = {}
        out = []
        for case in cases:
            if case.corpus_id not in corpora:
                corpora[case.corpus_id] = self.store.get_corpus(case.corpus_id).hashes()
            trace = self.store.get_trace(case.case_id)
            current = self.store.judgments(case.case_id)
            out.append(self._case_input(case, trace, current, corpora[case.corpus_id]))
        return out

    @staticmethod
    def _case_input(case: Case, trace: SourceTrace, current: JudgmentSet, hashes: Mapping[str, str]) -> CaseInput:
        return CaseInput(
            case_id=case.case_id,
            candidates=trace.candidates,
            latency_ms=trace.latency_ms,
            warm=trace.warm,
            judgments=current.to_metric_judgments(trace.unit_resources()),
            corpus_hashes=hashes,
        )


def judgment_conflict(case_id: str, expected: int, current: int) -> EvaluationJudgmentConflict:
    """The stale-version error (the service's early check and the stores' compare-and-set)."""
    return EvaluationJudgmentConflict(
        f"judgments of case {case_id!r} are at version {current}, not {expected}: reload and retry",
        case_id=case_id,
        expected_version=expected,
        current_version=current,
    )
