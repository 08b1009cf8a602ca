"""``memcore eval export / import / replay`` as a user runs them (issue 14 items 6 and 10): the
real CLI in subprocesses, over a home seeded in process; the replay runs the real pipeline
(Lucene, MiniLM). Export names no local folder unless ``--with-uris``; import and replay print
a readable summary (``--json``: the wire form); an unreplayable fixture is refused whole."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from memory_core.domain.model import Source

from ..reliability.harness import PROJECT, engine_for, write_memory
from ..reliability.test_bad_input import reseal
from ..reliability.test_fixture_replay import add_resource
from .test_cli import memcore

pytestmark = pytest.mark.slow


def test_export_import_and_replay_through_the_cli(tmp_path: Path) -> None:
    origin, fresh = tmp_path / "origin", tmp_path / "fresh"
    source = write_memory(tmp_path / "private-notes", 0)
    engine = engine_for(origin)
    try:
        engine.add_project(PROJECT, [Source(str(source))])
        engine.index(PROJECT)
        run_id = engine.activate(PROJECT, "how do I roll back the ledger").response.run_id
        assert run_id
        case_id = engine.create_evaluation_case(run_id).case_id
        engine.replace_evaluation_judgments(case_id, 0, [{"resource_id": "a.md", "relevance": 3}])
        engine.evaluations().mark_reviewed(case_id, 1)
    finally:
        engine.close()

    portable, with_uris = tmp_path / "portable.json", tmp_path / "with-uris.json"
    memcore(origin, "eval", "export", "--out", str(portable))
    memcore(origin, "eval", "export", "--with-uris", "--out", str(with_uris))
    assert b"file://" not in portable.read_bytes() and b"private-notes" not in portable.read_bytes()
    uris = [r["uri"] for c in json.loads(with_uris.read_bytes())["corpora"] for r in c["resources"]]
    assert uris and all(u.startswith("file:///") and "private-notes" in u for u in uris)

    imported = memcore(fresh, "eval", "import", str(portable)).stdout
    assert imported.startswith("imported 1 case, 0 already here unchanged; 1 new corpus, 4 bodies written")
    assert f"added: {case_id}" in imported and "{" not in imported
    again = json.loads(memcore(fresh, "eval", "import", str(portable), "--json").stdout)
    assert again == {"cases_added": [], "cases_unchanged": [case_id], "corpora_added": 0, "blobs_written": 0}
    older = json.loads(memcore(fresh, "eval", "import", str(with_uris), "--json").stdout)  # a fixture with uris
    assert older["cases_unchanged"] == [case_id] and older["corpora_added"] == 0

    # The real pipeline ranks otherwise than the seeded home's cheap one: the gate allows any drop.
    shown = memcore(fresh, "eval", "replay", "--fixture", str(portable), "--max-drop", "1").stdout
    assert shown.startswith("replay gate PASSED: ndcg@10 (resource level), current vs b4_reranked")
    assert "4 resources indexed as replay-" in shown and "checked equal to the frozen corpus" in shown
    assert "{" not in shown
    result = json.loads(memcore(fresh, "eval", "replay", "--fixture", str(portable), "--max-drop", "1",
                                "--json").stdout)  # fmt: skip
    assert result["passed"] and result["compared"] == 1 and result["failed_cases"] == []
    assert result["corpora"] == [
        {"corpus_id": json.loads(portable.read_bytes())["cases"][0]["corpus_id"],
         "project_id": result["corpora"][0]["project_id"], "resources": 4}
    ]  # fmt: skip
    assert result["cases"][0]["case_id"] == case_id and result["variant"] == "current"

    document = json.loads(portable.read_bytes())
    bad = copy.deepcopy(document)
    add_resource(bad, "a.md/inner.md", b"# Inner\n")
    reseal(bad)
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    cases_before = memcore(fresh, "eval", "case", "list", "--json").stdout
    refused = memcore(fresh, "eval", "import", str(tmp_path / "bad.json"), check=False)
    assert refused.returncode == 2 and "error[invalid_evaluation_fixture]" in refused.stderr
    assert "'a.md/inner.md' needs 'a.md' to be a folder" in refused.stderr and "Traceback" not in refused.stderr
    assert memcore(fresh, "eval", "case", "list", "--json").stdout == cases_before
