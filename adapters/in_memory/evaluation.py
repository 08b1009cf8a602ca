"""In-memory twin of ``SqliteEvaluationStore`` (same contract: ``tests/contracts``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import attrs

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.evaluation_errors import EvaluationCaseExists, EvaluationCaseNotFound, EvaluationCorpusNotFound
from memory_core.evaluation.cases import Case, CaseRecord, Corpus, Judgment, JudgmentSet, SourceTrace
from memory_core.ports.evaluation import check_judgment_version

_Kept = TypeVar("_Kept")


def _corpus_not_found(corpus_id: str) -> EvaluationCorpusNotFound:
    return EvaluationCorpusNotFound(f"no evaluation corpus {corpus_id!r}", corpus_id=corpus_id)


def _case_not_found(case_id: str) -> EvaluationCaseNotFound:
    return EvaluationCaseNotFound(f"no evaluation case {case_id!r}", case_id=case_id)


class InMemoryEvaluationStore:
    """``EvaluationStore`` over dicts. Pass ``referenced_blobs`` to ``InMemoryRunStore`` as its
    ``corpus_references`` so that GC keeps the blobs of evaluation corpora."""

    def __init__(self) -> None:
        self._corpora: dict[str, Corpus] = {}
        self._cases: dict[str, Case] = {}
        self._traces: dict[str, SourceTrace] = {}
        self._sets: dict[str, dict[int, JudgmentSet]] = {}
        self._lock = threading.RLock()

    def has_corpus(self, corpus_id: str) -> bool:
        with self._lock:
            return corpus_id in self._corpora

    def _kept(self, kept: Mapping[str, _Kept], key: str, missing: Callable[[], Exception]) -> _Kept:
        """``kept[key]``, else the typed error ``missing`` makes."""
        with self._lock:
            if key not in kept:
                raise missing()
            return kept[key]

    def get_corpus(self, corpus_id: str) -> Corpus:
        return self._kept(self._corpora, corpus_id, lambda: _corpus_not_found(corpus_id))

    def add_cases(self, corpora: Sequence[Corpus], records: Sequence[CaseRecord]) -> None:
        with self._lock:
            ids = [r.case.case_id for r in records]
            clash = [i for i in ids if i in self._cases] or [i for i in ids if ids.count(i) > 1]
            if clash:
                raise EvaluationCaseExists(f"evaluation case {clash[0]!r} exists already", case_id=clash[0])
            known = set(self._corpora) | {c.corpus_id for c in corpora}
            for r in records:
                if r.case.corpus_id not in known:
                    raise _corpus_not_found(r.case.corpus_id)
                versions = [s.version for s in r.judgment_sets]
                if versions != sorted(set(versions)) or (versions and versions[-1] != r.case.judgment_version):
                    raise InvalidRequest("judgment versions must ascend to the case's version", case_id=r.case.case_id)
            for c in corpora:
                self._corpora.setdefault(c.corpus_id, c)
            for r in records:
                self._cases[r.case.case_id] = r.case
                self._traces[r.case.case_id] = r.trace
                self._sets[r.case.case_id] = {s.version: s for s in r.judgment_sets}

    def get_case(self, case_id: str) -> Case:
        return self._kept(self._cases, case_id, lambda: _case_not_found(case_id))

    def get_trace(self, case_id: str) -> SourceTrace:
        with self._lock:
            self.get_case(case_id)
            return self._traces[case_id]

    def case_for_run(self, run_id: str, provenance: str) -> Case | None:
        with self._lock:
            found = [c for c in self._cases.values() if c.source_run_id == run_id and c.provenance == provenance]
        return min(found, key=lambda c: (c.created_at, c.case_id)) if found else None

    def list_cases(self, project_id: str | None = None, case_ids: Sequence[str] | None = None) -> list[Case]:
        with self._lock:
            if case_ids is not None:
                chosen = [self.get_case(i) for i in dict.fromkeys(case_ids)]
            else:
                chosen = list(self._cases.values())
        chosen = [c for c in chosen if project_id is None or c.project_id == project_id]
        return sorted(chosen, key=lambda c: (c.created_at, c.case_id))

    def judgments(self, case_id: str, version: int | None = None) -> JudgmentSet:
        with self._lock:
            case = self.get_case(case_id)
            wanted = case.judgment_version if version is None else version
            if wanted == 0:
                return JudgmentSet(case_id, 0, (), None)
            found = self._sets[case_id].get(wanted)
            if found is None:
                raise InvalidRequest(
                    f"case {case_id!r} has no stored judgment version {wanted}", case_id=case_id, version=wanted
                )
            return found

    def judgment_history(self, case_id: str) -> list[JudgmentSet]:
        with self._lock:
            self.get_case(case_id)
            return [self._sets[case_id][v] for v in sorted(self._sets[case_id])]

    def replace_judgments(
        self, case_id: str, expected_version: int, judgments: Sequence[Judgment], created_at: str
    ) -> JudgmentSet:
        with self._lock:
            case = check_judgment_version(self.get_case(case_id), expected_version)
            fresh = JudgmentSet(case_id, expected_version + 1, tuple(judgments), created_at)
            self._sets[case_id][fresh.version] = fresh
            self._cases[case_id] = attrs.evolve(case, judgment_version=fresh.version)
            return fresh

    def set_reviewed(self, case_id: str, expected_version: int, reviewed: bool) -> Case:
        with self._lock:
            case = check_judgment_version(self.get_case(case_id), expected_version)
            updated = attrs.evolve(case, reviewed_version=expected_version if reviewed else None)
            self._cases[case_id] = updated
            return updated

    def delete_case(self, case_id: str) -> None:
        with self._lock:
            case = self.get_case(case_id)
            del self._cases[case_id], self._traces[case_id], self._sets[case_id]
            if not any(c.corpus_id == case.corpus_id for c in self._cases.values()):
                self._corpora.pop(case.corpus_id, None)

    def runs_of_cases(self) -> set[str]:
        with self._lock:
            return {c.source_run_id for c in self._cases.values()}

    def referenced_blobs(self) -> set[str]:
        with self._lock:
            return {e.resource_hash for c in self._corpora.values() for e in c.resources}
