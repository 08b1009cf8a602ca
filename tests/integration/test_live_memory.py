"""Live Effective Memory at activation with the real adapters (real apsw, Lucene, MiniLM; issue 15).

Every Run records the Effective Memory the sources show at that moment, beside the Index Revision
that ranked it; a case made from the Run freezes that live memory, so Stale Result and Scope
Violation measure how far the index lagged.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from memory_core.domain.canonical import plain
from memory_core.domain.model import Layer, Source
from memory_core.entrypoints.bootstrap import bootstrap
from memory_core.evaluation.metrics import RankedItem, ScopeStatus, scope_status

pytestmark = pytest.mark.slow
QUERY = "supersonic wing flutter boundary layer"
TOPICS = {
    "wing.md": "# Wing flutter\n\nSupersonic wing flutter couples the boundary layer with panel bending.\n",
    "layer.md": "# Boundary layer\n\nThe boundary layer over a supersonic wing thickens behind the shock.\n",
    "nozzle.md": "# Nozzle\n\nA convergent nozzle chokes at the throat; the jet then expands.\n",
    "heat.md": "# Heat transfer\n\nHeat transfer to a cylinder in laminar flow follows the Nusselt number.\n",
    "buckling.md": "# Buckling\n\nThin panels buckle under compressive load before the material yields.\n",
    "ADR-0004.md": "# ADR-0004 Storage\n\nRuns live in local.db beside the catalog.\n",
}


def write_memory(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name, text in TOPICS.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("live")
    engine = bootstrap(base / "home")
    yield base, engine
    engine.close()


def test_a_case_from_a_lagging_index_shows_stale_and_scope_violation_for_exactly_those_resources(home):  # type: ignore[no-untyped-def]
    base, engine = home
    source = write_memory(base / "lag")
    engine.add_project("lag", [Source(str(source))])
    engine.index("lag")
    fresh = engine.activate("lag", QUERY).response
    assert fresh.freshness.live and fresh.freshness.index_behind is False
    assert fresh.freshness.changed_resources == 0
    assert fresh.freshness.effective_memory_hash == fresh.revisions["effective_memory_hash"]
    assert {"wing.md", "layer.md"} <= {f.resource_id for f in fresh.fragments}

    edited = "# Wing flutter\n\nRewritten: flutter margins are now tested in the tunnel first.\n"
    (source / "wing.md").write_text(edited, encoding="utf-8")
    (source / "layer.md").unlink()
    lagging = engine.activate("lag", QUERY)
    response = lagging.response
    # The ranked answer is the generation's, unchanged by reading the live memory.
    assert [f.unit_id for f in response.fragments] == [f.unit_id for f in fresh.fragments]
    freshness = response.freshness
    assert freshness.live and freshness.index_behind is True and freshness.reindex_pending is False
    assert freshness.changed_resources == 2
    assert freshness.stale_resources == ("wing.md",)
    assert freshness.missing_resources == ("layer.md",)
    assert "live_memory" in response.latency_ms

    run = engine.get_run(response.run_id)
    # The Run records the live memory, and separately the Index Revision that ranked it.
    assert run.summary.effective_memory_hash == freshness.effective_memory_hash
    assert run.summary.effective_memory_hash != run.revisions["effective_memory_hash"]
    assert run.summary.index_revision == response.revisions["index_revision"]
    manifest = {e.resource_id: e for e in engine.history.run_manifest(run.summary.effective_memory_hash)}
    assert "layer.md" not in manifest and set(manifest) == set(TOPICS) - {"layer.md"}
    # The edited body is kept content-addressed with the Run, so the case's corpus is whole.
    assert engine.indexer.blobs.get(manifest["wing.md"].resource_hash) == edited.encode("utf-8")

    case = engine.create_evaluation_case(response.run_id)
    corpus = engine.evaluations().get_corpus(case.corpus_id).hashes()
    assert case.corpus_id == run.summary.effective_memory_hash
    trace = engine.evaluations().get_trace(case.case_id)
    top = sorted(trace.candidates, key=lambda c: c.final_rank)[:20]
    status = {c.resource_id: scope_status(RankedItem(c.unit_id, c.resource_id, c.resource_hash), corpus) for c in top}
    assert {r for r, s in status.items() if s is ScopeStatus.STALE} == {"wing.md"}
    assert {r for r, s in status.items() if s is ScopeStatus.SCOPE_VIOLATION} == {"layer.md"}
    report = plain(engine.evaluation_report(case_ids=[case.case_id]))
    final = report["levels"]["resource"]["variants"]["b4_reranked"]
    resources_in_top = len({c.resource_id for c in top})
    assert final["stale_result@20"]["mean"] == pytest.approx(1 / resources_in_top)
    assert final["scope_violation@20"]["mean"] == pytest.approx(1 / resources_in_top)

    # Re-indexing catches up: the next Run's memory is the generation's again.
    engine.index("lag")
    caught_up = engine.activate("lag", QUERY).response
    assert caught_up.freshness.index_behind is False and caught_up.freshness.changed_resources == 0
    recorded = engine.get_run(caught_up.run_id).summary.effective_memory_hash
    assert recorded == caught_up.revisions["effective_memory_hash"]


def test_a_vanished_source_never_fails_the_activation_or_changes_its_answer(home):  # type: ignore[no-untyped-def]
    base, engine = home
    shared = write_memory(base / "org")
    own = base / "own"
    own.mkdir()
    (own / "local-note.md").write_text("# Local\n\nOur wing flutter test rig is in hangar 2.\n", encoding="utf-8")
    engine.add_project("gone", [Source(str(shared), Layer.ORGANIZATION), Source(str(own))])
    engine.index("gone")
    before = engine.activate("gone", QUERY)
    shutil.rmtree(shared)
    after = engine.activate("gone", QUERY)
    assert [c.unit.unit_id for c in after.candidates] == [c.unit.unit_id for c in before.candidates]
    assert [f.unit_id for f in after.response.fragments] == [f.unit_id for f in before.response.fragments]
    freshness = after.response.freshness
    assert freshness.live is False and freshness.index_behind is None and freshness.changed_resources is None
    assert freshness.error is not None and str(shared) in freshness.error
    run = engine.get_run(after.response.run_id)
    # What could be recorded: the memory of the generation that answered.
    assert run.summary.status == "succeeded"
    assert run.summary.effective_memory_hash == after.response.revisions["effective_memory_hash"]


def test_the_cli_warns_when_the_index_is_behind_and_shows_what_a_run_saw(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]

    def memcore(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "memory_core", "--home", str(tmp_path / "home"), *args],
            capture_output=True, text=True, cwd=root, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done

    source = write_memory(tmp_path / "notes")
    memcore("project", "add", "notes", "--source", str(source))
    memcore("index", "notes")
    (source / "wing.md").write_text("# Wing flutter\n\nNow measured in the tunnel.\n", encoding="utf-8")
    (source / "layer.md").unlink()
    lagging = memcore("activate", "notes", QUERY, "--json")
    assert "warning: the index of 'notes' is behind its sources (2 resource(s) changed" in lagging.stderr
    assert "edited since: wing.md" in lagging.stderr and "deleted since: layer.md" in lagging.stderr
    assert re.search(r"run `memcore (--home \S+ )?index notes`", lagging.stderr)  # hints keep --home
    response = json.loads(lagging.stdout)["response"]  # stdout stays one JSON document
    assert response["freshness"]["index_behind"] is True
    shown = memcore("runs", "show", response["run_id"], "--manifest")
    assert "index behind" in shown.stdout and "stale wing.md, missing layer.md" in shown.stdout
    detail = json.loads(memcore("runs", "show", response["run_id"], "--manifest", "--json").stdout)
    assert {e["resource_id"] for e in detail["manifest"]} == set(TOPICS) - {"layer.md"}
