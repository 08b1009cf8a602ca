"""Learning a ranker through the real daemon on its socket (issue 32, item 2): learn_project runs
as a job in a child process, keeps its result (list_learnings) and changes no judgment; its
refusals carry stable codes; the CLI's ``eval learn`` goes through the daemon."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.evaluation_errors import EvaluationSetEmpty, LearnedModelRefused, LearningNotFound
from memory_core.evaluation.learning import KEEP_CURRENT_LABEL
from tests.daemon.test_server import ROOT, Daemon, running_daemon

QUERIES = ("how do I roll back a deploy?", "advisory locks", "where is the coffee", "printer broken",
           "helm upgrade", "postgres idempotency keys", "replay the outbox", "ledger deploy")  # fmt: skip


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from running_daemon(tmp_path_factory, "learning", "--no-watch", indexed_project="notes")


def memcore(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memory_core", "--home", str(daemon.home), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=180)  # fmt: skip


def test_learning_runs_as_a_job_keeps_its_result_and_changes_no_judgment(daemon: Daemon) -> None:
    client = daemon.client
    with pytest.raises(EvaluationSetEmpty):
        client.learn_project("notes")
    with pytest.raises(InvalidRequest):
        client.learn_project("notes", folds=1)
    case_ids = []
    for query in QUERIES:
        response = client.activate_memory("notes", query)
        case = client.create_evaluation_case(response.run_id)
        judged = client.replace_evaluation_judgments(
            case.case_id, case.judgment_version, [{"relevance": 2, "resource_id": response.fragments[0].resource_id}]
        )
        client.mark_evaluation_reviewed(case.case_id, judged.version)
        case_ids.append(case.case_id)
    before = [client.get_evaluation_case(c).judgments for c in case_ids]
    result = client.learn_project("notes", folds=2)
    assert result.cases == len(QUERIES) and "lightgbm" in result.trainer
    # The setting chosen per outer fold and finally, among the grid; no model when the current ranking is kept.
    assert len(result.fold_settings) == 2 and set(result.fold_settings) | {result.chosen_setting} <= set(
        result.settings
    )
    assert (result.model_digest is None) == (result.chosen_setting == KEEP_CURRENT_LABEL)
    assert result.proposed == (result.model_digest is not None and result.gain_low is not None and result.gain_low > 0)
    assert [client.get_evaluation_case(c).judgments for c in case_ids] == before
    assert client.list_learnings("notes") == [result]
    assert any(j.operation == "learn_project" and j.project_id == "notes" for j in client.list_jobs().jobs)
    if not result.proposed:
        with pytest.raises(InvalidRequest, match="proposed nothing"):
            client.set_profile_from_learning("notes", result.learn_id)
    with pytest.raises(LearningNotFound):
        client.set_profile_from_learning("notes", "01NOSUCHLEARNING0000000000")
    with pytest.raises(LearnedModelRefused, match="has no learned model"):
        client.set_project_profile("notes", {"learned_model": "0" * 64})


def test_the_cli_learns_through_the_daemon(daemon: Daemon) -> None:
    shown = memcore(daemon, "eval", "learn", "notes", "--folds", "2", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["project_id"] == "notes"
    said = memcore(daemon, "eval", "learn", "notes", "--folds", "2")
    assert said.returncode == 0 and ("proposed:" in said.stdout or "no proposal" in said.stdout)
    assert "setting chosen per outer fold (a 3-fold cross-validation on its training folds, among 7): 1 " in said.stdout
    assert "final setting (cross-validation over all cases): " in said.stdout
    assert "window units had their text (100.0%)" in said.stdout and "warning: only" not in said.stdout
    grouped = memcore(daemon, "eval", "learn", "notes", "--folds", "2", "--group-by", "/", "--json")
    assert grouped.returncode == 0, grouped.stderr
    assert 2 <= json.loads(grouped.stdout)["groups"] <= json.loads(grouped.stdout)["cases"]
    blank = memcore(daemon, "eval", "learn", "notes", "--group-by", " ")
    assert blank.returncode != 0 and "group_by must be 1-8 characters" in blank.stderr
    missing = memcore(daemon, "project", "profile", "set", "notes", "--from-learn", "01NOSUCHLEARNING0000000000")
    assert missing.returncode != 0 and "no learning" in missing.stderr
