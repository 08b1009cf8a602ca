"""The CLI's engine when a daemon serves the home: the methods the command handlers call on
``Engine``, implemented over the daemon's socket (``DaemonClient``).

The handlers cannot tell the difference, so every command behaves the same in both modes, with
the daemon's warm indexes and models. One difference is by nature: ``activate`` gets the ranked
candidates back from the Run the daemon recorded (``CandidateRecord`` values in final order, the
fields the stage table and ``--json`` show), not the live pipeline objects.

Evaluation Sets: ``evaluations()`` answers what ``memcore eval`` asks of ``EvaluationService``
(cases, show, review) and the engine-level methods (case from a Run, judgments, report, export,
import) go to the daemon's methods, returning the engine's own values. ``eval import-beir`` and
``eval replay`` stay embedded (``commands.run``): they read local files, index throwaway or new
projects for minutes and report progress, which the daemon's one serialised engine would spend
blocking every agent's activation.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from memory_core.domain.model import Project, Source
from memory_core.domain.progress import Progress
from memory_core.entrypoints.daemon.client import DaemonClient
from memory_core.evaluation.cases import Case, CaseDetail, JudgmentSet
from memory_core.evaluation.fixture import ImportResult
from memory_core.evaluation.report import Report
from memory_core.retrieval.activation_state import ActivationState
from memory_core.runs.records import ClearReport, RunDetail, RunFilter, RunPage
from memory_core.services.engine import Activation, ProjectInfo
from memory_core.services.indexing import IndexReport
from memory_core.services.local_storage import ProjectRemoval, ProjectStorage


class ClientEngine:
    """``Engine``'s CLI-facing methods over a running daemon."""

    def __init__(self, client: DaemonClient) -> None:
        self.client = client

    @classmethod
    def running(cls, home: str | os.PathLike[str] | None = None) -> ClientEngine | None:
        """A client engine when a daemon answers for ``home``, else ``None`` (go embedded)."""
        client = DaemonClient.running(home)
        return cls(client) if client is not None else None

    # -- projects ---------------------------------------------------------------------------
    def add_project(self, name: str, sources: Sequence[Source]) -> Project:
        return self.client.add_project(name, sources).project

    def list_projects(self) -> list[ProjectInfo]:
        return self.client.list_projects()

    def show_project(self, name: str) -> ProjectInfo:
        return self.client.show_project(name)

    def remove_project(self, name: str, *, purge: bool = False) -> ProjectRemoval:
        return self.client.remove_project(name, purge=purge)

    def project_storage(self, name: str) -> ProjectStorage:
        return self.client.show_project_storage(name)

    def move_project_storage(self, name: str, destination: str | os.PathLike[str]) -> ProjectStorage:
        # The daemon resolves nothing against its own working directory: send an absolute path.
        return self.client.move_project_storage(name, os.path.abspath(os.path.expanduser(destination)))

    def clear_project_storage(self, name: str) -> ProjectStorage:
        return self.client.clear_project_storage(name)

    def index(self, name: str, *, force: bool = False, progress: Progress | None = None) -> IndexReport:
        # The daemon reports no progress while it indexes; the report comes when it is done.
        return self.client.index_project(name, force=force)

    # -- activation -------------------------------------------------------------------------
    def activate(
        self,
        project_id: str,
        query: str,
        *,
        budget: int | None = None,
        state: ActivationState | Mapping[str, Any] | None = None,
    ) -> Activation:
        held = state if state is None or isinstance(state, ActivationState) else ActivationState.from_json(state)
        response = self.client.activate_memory(project_id, query, budget=budget, activation_state=held)
        candidates: tuple[Any, ...] = ()
        if response.run_id is not None:  # None only when the daemon could not write history
            candidates = self.client.get_retrieval_run(response.run_id).candidates
        return Activation(response, candidates)

    # -- Retrieval Runs ---------------------------------------------------------------------
    def list_runs(self, run_filter: RunFilter | None = None, *, limit: int = 50, cursor: str | None = None) -> RunPage:
        return self.client.list_retrieval_runs(run_filter, limit=limit, cursor=cursor)

    def get_run(self, run_id: str, *, manifest: bool = False) -> RunDetail:
        return self.client.get_retrieval_run(run_id, manifest=manifest)

    def clear_runs(self, project_id: str | None = None) -> ClearReport:
        if project_id is None:
            return self.client.clear_retrieval_runs(all=True)
        return self.client.clear_retrieval_runs(project_id)

    # -- Evaluation Sets (Engine's names) ---------------------------------------------------
    def evaluations(self) -> DaemonEvaluations:
        return DaemonEvaluations(self.client)

    def create_evaluation_case(self, run_id: str) -> Case:
        return self.client.create_evaluation_case(run_id)

    def replace_evaluation_judgments(
        self, case_id: str, expected_judgment_version: int, judgments: object
    ) -> JudgmentSet:
        return self.client.replace_evaluation_judgments(case_id, expected_judgment_version, judgments)

    def evaluation_report(self, project_id: str | None = None, case_ids: Sequence[str] | None = None) -> Report:
        return self.client.evaluation_report(project_id, case_ids).to_report()

    def export_evaluation_set(
        self,
        *,
        project_id: str | None = None,
        case_ids: Sequence[str] | None = None,
        with_history: bool = False,
        with_uris: bool = False,
    ) -> bytes:
        fixture = self.client.export_evaluation_set(
            project_id, case_ids=case_ids, with_history=with_history, with_uris=with_uris
        )
        return fixture.to_bytes()

    def import_evaluation_set(self, data: bytes | str | Mapping[str, Any]) -> ImportResult:
        return self.client.import_evaluation_set(data)

    def close(self) -> None:
        self.client.close()


class DaemonEvaluations:
    """``EvaluationService``'s reading and reviewing methods over the daemon."""

    def __init__(self, client: DaemonClient) -> None:
        self.client = client

    def get_case(self, case_id: str) -> Case:
        return self.client.get_evaluation_case(case_id).case

    def list_cases(self, project_id: str | None = None, case_ids: Sequence[str] | None = None) -> list[Case]:
        return self.client.list_evaluation_cases(project_id, case_ids)

    def show_case(self, case_id: str) -> CaseDetail:
        d = self.client.get_evaluation_case(case_id)
        return CaseDetail(d.case, d.trace, d.judgments, len(d.corpus.resources), d.metrics, d.missed_evidence)

    def judgment_history(self, case_id: str) -> list[JudgmentSet]:
        return list(self.client.get_evaluation_case(case_id).judgment_history)

    def replace_judgments(self, case_id: str, expected_judgment_version: int, judgments: object) -> JudgmentSet:
        return self.client.replace_evaluation_judgments(case_id, expected_judgment_version, judgments)

    def mark_reviewed(self, case_id: str, expected_judgment_version: int, reviewed: bool = True) -> Case:
        return self.client.mark_evaluation_reviewed(case_id, expected_judgment_version, reviewed)

    def report(self, project_id: str | None = None, case_ids: Sequence[str] | None = None) -> Report:
        return self.client.evaluation_report(project_id, case_ids).to_report()
