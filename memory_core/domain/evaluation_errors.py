"""Typed errors of Evaluation Sets (seed "Evaluation Case"; brief §7). Stable ``code``s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory_core.domain.errors import InvalidRequest, MemoryCoreError


class EvaluationCaseNotFound(MemoryCoreError):
    """No Evaluation Case with that id exists."""

    code = "evaluation_case_not_found"


class EvaluationCorpusNotFound(MemoryCoreError):
    """No Evaluation Corpus with that id exists."""

    code = "evaluation_corpus_not_found"


class EvaluationCaseExists(MemoryCoreError):
    """A case with that id exists already (a concurrent import or BEIR resume raced us)."""

    code = "evaluation_case_exists"


class EvaluationRunNotSucceeded(MemoryCoreError):
    """Only a ``succeeded`` Run can become an Evaluation Case."""

    code = "evaluation_run_not_succeeded"


class EvaluationCorpusIncomplete(MemoryCoreError):
    """A Run's manifest or one of its resource bodies is no longer available to freeze."""

    code = "evaluation_corpus_incomplete"


class EvaluationJudgmentConflict(MemoryCoreError):
    """``expected_judgment_version`` is stale: someone replaced the judgments meanwhile."""

    code = "evaluation_judgment_conflict"

    def __init__(self, message: str, *, case_id: str, expected_version: int, current_version: int) -> None:
        super().__init__(message, case_id=case_id, expected_version=expected_version, current_version=current_version)
        self.current_version = current_version


class InvalidJudgments(InvalidRequest):
    """A judgment set failed validation; the whole request is rejected and nothing is written.

    ``details["problems"]`` lists every problem as ``{"index", "field", "reason"}``.
    """

    code = "invalid_judgments"

    def __init__(self, message: str, *, problems: Sequence[dict[str, Any]], **details: Any) -> None:
        super().__init__(message, problems=list(problems), **details)
        self.problems = list(problems)


class InvalidFixture(InvalidRequest):
    """An evaluation fixture is malformed; ``details["place"]`` is a JSON pointer into it."""

    code = "invalid_evaluation_fixture"

    def __init__(self, message: str, *, place: str, **details: Any) -> None:
        super().__init__(f"{place or '/'}: {message}", place=place or "/", **details)
        self.place = place or "/"


class FixtureHashMismatch(InvalidFixture):
    """A body, manifest or trace in a fixture does not hash to the value it claims."""

    code = "evaluation_fixture_hash_mismatch"


class EvaluationImportConflict(MemoryCoreError):
    """A fixture holds a different record under an id that exists here; nothing was written."""

    code = "evaluation_import_conflict"


class InvalidBeirCollection(InvalidRequest):
    """A BEIR-layout folder is malformed; ``details["place"]`` names the file and line."""

    code = "invalid_beir_collection"

    def __init__(self, message: str, *, place: str, **details: Any) -> None:
        super().__init__(f"{place}: {message}", place=place, **details)
        self.place = place


class EvaluationReplayCorpusMismatch(MemoryCoreError):
    """A replay indexed another memory than a case's frozen corpus (a file its scan skipped,
    or read otherwise); it compared nothing. ``details``: the corpus, what differs, the scan's
    warnings."""

    code = "evaluation_replay_corpus_mismatch"


class EvaluationSetEmpty(MemoryCoreError):
    """A replay or gate found no case it may use (e.g. none reviewed)."""

    code = "evaluation_set_empty"


__all__ = [
    "EvaluationCaseExists",
    "EvaluationCaseNotFound",
    "EvaluationCorpusIncomplete",
    "EvaluationCorpusNotFound",
    "EvaluationImportConflict",
    "EvaluationJudgmentConflict",
    "EvaluationReplayCorpusMismatch",
    "EvaluationRunNotSucceeded",
    "EvaluationSetEmpty",
    "FixtureHashMismatch",
    "InvalidBeirCollection",
    "InvalidFixture",
    "InvalidJudgments",
]


class TuningNotFound(MemoryCoreError):
    """No tuning with that id exists (for that project)."""

    code = "tuning_not_found"


class LearningNotFound(MemoryCoreError):
    """No learning (``memcore eval learn``) with that id exists."""

    code = "learning_not_found"


class LearnedModelRefused(MemoryCoreError):
    """A learned ranking model that cannot be applied: its bytes are missing, corrupt or not its
    digest, or it was trained on another feature revision. A profile naming it ranks with the
    default reranker instead, and its Runs record the refusal."""

    code = "learned_model_refused"
