"""A project's cross-encoder under its ranking profile (issue 33, item 3), through the real
components: a tiny ``BertForSequenceClassification`` with random weights built here, added with
``memcore model add``, chosen with ``project set --reranker``, the real ONNX graph, apsw store,
Lucene and vector index, and the Run store. The profile's ``rerank_max_tokens`` cuts the pairs
(the scores of long texts change, and so does the reranker's revision); ``rerank_batch`` only
groups them (same scores, same revisions); a bad value is refused naming the key and nothing
is stored; every Run records the rerank stage's scores, its time and revision."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memory_core.entrypoints.cli.main import main
from tests.integration.own_models import tiny_bert

# Each note is far longer than 16 tokens, so a 16-token pair keeps only the query and a few words.
NOTES = {
    "wing.md": "# Wing\n\n" + "The wing flap adds lift at low speed during landing and takeoff. " * 6,
    "engine.md": "# Engine\n\n" + "The turbine engine burns kerosene and drives the compressor stages. " * 6,
    "tail.md": "# Tail\n\n" + "The rudder on the tail keeps the aircraft straight in a crosswind. " * 6,
}
QUERY = "wing lift at low speed"

Cli = Callable[..., tuple[int, Any]]


@pytest.fixture
def memcore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    home, notes = tmp_path / "home", tmp_path / "notes"
    notes.mkdir()
    for name, text in NOTES.items():
        (notes / name).write_text(text)

    def run(*args: str) -> tuple[int, Any]:
        capsys.readouterr()
        code = main(["--home", str(home), *args, "--json"])
        out = capsys.readouterr().out
        return code, json.loads(out) if out.strip() else None

    ce = tiny_bert(tmp_path / "ce", hidden=32, classifier=True, seed=5)
    assert run("project", "add", "notes", "--source", str(notes))[0] == 0
    assert run("model", "add", "ce", str(ce))[0] == 0
    assert run("project", "set", "notes", "--reranker", "ce")[0] == 0
    assert run("index", "notes")[0] == 0
    return run


def set_profile(memcore: Cli, tmp_path: Path, settings: dict[str, Any]) -> tuple[int, Any]:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(settings))
    return memcore("project", "profile", "set", "notes", "--file", str(path))


def rerank_scores(memcore: Cli) -> tuple[dict[str, str], dict[str, float], str]:
    """One activation's revisions, its rerank scores by unit, and its Run id."""
    code, answer = memcore("activate", "notes", QUERY)
    assert code == 0
    scores = {c["unit_id"]: c["rerank_score"] for c in answer["candidates"] if c["rerank_score"] is not None}
    return answer["response"]["revisions"], scores, answer["response"]["run_id"]


def test_the_profile_cuts_the_cross_encoders_pairs_and_the_run_records_it(memcore: Cli, tmp_path: Path) -> None:
    code, shown = memcore("project", "profile", "show", "notes")
    assert code == 0 and shown["settings"]["rerank_max_tokens"] is None and shown["settings"]["rerank_batch"] is None
    unbounded_revisions, unbounded, _ = rerank_scores(memcore)
    assert unbounded_revisions["reranker_model"] == shown["reranker"]  # the view names what a Run records
    assert shown["reranker"].startswith("cross-encoder:") and "+max" not in shown["reranker"]
    assert len(unbounded) == 3  # every candidate is inside the default window of 50

    code, view = set_profile(memcore, tmp_path, {"name": "short", "rerank_max_tokens": 16})
    assert code == 0 and view["settings"]["rerank_max_tokens"] == 16
    assert view["reranker"] == shown["reranker"] + "+max16"
    revisions, cut, run_id = rerank_scores(memcore)
    assert revisions["reranker_model"] == view["reranker"] and revisions["ranking_profile"] == view["ranking_profile"]
    assert cut.keys() == unbounded.keys()
    assert all(abs(cut[u] - unbounded[u]) > 1e-6 for u in cut)  # every text was cut: every score moved

    code, run = memcore("runs", "show", run_id)
    assert code == 0
    recorded = {c["unit_id"]: c["rerank_score"] for c in run["candidates"] if c["rerank_score"] is not None}
    assert recorded == pytest.approx(cut)  # the rerank stage's scores, one per pair scored
    assert len(recorded) == min(50, run["summary"]["candidate_count"])  # the pairs scored: the window
    assert run["latency_ms"]["rerank"] > 0  # and its time
    assert run["revisions"]["reranker_model"] == view["reranker"]

    # The batch only groups the pairs: same revisions, same scores (up to padding's rounding).
    code, batched = set_profile(memcore, tmp_path, {"name": "short", "rerank_max_tokens": 16, "rerank_batch": 1})
    assert code == 0 and batched["settings"]["rerank_batch"] == 1
    assert (batched["reranker"], batched["ranking_profile"]) == (view["reranker"], view["ranking_profile"])
    revisions, one_by_one, _ = rerank_scores(memcore)
    assert revisions["reranker_model"] == view["reranker"]
    assert one_by_one == pytest.approx(cut, rel=1e-5, abs=1e-6)

    # Past the model's own maximum (128 positions) is the model's own: the unbounded revision.
    code, long = set_profile(memcore, tmp_path, {"name": "short", "rerank_max_tokens": 4096})
    assert code == 0 and long["reranker"] == shown["reranker"]
    assert rerank_scores(memcore)[1] == pytest.approx(unbounded, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"rerank_max_tokens": 7}, "rerank_max_tokens"),
        ({"rerank_max_tokens": 8193}, "rerank_max_tokens"),
        ({"rerank_max_tokens": 64.0}, "rerank_max_tokens"),
        ({"rerank_batch": 0}, "rerank_batch"),
        ({"rerank_batch": "16"}, "rerank_batch"),
        ({"rerank_batch": True}, "rerank_batch"),
    ],
)
def test_a_bad_cross_encoder_setting_is_refused_and_nothing_stored(
    memcore: Cli, tmp_path: Path, settings: dict[str, Any], key: str
) -> None:
    before = memcore("project", "profile", "show", "notes")[1]
    code, error = set_profile(memcore, tmp_path, settings)
    assert code == 2 and error["error"]["code"] == "invalid_request"
    assert error["error"]["details"]["key"] == key and key in error["error"]["message"]
    assert memcore("project", "profile", "show", "notes")[1] == before
