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
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, ROOT, measured, percentile, read_result, scratch_dir, write_result
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
    from memory_core.adapters.sqlite.embedding_cache import SqliteEmbeddingCache

    CACHE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    return SqliteEmbeddingCache(CACHE_DIR / "embeddings.db")


def index_folder(home: Path, project: str, folder: Path, **overrides: Any) -> Any:
    """``project add`` + ``index`` with the real adapters and the shared embedding cache; the
    engine is returned open (the caller closes it)."""
    from memory_core.domain.model import Source
    from memory_core.entrypoints.bootstrap import bootstrap

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
    from memory_core.runs.records import RunStart, RunTrace

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


MODES = ("unrecorded", "recorded", "recorded_sync")
BLOCK = 10  # activations per back-to-back block


def measure(engine: Any, queries: list[str], sync_store: Any) -> dict[str, Any]:
    """Three recorders over one engine, interleaved query by query in rotating order: none, the
    default store (trace written behind the answer) and ``sync_store`` (trace written before
    ``activate`` returns). Each timed activation starts with the writer idle (``settle`` between
    activations, untimed), as an agent's activations come between its model's turns; then
    back-to-back blocks of activations, timed through the last write, give the recorder's whole
    cost when activations queue up."""
    from memory_core.runs.records import NullRecorder

    store = engine.history
    timed = {"recorded": TimedRecorder(store), "recorded_sync": TimedRecorder(sync_store)}
    recorders: dict[str, Any] = {"unrecorded": NullRecorder(), **timed}
    for q in queries[:WARMUP]:
        for recorder in recorders.values():
            engine.recorder = recorder
            engine.activate(PROJECT, q)
            store.settle()
    for recorder in timed.values():
        recorder.clear()
    walls: dict[str, list[float]] = {mode: [] for mode in MODES}
    tails: list[float] = []  # what the writer still had to do when a recorded answer was back
    candidates: list[float] = []
    load = [loadavg()]
    for i, q in enumerate(queries[WARMUP:]):
        order = MODES[i % 3 :] + MODES[: i % 3]
        for mode in order if i % 2 == 0 else order[::-1]:
            engine.recorder = recorders[mode]
            t0 = time.perf_counter()
            activation = engine.activate(PROJECT, q)
            t1 = time.perf_counter()
            store.settle()
            if mode == "recorded":
                tails.append((time.perf_counter() - t1) * 1000)
            walls[mode].append((t1 - t0) * 1000)
            assert (activation.response.run_id is not None) == (mode != "unrecorded")
        candidates.append(float(activation.response.totals["candidates"]))
    back_to_back = _back_to_back(engine, store, {m: recorders[m] for m in ("unrecorded", "recorded")}, queries)
    load.append(loadavg())
    engine.recorder = store
    stats = {
        mode: {"p50": percentile(v, 50), "p95": percentile(v, 95), "mean": statistics.fmean(v)}
        for mode, v in walls.items()
    }
    unrecorded = walls["unrecorded"]
    return {
        "pairs": len(unrecorded),
        "wall_ms": stats,
        "ratio_p50": stats["recorded"]["p50"] / stats["unrecorded"]["p50"],
        "ratio_p50_ci95": ratio_of_medians_ci(walls["recorded"], unrecorded),
        "ratio_p95": stats["recorded"]["p95"] / stats["unrecorded"]["p95"],
        "median_paired_ratio": statistics.median(r / u for r, u in zip(walls["recorded"], unrecorded, strict=True)),
        "sync_ratio_p50": stats["recorded_sync"]["p50"] / stats["unrecorded"]["p50"],
        "sync_ratio_p50_ci95": ratio_of_medians_ci(walls["recorded_sync"], unrecorded),
        "write_behind_tail_ms": {"p50": percentile(tails, 50), "p95": percentile(tails, 95)},
        "back_to_back": back_to_back,
        "recorder_ms": timed["recorded"].summary(),
        "sync_recorder_ms": timed["recorded_sync"].summary(),
        "candidates_p50": percentile(candidates, 50),
        "loadavg_1m": load,
    }


def _back_to_back(engine: Any, store: Any, recorders: dict[str, Any], queries: list[str]) -> dict[str, Any]:
    """Blocks of ``BLOCK`` activations with no pause, recorded (default store, timed until its
    last write has landed) and unrecorded, in ABBA order: the ratio of their total times is what
    recording costs in all, wherever the work happens."""
    timed = queries[WARMUP:]
    totals: dict[str, float] = {"unrecorded": 0.0, "recorded": 0.0}
    blocks = [timed[k : k + BLOCK] for k in range(0, len(timed) - BLOCK + 1, BLOCK)]
    for i, block in enumerate(blocks):
        order = ("recorded", "unrecorded") if i % 2 == 0 else ("unrecorded", "recorded")
        for mode in order:
            engine.recorder = recorders[mode]
            t0 = time.perf_counter()
            for q in block:
                engine.activate(PROJECT, q)
            store.settle()
            totals[mode] += time.perf_counter() - t0
    count = len(blocks) * BLOCK
    return {
        "activations": count,
        "mean_ms": {mode: total / count * 1000 for mode, total in totals.items()},
        "ratio": totals["recorded"] / totals["unrecorded"],
    }


def run(quick: bool) -> dict[str, Any]:
    sizes = [1_000] if quick else [1_000, 3_000, 10_000]
    queries = cranfield_queries(WARMUP + (60 if quick else 200))
    with scratch_dir("recording") as work:
        rows = [_measure_size(work, units, queries) for units in sizes]
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


def _measure_size(work: Path, units: int, queries: list[str]) -> dict[str, Any]:
    """One row: a synthetic project of ``units`` units indexed (timed), its history filled to the
    retention cap, then ``measure``d."""
    from memory_core.adapters.sqlite.database import open_database
    from memory_core.adapters.sqlite.runs import SqliteRunStore

    memory = write_synthetic_memory(work / f"memory-{units}", units)
    print(f"   {units:,} units: indexing", flush=True)
    t0 = time.perf_counter()
    engine = index_folder(work / f"home-{units}", PROJECT, memory.folder)
    sync_store = SqliteRunStore(open_database(work / f"home-{units}" / "local.db"), write_behind=False)
    try:
        index_s = time.perf_counter() - t0
        fill_history(engine, RETENTION_CAP)
        print(f"   {units:,} units: measuring", flush=True)
        return {"units": units, "index_s": round(index_s, 1), **measure(engine, queries, sync_store)}
    finally:
        sync_store.close()
        engine.close()


def _ci(row: dict[str, Any]) -> str:
    ci = row.get("ratio_p50_ci95")
    return f" ({ci[0]:.3f}–{ci[1]:.3f})" if ci else ""


def render(result: dict[str, Any]) -> str:
    from benchmarks.plots import link

    lines = ["## Recording overhead", "", _method(result), "", *_table(result["rows"]), "", _verdict(result)]
    if result["rows"]:
        lines += ["", _growth(result)]
    lines += ["", link(NAME, "activation recorded vs unrecorded"), ""]
    return "\n".join(lines)


def _method(result: dict[str, Any]) -> str:
    return (
        measured(result)
        + ". In process, one engine per synthetic project (`benchmarks/synthetic.py`), default profile; "
        "the same warm activations unrecorded (`NullRecorder`), *recorded* by the real `SqliteRunStore` as "
        "the product runs it (the trace is written right behind the answer) and *recorded, sync* by a "
        "`SqliteRunStore(write_behind=False)` (`memcore serve --sync-history`: the trace is committed before "
        f"`activate` returns), interleaved query by query in rotating order after {WARMUP} warm-up rounds. "
        "Each timed activation starts with the store's writer idle (it is settled between activations, "
        "untimed), as an agent's activations come between its model's turns; *tail* is how long that "
        "settle waited after a recorded answer. *Back to back* runs blocks of "
        f"{BLOCK} activations with no pause, timed until the last write has landed: the recorder's whole "
        f"cost when activations queue up. The history starts at its retention cap ({result['retention_cap_runs']} "
        "Runs), so each recorded activation also prunes the oldest Run. Latency is the wall time of "
        "`Engine.activate` in milliseconds; *recorder* is the time the activation spends inside `start` "
        "(hand the `running` insert and the prune to the writer thread, which does them while the pipeline "
        "ranks) + `complete` (turn the candidates into rows, wait for that insert, queue the transaction "
        "or, sync, run it). The machine is shared and noisy (`load avg`: 1-minute load before and after); "
        "ratios come from interleaved measurements of the same run."
    )


def _table(rows: list[dict[str, Any]]) -> list[str]:
    head = [
        "| units | rounds | unrecorded p50 / p95 | recorded p50 / p95 | ratio of p50 (95% CI) | recorder p50 "
        "| tail p50 / p95 | recorded, sync p50 | sync ratio of p50 (95% CI) | sync recorder p50 "
        "| back to back: ms per activation, ratio | candidates p50 | load avg |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    return head + [_row(r) for r in rows]


def _row(r: dict[str, Any]) -> str:
    w = r["wall_ms"]
    b2b = r["back_to_back"]
    sync_ci = r["sync_ratio_p50_ci95"]
    return (
        f"| {r['units']:,} | {r['pairs']} | {w['unrecorded']['p50']:.1f} / {w['unrecorded']['p95']:.1f} "
        f"| {w['recorded']['p50']:.1f} / {w['recorded']['p95']:.1f} | {r['ratio_p50']:.3f}{_ci(r)} "
        f"| {r['recorder_ms']['total']['p50']:.2f} "
        f"| {r['write_behind_tail_ms']['p50']:.2f} / {r['write_behind_tail_ms']['p95']:.2f} "
        f"| {w['recorded_sync']['p50']:.1f} | {r['sync_ratio_p50']:.3f} ({sync_ci[0]:.3f}–{sync_ci[1]:.3f}) "
        f"| {r['sync_recorder_ms']['total']['p50']:.2f} "
        f"| {b2b['mean_ms']['recorded']:.1f} vs {b2b['mean_ms']['unrecorded']:.1f}, {b2b['ratio']:.3f} "
        f"| {r['candidates_p50']:.0f} "
        f"| {'–'.join(f'{x:.1f}' for x in r['loadavg_1m'])} |"
    )


def _verdict(result: dict[str, Any]) -> str:
    target = result.get("target")
    if target is None:
        return (
            f"Target (overhead ≤ {TARGET_RATIO - 1:.0%} at {TARGET_UNITS:,} units): not measured in this run "
            "(the quick run stops at 1,000 units)."
        )
    state = "met" if target["met"] else "**not met**"
    row = next(r for r in result["rows"] if r["units"] == TARGET_UNITS)
    ci = target.get("ci95")
    return (
        f"Target (overhead ≤ {TARGET_RATIO - 1:.0%} at {TARGET_UNITS:,} units, ratio of p50, as the product "
        f"runs): {state}, {target['ratio_p50']:.3f}"
        + (f" (95% CI {ci[0]:.3f}–{ci[1]:.3f})" if ci else "")
        + f". Committing the trace before answering (`--sync-history`) costs {row['sync_ratio_p50']:.3f}, "
        f"and back to back, where the writer's work competes with the next activation, recording costs "
        f"{row['back_to_back']['ratio']:.3f} in all: writing behind the answer takes the trace's "
        "transaction off the agent's wait, not off the machine."
    )


def _growth(result: dict[str, Any]) -> str:
    """The recorder's own cost by corpus size, beside the isolated figure (``bench_recording``)."""
    recorder = ", ".join(f"{r['recorder_ms']['total']['p50']:.2f} ms at {r['units']:,} units" for r in result["rows"])
    text = f"**Growth with corpus size.** The recorder's own p50 above: {recorder}."
    growth = read_result("recording")
    if growth is None:
        return text
    sizes = list(growth["sizes"].values())
    return text + (
        f" Isolated (`benchmarks/results/recording.json`, {growth['candidates']} candidates, "
        f"{growth['machine']['date']}): {sizes[0]['median_ms']:.2f} ms with a "
        f"{sizes[0]['resources']:,}-resource manifest vs {sizes[-1]['median_ms']:.2f} ms with "
        f"{sizes[-1]['resources']:,} resources, ratio {growth['ratio_of_medians']:.3f} (target ≤ "
        f"{growth['target_ratio']}): a Run refers to its manifest by hash, so its cost follows the "
        "number of candidates, not the corpus."
    )


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
