"""``python -m tests.reliability.workflow HOME SOURCE BEIR``: every kind of write the product makes,
with the default adapters (Lucene, MiniLM), for the permission walk of ``test_security``.

Index, activate, create a case, judge, review, export, delete and re-import it, import a BEIR
folder and replay the set (both write evaluation sources under the home), Clear History.
"""

from __future__ import annotations

import sys

from memory_core.adapters.files.evaluation_sources import FolderSources
from memory_core.domain.model import Source
from memory_core.entrypoints.bootstrap import bootstrap
from memory_core.evaluation.fixture import load_fixture
from memory_core.services.beir_import import EngineWorkspace, import_beir
from memory_core.services.replay import replay


def main(home: str, source: str, beir: str) -> int:
    engine = bootstrap(home)
    engine.add_project("proj", [Source(source)])
    engine.index("proj")
    run_id = engine.activate("proj", "advisory locks for idempotency keys").response.run_id
    engine.activate("proj", "how do I roll back the ledger")
    assert run_id
    service = engine.evaluations()
    case = engine.create_evaluation_case(run_id)
    unit = service.get_trace(case.case_id).candidates[0].unit_id
    engine.replace_evaluation_judgments(case.case_id, 0, [{"unit_id": unit, "relevance": 3}])
    service.mark_reviewed(case.case_id, 1)
    fixture = engine.export_evaluation_set()
    service.delete_case(case.case_id)
    engine.import_evaluation_set(fixture)
    workspace = EngineWorkspace(engine, FolderSources(f"{home}/evaluation-sources"))
    import_beir(service, workspace, beir, "beir")
    replay(load_fixture(fixture), workspace)
    engine.clear_runs()
    engine.close()
    print("workflow done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:4]))
