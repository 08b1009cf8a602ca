"""Recording overhead (issue 4, brief §5/§9): the same warm activation recorded vs unrecorded.

One engine per project size; its recorder is switched between the real ``SqliteRunStore`` (the
default, wrapped to time its own ``start`` + ``complete`` calls) and ``NullRecorder``, alternating
(ABBA order) query by query so drift and the other jobs on the machine hit both alike. Latency is
the wall time of ``Engine.activate`` (the recorded ``total`` stage stops before ``complete``).
The Run history is filled to its retention cap first (500 unpinned Runs), so every recorded
activation also prunes the oldest Run, as in long use.

Indexing 10,000 units embeds them with MiniLM (about 6 minutes on 2 cores); the embeddings are
kept in a content-addressed cache under ``build/bench-cache/`` (git-ignored; keyed by model
revision and unit hash, so it cannot change a result), which makes a second run fast.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, ROOT, percentile, read_result, write_result
from benchmarks.synthetic import cranfield_queries, write_synthetic_memory

NAME = "recording_overhead"
PROJECT = "bench"
TARGET_UNITS = 10_000
TARGET_RATIO = 1.10
WARMUP = 10
RETENTION_CAP = 500
CACHE_DIR = ROOT / "build" / "bench-cache"


# -- shared by the other benchmarks of this suite ---------------------------------------------
def shared_embedding_cache() -> Any:
    """The suite's persistent embedding cache (content-addressed: only indexing time changes)."""
    from memory_core.adapters.embedding_cache import SqliteEmbeddingCache

    CACHE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    return SqliteEmbeddingCache(CACHE_DIR / "embeddings.db")


def index_folder(home: Path, project: str, folder: Path, **overrides: Any) -> Any:
    """``project add`` + ``index`` with the real adapters and the shared embedding cache; the
    engine is returned open (the caller closes it)."""
    from memory_core.entrypoints.bootstrap import bootstrap
    from memory_core.model import Source

    engine = bootstrap(home, embedding_cache=shared_embedding_cache(), **overrides)
    engine.add_project(project, [Source(str(folder))])
    engine.index(project)
    return engine


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


# -- the measurement --------------------------------------------------------------------------
class TimedRecorder:
    """Delegates to a RunRecorder and times its ``start`` and ``complete`` calls, as the activation
    sees them (the ``running`` insert and the prune happen on the store's writer thread)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.start_ms: list[float] = []
        self.complete_ms: list[float] = []

    def start(self, run: Any) -> str:
        t0 = time.perf_counter()
        try:
            return self.inner.start(run)  # type: ignore[no-any-return]
        finally:
            self.start_ms.append((time.perf_counter() - t0) * 1000)

    def complete(self, run_id: str, trace: Any) -> None:
        t0 = time.perf_counter()
        try:
            self.inner.complete(run_id, trace)
        finally:
            self.complete_ms.append((time.perf_counter() - t0) * 1000)

    def fail(self, run_id: str, failure: Any) -> None:
        self.inner.fail(run_id, failure)

    def clear(self) -> None:
        self.start_ms.clear()
        self.complete_ms.clear()

    def summary(self) -> dict[str, dict[str, float]]:
        both = [s + c for s, c in zip(self.start_ms, self.complete_ms, strict=True)]
        return {
            name: {"p50": percentile(v, 50), "p95": percentile(v, 95)}
            for name, v in (("total", both), ("start", self.start_ms), ("complete", self.complete_ms))
        }


def fill_history(engine: Any, count: int) -> None:
    """``count`` synthetic Runs (200 candidates each) on the project's current manifest."""
    from benchmarks.bench_recording import synthetic_candidates
    from memory_core.recording import RunStart, RunTrace

    generation = engine.catalog.current_generation(PROJECT)
    candidates = synthetic_candidates()
    store = engine.history
    for i in range(count):
        run_id = store.start(RunStart(PROJECT, f"filler {i}", "f" * 64, 1200, engine.now()))
        store.complete(
            run_id,
            RunTrace(
                effective_memory_hash=generation.effective_memory_hash,
                index_revision=generation.index_revision,
                revisions={"filler": "1"},
                candidates=candidates,
                latency_ms={"total": 1.0},
                warm=True,
                fragment_count=8,
                token_count=960,
                finished_at=engine.now(),
            ),
        )


def ratio_of_medians_ci(recorded: list[float], unrecorded: list[float], resamples: int = 2000) -> list[float]:
    """95 % percentile-bootstrap interval of p50(recorded) / p50(unrecorded), resampling the
    interleaved pairs together (seeded: the same data give the same interval)."""
    rng = random.Random(0)
    n = len(recorded)
    ratios = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        ratios.append(percentile([recorded[i] for i in picks], 50) / percentile([unrecorded[i] for i in picks], 50))
    ratios.sort()
    return [ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]]


def measure(engine: Any, queries: list[str]) -> dict[str, Any]:
    from memory_core.recording import NullRecorder

    recorded = TimedRecorder(engine.history)
    unrecorded = NullRecorder()
    for q in queries[:WARMUP]:
        for recorder in (recorded, unrecorded):
            engine.recorder = recorder
            engine.activate(PROJECT, q)
    recorded.clear()
    walls: dict[str, list[float]] = {"recorded": [], "unrecorded": []}
    candidates: list[float] = []
    load = [loadavg()]
    for i, q in enumerate(queries[WARMUP:]):
        order = ("recorded", "unrecorded") if i % 2 == 0 else ("unrecorded", "recorded")
        for mode in order:
            engine.recorder = recorded if mode == "recorded" else unrecorded
            t0 = time.perf_counter()
            activation = engine.activate(PROJECT, q)
            walls[mode].append((time.perf_counter() - t0) * 1000)
            assert (activation.response.run_id is not None) == (mode == "recorded")
        candidates.append(float(activation.response.totals["candidates"]))
    load.append(loadavg())
    engine.recorder = engine.history
    pairs = [r / u for r, u in zip(walls["recorded"], walls["unrecorded"], strict=True)]
    stats = {
        mode: {"p50": percentile(v, 50), "p95": percentile(v, 95), "mean": statistics.fmean(v)}
        for mode, v in walls.items()
    }
    return {
        "pairs": len(pairs),
        "wall_ms": stats,
        "ratio_p50": stats["recorded"]["p50"] / stats["unrecorded"]["p50"],
        "ratio_p50_ci95": ratio_of_medians_ci(walls["recorded"], walls["unrecorded"]),
        "ratio_p95": stats["recorded"]["p95"] / stats["unrecorded"]["p95"],
        "median_paired_ratio": statistics.median(pairs),
        "recorder_ms": recorded.summary(),
        "candidates_p50": percentile(candidates, 50),
        "loadavg_1m": load,
    }


def run(quick: bool) -> dict[str, Any]:
    os.umask(0o077)
    sizes = [1_000] if quick else [1_000, 3_000, 10_000]
    queries = cranfield_queries(WARMUP + (60 if quick else 200))
    rows = []
    with tempfile.TemporaryDirectory(prefix="memcore-bench-recording-") as tmp:
        work = Path(tmp)
        for units in sizes:
            memory = write_synthetic_memory(work / f"memory-{units}", units)
            print(f"   {units:,} units: indexing", flush=True)
            t0 = time.perf_counter()
            engine = index_folder(work / f"home-{units}", PROJECT, memory.folder)
            try:
                index_s = time.perf_counter() - t0
                fill_history(engine, RETENTION_CAP)
                print(f"   {units:,} units: measuring", flush=True)
                rows.append({"units": units, "index_s": round(index_s, 1), **measure(engine, queries)})
            finally:
                engine.close()
    target = next((r for r in rows if r["units"] == TARGET_UNITS), None)
    verdict = None
    if target is not None:
        verdict = {
            "ratio_p50": target["ratio_p50"],
            "ci95": target["ratio_p50_ci95"],
            "target": TARGET_RATIO,
            "met": target["ratio_p50"] <= TARGET_RATIO,
        }
    return write_result(NAME, {"quick": quick, "retention_cap_runs": RETENTION_CAP, "rows": rows, "target": verdict})


def _ci(row: dict[str, Any]) -> str:
    ci = row.get("ratio_p50_ci95")
    return f" ({ci[0]:.3f}–{ci[1]:.3f})" if ci else ""


def render(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        "## Recording overhead",
        "",
        f"Measured {m['date']} on {m['cpus']} CPUs ({m['processor']}, {m['platform']}, Python {m['python']})"
        + (", quick run" if result.get("quick") else "")
        + ". In process, one engine per synthetic project (`benchmarks/synthetic.py`), default profile; "
        "the same warm activations alternately recorded by the real `SqliteRunStore` and unrecorded "
        f"(`NullRecorder`), in ABBA order, after {WARMUP} warm-up pairs. The history starts at its retention "
        f"cap ({result['retention_cap_runs']} Runs), so each recorded activation also prunes the oldest Run. "
        "Latency is the wall time of `Engine.activate` in milliseconds; *recorder* is the time the activation "
        "spends inside `start` (hand the insert of the `running` Run and the prune past the cap to the store's "
        "writer thread, which does them while the pipeline ranks) + `complete` (wait for that insert if it is "
        "still pending, then the candidates and the terminal status in one transaction). The machine is "
        "shared and noisy (`load avg`: 1-minute load before and after); ratios come from interleaved pairs "
        "of the same run.",
        "",
        "| units | pairs | unrecorded p50 / p95 | recorded p50 / p95 | ratio of p50 (95% CI) | ratio of p95 "
        "| median paired ratio | recorder p50 / p95 | start / complete p50 | candidates p50 | load avg |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        w = r["wall_ms"]
        lines.append(
            f"| {r['units']:,} | {r['pairs']} | {w['unrecorded']['p50']:.1f} / {w['unrecorded']['p95']:.1f} "
            f"| {w['recorded']['p50']:.1f} / {w['recorded']['p95']:.1f} | {r['ratio_p50']:.3f}{_ci(r)} "
            f"| {r['ratio_p95']:.3f} | {r['median_paired_ratio']:.3f} "
            f"| {r['recorder_ms']['total']['p50']:.2f} / {r['recorder_ms']['total']['p95']:.2f} "
            f"| {r['recorder_ms']['start']['p50']:.2f} / {r['recorder_ms']['complete']['p50']:.2f} "
            f"| {r['candidates_p50']:.0f} "
            f"| {'–'.join(f'{x:.1f}' for x in r['loadavg_1m'])} |"
        )
    lines.append("")
    target = result.get("target")
    if target is None:
        lines.append(
            f"Target (overhead ≤ {TARGET_RATIO - 1:.0%} at {TARGET_UNITS:,} units): not measured in this run "
            "(the quick run stops at 1,000 units)."
        )
    else:
        state = "met" if target["met"] else "**not met**"
        lines.append(
            f"Target (overhead ≤ {TARGET_RATIO - 1:.0%} at {TARGET_UNITS:,} units, ratio of p50): {state}, "
            f"{target['ratio_p50']:.3f}."
        )
        ci = target.get("ci95")
        if ci and ci[0] <= TARGET_RATIO < ci[1]:
            lines[-1] += (
                f" The 95% interval ({ci[0]:.3f}–{ci[1]:.3f}) straddles the target: on this machine the "
                "verdict can flip between runs, so read it as about 10%, not as a margin."
            )
    growth = read_result("recording")
    if result["rows"]:
        recorder = ", ".join(
            f"{r['recorder_ms']['total']['p50']:.2f} ms at {r['units']:,} units" for r in result["rows"]
        )
        lines += ["", f"**Growth with corpus size.** The recorder's own p50 above: {recorder}."]
        if growth is not None:
            sizes = list(growth["sizes"].values())
            lines[-1] += (
                f" Isolated (`benchmarks/results/recording.json`, {growth['candidates']} candidates, "
                f"{growth['machine']['date']}): {sizes[0]['median_ms']:.2f} ms with a "
                f"{sizes[0]['resources']:,}-resource manifest vs {sizes[-1]['median_ms']:.2f} ms with "
                f"{sizes[-1]['resources']:,} resources, ratio {growth['ratio_of_medians']:.3f} (target ≤ "
                f"{growth['target_ratio']}): a Run refers to its manifest by hash, so its cost follows the "
                "number of candidates, not the corpus."
            )
    from benchmarks.plots import link

    lines += ["", link(NAME, "activation recorded vs unrecorded")]
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.recording_overhead")
    parser.add_argument("--quick", action="store_true")
    result = run(quick=parser.parse_args().quick)
    print(render(result))
    print(f"wrote {RESULTS / (NAME + '.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
