"""Indexing throughput, no-op and one-change re-index, peak RSS (issue 2's benchmark).

Every measured index runs in its own child process, so peak RSS (``wait4``'s ``ru_maxrss``) is
per job. A child loads the model and starts the JVM before it times ``Engine.index`` and reports
that load separately; stage times come from the progress callback's timestamps:

- scan: Effective Memory (walk, hash, override) up to the first chunked resource
- chunk: read, store blobs, chunk
- embed: embedding-cache lookup, MiniLM on the missing units, cache writes
- lexical: the Lucene index
- rest: vector index, unit table, publish, catalog, prune

Embed batching (issue 17): the Indexer embeds the missing units longest first across the whole
set; before, it embedded them 64 at a time in unit order (each call sorted its own 64). Both
strategies embed the same Cranfield units with the same fresh embedder (no cache), taking turns
over four disjoint subsets so other jobs on the machine slow both alike; ``python -m
benchmarks.indexing --batching`` runs only this comparison and keeps the rest of the saved result.

Inference paths (issue 17, item 3): the whole Cranfield index, each time in a fresh child process
and a fresh home (no embedding cache), with torch fp32 (the path when issue 17 was filed), ONNX
Runtime fp32 (the default of 4-5 December 2026) and ONNX int8 (the default since) taking turns,
round by round, so all see the same machine; ``python -m benchmarks.indexing --paths`` runs only
this comparison.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, machine, measured, read_result, scratch_dir, write_result
from benchmarks.synthetic import write_cranfield_markdown, write_synthetic_memory

NAME = "indexing"
PROJECT = "bench"
CLI_REPEATS = 3
NOT_MEASURED = (
    "50,000 units: not measured here. Embedding dominates ({minutes}), and the vector index switches "
    "from exact search to an HNSW graph above 20,000 units (its build adds about a minute at 1k vectors/s). "
    "The activation latency section does index a 50,000-unit project, through the suite's embedding "
    "cache, so its time is not an indexing figure."
)


# -- child side -------------------------------------------------------------------------------
class _Marks:
    """First and last timestamp of each progress stage."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        self.first.setdefault(stage, now)
        self.last[stage] = now


def _stages(marks: _Marks, start: float, end: float) -> dict[str, float]:
    if "chunk" not in marks.first or "lexical index" not in marks.first:
        return {}
    return {
        "scan": marks.first["chunk"] - start,
        "chunk": marks.last["chunk"] - marks.first["chunk"],
        "embed": marks.first["lexical index"] - marks.last["chunk"],
        "lexical": marks.last["lexical index"] - marks.first["lexical index"],
        "rest": end - marks.last["lexical index"],
    }


def _child(job: dict[str, Any]) -> dict[str, Any]:
    os.umask(0o077)
    started = time.perf_counter()
    from memory_core.adapters.search.jvm import ensure_jvm
    from memory_core.domain.model import Source
    from memory_core.entrypoints.bootstrap import bootstrap

    engine = bootstrap(job["home"], inference=job.get("inference"))
    if job.get("add_source"):
        engine.add_project(PROJECT, [Source(job["add_source"])])
    load = getattr(engine.embedder, "load", None)
    if load is not None:
        load()
    ensure_jvm()
    loaded = time.perf_counter()
    marks = _Marks()
    t0 = time.perf_counter()
    report = engine.index(PROJECT, progress=marks)
    t1 = time.perf_counter()
    out: dict[str, Any] = {
        "load_s": loaded - started,
        "index_s": t1 - t0,
        "status": report.status,
        "resources": report.resources,
        "units": report.units,
        "embedded": report.embedded,
        "reused_embeddings": report.reused_embeddings,
        "stages_s": _stages(marks, t0, t1),
    }
    current = engine.catalog.current_generation(PROJECT)
    if current is not None:  # explains units/s: MiniLM's cost grows with a unit's tokens
        units = engine.generations.load_units(Path(current.directory))
        out["mean_unit_tokens"] = sum(u.token_count for u in units) / max(1, len(units))
    if job.get("noop_after"):
        t2 = time.perf_counter()
        again = engine.index(PROJECT)
        out["noop_in_process_s"] = time.perf_counter() - t2
        out["noop_status"] = again.status
    engine.close()
    return out


# -- embed batching, before and after (same run, same embedder) ---------------------------------
BATCHING_SUBSETS = 4


def _cranfield_units() -> list[Any]:
    from benchmarks.cranfield_quality import Cranfield
    from memory_core.adapters.models.minilm import MiniLMTokenCounter
    from memory_core.retrieval.chunking import MarkdownChunker

    cranfield = Cranfield.load()
    chunker = MarkdownChunker(MiniLMTokenCounter())
    units = []
    for doc, (title, text) in cranfield.documents.items():
        units += chunker.chunk(f"{doc}.md", doc, Cranfield.markdown(title, text), "text/markdown")
    return units


def _embed_in_order(embedder: Any, units: list[Any]) -> None:
    """Before: 64 units per call in unit order (each call sorts its own 64 by length)."""
    from memory_core.services.indexing import EMBED_BATCH

    for start in range(0, len(units), EMBED_BATCH):
        embedder.embed_documents([u.search_text for u in units[start : start + EMBED_BATCH]])


def _embed_longest_first(embedder: Any, units: list[Any]) -> None:
    """After, as ``Indexer._embed`` does it: all missing units longest first, then 64 per call."""
    _embed_in_order(embedder, sorted(units, key=lambda u: -u.token_count))


def _batching(quick: bool) -> dict[str, Any]:
    from memory_core.adapters.models.minilm import MiniLMEmbedder

    units = _cranfield_units()
    if quick:  # each subset still spans several 64-unit calls, or both strategies make the same call
        units = units[: BATCHING_SUBSETS * 3 * 64]
    embedder = MiniLMEmbedder()
    embedder.load()
    embedder.embed_documents(["warm up"] * 4)
    strategies = {"in_order": _embed_in_order, "longest_first": _embed_longest_first}
    rates: dict[str, list[float]] = {k: [] for k in strategies}
    load_before = os.getloadavg()[0]
    for i in range(BATCHING_SUBSETS):
        subset = units[i::BATCHING_SUBSETS]
        for name in list(strategies) if i % 2 == 0 else list(strategies)[::-1]:
            t0 = time.perf_counter()
            strategies[name](embedder, subset)
            rates[name].append(len(subset) / (time.perf_counter() - t0))
    ratios = [a / b for a, b in zip(rates["longest_first"], rates["in_order"], strict=True)]
    return {
        "units": len(units),
        "mean_unit_tokens": sum(u.token_count for u in units) / len(units),
        "units_per_s": rates,
        "ratio_per_subset": ratios,
        "ratio_median": statistics.median(ratios),
        "loadavg_1m": [load_before, os.getloadavg()[0]],
        "machine": machine(),
    }


# -- parent side ------------------------------------------------------------------------------
# A small launcher spawns each measured process and reports its wall time and rusage. Linux
# carries the spawning process's high-water RSS into a child across exec, so a child spawned
# straight from this (large, model-holding) process would report this process's RSS as its own.
_LAUNCHER = """
import json, os, subprocess, sys, time
argv, cwd = json.loads(sys.argv[1]), sys.argv[2]
t0 = time.perf_counter()
proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
stderr = proc.stderr.read()
_, status, usage = os.wait4(proc.pid, 0)
proc.returncode = os.waitstatus_to_exitcode(status)
print(json.dumps({"wall_s": time.perf_counter() - t0, "maxrss_kib": usage.ru_maxrss,
                  "rc": proc.returncode, "stderr": stderr.decode(errors="replace")[-2000:]}))
"""


def _run_child(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of one child process."""
    launched = subprocess.run(
        [sys.executable, "-I", "-c", _LAUNCHER, json.dumps(argv), str(ROOT)],
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(launched.stdout)
    if out["rc"] != 0:
        raise RuntimeError(f"{argv[2:4]} failed ({out['rc']}): {out['stderr']}")
    return out["wall_s"], out["maxrss_kib"] / 1024


def _index_job(work: Path, job: dict[str, Any]) -> dict[str, Any]:
    result_file = work / f"job-{time.monotonic_ns()}.json"
    job = {**job, "result": str(result_file)}
    load_before = os.getloadavg()[0]
    wall, rss = _run_child([sys.executable, "-m", "benchmarks.indexing", "--child", json.dumps(job)])
    result: dict[str, Any] = json.loads(result_file.read_text())
    result["process_wall_s"] = wall
    result["peak_rss_mib"] = rss
    result["loadavg_1m"] = [load_before, os.getloadavg()[0]]
    return result


def _memcore() -> list[str]:
    script = Path(sys.executable).parent / "memcore"
    return [str(script)] if script.exists() else [sys.executable, "-m", "memory_core"]


def _cli_noop(home: Path) -> dict[str, Any]:
    runs = [_run_child([*_memcore(), "--home", str(home), "index", PROJECT, "--json"]) for _ in range(CLI_REPEATS)]
    walls = [r[0] for r in runs]
    return {"wall_s": walls, "wall_s_median": statistics.median(walls), "peak_rss_mib": max(r[1] for r in runs)}


def _measure_corpus(name: str, source: Path, edit: Any, work: Path) -> dict[str, Any]:
    home = work / f"home-{name}"
    print(f"   {name}: full index", flush=True)
    full = _index_job(work, {"home": str(home), "add_source": str(source), "noop_after": True})
    print(f"   {name}: no-op `memcore index` x{CLI_REPEATS}", flush=True)
    cli = _cli_noop(home)
    edited = edit()
    print(f"   {name}: re-index after editing {edited.name}", flush=True)
    change = _index_job(work, {"home": str(home)})
    return {
        "corpus": name,
        "resources": full["resources"],
        "units": full["units"],
        "full": {
            **{k: full[k] for k in ("load_s", "index_s", "embedded", "stages_s", "process_wall_s", "peak_rss_mib")},
            "loadavg_1m": full["loadavg_1m"],
            "mean_unit_tokens": full.get("mean_unit_tokens"),
            "units_per_s": full["units"] / full["index_s"],
            "embedded_per_s": full["embedded"] / full["stages_s"]["embed"] if full["stages_s"] else None,
        },
        "noop_in_process_s": full["noop_in_process_s"],
        "noop_cli": cli,
        "one_change": {
            "edited": edited.name,
            **{k: change[k] for k in ("status", "index_s", "embedded", "reused_embeddings", "stages_s")},
            **{k: change[k] for k in ("load_s", "process_wall_s", "peak_rss_mib")},
        },
    }


def _edit_cranfield(folder: Path) -> Any:
    def edit() -> Path:
        path = folder / "700.md"
        path.write_text(path.read_text(encoding="utf-8").rstrip("\n") + " an edited closing sentence .\n", "utf-8")
        return path

    return edit


def run(quick: bool) -> dict[str, Any]:
    synthetic_units = 1_000 if quick else 10_000
    corpora = []
    with scratch_dir("indexing") as work:
        cran = write_cranfield_markdown(work / "cranfield")
        corpora.append(_measure_corpus("cranfield", cran, _edit_cranfield(cran), work))
        synthetic = write_synthetic_memory(work / "synthetic", synthetic_units)
        corpora.append(
            _measure_corpus(f"synthetic-{synthetic_units // 1000}k", synthetic.folder, synthetic.edit_one, work)
        )
        paths = _paths(quick, work)
    print("   embed batching: in unit order vs longest first", flush=True)
    return write_result(NAME, {"quick": quick, "corpora": corpora, "paths": paths, "batching": _batching(quick)})


PATH_ROUNDS = 3
# The path of the indexer when issue 17 was filed (3 December 2026), the default of 4-5 December,
# and today's default, which is compared with each of the others.
COMPARED_PATHS = ("torch-fp32", "onnx-fp32", "onnx-int8")


def _paths(quick: bool, work: Path) -> dict[str, Any]:
    """Units per second of a whole Cranfield index per inference path, the paths taking turns
    (the order rotates round by round, so no path always runs first or last)."""
    cran = write_cranfield_markdown(work / "cranfield-paths")
    rates: dict[str, list[float]] = {p: [] for p in COMPARED_PATHS}
    load_before = os.getloadavg()[0]
    for r in range(1 if quick else PATH_ROUNDS):
        shift = r % len(COMPARED_PATHS)
        for name in COMPARED_PATHS[shift:] + COMPARED_PATHS[:shift]:
            print(f"   cranfield with {name}, round {r + 1}", flush=True)
            home = work / f"home-paths-{name}-{r}"
            job = _index_job(work, {"home": str(home), "add_source": str(cran), "inference": name})
            rates[name].append(job["units"] / job["index_s"])
    new = COMPARED_PATHS[-1]
    ratios = {base: [a / b for a, b in zip(rates[new], rates[base], strict=True)] for base in COMPARED_PATHS[:-1]}
    return {
        "units_per_s": rates,
        "new": new,
        "ratio_per_round": ratios,
        "ratio_median": {base: statistics.median(v) for base, v in ratios.items()},
        "loadavg_1m": [load_before, os.getloadavg()[0]],
        "machine": machine(),
    }


def run_paths_only(quick: bool) -> dict[str, Any]:
    """Only the inference-path comparison; the rest of the saved result stays."""
    saved = read_result(NAME) or {"quick": quick, "corpora": []}
    saved.pop("machine", None)
    with scratch_dir("indexing-paths") as work:
        return write_result(NAME, {**saved, "paths": _paths(quick, work)})


def run_batching_only(quick: bool) -> dict[str, Any]:
    """Only the batching comparison; the saved full-index figures stay (each states its date)."""
    saved = read_result(NAME) or {"quick": quick, "corpora": []}
    saved.pop("machine", None)
    return write_result(NAME, {**saved, "batching": _batching(quick)})


# -- document ---------------------------------------------------------------------------------
def _s(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def _not_measured(result: dict[str, Any]) -> str:
    rates = [c["full"]["embedded_per_s"] for c in result["corpora"] if c["corpus"].startswith("synthetic")]
    if rates and rates[0]:
        minutes = f"about {50_000 / rates[0] / 60:.0f} minutes of MiniLM at this run's {rates[0]:.0f} units/s"
    else:
        minutes = "tens of minutes of MiniLM on these 2 cores"
    return NOT_MEASURED.format(minutes=minutes)


def render(result: dict[str, Any]) -> str:
    lines = [
        "## Indexing",
        "",
        measured(result)
        + ". Each index runs in a fresh child process (peak RSS is that process's `ru_maxrss`, JVM included); "
        "the model and the JVM load before the clock starts (`load`). Cranfield is one markdown file "
        "per document; the synthetic project is notes of ten H2 sections of Cranfield sentences, one "
        "unit per section (`benchmarks/synthetic.py`). Other jobs shared the 2 cores during the run, so "
        "absolute times are noisy; the ratios within a row come from the same run.",
        "",
        "### First full index",
        "",
        "| corpus | resources | units | tokens/unit | load (s) | index (s) | units/s | scan | chunk | embed "
        "| lexical | rest | peak RSS (MiB) | load avg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in result["corpora"]:
        f = c["full"]
        st = f["stages_s"]
        lines.append(
            f"| {c['corpus']} | {c['resources']:,} | {c['units']:,} | {_s(f.get('mean_unit_tokens'))} | "
            f"{_s(f['load_s'])} | {_s(f['index_s'])} | "
            f"{f['units_per_s']:.0f} | {_s(st.get('scan'))} | {_s(st.get('chunk'))} | {_s(st.get('embed'))} | "
            f"{_s(st.get('lexical'))} | {_s(st.get('rest'))} | {f['peak_rss_mib']:.0f} | "
            + "–".join(f"{x:.1f}" for x in f.get("loadavg_1m", []))
            + " |"
        )
    lines += [
        "",
        "Stage columns are seconds: scan (walk and hash the sources), chunk (read, blob store, chunk), "
        "embed (cache lookup and MiniLM), lexical (Lucene), rest (vector index, units, publish); "
        "`load avg` is the 1-minute load average before and after the job (2.0 means both cores busy).",
        "",
        "### Re-index",
        "",
        "| corpus | no-op, in process (s) | no-op `memcore index` wall (s, median of "
        f"{CLI_REPEATS}) | no-op CLI peak RSS (MiB) | one resource changed: index (s) | units embedded | "
        "units reused | process wall incl. load (s) | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in result["corpora"]:
        o = c["one_change"]
        lines.append(
            f"| {c['corpus']} | {c['noop_in_process_s']:.3f} | {c['noop_cli']['wall_s_median']:.2f} | "
            f"{c['noop_cli']['peak_rss_mib']:.0f} | {_s(o['index_s'])} | {o['embedded']:,} | "
            f"{o['reused_embeddings']:,} | {_s(o['process_wall_s'])} | {o['peak_rss_mib']:.0f} |"
        )
    lines += [
        "",
        "The one-resource change appends a sentence to one file (Cranfield `700.md`; the first section "
        "of one synthetic note). Unit hashes include the unit's span, so every later unit of the edited "
        "file is re-embedded too; no other file's units are.",
        "",
        _not_measured(result),
        "",
    ]
    b = result.get("batching")
    if b is not None:
        rates = b["units_per_s"]
        lines += [
            "### Embed batching",
            "",
            f"Measured {b['machine']['date']}, load average {b['loadavg_1m'][0]:.1f}–{b['loadavg_1m'][1]:.1f}: "
            f"{b['units']:,} Cranfield units ({b['mean_unit_tokens']:.0f} tokens each on average) embedded by "
            "one fresh MiniLM embedder, no cache, in four disjoint subsets, the two strategies taking turns. "
            "Before: 64 units per call in unit order; after (the Indexer now): all missing units longest "
            "first, then 64 per call, so a batch pads to nearly its own length.",
            "",
            "| strategy | units/s per subset | median |",
            "|---|---|---:|",
            *(
                f"| {name.replace('_', ' ')} | {', '.join(f'{x:.0f}' for x in v)} | {statistics.median(v):.0f} |"
                for name, v in rates.items()
            ),
            "",
            f"Speed-up per subset (same subset, same run): {', '.join(f'{x:.2f}x' for x in b['ratio_per_subset'])}; "
            f"median {b['ratio_median']:.2f}x.",
            "",
        ]
    lines += _render_paths(result.get("paths"))
    return "\n".join(lines)


def _render_paths(p: dict[str, Any] | None) -> list[str]:
    if p is None or "new" not in p:  # a result saved before the comparison took three paths
        return []
    new = p["new"]
    return [
        "### Inference paths: a whole index",
        "",
        f"Measured {p['machine']['date']}, load average {p['loadavg_1m'][0]:.1f}–{p['loadavg_1m'][1]:.1f}: the "
        "whole Cranfield index (Lucene, chunks, MiniLM, vectors), each time in a fresh child process and a fresh "
        "home (nothing cached), the paths taking turns in an order that rotates round by round. `torch-fp32` "
        "indexed when issue 17 was filed (3 December 2026), `onnx-fp32` was the default on 4 and 5 December, "
        f"`{new}` is since (docs/performance.md, *MiniLM inference paths*); it runs `batch_threads` texts at "
        "once on a one-thread session (`OnnxMiniLMEmbedder._embed_alone`). Every path here batches longest "
        "first, so torch-fp32's row is slightly faster than the indexer of 3 December, which batched in unit "
        "order (*Embed batching*).",
        "",
        "| path | units/s per round | median |",
        "|---|---|---:|",
        *(
            f"| {name} | {', '.join(f'{x:.1f}' for x in v)} | {statistics.median(v):.1f} |"
            for name, v in p["units_per_s"].items()
        ),
        "",
        *(
            f"- {new} over {base}, per round (same run): {', '.join(f'{x:.2f}x' for x in ratios)}; "
            f"median {p['ratio_median'][base]:.2f}x."
            for base, ratios in p["ratio_per_round"].items()
        ),
        "",
        "Goal (issue 17, item 3): 2x the units per second of the indexer when the issue was filed.",
        "",
    ]


if __name__ == "__main__" and sys.argv[1:2] == ["--batching"]:
    print(render(run_batching_only(quick="--quick" in sys.argv)))
elif __name__ == "__main__" and sys.argv[1:2] == ["--paths"]:
    print(render(run_paths_only(quick="--quick" in sys.argv)))
elif __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--child":
    job = json.loads(sys.argv[2])
    Path(job["result"]).write_text(json.dumps(_child(job)))
