"""``python -m tests.reliability.child HOME ACTION [ARGS]``: one process of a crash test.

It wires the engine as the tests do (``harness.engine_for``; recovery runs at start), performs
ACTION and prints one JSON line per write the product acknowledged (the call returned), flushed
at once, so the parent knows exactly what completed before the crash. ``$MEMORY_CORE_CRASH_POINT``
decides where it dies; SIGKILL is the other way.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

from memory_core.domain.errors import RetrievalFailed
from tests.reliability.harness import (
    BROKEN_EMBEDDER_ENV,
    LUCENE_ENV,
    PROJECT,
    QUERIES,
    SYNC_HISTORY_ENV,
    BrokenEmbedder,
    engine_for,
    judgments_for,
)


def ack(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def main(argv: list[str]) -> int:
    home, action, *args = argv
    overrides: dict[str, Any] = {}
    if os.environ.get(BROKEN_EMBEDDER_ENV):
        overrides["embedder"] = BrokenEmbedder()
    if os.environ.get(SYNC_HISTORY_ENV):
        overrides["sync_history"] = True
    engine = engine_for(home, lucene=bool(os.environ.get(LUCENE_ENV)), **overrides)
    ack(started=os.getpid())
    if action == "index":
        report = engine.index(PROJECT)
        ack(index=report.index_revision, status=report.status)
    elif action == "activate":
        for query in QUERIES[: int(args[0]) if args else 3]:
            ack(run=engine.activate(PROJECT, query).response.run_id)
    elif action == "loop":  # until killed
        for n in itertools.count():
            ack(run=engine.activate(PROJECT, QUERIES[n % len(QUERIES)]).response.run_id)
    elif action == "fail":
        try:
            engine.activate(PROJECT, QUERIES[0])
        except RetrievalFailed as exc:
            ack(failed=exc.run_id)
    elif action == "case":
        for run_id in args:
            ack(case=engine.create_evaluation_case(run_id).case_id, run=run_id)
    elif action == "judge":
        case_id = args[0]
        version = engine.evaluations().get_case(case_id).judgment_version
        for _ in range(3):
            judged = engine.replace_evaluation_judgments(case_id, version, judgments_for(engine, case_id, version + 1))
            version = judged.version
            ack(judged=version)
    elif action == "clear":
        ack(cleared=engine.clear_runs().deleted_runs)
    elif action == "import":
        result = engine.import_evaluation_set(Path(args[0]).read_bytes())
        ack(imported=list(result.cases_added))
    elif action == "move":
        ack(moved=engine.move_project_storage(PROJECT, args[0]).location)
    elif action == "noop":  # bootstrap (and its recovery) only
        pass
    else:
        raise SystemExit(f"unknown action {action!r}")
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
