"""MiniLM inference paths by ranking quality and speed (issue 17, item 2).

For Cranfield and CISI, every whole document (``# title`` + abstract, as the engine sees a
one-unit resource) is embedded with each inference path: ``MiniLMEmbedder`` (torch fp32, torch
dynamic int8 per-channel) and ``OnnxMiniLMEmbedder`` (ONNX Runtime fp32 and dynamic int8
per-channel, the graph built from the same weights); each query's documents are ranked by cosine alone (dense-only, no
lexical list), and nDCG@10 of each path is compared with torch fp32's (today's default) by a
paired bootstrap over queries. Speed: one short query (its first five words) and one whole query embedded by each
path in turn, query by query (interleaved, so other jobs on the machine slow every path alike),
measured as wall time and as the thread's CPU time (what the path costs, whatever else runs);
and documents per second, each path embedding the same documents in batches (one thread), and
again with every core, as indexing runs (issue 17, item 3).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import CISI, CRANFIELD, measured, percentile, write_result
from benchmarks.interleaved import interleaved_rates
from memory_core.adapters.models.inference import CHOICES

NAME = "embedder_paths"
# Every inference path the product offers, as (runtime, inference), under the short labels the
# tables use (torch's without a prefix); "fp32" (torch) is the reference every interval is against.
PATHS = {name.removeprefix("torch-"): runtime_path for name, runtime_path in CHOICES.items()}
# Batch throughput with every core (what indexing runs): the same documents in turns, path by path.
THROUGHPUT_ROUNDS = 4
THROUGHPUT_DOCS = 128
COLLECTIONS = {"cranfield": CRANFIELD, "cisi": CISI}
SPEED_QUERIES = 60
QUICK_QUERIES = 30
DECISION = (
    "Default since 5 December 2026: ONNX Runtime int8 (`onnx-int8`, revision suffix `+onnx-int8-per-channel`; "
    "`adapters/models/inference.py`). On the whole of both collections its nDCG@10 is within noise of fp32's, "
    "dense-only above and as returned through the engine (B4, *Side by side with the common local-memory-server "
    "design*), at about 2.5x ONNX fp32's batch throughput with every core (the indexing table's same-run ratio) "
    "and under half its query CPU. Until then the default was ONNX fp32, chosen when a 30-query quick run showed "
    "int8 losing on CISI; the whole collections do not confirm that loss. `torch-bf16` keeps fp32's vectors to "
    "cosine 0.9999 at about 2x the batch rate but queries slower and needs torch; `onnx-int8-blockwise` queries "
    "faster than fp32 but batches no faster. `MEMORY_CORE_INFERENCE` (or `bootstrap(inference=...)`) picks "
    "another; a home indexed with another path is refused at `embed_query` with `project_not_indexed` until "
    "`memcore index` re-embeds it (vectors of two revisions are never mixed)."
)
DEPTH = 100
CHUNK = 64


def _collection(root: Path) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    from benchmarks.cranfield_quality import Cranfield

    c = Cranfield.load(root)
    docs = {d: Cranfield.markdown(t, x) for d, (t, x) in c.documents.items()}
    queries = {q: t for q, t in c.queries.items() if q in c.qrels}
    return docs, queries, {q: dict(r) for q, r in c.qrels.items()}


def _quality(embedders: dict[str, Any], root: Path, quick: bool) -> dict[str, Any]:
    from benchmarks.cranfield_quality import TrecEval
    from memory_core.evaluation.statistics import paired_bootstrap

    docs, queries, qrels = _collection(root)
    if quick:  # 30 queries over a pool: their judged documents and 100 others (seeded), capped at 400
        import random

        queries = dict(list(queries.items())[:QUICK_QUERIES])
        judged = sorted({d for q in queries for d in qrels.get(q, {}) if d in docs})[:300]
        others = sorted(set(docs) - set(judged))
        pool = judged + random.Random(0).sample(others, min(100, len(others)))
        docs = {d: docs[d] for d in pool}
    ids = list(docs)
    scores: dict[str, dict[str, float]] = {}
    throughput: dict[str, float] = {}
    trec = TrecEval(qrels, ("ndcg_cut_10",))
    # Documents embedded in chunks, path after path within each chunk (interleaved, so a burst of
    # other load slows every path alike); each chunk is batched by the embedder as in indexing.
    texts = [docs[d] for d in ids]
    rows: dict[str, list[Any]] = {p: [] for p in embedders}
    seconds = dict.fromkeys(embedders, 0.0)
    for start in range(0, len(texts), CHUNK):
        for path, embedder in embedders.items():
            t0 = time.perf_counter()
            rows[path].extend(embedder.embed_documents(texts[start : start + CHUNK]))
            seconds[path] += time.perf_counter() - t0
    matrices = {p: np.stack(r) for p, r in rows.items()}
    cosine = {p: (matrices[p] * matrices["fp32"]).sum(axis=1) for p in embedders if p != "fp32"}
    for path, embedder in embedders.items():
        throughput[path] = len(ids) / seconds[path]
        matrix = matrices[path]
        rankings = {}
        for q, text in queries.items():
            sims = matrix @ embedder._encode([text], 1)[0]
            top = np.argsort(-sims, kind="stable")[:DEPTH]
            rankings[q] = [ids[i] for i in top]
        scores[path] = {q: v["ndcg_cut_10"] for q, v in trec.per_query(rankings).items()}
    qids = sorted(scores["fp32"])
    out: dict[str, Any] = {
        "queries": len(qids),
        "documents": len(ids),
        "ndcg10": {},
        "vs_fp32": {},
        "docs_per_s": throughput,
        "cosine": {p: {"min": float(c.min()), "median": float(np.median(c))} for p, c in cosine.items()},
    }
    for path in embedders:
        out["ndcg10"][path] = statistics.fmean(scores[path][q] for q in qids)
        if path != "fp32":
            ci = paired_bootstrap([scores[path][q] for q in qids], [scores["fp32"][q] for q in qids])
            out["vs_fp32"][path] = {"diff": ci.mean_diff, "low": ci.low, "high": ci.high}
    return out


def _speed(embedders: dict[str, Any]) -> dict[str, Any]:
    with (CRANFIELD / "queries.jsonl").open(encoding="utf-8") as f:
        whole = [json.loads(line)["text"] for line in f][:SPEED_QUERIES]
    kinds = {"short": [" ".join(q.split()[:5]) for q in whole], "whole": whole}
    samples: dict[str, dict[str, dict[str, list[float]]]] = {
        k: {p: {"wall": [], "cpu": []} for p in embedders} for k in kinds
    }
    for embedder in embedders.values():
        for q in whole[:5]:
            embedder._encode([q], 1)
    for kind, texts in kinds.items():
        for text in texts:
            for path, embedder in embedders.items():
                t0, c0 = time.perf_counter(), time.thread_time()
                embedder._encode([text], 1)  # no query cache: the cost of a miss
                samples[kind][path]["wall"].append((time.perf_counter() - t0) * 1000)
                samples[kind][path]["cpu"].append((time.thread_time() - c0) * 1000)
    result: dict[str, Any] = {}
    for kind, by_path in samples.items():
        result[kind] = {}
        for path, s in by_path.items():
            ratio = [a / b for a, b in zip(s["cpu"], by_path["fp32"]["cpu"], strict=True)]
            result[kind][path] = {
                "wall_p50": percentile(s["wall"], 50),
                "wall_p95": percentile(s["wall"], 95),
                "cpu_p50": percentile(s["cpu"], 50),
                "cpu_ratio_p50": statistics.median(ratio),
            }
    return result


def _throughput(paths: dict[str, tuple[str, str]], torch_class: Any, onnx_class: Any, scratch: Path) -> dict[str, Any]:
    """Cranfield documents per second of each path with every core, in rounds of disjoint
    documents taken path by path (interleaved), each path's embedder fresh and loaded first."""
    docs, _, _ = _collection(CRANFIELD)
    texts = list(docs.values())
    embedders = {}
    for path, (kind, inference) in paths.items():
        if kind == "torch":
            embedders[path] = torch_class(inference=inference, query_cache_size=0)
        else:
            embedders[path] = onnx_class(inference=inference, cache_dir=scratch, query_cache_size=0)
        embedders[path].embed_documents(texts[:8])  # load, and the first batch's one-off costs
    rates = interleaved_rates(embedders, texts, 8, THROUGHPUT_ROUNDS, THROUGHPUT_DOCS)
    out: dict[str, Any] = {"docs": THROUGHPUT_ROUNDS * THROUGHPUT_DOCS, "rounds": THROUGHPUT_ROUNDS, "paths": {}}
    for path, r in rates.items():
        ratios = [a / b for a, b in zip(r, rates["onnx-fp32"], strict=True)]
        out["paths"][path] = {
            "docs_per_s": statistics.median(r),
            "ratio_to_onnx_fp32": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)],
        }
    return out


def run(quick: bool) -> dict[str, Any]:
    import tempfile

    from memory_core.adapters.models.minilm import MiniLMEmbedder
    from memory_core.adapters.models.onnx_minilm import OnnxMiniLMEmbedder

    # The ONNX files are built in a scratch folder, not in the user's home.
    with tempfile.TemporaryDirectory(prefix="embedder-paths-") as scratch:
        return _run(quick, Path(scratch), MiniLMEmbedder, OnnxMiniLMEmbedder)


def _run(quick: bool, scratch: Path, torch_class: Any, onnx_class: Any) -> dict[str, Any]:
    import os

    # One thread for batches too: on a shared 2-core machine two OpenMP threads stall at barriers.
    embedders: dict[str, Any] = {}
    for path, (kind, inference) in PATHS.items():
        if kind == "torch":
            embedders[path] = torch_class(inference=inference, query_cache_size=0, torch_threads=1)
        else:
            embedders[path] = onnx_class(inference=inference, cache_dir=scratch, query_cache_size=0, batch_threads=1)
    for e in embedders.values():
        e.load()
    load_before = os.getloadavg()[0]
    speed = _speed(embedders)
    throughput = _throughput(PATHS, torch_class, onnx_class, scratch)
    quality = {name: _quality(embedders, root, quick) for name, root in COLLECTIONS.items()}
    result = {
        "quick": quick,
        "revisions": {p: e.revision for p, e in embedders.items()},
        "speed": speed,
        "throughput": throughput,
        "quality": quality,
        "loadavg_1m": [load_before, os.getloadavg()[0]],
    }
    return write_result(NAME, result)


def render(result: dict[str, Any]) -> str:
    quick_note = (
        f", quick run ({QUICK_QUERIES} queries per collection ranked over a pool: their judged documents "
        "and 100 others)"
    )
    lines = [
        "## MiniLM inference paths",
        "",
        measured(result, quick_note=quick_note)
        + f"; 1-minute load average {result['loadavg_1m'][0]:.1f}–{result['loadavg_1m'][1]:.1f} on 2 cores. "
        "Dense-only ranking of whole documents by each path of `MiniLMEmbedder`; the interval is a "
        "paired bootstrap (95 %) of the path's nDCG@10 less fp32's, over queries.",
        "",
    ]
    paths = list(result["revisions"])
    others = [p for p in paths if p != "fp32"]
    lines += [
        "| collection | queries | path | nDCG@10 | − torch fp32 [95 % CI] | docs/s |",
        "|---|---:|---|---:|---|---:|",
    ]
    for name, q in result["quality"].items():
        for path in paths:
            d = q["vs_fp32"].get(path)
            interval = "" if d is None else f"{d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
            lines.append(
                f"| {name} | {q['queries']} | {path} | {q['ndcg10'][path]:.3f} | {interval} | "
                f"{q['docs_per_s'][path]:.1f} |"
            )
    lines += ["", "Cosine of each path's document vector to torch fp32's, over the documents embedded above:", ""]
    for name, q in result["quality"].items():
        cos = q.get("cosine", {})
        lines.append(
            f"- {name}: "
            + "; ".join(f"{p} min {cos[p]['min']:.5f}, median {cos[p]['median']:.5f}" for p in others if p in cos)
        )
    lines += [
        "",
        "One query embedding (1 thread, no cache), interleaved path by path; thread CPU time is what "
        "the path costs whatever else runs, wall time what a caller waited on this shared machine:",
        "",
        "| query | path | wall p50 / p95 ms | CPU p50 ms | CPU ratio to torch fp32 (median) |",
        "|---|---|---|---:|---:|",
    ]
    for kind, by_path in result["speed"].items():
        for path, s in by_path.items():
            lines.append(
                f"| {kind} | {path} | {s['wall_p50']:.1f} / {s['wall_p95']:.1f} | {s['cpu_p50']:.1f} | "
                f"{s['cpu_ratio_p50']:.2f} |"
            )
    tp = result.get("throughput")
    if tp:
        lines += [
            "",
            f"Batch throughput with every core (as indexing runs): {tp['docs']} Cranfield documents in "
            f"{tp['rounds']} rounds, the paths taking turns; ratio to ONNX fp32 (today's default), "
            "median and range over rounds:",
            "",
            "| path | docs/s | ratio to onnx-fp32 |",
            "|---|---:|---|",
        ]
        for path, s in tp["paths"].items():
            lo, hi = s["ratio_range"]
            lines.append(f"| {path} | {s['docs_per_s']:.1f} | {s['ratio_to_onnx_fp32']:.2f} ({lo:.2f}–{hi:.2f}) |")
    lines += ["", DECISION, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(render(run(quick="--quick" in sys.argv)))
