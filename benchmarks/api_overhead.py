"""API and MCP overhead, load from 8 concurrent clients, daemon RSS (issues 6 and 8).

A real daemon (``python -m memory_core --home H serve``, started as ``memcore mcp`` starts it) on
its Unix socket serves a ~1,000-unit synthetic project. One loop then runs each query three ways,
rotating the order: in process (``Engine.activate`` on the same home, recorded as the daemon
records), through ``DaemonClient``, and through ``memcore mcp`` driven by the official MCP stdio
client (which forwards to the same daemon). Then 8 client processes, each with its own
``DaemonClient``, call ``activate_memory`` for a bounded time; every answer's ``run_id`` is
collected and checked against ``list_retrieval_runs`` (one project per two clients keeps each
under the 500-Run retention cap). The daemon's RSS is read from ``/proc/<pid>/status``.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, measured, percentile, write_result
from benchmarks.synthetic import cranfield_queries, write_synthetic_memory

NAME = "api_overhead"
PROJECT = "bench"
UNITS = 1_000
CLIENTS = 8
CLIENTS_PER_PROJECT = 2
WARMUP = 5
START_TIMEOUT_S = 120.0


def proc_memory(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak) of ``pid`` in MiB."""
    out = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    return out


class RssSampler:
    """The largest VmRSS of a process seen while sampling (every ``interval_s``)."""

    def __init__(self, pid: int, interval_s: float = 0.2) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, proc_memory(self.pid)["VmRSS"])

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def stats(values: Sequence[float]) -> dict[str, float]:
    return {"p50": percentile(list(values), 50), "p95": percentile(list(values), 95), "mean": statistics.fmean(values)}


# -- the daemon ---------------------------------------------------------------------------------
def start_daemon(home: Path, *extra_args: str) -> tuple[subprocess.Popen[bytes], Any]:
    from memory_core.entrypoints.daemon import launcher
    from memory_core.entrypoints.daemon.client import DaemonClient

    proc = launcher.spawn(home, extra_args)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        client = DaemonClient.running(home, timeout=120)
        if client is not None:
            return proc, client
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = launcher.log_path(home).read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the daemon did not start (status {proc.poll()}):\n{tail}")
        time.sleep(0.1)


def stop_daemon(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def history_modes(home: Path, queries: list[str], duration_s: float) -> dict[str, Any]:
    """The concurrent load against a fresh daemon per round, traces written behind the answer
    (the default) or before it (``--sync-history``), in ABBA order: throughput per mode."""
    rounds = ("behind", "sync", "sync", "behind") * 2
    totals: dict[str, dict[str, float]] = {m: {"requests": 0, "seconds": 0.0} for m in ("behind", "sync")}
    per_round: list[float] = []
    whole = True
    for mode in rounds:
        proc, client = start_daemon(home, *(["--sync-history"] if mode == "sync" else []), "--no-ui")
        try:
            with client:
                pid = client.runtime_status().pid
                for p in [f"load-{i}" for i in range(CLIENTS // CLIENTS_PER_PROJECT)]:
                    client.clear_retrieval_runs(p)  # each round counts its Runs under the retention cap
                    client.activate_memory(p, queries[0])  # warm: model and project loaded
                loaded = concurrent_load(home, client, pid, queries, duration_s)
        finally:
            stop_daemon(proc)
        totals[mode]["requests"] += loaded["requests"]
        totals[mode]["seconds"] += loaded["duration_s"]
        per_round.append(loaded["requests"] / loaded["duration_s"])
        whole = whole and loaded["one_run_per_request"] and not loaded["errors"]
    per_s = {m: t["requests"] / t["seconds"] for m, t in totals.items()}
    return {
        "rounds": list(rounds),
        "throughput_per_s": per_s,
        "ratio_behind_over_sync": per_s["behind"] / per_s["sync"],
        "per_round_per_s": per_round,
        "one_run_per_request_no_errors": whole,
    }


# -- one loop, three ways -----------------------------------------------------------------------
async def _three_ways(home: Path, engine: Any, client: Any, queries: list[str]) -> dict[str, Any]:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memory_core", "--home", str(home), "mcp"],
        cwd=str(ROOT),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lat: dict[str, list[float]] = {"in_process": [], "daemon": [], "mcp": []}
    run_ids: list[str] = []
    with open(os.devnull, "w") as errlog:
        t0 = time.perf_counter()
        async with stdio_client(server, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            mcp_start_s = time.perf_counter() - t0

            async def via_mcp(q: str) -> str:
                result = await session.call_tool("activate_memory", {"project": PROJECT, "query": q})
                if result.is_error:
                    raise RuntimeError(f"MCP call failed: {result.content}")
                return str(result.structured_content["run_id"])

            for q in queries[:WARMUP]:
                engine.activate(PROJECT, q)
                client.activate_memory(PROJECT, q)
                await via_mcp(q)
            for i, q in enumerate(queries[WARMUP:]):
                order = ("in_process", "daemon", "mcp")[i % 3 :] + ("in_process", "daemon", "mcp")[: i % 3]
                for way in order:
                    t0 = time.perf_counter()
                    if way == "in_process":
                        run_id = engine.activate(PROJECT, q).response.run_id
                    elif way == "daemon":
                        run_id = client.activate_memory(PROJECT, q).run_id
                    else:
                        run_id = await via_mcp(q)
                    lat[way].append((time.perf_counter() - t0) * 1000)
                    run_ids.append(str(run_id))
    return {"latency": lat, "run_ids": run_ids, "mcp_start_s": mcp_start_s}


# -- load ---------------------------------------------------------------------------------------
def load_worker(home: str, project: str, queries: list[str], start_at: float, duration_s: float) -> dict[str, Any]:
    """One client process: activate_memory in a loop from ``start_at`` for ``duration_s``."""
    from memory_core.entrypoints.daemon.client import DaemonClient

    latencies: list[float] = []
    run_ids: list[str] = []
    errors: list[str] = []
    with DaemonClient.for_home(home, timeout=120) as client:
        client.runtime_status()  # connected before the clock starts
        while time.time() < start_at:
            time.sleep(0.002)
        began = time.time()
        i = 0
        while time.time() < start_at + duration_s:
            q = queries[i % len(queries)]
            i += 1
            t0 = time.perf_counter()
            try:
                response = client.activate_memory(project, q)
                run_ids.append(str(response.run_id))
            except Exception as exc:  # counted and reported: the figure must be 0
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
            latencies.append((time.perf_counter() - t0) * 1000)
        ended = time.time()
    return {
        "project": project,
        "latencies": latencies,
        "run_ids": run_ids,
        "errors": errors,
        "began": began,
        "ended": ended,
    }


def listed_run_ids(client: Any, project: str) -> list[Any]:
    from memory_core.runs.records import RunFilter

    runs: list[Any] = []
    cursor = None
    while True:
        page = client.list_retrieval_runs(RunFilter(project_id=project), limit=200, cursor=cursor)
        runs.extend(page.runs)
        cursor = page.next_cursor
        if cursor is None:
            return runs


def concurrent_load(home: Path, client: Any, pid: int, queries: list[str], duration_s: float) -> dict[str, Any]:
    projects = [f"load-{i}" for i in range(CLIENTS // CLIENTS_PER_PROJECT)]
    before = {p: len(listed_run_ids(client, p)) for p in projects}
    context = multiprocessing.get_context("spawn")  # never fork a process holding a JVM and torch
    with ProcessPoolExecutor(CLIENTS, mp_context=context) as pool, RssSampler(pid) as sampler:
        start_at = time.time() + 8.0  # time for every worker to start and connect
        futures = [
            pool.submit(load_worker, str(home), projects[i // CLIENTS_PER_PROJECT],
                        queries[i::CLIENTS] + queries, start_at, duration_s)
            for i in range(CLIENTS)
        ]  # fmt: skip
        results = [f.result() for f in futures]
    memory = proc_memory(pid)
    returned: dict[str, list[str]] = {p: [] for p in projects}
    for r in results:
        returned[r["project"]].extend(r["run_ids"])
    per_project = {}
    for p in projects:
        runs = listed_run_ids(client, p)
        listed = {r.run_id for r in runs}
        per_project[p] = {
            "before": before[p],
            "requests": len(returned[p]),
            "distinct_run_ids": len(set(returned[p])),
            "listed_after": len(runs),
            "all_returned_listed": set(returned[p]) <= listed,
            "succeeded": sum(r.status == "succeeded" for r in runs if r.run_id in set(returned[p])),
        }
    latencies = [x for r in results for x in r["latencies"]]
    errors = [e for r in results for e in r["errors"]]
    span = max(r["ended"] for r in results) - min(r["began"] for r in results)
    requests = sum(len(r["latencies"]) for r in results)
    one_run_each = all(
        v["requests"] == v["distinct_run_ids"] == v["succeeded"] == v["listed_after"] - v["before"]
        and v["all_returned_listed"]
        for v in per_project.values()
    )
    return {
        "clients": CLIENTS,
        "duration_s": round(span, 2),
        "requests": requests,
        "throughput_per_s": requests / span,
        "errors": len(errors),
        "error_samples": errors[:5],
        "latency_ms": stats(latencies),
        "per_project": per_project,
        "one_run_per_request": one_run_each,
        "rss_peak_sampled_mib": sampler.peak,
        "rss_after_mib": memory["VmRSS"],
        "hwm_mib": memory["VmHWM"],
    }


def three_ways_main(home: str, loops: int, out: str) -> int:
    """The three-way loop, in a process of its own session (see ``run``); JSON to ``out``."""
    import json

    import anyio

    from memory_core.entrypoints.bootstrap import bootstrap
    from memory_core.entrypoints.daemon.client import DaemonClient

    queries = cranfield_queries(WARMUP + loops)
    engine = bootstrap(home)  # recorded, as the daemon records
    try:
        with DaemonClient.for_home(home, timeout=120) as client:
            ways = anyio.run(_three_ways, Path(home), engine, client, queries)
    finally:
        engine.close()
    Path(out).write_text(json.dumps(ways), encoding="utf-8")
    return 0


def run(quick: bool) -> dict[str, Any]:
    import json

    from benchmarks.recording_overhead import index_folder, loadavg
    from memory_core.domain.model import Source

    os.umask(0o077)
    loops = 40 if quick else 150
    duration_s = 5.0 if quick else 10.0
    queries = cranfield_queries(225)
    projects = [f"load-{i}" for i in range(CLIENTS // CLIENTS_PER_PROJECT)]
    # A short base directory: the socket path must stay under 100 bytes.
    with tempfile.TemporaryDirectory(prefix="mcb-", dir="/tmp") as tmp:
        work = Path(tmp)
        home = work / "home"
        memory = write_synthetic_memory(work / "memory", UNITS)
        print("   indexing", flush=True)
        engine = index_folder(home, PROJECT, memory.folder)
        try:
            for p in projects:
                engine.add_project(p, [Source(str(memory.folder))])
                engine.index(p)
        finally:
            engine.close()
        print("   starting the daemon", flush=True)
        t0 = time.perf_counter()
        proc, client = start_daemon(home)
        try:
            with client:
                pid = client.runtime_status().pid
                client.activate_memory(PROJECT, queries[0])
                first_answer_s = time.perf_counter() - t0
                for q in queries[1:WARMUP]:
                    client.activate_memory(PROJECT, q)
                for p in projects:
                    client.activate_memory(p, queries[0])
                time.sleep(1.0)
                idle = proc_memory(pid)
                print("   in process vs daemon vs MCP", flush=True)
                load = [loadavg()]
                # In a new session, like the daemon (and the MCP server, which the SDK starts so):
                # with Linux autogroup scheduling each session gets its own CPU share, and a loaded
                # machine would otherwise favour the daemon over the in-process engine.
                subprocess.run(
                    [sys.executable, "-m", "benchmarks.api_overhead", "--three-ways", str(home), str(loops),
                     str(work / "ways.json")],
                    cwd=ROOT, check=True, start_new_session=True, stdout=subprocess.DEVNULL,
                )  # fmt: skip
                ways = json.loads((work / "ways.json").read_text(encoding="utf-8"))
                load.append(loadavg())
                print(f"   {CLIENTS} concurrent clients for {duration_s:g} s", flush=True)
                loaded = concurrent_load(home, client, pid, queries, duration_s)
                load.append(loadavg())
                three_ids = set(ways["run_ids"])
                listed = sum(1 for r in listed_run_ids(client, PROJECT) if r.run_id in three_ids)
        finally:
            stop_daemon(proc)
        print(f"   {CLIENTS} clients, traces behind the answer vs --sync-history (ABBA)", flush=True)
        modes = history_modes(home, queries, duration_s)
        load.append(loadavg())
    in_proc, daemon, mcp = (ways["latency"][k] for k in ("in_process", "daemon", "mcp"))
    result = {
        "quick": quick,
        "units": UNITS,
        "loops": loops,
        "latency_ms": {"in_process": stats(in_proc), "daemon": stats(daemon), "mcp": stats(mcp)},
        "overhead_ms": {
            "daemon_p50": stats(daemon)["p50"] - stats(in_proc)["p50"],
            "daemon_p95": stats(daemon)["p95"] - stats(in_proc)["p95"],
            "mcp_p50": stats(mcp)["p50"] - stats(in_proc)["p50"],
            "mcp_p95": stats(mcp)["p95"] - stats(in_proc)["p95"],
            "daemon_median_paired": statistics.median(d - i for d, i in zip(daemon, in_proc, strict=True)),
            "mcp_median_paired": statistics.median(m - i for m, i in zip(mcp, in_proc, strict=True)),
        },
        "three_way_runs": {"requests": len(ways["run_ids"]), "distinct": len(three_ids), "listed": listed},
        "daemon_first_answer_s": round(first_answer_s, 2),
        "mcp_start_s": round(ways["mcp_start_s"], 2),
        "load": loaded,
        "history_modes": modes,
        "rss_mib": {
            "idle": idle["VmRSS"],
            "idle_hwm": idle["VmHWM"],
            "under_load_peak": loaded["rss_peak_sampled_mib"],
            "hwm_after_load": loaded["hwm_mib"],
        },
        "loadavg_1m": load,
    }
    return write_result(NAME, result)


def render(result: dict[str, Any]) -> str:
    lat, over, load, rss = result["latency_ms"], result["overhead_ms"], result["load"], result["rss_mib"]
    runs = result["three_way_runs"]
    modes = result["history_modes"]
    per_s = modes["throughput_per_s"]

    def row(label: str, key: str) -> str:
        v = lat[key]
        return f"| {label} | {v['p50']:.1f} | {v['p95']:.1f} | {v['mean']:.1f} |"

    verdict = "yes" if load["one_run_per_request"] else "**no**"
    lines = [
        "## API and MCP overhead, concurrent clients, daemon memory",
        "",
        measured(result)
        + f". A real daemon on its Unix socket serving a {result['units']:,}-unit synthetic project; every "
        "activation recorded (the default). The same queries run in process (`Engine.activate` on the same "
        "home, in a process of its own session as the daemon is: Linux gives each session its own CPU share), "
        "through `DaemonClient`, and through `memcore mcp` driven by the official MCP stdio client, "
        f"the order rotating query by query; {WARMUP} warm-up queries each, then {result['loops']}. Milliseconds, "
        "wall time at the caller. The machine is shared and noisy (1-minute load average "
        f"{'–'.join(f'{x:.1f}' for x in result['loadavg_1m'])} at the start, middle and end); the overheads are "
        "differences within one run.",
        "",
        "| path | p50 | p95 | mean |",
        "|---|---:|---:|---:|",
        row("in process", "in_process"),
        row("daemon (HTTP/JSON on the Unix socket)", "daemon"),
        row("MCP (stdio client → `memcore mcp` → daemon)", "mcp"),
        "",
        f"Overhead against in process: daemon {over['daemon_p50']:+.1f} ms at p50, {over['daemon_p95']:+.1f} ms at "
        f"p95 (median paired difference {over['daemon_median_paired']:+.1f} ms); MCP {over['mcp_p50']:+.1f} ms "
        f"at p50, {over['mcp_p95']:+.1f} ms at p95 (median paired {over['mcp_median_paired']:+.1f} ms). "
        f"{runs['requests']} requests, {runs['distinct']} distinct run ids, {runs['listed']} of them listed by "
        f"`list_retrieval_runs`. Daemon start to its first activation answered {result['daemon_first_answer_s']:.1f} s "
        f"(JVM, model, opening the project); MCP server start and `initialize` {result['mcp_start_s']:.1f} s.",
        "",
        f"**{load['clients']} concurrent clients** (separate processes, each with its own `DaemonClient`, "
        f"two per project) for {load['duration_s']:.1f} s: {load['requests']} requests, "
        f"**{load['throughput_per_s']:.1f} per second**, {load['errors']} errors, latency p50 "
        f"{load['latency_ms']['p50']:.0f} ms / p95 {load['latency_ms']['p95']:.0f} ms. Exactly one Run per "
        f"request (distinct run ids = requests = new Runs listed, all succeeded): {verdict}. The daemon runs "
        "one engine call at a time (its engine lock), so throughput is one over the activation time and "
        "latency grows with the queue.",
        "",
        f"**Where the trace is written, under the same load** (a fresh daemon per round of "
        f"{load['clients']} clients, rounds in ABBA order): traces right behind the answer (the "
        f"default) {per_s['behind']:.1f} requests per second, `--sync-history` {per_s['sync']:.1f}; ratio "
        f"{modes['ratio_behind_over_sync']:.3f} (per round: "
        + ", ".join(f"{m} {v:.1f}" for m, v in zip(modes["rounds"], modes["per_round_per_s"], strict=True))
        + "). With one engine call at a time, the trace written behind one answer overlaps the next "
        "activation instead of preceding it. Exactly one Run per request and no error in every round: "
        f"{'yes' if modes['one_run_per_request_no_errors'] else '**no**'}.",
        "",
        f"**Daemon memory** (`/proc/<pid>/status`): idle, warm (model and project loaded) VmRSS "
        f"{rss['idle']:.0f} MiB; under load peak sampled VmRSS {rss['under_load_peak']:.0f} MiB; VmHWM after "
        f"the load {rss['hwm_after_load']:.0f} MiB (the high-water mark includes start-up).",
        "",
    ]
    if load["errors"]:
        lines.insert(-1, "Errors seen: " + "; ".join(load["error_samples"]))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.api_overhead")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--three-ways", nargs=3, metavar=("HOME", "LOOPS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.three_ways:
        home, loops, out = args.three_ways
        return three_ways_main(home, int(loops), out)
    print(render(run(quick=args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
