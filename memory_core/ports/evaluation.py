"""The evaluation's ports: where Cases are kept, where Runs are read, where BEIR queries run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from memory_core.domain.model import ManifestEntry
from memory_core.domain.progress import Progress, no_progress
from memory_core.evaluation.beir import Prepared
from memory_core.evaluation.cases import Case, CaseRecord, Corpus, Judgment, JudgmentSet, SourceTrace
from memory_core.evaluation.cases import check_judgment_version as check_judgment_version  # every store's CAS rule
from memory_core.evaluation.metrics import RankedItem
from memory_core.runs.records import RunDetail


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


class Workspace(Protocol):
    """A place to index resources as a project and run queries over it."""

    def prepare(self, project_id: str, files: Mapping[str, bytes], progress: Progress = no_progress) -> Prepared:
        """Make ``project_id``'s only source hold exactly ``files`` (resource_id -> body); index it."""
        ...

    def activate(self, project_id: str, query: str) -> str:
        """Run the query through the pipeline; the recorded Run's id."""
        ...

    def rank(self, project_id: str, query: str, ranked_as: str | None = None) -> list[RankedItem]:
        """Run the query; the final order (B4) as ranked items. ``ranked_as``: rank with that
        project's ranking (its own profile) instead of ``project_id``'s."""
        ...
