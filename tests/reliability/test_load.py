"""Bounded load from several processes against the real daemon on its Unix socket.

Four client processes (two per project) each send a fixed number of activations, with a Run
listing now and then, all at once. Every request must be answered without an error, every answer
must carry its own run id, and afterwards each project must hold exactly one succeeded Run per
answer, each whole (its stored candidates match its count); the database must pass
``PRAGMA integrity_check`` once the daemon has stopped. The latency percentiles are reported
(``record_property``, and printed with ``-s``); the figures with 8 clients for a longer time are
the API benchmark's (docs/performance.md).
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from benchmarks.api_overhead import listed_run_ids
from memory_core.adapters.sqlite.database import open_database
from memory_core.adapters.system.home import HomeLayout
from memory_core.domain.model import Layer, Source
from memory_core.runs.records import SUCCEEDED, RunFilter
from tests.daemon.test_server import Daemon, memory_folder

pytestmark = pytest.mark.slow

CLIENTS = 4
PROJECTS = ("load-a", "load-b")
REQUESTS_PER_CLIENT = 15
QUERIES = ["deploy rollback", "advisory locks idempotency", "helm upgrade", "replay the outbox", "printer"]


def client_process(home: str, project: str, requests: int, start_at: float) -> dict[str, Any]:
    """One client: ``requests`` activations in a row, listing the project's Runs every fifth."""
    from memory_core.entrypoints.daemon.client import DaemonClient

    latencies: list[float] = []
    run_ids: list[str | None] = []
    errors: list[str] = []
    with DaemonClient.for_home(home, timeout=120) as client:
        client.runtime_status()  # connected before the others start
        while time.time() < start_at:
            time.sleep(0.002)
        for i in range(requests):
            t0 = time.perf_counter()
            try:
                run_ids.append(client.activate_memory(project, f"{QUERIES[i % len(QUERIES)]} {i}").run_id)
                if i % 5 == 4:
                    client.list_retrieval_runs(RunFilter(project_id=project), limit=20)
            except Exception as exc:  # every one is reported by the test, which wants none
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
            latencies.append((time.perf_counter() - t0) * 1000)
    return {"project": project, "run_ids": run_ids, "errors": errors, "latencies": latencies}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    base = tmp_path_factory.mktemp("load")
    running = Daemon(base / "home", base / "daemon.log")
    try:
        source = memory_folder(base / "memory")
        for project in PROJECTS:
            running.client.add_project(project, [Source(str(source), Layer.LOCAL)])
            running.client.index_project(project)
        yield running
    finally:
        running.stop()


def test_several_client_processes_get_every_answer_and_one_run_each(daemon: Daemon, record_property: Any) -> None:
    context = multiprocessing.get_context("spawn")  # never fork a process that imported torch
    with ProcessPoolExecutor(CLIENTS, mp_context=context) as pool:
        start_at = time.time() + 5.0  # time for every client process to start and connect
        futures = [
            pool.submit(client_process, str(daemon.home), PROJECTS[i % len(PROJECTS)], REQUESTS_PER_CLIENT, start_at)
            for i in range(CLIENTS)
        ]
        results = [f.result(timeout=600) for f in futures]

    assert [e for r in results for e in r["errors"]] == []
    returned = {p: [rid for r in results if r["project"] == p for rid in r["run_ids"]] for p in PROJECTS}
    for project, run_ids in returned.items():
        assert len(run_ids) == CLIENTS // len(PROJECTS) * REQUESTS_PER_CLIENT
        assert None not in run_ids and len(set(run_ids)) == len(run_ids)  # one Run each, none shared
        runs = listed_run_ids(daemon.client, project)
        assert sorted(r.run_id for r in runs) == sorted(run_ids)  # and no other Run
        assert {r.status for r in runs} == {SUCCEEDED}
        for run_id in run_ids[:: max(1, len(run_ids) // 5)]:  # a sample, read whole
            detail = daemon.client.get_retrieval_run(run_id)
            assert len(detail.candidates) == detail.summary.candidate_count > 0

    latencies = sorted(x for r in results for x in r["latencies"])
    p50, p95 = statistics.median(latencies), latencies[int(0.95 * (len(latencies) - 1))]
    record_property("load_latency_ms", {"p50": round(p50, 1), "p95": round(p95, 1), "requests": len(latencies)})
    print(f"\n{len(latencies)} requests from {CLIENTS} processes: p50 {p50:.1f} ms, p95 {p95:.1f} ms")

    assert daemon.stop() == 0
    conn = open_database(HomeLayout.at(daemon.home).db_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("SELECT count(*) FROM retrieval_runs WHERE status = 'running'").fetchall() == [(0,)]
    finally:
        conn.close()
