"""The seed's "Verification" through the real daemon entry: real adapters, a daemon subprocess on
a real socket, the typed client.

One home for the module, served by successive daemons: successful and failed activations are
recorded; the returned fragments are the Run's selected candidates; a SIGTERM with an activation
in flight lets it finish and record its Run; a daemon that dies hard mid-recording leaves a
``running`` Run that the next daemon fails at start-up; and every Run survives restarts and is
served again. (Evaluation Cases surviving a restart belong here too once the Case methods are
in the dispatch table.)
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memory_core.domain.canonical import plain
from memory_core.domain.errors import InvalidQuery, ProjectNotFound, ProjectNotIndexed, RunNotFound
from memory_core.domain.model import Source
from memory_core.entrypoints.daemon.client import DaemonClient
from memory_core.retrieval.activation_state import ActivationState
from memory_core.runs.records import CandidateRecord, RunFilter

from .test_server import Daemon, memory_folder

pytestmark = pytest.mark.slow
QUESTION = "how do I roll back a deploy?"
IDENTITY_FIELDS = ("unit_id", "unit_hash", "resource_id", "heading_path", "token_count", "delta_action",
                   "final_rank", "final_score")


class Home:
    """The module's home and what each stage learned, for the next stage to check."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.home = base / "home"
        self.log = base / "daemon.log"
        self.facts: dict[str, Any] = {}

    def daemon(self, *args: str, **env: str) -> Daemon:
        return Daemon(self.home, self.log, *args, env=env or None)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Home:
    base = tmp_path_factory.mktemp("seed")
    home = Home(base)
    daemon = home.daemon()
    try:
        client = daemon.client
        client.add_project("ledger", [Source(str(memory_folder(base / "memory")))])
        client.add_project("fresh", [Source(str(memory_folder(base / "fresh")))])
        assert client.index_project("ledger").status == "built"
    finally:
        assert daemon.stop() == 0
    return home


def assert_identity(client: DaemonClient, answer: Any) -> None:
    """The returned fragments are exactly the Run's selected candidates, in final order."""
    detail = client.get_retrieval_run(answer.run_id)
    selected = [c for c in detail.candidates if c.disposition == "selected"]
    assert len(selected) == len(answer.fragments) == detail.summary.fragment_count
    for fragment, candidate in zip(answer.fragments, selected, strict=True):
        assert isinstance(candidate, CandidateRecord)
        for field in IDENTITY_FIELDS:
            assert getattr(fragment, field) == getattr(candidate, field), field
    assert [c.final_rank for c in detail.candidates] == list(range(1, len(detail.candidates) + 1))
    assert detail.summary.token_count == answer.totals["tokens"]


def test_activations_are_recorded_through_the_daemon(shared: Home) -> None:
    daemon = shared.daemon()
    try:
        client = daemon.client
        first = client.activate_memory("ledger", QUESTION)
        assert first.run_id and first.fragments and first.fragments[0].resource_id == "runbooks/deploy.md"
        assert_identity(client, first)
        detail = client.get_retrieval_run(first.run_id)
        assert detail.summary.status == "succeeded" and detail.summary.query == QUESTION
        assert detail.summary.warm is not None and detail.revisions == dict(first.revisions)

        second = client.activate_memory("ledger", QUESTION, activation_state=first.activation_state)
        assert {f.delta_action for f in second.fragments} == {"reuse"}
        assert_identity(client, second)
        assert client.get_retrieval_run(second.run_id).summary.state_fingerprint == \
            first.activation_state.fingerprint

        # A failure after validation is a failed Run, named in the error.
        with pytest.raises(ProjectNotIndexed) as not_indexed:
            client.activate_memory("fresh", QUESTION)
        failed_id = not_indexed.value.details["run_id"]
        failed = client.get_retrieval_run(failed_id)
        assert failed.summary.status == "failed" and failed.summary.error_code == "project_not_indexed"
        assert failed.candidates == ()

        # Requests failing validation record nothing.
        before = client.list_retrieval_runs(limit=500).runs
        with pytest.raises(InvalidQuery):
            client.activate_memory("ledger", "   ")
        with pytest.raises(ProjectNotFound):
            client.activate_memory("nope", QUESTION)
        assert client.list_retrieval_runs(limit=500).runs == before
        with pytest.raises(RunNotFound):
            client.get_retrieval_run("01NOSUCHRUN0000000000000000")

        listed = client.list_retrieval_runs(RunFilter(project_id="ledger"))
        assert [r.run_id for r in listed.runs] == [second.run_id, first.run_id]
        assert [r.run_id for r in client.list_retrieval_runs(RunFilter(status="failed")).runs] == [failed_id]
        shared.facts.update(
            first=first, second=second, failed_id=failed_id,
            details={run_id: client.get_retrieval_run(run_id) for run_id in (first.run_id, second.run_id, failed_id)},
        )
    finally:
        assert daemon.stop() == 0


def test_sigterm_with_an_activation_in_flight_leaves_no_run_running(shared: Home) -> None:
    # --no-warm: the first activation loads the JVM and the model, seconds in flight.
    daemon = shared.daemon("--no-warm")
    outcome: dict[str, Any] = {}

    def activate() -> None:
        try:
            outcome["answer"] = daemon.client.activate_memory("ledger", "helm upgrade atomic")
        except Exception as exc:  # reported by the assertion below
            outcome["error"] = exc

    worker = threading.Thread(target=activate)
    worker.start()
    deadline = time.monotonic() + 30
    while daemon.client.runtime_status().in_flight == 0:
        assert time.monotonic() < deadline, "the activation never reached the engine"
        time.sleep(0.01)
    assert worker.is_alive(), "the activation finished before SIGTERM; the test proves nothing"
    assert daemon.stop() == 0
    worker.join(timeout=30)
    assert "error" not in outcome, outcome
    shared.facts["in_flight"] = outcome["answer"]


def test_a_daemon_dying_mid_recording_leaves_a_run_the_next_one_recovers(shared: Home) -> None:
    # The trace is written behind the answer: the answer may reach us before the daemon dies.
    crashing = shared.daemon(MEMORY_CORE_CRASH_POINT="runs.complete.after_candidates")
    try:
        answered = crashing.client.activate_memory("ledger", "advisory locks for idempotency keys")
        shared.facts["crashed_answer"] = answered.run_id
    except Exception:  # noqa: BLE001 - or the connection drops as the daemon exits hard
        pass
    assert crashing.proc.wait(timeout=60) == 70
    crashing.client.close()
    crashing._stderr.close()
    # With --sync-history the trace is written first: the daemon dies before it can answer.
    syncing = shared.daemon("--sync-history", MEMORY_CORE_CRASH_POINT="runs.complete.after_candidates")
    with pytest.raises(Exception):  # noqa: B017 - the connection drops as the daemon exits hard
        syncing.client.activate_memory("ledger", "advisory locks for retries")
    assert syncing.proc.wait(timeout=60) == 70
    syncing.client.close()
    syncing._stderr.close()
    shared.facts["crashed"] = True


def test_runs_survive_restarts_and_none_is_left_running(shared: Home) -> None:
    facts = shared.facts
    assert {"first", "in_flight", "crashed"} <= set(facts), "run the module's tests in order"
    daemon = shared.daemon()
    try:
        client = daemon.client
        assert client.list_retrieval_runs(RunFilter(status="running")).runs == ()
        # The activation that was in flight at SIGTERM finished and recorded its Run.
        in_flight = client.get_retrieval_run(facts["in_flight"].run_id)
        assert in_flight.summary.status == "succeeded"
        assert in_flight.summary.fragment_count == len(facts["in_flight"].fragments)
        # The one whose daemon died mid-recording was failed by this daemon's start-up recovery.
        interrupted = client.list_retrieval_runs(RunFilter(query_contains="advisory locks")).runs
        assert len(interrupted) == 2
        assert all(r.status == "failed" and r.error_code == "retrieval_interrupted" for r in interrupted)
        if facts.get("crashed_answer"):  # answered, then its trace died with the daemon
            assert facts["crashed_answer"] in {r.run_id for r in interrupted}
        assert any(r.get("message") == "recovered interrupted runs" and r.get("failed") == 1
                   for r in daemon.log_records())
        # Earlier Runs are served again, unchanged, and their states still reuse.
        for run_id, detail in facts["details"].items():
            assert client.get_retrieval_run(run_id) == detail
        first = facts["first"]
        state = ActivationState.from_json(plain(first.activation_state))
        again = client.activate_memory("ledger", QUESTION, activation_state=state)
        assert {f.delta_action for f in again.fragments} == {"reuse"}
        assert [f.unit_id for f in again.fragments] == [f.unit_id for f in first.fragments]
        assert_identity(client, again)
    finally:
        assert daemon.stop() == 0
