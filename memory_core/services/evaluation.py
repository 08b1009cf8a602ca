"""The evaluation use cases: freeze a Run into a Case, judge it, report (EvaluationService)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.domain.evaluation_errors import (
    EvaluationCorpusIncomplete,
    EvaluationRunNotSucceeded,
    EvaluationSetEmpty,
    InvalidJudgments,
)
from memory_core.domain.ids import new_case_id
from memory_core.domain.progress import Progress, no_progress
from memory_core.evaluation.cases import (
    BEIR_IMPORT,
    RUN,
    Case,
    CaseDetail,
    CaseRecord,
    Corpus,
    Judgment,
    JudgmentSet,
    SourceTrace,
    check_judgment_version,
    parse_judgments,
    target_problems,
    validate_case_id,
)
from memory_core.evaluation.fixture import ExportScope, ImportResult
from memory_core.evaluation.passages import candidate_passages
from memory_core.evaluation.report import (
    CaseInput,
    Report,
    build_report,
    case_metrics,
    missed_evidence,
)
from memory_core.ports import BlobStore
from memory_core.ports.evaluation import EvaluationStore, RunSource
from memory_core.runs.records import SUCCEEDED
from memory_core.services import fixtures


def _check_version(value: object, name: str = "expected_judgment_version") -> int:
    if type(value) is not int or value < 0:
        raise InvalidRequest(f"{name} must be a non-negative integer", **{name: value})
    return value


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

    def cases_to_learn_from(self, project_id: str, *, include_unreviewed: bool, verb: str, use: str) -> list[Case]:
        """The project's cases a tuning or a learning may use: reviewed ones unless
        ``include_unreviewed`` (seed: only reviewed cases may gate); ``EvaluationSetEmpty`` when
        none may, saying what to do (``verb``: "tune"; ``use``: "to tune on")."""
        cases = self.list_cases(project_id)
        if not cases:
            raise EvaluationSetEmpty(f"project {project_id!r} has no Evaluation Cases {use}", project=project_id)
        usable = cases if include_unreviewed else [c for c in cases if c.reviewed]
        if not usable:
            raise EvaluationSetEmpty(
                f"none of the {len(cases)} cases of project {project_id!r} is reviewed: review them "
                f"(`memcore eval review`, or `eval import-beir --reviewed` for a collection's qrels) or {verb} "
                "with --include-unreviewed",
                project=project_id,
            )
        return usable

    def show_case(self, case_id: str) -> CaseDetail:
        case = self.store.get_case(case_id)
        trace = self.store.get_trace(case_id)
        current = self.store.judgments(case_id)
        corpus = self.store.get_corpus(case.corpus_id)
        hashes = corpus.hashes()
        data = self._case_input(case, trace, current, hashes)
        return CaseDetail(
            case=case,
            trace=trace,
            judgments=current,
            corpus_resources=len(corpus.resources),
            metrics=case_metrics(data),
            missed=tuple(missed_evidence(case_id, trace.candidates, data.judgments)),
            passages=candidate_passages(trace.candidates, hashes, self.blobs.get),
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
        case = check_judgment_version(self.store.get_case(case_id), expected)
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

    # -- fixtures (services/fixtures.py, which reads this service through its own Protocol) ------------------

    def export_fixture(self, **scope: Unpack[ExportScope]) -> bytes:
        """The self-contained JSON fixture of a project's cases, chosen cases, or all
        (``with_uris``: keep each resource's ``file:///`` URI; otherwise its resource id)."""
        return fixtures.export_fixture(self, **scope)

    def import_fixture(self, data: bytes | str | Mapping[str, Any], progress: Progress = no_progress) -> ImportResult:
        """Verify a fixture whole, then store what is new (nothing on any problem)."""
        return fixtures.import_fixture(self, data, progress)

    def case_inputs(self, cases: Sequence[Case], progress: Progress = no_progress) -> list[CaseInput]:
        """Each case's stored trace, judgments and corpus hashes; ``progress``: ("reading", cases read, cases)."""
        corpora: dict[str, dict[str, str]] = {}
        out = []
        for done, case in enumerate(cases):
            if done % 50 == 0:
                progress("reading", done, len(cases))
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
