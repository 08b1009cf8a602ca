"""Project profiles and tuning through the real daemon on its socket, and the CLI against it (the
operations over its client, ``cli/executor.py``): set, show, restore, refusals with stable codes,
and a Run recording the project's own profile."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.evaluation_errors import EvaluationSetEmpty, TuningNotFound
from tests.daemon.test_server import ROOT, Daemon, running_daemon


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from running_daemon(tmp_path_factory, "profiles", "--no-watch", indexed_project="notes")


def memcore(daemon: Daemon, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memory_core", "--home", str(daemon.home), *args], input=stdin,
                          capture_output=True, text=True, cwd=ROOT, timeout=120)  # fmt: skip


def test_a_profile_set_on_the_daemon_is_what_its_runs_record(daemon: Daemon) -> None:
    view = daemon.client.set_project_profile("notes", {"name": "two", "max_fragments": 2, "rrf_k": 30})
    assert view.in_use is not None and view.settings["rrf_k"] == 30 and view.ranking_profile.startswith("two@")
    response = daemon.client.activate_memory("notes", "how do I roll back a deploy?")
    assert len(response.fragments) <= 2 and response.revisions["ranking_profile"] == view.ranking_profile
    run = daemon.client.get_retrieval_run(response.run_id)
    assert run.revisions["ranking_profile"] == view.ranking_profile
    restored = daemon.client.restore_project_profile("notes", 0)
    assert restored.ranking_profile.startswith("default@")


def test_refusals_carry_their_codes_and_store_nothing(daemon: Daemon) -> None:
    before = len(daemon.client.show_project_profile("notes").history)
    with pytest.raises(InvalidRequest, match="unknown profile setting"):
        daemon.client.set_project_profile("notes", {"weights": [1, 2]})
    with pytest.raises(TuningNotFound):
        daemon.client.set_project_profile("notes", None, "01NOSUCHTUNING000000000000")
    with pytest.raises(EvaluationSetEmpty):
        daemon.client.tune_project("notes")
    with pytest.raises(InvalidRequest):
        daemon.client.tune_project("notes", folds=1)
    assert len(daemon.client.show_project_profile("notes").history) == before
    assert daemon.client.list_tunings("notes") == []


def test_the_cli_sets_shows_and_restores_through_the_daemon(daemon: Daemon) -> None:
    set_ = memcore(daemon, "project", "profile", "set", "notes", "--file", "-", "--json", stdin='{"alpha": 0.5}')
    assert set_.returncode == 0, set_.stderr
    assert json.loads(set_.stdout)["settings"]["alpha"] == 0.5
    shown = memcore(daemon, "project", "profile", "show", "notes")
    assert shown.returncode == 0 and "alpha = 0.5" in shown.stdout and "reranker convex-fusion" in shown.stdout
    bad = memcore(daemon, "project", "profile", "set", "notes", "--file", "-", stdin='{"alpha": 7}')
    assert bad.returncode != 0 and "alpha must be within [0, 1], got 7" in bad.stderr
    grid = memcore(daemon, "eval", "tune", "notes", "--grid", "alpha")
    assert grid.returncode != 0 and "--grid wants KEY=V1,V2" in grid.stderr
    none = memcore(daemon, "eval", "tune", "notes")
    assert none.returncode != 0 and "has no Evaluation Cases" in none.stderr
    back = memcore(daemon, "project", "profile", "restore", "notes", "--json")
    assert back.returncode == 0 and json.loads(back.stdout)["in_use"]["source"].startswith("restore:")


@pytest.mark.parametrize(
    ("settings", "key", "message"),
    [
        ({"name": "gate\x00"}, "name", r"name holds a control character \(U\+0000\)"),
        ({"name": "notes\u202ecod.exe"}, "name", r"name holds a bidirectional control \(U\+202E\)"),
        ({"min_final_score": 1e300}, "min_final_score", r"min_final_score must be within \[0, 2\]"),
    ],
)
def test_a_hostile_name_or_a_floor_above_every_score_is_refused_and_nothing_stored(
    daemon: Daemon, settings: dict[str, object], key: str, message: str
) -> None:
    before = daemon.client.show_project_profile("notes").history
    with pytest.raises(InvalidRequest, match=message) as refused:
        daemon.client.set_project_profile("notes", settings)
    assert refused.value.code == "invalid_request" and refused.value.details["key"] == key
    assert daemon.client.show_project_profile("notes").history == before


def test_the_cli_names_the_floors_range(daemon: Daemon) -> None:
    bad = memcore(daemon, "project", "profile", "set", "notes", "--file", "-", stdin='{"min_final_score": 1e300}')
    assert bad.returncode != 0 and "min_final_score must be within [0, 2]" in bad.stderr


def test_an_answer_the_floor_emptied_says_so_in_the_response_and_the_mcp_text(daemon: Daemon) -> None:
    from memory_core.entrypoints.mcp.replies import activation_text
    from memory_core.entrypoints.mcp.server import Forwarder

    question = "how do I roll back a deploy?"
    assert daemon.client.activate_memory("notes", question).notices == ()
    daemon.client.set_project_profile("notes", {"name": "strict", "min_final_score": 2.0})  # the top of [0, 2]
    forwarder = Forwarder(daemon.home, start_timeout_s=60)
    try:
        response = daemon.client.activate_memory("notes", question)
        assert response.fragments == () and [n.code for n in response.notices] == ["score_floor_removed_all"]
        run = daemon.client.get_retrieval_run(response.run_id)
        reranked = [c for c in run.candidates if c.rerank_rank is not None]
        assert reranked and {c.exclusion_code for c in reranked} == {"below_score_threshold"}
        assert f"{len(reranked)} of the {len(reranked)} reranked candidates" in response.notices[0].message

        structured = forwarder.activate({"project": "notes", "query": question})  # what the MCP tool returns
        assert structured["fragments"] == [] and structured["notices"][0]["code"] == "score_floor_removed_all"
        lines = activation_text(structured).splitlines()
        assert lines[0].startswith("0 fragments of project notes")
        assert lines[1] == f"notice[score_floor_removed_all]: {structured['notices'][0]['message']}"
        assert "min_final_score 2 (the best " in lines[1]
    finally:
        forwarder.close()
        daemon.client.restore_project_profile("notes", 0)
