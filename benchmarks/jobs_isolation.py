"""Activations while operator jobs run (issue 30, item 2): through the real daemon, activation
latency alone and while a tuning of 2,000 cases, a fixture import and storage moves run at once.

The jobs run in child processes of the daemon (``entrypoints/daemon/jobs.py``), off its engine
lock; before, each held the lock and every activation waited for it (minutes under one large
tuning). Rounds alternate idle and busy, so drift in the shared machine's load hits both; the
p95 ratio's 95% interval is a bootstrap over each phase's activations.

Then the import alone (issue 31): the daemon process's own CPU seconds for one import (its job's
process not counted), and activations while one runs. Before, the daemon decoded the fixture's
JSON and converted it (seconds of its GIL, beside every activation) and pickled the document to
the job; now it hands the job the body's bytes. ``daemon_work_ms`` times both ways of that work on
the same fixture in this process.

The import is sent as its request's bytes, encoded once beforehand, as a client in a process of
its own would send it: ``DaemonClient.import_evaluation_set`` parses a fixture file and encodes
the request again, seconds of this process's GIL that stalled the thread timing activations (a
measurement of this process, not of the daemon; the first runs' 2.9 s outlier included it).
"""

from __future__ import annotations

import os
import pickle
import random
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import measured, percentile, scratch_dir, write_result
from benchmarks.synthetic import cranfield_queries, write_synthetic_memory

NAME = "jobs_isolation"
PROJECT = "bench"
UNITS = 1_000
IMPORTED_CASES = 300  # the fixture a busy round imports (all present already: verified, kept)
RESAMPLES = 2_000


def _activations(client: Any, queries: list[str], until: Any, start: int) -> list[float]:
    """Activation latencies (ms, as the client sees them) until ``until()`` is true."""
    out: list[float] = []
    i = start
    while not until():
        t0 = time.perf_counter()
        client.activate_memory(PROJECT, queries[i % len(queries)] + " ?" * (i // len(queries)))
        out.append((time.perf_counter() - t0) * 1000)
        i += 1
    return out


def _import(home: Path, body: bytes) -> None:
    """Post an import's request bytes as they are (no parsing or encoding in this process)."""
    from memory_core.entrypoints.bootstrap import resolve_home
    from memory_core.entrypoints.daemon import paths
    from memory_core.entrypoints.daemon.transport import UnixSocketHTTP

    http = UnixSocketHTTP(paths.socket_path_for(resolve_home(home)), timeout=1800, connect_timeout=5.0)
    try:
        reply = http.post("/v1/import_evaluation_set", content=body, headers={"content-type": "application/json"})
    finally:
        http.close()
    if reply.status_code != 200:
        raise RuntimeError(f"the import failed ({reply.status_code}): {reply.content[:500]!r}")


def _request(fixture: bytes) -> bytes:
    """import_evaluation_set's request body around a fixture file's bytes."""
    return b'{"fixture":' + fixture + b"}"


def _busy_round(home: Path, work: Path, fixture: bytes, round_no: int) -> tuple[threading.Event, dict[str, float]]:
    """Start the tuning, the import and the moves, each on its own client; set when all ended."""
    from memory_core.entrypoints.daemon.client import DaemonClient

    done = threading.Event()
    took: dict[str, float] = {}

    def timed(name: str, call: Any) -> None:
        with DaemonClient.running(home, timeout=1800) as client:  # type: ignore[union-attr]
            t0 = time.perf_counter()
            call(client)
            took[name] = round(time.perf_counter() - t0, 2)

    def moves(client: Any) -> None:
        for k in range(3):
            client.move_project_storage(PROJECT, work / f"storage-{round_no}-{k}")

    jobs = [
        threading.Thread(target=timed, args=("tune_s", lambda c: c.tune_project(PROJECT, include_unreviewed=True))),
        threading.Thread(target=timed, args=("import_s", lambda _: _import(home, _request(fixture)))),
        threading.Thread(target=timed, args=("moves_s", moves)),
    ]
    for job in jobs:
        job.start()

    def wait() -> None:
        for job in jobs:
            job.join()
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    return done, took


def _cpu_s(pid: int) -> float:
    """The process's own user and system CPU seconds (its children's not counted)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _import_alone(proc: Any, client: Any, home: Path, fixture: bytes, queries: list[str],
                  start: int) -> dict[str, Any]:  # fmt: skip
    """One import with nothing else running: the daemon's CPU seconds for it; then another with
    activations beside it (their latencies)."""
    body = _request(fixture)
    cpu0, t0 = _cpu_s(proc.pid), time.perf_counter()
    _import(home, body)
    took, cpu = time.perf_counter() - t0, _cpu_s(proc.pid) - cpu0
    done = threading.Event()

    def run() -> None:
        try:
            _import(home, body)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    beside = _activations(client, queries, done.is_set, start)
    latencies = {"n": len(beside), "p50": percentile(beside, 50), "p95": percentile(beside, 95), "max": max(beside)}
    return {"import_s": round(took, 2), "daemon_cpu_s": round(cpu, 3), "activations_ms": latencies}


def _daemon_work_ms(fixture: bytes) -> dict[str, float]:
    """The daemon's part of an import, both ways, on this fixture (CPU ms, best of 3): decoding
    and converting the request and pickling the document to the job (before), or pickling the
    body's bytes (now). The request's body as a client sends it."""
    from memory_core.entrypoints.daemon import api
    from memory_core.entrypoints.wire_input import decode_json

    body = _request(fixture)
    converter = api.make_converter()

    def decoded() -> None:
        request = api.structure(converter, decode_json(body), api.ImportEvaluationSetRequest)
        pickle.dumps(("import_evaluation_set", (request.fixture.document,), {}), protocol=pickle.HIGHEST_PROTOCOL)

    def undecoded() -> None:
        pickle.dumps(("import_evaluation_set", (bytes(body),), {}), protocol=pickle.HIGHEST_PROTOCOL)

    def best(work: Any) -> float:
        times = []
        for _ in range(3):
            t0 = time.process_time()
            work()
            times.append((time.process_time() - t0) * 1000)
        return round(min(times), 1)

    return {"decoded": best(decoded), "undecoded": best(undecoded)}


def _p95_ratio_interval(busy: list[float], idle: list[float], seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    ratios = sorted(
        percentile(rng.choices(busy, k=len(busy)), 95) / percentile(rng.choices(idle, k=len(idle)), 95)
        for _ in range(RESAMPLES)
    )
    return ratios[int(0.025 * RESAMPLES)], ratios[int(0.975 * RESAMPLES) - 1]


def run(quick: bool) -> dict[str, Any]:
    from benchmarks.api_overhead import start_daemon, stop_daemon
    from benchmarks.evaluation_scale import judgments_for
    from benchmarks.recording_overhead import index_folder, loadavg

    cases = 200 if quick else 2_000
    rounds = 1 if quick else 2
    idle_s = 10.0 if quick else 20.0
    queries = cranfield_queries()
    rng = random.Random(0)
    with scratch_dir("jobs") as work:
        memory = write_synthetic_memory(work / "memory", UNITS)
        print(f"   indexing, then {cases:,} judged cases", flush=True)
        engine = index_folder(work / "home", PROJECT, memory.folder)
        try:
            case_ids = []
            for i in range(cases):
                activation = engine.activate(PROJECT, queries[i % len(queries)])
                case = engine.create_evaluation_case(activation.response.run_id)
                engine.replace_evaluation_judgments(case.case_id, 0, judgments_for(activation, rng))
                case_ids.append(case.case_id)
            fixture = engine.export_evaluation_set(case_ids=case_ids[:IMPORTED_CASES])
        finally:
            engine.close()
        proc, client = start_daemon(work / "home")
        load = [loadavg()]
        try:
            for i in range(50):  # warm: models loaded, generation open
                client.activate_memory(PROJECT, queries[i])
            idle: list[float] = []
            busy: list[float] = []
            took: list[dict[str, float]] = []
            for r in range(rounds):
                print(f"   round {r + 1}: idle {idle_s:.0f} s", flush=True)
                deadline = time.monotonic() + idle_s
                idle += _activations(client, queries, lambda d=deadline: time.monotonic() > d, len(idle) + len(busy))
                print(f"   round {r + 1}: tuning {cases:,} cases, importing {IMPORTED_CASES}, 3 moves", flush=True)
                done, round_took = _busy_round(work / "home", work, fixture, r)
                busy += _activations(client, queries, done.is_set, len(idle) + len(busy))
                took.append(round_took)
                load.append(loadavg())
            print("   the import alone, then beside activations", flush=True)
            alone = _import_alone(proc, client, work / "home", fixture, queries, len(idle) + len(busy))
            load.append(loadavg())
        finally:
            client.close()
            stop_daemon(proc)
    low, high = _p95_ratio_interval(busy, idle)
    result = {
        "quick": quick,
        "cases": cases,
        "units": UNITS,
        "imported_cases": IMPORTED_CASES,
        "fixture_bytes": len(fixture),
        "rounds": rounds,
        "idle_ms": {"n": len(idle), "p50": percentile(idle, 50), "p95": percentile(idle, 95), "max": max(idle)},
        "busy_ms": {"n": len(busy), "p50": percentile(busy, 50), "p95": percentile(busy, 95), "max": max(busy)},
        "p95_ratio": percentile(busy, 95) / percentile(idle, 95),
        "p95_ratio_ci95": [low, high],
        "p50_ratio": percentile(busy, 50) / percentile(idle, 50),
        "jobs_s": took,
        "import_alone": alone,
        "daemon_work_ms": _daemon_work_ms(fixture),
        "loadavg_1m": load,
    }
    return write_result(NAME, result)


def render(result: dict[str, Any]) -> str:
    idle, busy = result["idle_ms"], result["busy_ms"]
    low, high = result["p95_ratio_ci95"]
    jobs = "; ".join(f"round {i + 1}: " + ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in sorted(t.items()))
                     for i, t in enumerate(result["jobs_s"]))  # fmt: skip
    return f"""## Activations while operator jobs run

{measured(result)}. Through the real daemon's socket, a 1,000-unit synthetic project: activation
latency (as the client sees it) alone, and while a tuning over {result["cases"]:,} cases (default grid), an
import of a {result["imported_cases"]}-case fixture ({result["fixture_bytes"] / 2**20:.1f} MiB) and three storage moves
run at once; {result["rounds"]} idle and {result["rounds"]} busy rounds, alternating. The jobs run in child
processes of the daemon, off its engine lock (issue 30; before, each held every activation).

| | activations | p50 | p95 | max |
|---|---:|---:|---:|---:|
| idle | {idle["n"]} | {idle["p50"]:.1f} ms | {idle["p95"]:.1f} ms | {idle["max"]:.1f} ms |
| jobs running | {busy["n"]} | {busy["p50"]:.1f} ms | {busy["p95"]:.1f} ms | {busy["max"]:.1f} ms |

p95 with jobs running / idle: **{result["p95_ratio"]:.2f}x** (95% interval {low:.2f}-{high:.2f}; goal: at most 2x);
p50 {result["p50_ratio"]:.2f}x. Jobs took: {jobs}. The machine was busy besides (1-minute load average
{min(result["loadavg_1m"]):.1f}-{max(result["loadavg_1m"]):.1f} on 2 cores), which the alternating rounds share.
{_render_alone(result)}"""


def _render_alone(result: dict[str, Any]) -> str:
    alone, work = result.get("import_alone"), result.get("daemon_work_ms")
    if alone is None or work is None:  # a result from before these were measured
        return ""
    beside = alone["activations_ms"]
    return f"""
The import alone (issue 31): the daemon hands its job the request's body undecoded, and the job's
process decodes and checks it. Each import here is its request's bytes, encoded beforehand, as a
client in a process of its own sends it (earlier runs parsed and re-encoded the fixture in the very
process timing activations, whose GIL then stalled them: part of their maximum). The daemon's
own CPU for one import: {alone["daemon_cpu_s"]:.2f} s (the import took {alone["import_s"]:.1f} s).
Its part of that work, timed here on this fixture: decoding and converting the request and
pickling the document to the job (as before) {work["decoded"]:,.0f} ms of CPU, pickling the
body's bytes (now) {work["undecoded"]:,.0f} ms. Activations beside an import alone:
{beside["n"]}, p50 {beside["p50"]:.1f} ms, p95 {beside["p95"]:.1f} ms, max {beside["max"]:.1f} ms.
"""
