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
from collections.abc import Callable, Mapping
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from memory_core.domain.model import Project
from memory_core.domain.progress import Progress
from memory_core.entrypoints.daemon import api, dispatch
from memory_core.entrypoints.daemon.client import DaemonClient
from memory_core.evaluation.cases import CaseDetail, JudgmentSet
from memory_core.retrieval.activation_state import ActivationState
from memory_core.runs.records import ClearReport
from memory_core.services.activation import Activation
from memory_core.services.engine import ProjectInfo
from memory_core.services.indexing import IndexReport
from memory_core.services.local_storage import ProjectStorage

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class Forward(Generic[P, R]):
    """An ``Engine`` method the daemon answers: the DaemonClient's method of the dispatch table
    (its parameters), called on the engine's client, its answer passed through ``then`` (the
    engine's value of it) if given. Made by :func:`forward`, which types both forms."""

    def __init__(self, method: Callable[..., Any], then: Callable[[Any], R] | None = None) -> None:
        self.method = method
        self.then = then

    def __get__(self, engine: Any, owner: type) -> Callable[P, R]:
        def bound(*args: P.args, **kwargs: P.kwargs) -> R:
            answer = self.method(engine.client, *args, **kwargs)
            return answer if self.then is None else self.then(answer)

        return bound


@overload
def forward(method: Callable[Concatenate[DaemonClient, P], R]) -> Forward[P, R]: ...


@overload
def forward(method: Callable[Concatenate[DaemonClient, P], T], then: Callable[[T], R]) -> Forward[P, R]: ...


def forward(method: Callable[..., Any], then: Callable[[Any], Any] | None = None) -> Forward[Any, Any]:
    return Forward(method, then)


def _project(info: ProjectInfo) -> Project:
    return info.project


class ClientEngine:
    """``Engine``'s CLI-facing methods over a running daemon."""

    def __init__(self, client: DaemonClient) -> None:
        self.client = client

    @classmethod
    def running(cls, home: str | os.PathLike[str] | None = None) -> ClientEngine | None:
        """A client engine when a daemon answers for ``home``, else ``None`` (go embedded)."""
        client = DaemonClient.running(home)
        return cls(client) if client is not None else None

    # Every operation of the table that names the Engine method it serves (``Method.engine``) is
    # forwarded as it is, made below the class (``_forward_the_tables_operations``); what follows
    # are the methods that reshape their arguments or the answer.

    # -- projects ---------------------------------------------------------------------------
    add_project = forward(DaemonClient.add_project, _project)

    def move_project_storage(self, name: str, destination: str | os.PathLike[str]) -> ProjectStorage:
        # The daemon resolves nothing against its own working directory: send an absolute path.
        return self.client.move_project_storage(name, os.path.abspath(os.path.expanduser(destination)))

    def index(self, name: str, *, force: bool = False, progress: Progress | None = None) -> IndexReport:
        if progress is None:
            return self.client.index_project(name, force=force)
        # The report comes when the build is done; meanwhile the daemon's health says how many
        # re-indexes the request waits behind, then how far its build is.
        from memory_core.entrypoints.cli.watch_commands import daemon_progress

        with daemon_progress(self.client, name, progress):
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
    def clear_runs(self, project_id: str | None = None) -> ClearReport:
        if project_id is None:
            return self.client.clear_retrieval_runs(all=True)
        return self.client.clear_retrieval_runs(project_id)

    # -- Evaluation Sets (Engine's names) ---------------------------------------------------
    def evaluations(self) -> DaemonEvaluations:
        return DaemonEvaluations(self.client)

    evaluation_report = forward(DaemonClient.evaluation_report, api.EvaluationReport.to_report)

    # The file's bytes, as an embedded export writes them.
    export_evaluation_set = forward(DaemonClient.export_evaluation_set, api.EvaluationFixture.to_bytes)

    def close(self) -> None:
        self.client.close()


def _forward_the_tables_operations() -> None:
    """``ClientEngine.<engine>`` for each operation of the table that says which Engine method it
    serves: a new one needs no line here."""
    for name, engine_name in _SAME_AS_THE_ENGINE.items():
        if engine_name not in vars(ClientEngine):
            setattr(ClientEngine, engine_name, Forward(getattr(DaemonClient, dispatch.lookup(name).name)))


# The operations that answer as the Engine method of this name does (interim: see issue 31).
_SAME_AS_THE_ENGINE = {
    "list_projects": "list_projects", "show_project": "show_project", "remove_project": "remove_project",
    "show_project_storage": "project_storage", "clear_project_storage": "clear_project_storage",
    "list_retrieval_runs": "list_runs", "get_retrieval_run": "get_run",
    "create_evaluation_case": "create_evaluation_case", "replace_evaluation_judgments": "replace_evaluation_judgments",
    "import_evaluation_set": "import_evaluation_set", "show_project_profile": "project_profile",
    "set_project_profile": "set_project_profile", "restore_project_profile": "restore_project_profile",
    "tune_project": "tune_project", "list_tunings": "tunings", "learn_project": "learn_project",
    "list_learnings": "learnings", "set_profile_from_learning": "set_profile_from_learning",
}


_forward_the_tables_operations()


class DaemonEvaluations:
    """``EvaluationService``'s reading and reviewing methods over the daemon."""

    def __init__(self, client: DaemonClient) -> None:
        self.client = client

    get_case = forward(DaemonClient.get_evaluation_case, lambda detail: detail.case)
    list_cases = forward(DaemonClient.list_evaluation_cases)

    def show_case(self, case_id: str) -> CaseDetail:
        d = self.client.get_evaluation_case(case_id)
        return CaseDetail(
            d.case, d.trace, d.judgments, len(d.corpus.resources), d.metrics, d.missed_evidence, d.passages
        )

    def judgment_history(self, case_id: str) -> list[JudgmentSet]:
        return list(self.client.get_evaluation_case(case_id).judgment_history)

    replace_judgments = forward(DaemonClient.replace_evaluation_judgments)
    mark_reviewed = forward(DaemonClient.mark_evaluation_reviewed)
    report = forward(DaemonClient.evaluation_report, api.EvaluationReport.to_report)
