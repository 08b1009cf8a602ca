"""What a brought model costs (issue 33): indexing units/s and query latency of the default
all-MiniLM-L6-v2 against a model of bge-base-en-v1.5's shape, and a cross-encoder's cost per query.

No weights but MiniLM's can be installed here (brief §11), so the larger models are built by
this benchmark: transformers' ``BertConfig`` of each public model's shape with random weights,
saved in a model cache's layout with MiniLM's tokenizer (bge-small/base and the ms-marco
cross-encoders use the same 30,522-token BERT vocabulary), then read by ``read_model_dir`` and
run by ``open_embedder`` / ``open_cross_encoder`` as a user's model would be. Cost depends on the
shape, not on the weights' values, so the timings hold for the real models; the vectors do not,
so no ranking quality is measured here (the int8 cosine on random weights is shown only as a
check that the path runs, the MiniLM figure is the one that counts).

- Indexing: Cranfield abstracts (whole documents, as one-unit resources), embedded in rounds of
  disjoint documents, model by model within each round (interleaved: a busy spell slows every
  model alike), every core; the ratio to MiniLM's default path per round, median and range.
- Queries: one Cranfield query at a time on one thread without the query cache, model by model
  per query; wall and thread CPU time.
- Cross-encoder: one query and the top ``RERANK_DEPTH`` (the default rerank depth) documents,
  batch 16, every core.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import attrs

from benchmarks.common import CRANFIELD, measured, percentile, scratch_dir, write_result
from benchmarks.interleaved import interleaved_rates

NAME = "models"
SHAPES = {
    # name: (layers, hidden, heads, intermediate)
    "bge-small shape (12 x 384)": (12, 384, 12, 1536),
    "bge-base shape (12 x 768)": (12, 768, 12, 3072),
}
CROSS_SHAPE = ("ms-marco-MiniLM-L-6 shape (6 x 384)", (6, 384, 12, 1536))
RERANK_DEPTH = 50
ROUNDS, ROUND_DOCS = 3, 64
QUERIES = 40
CROSS_QUERIES = 20
COSINE_DOCS = 32
# On the shared 2-core machine a full run takes over 25 minutes (the bge-base shape dominates).
QUICK = {"rounds": 2, "round_docs": 24, "queries": 15, "cross_queries": 5, "cosine_docs": 16}


def _build(directory: Path, shape: tuple[int, int, int, int], classifier: bool = False) -> Path:
    import torch
    import transformers as t

    from memory_core.adapters.models.minilm import default_model_dir

    layers, hidden, heads, intermediate = shape
    directory.mkdir(parents=True)
    shutil.copy(default_model_dir() / "tokenizer.json", directory / "tokenizer.json")
    shape_args: dict[str, Any] = {
        "vocab_size": 30522,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": intermediate,
        "num_labels": 1,
    }
    config = t.BertConfig(**shape_args)
    torch.manual_seed(0)
    model = (t.BertForSequenceClassification if classifier else t.BertModel)(config)  # saved as is: no mode
    model.save_pretrained(str(directory))
    if not classifier:  # bge's own files: CLS pooling, normalised
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ]
        (directory / "modules.json").write_text(json.dumps(modules))
        (directory / "1_Pooling").mkdir()
        (directory / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    return directory


def _texts(limit: int) -> tuple[list[str], list[str]]:
    from benchmarks.cranfield_quality import Cranfield

    c = Cranfield.load(CRANFIELD)
    docs = [Cranfield.markdown(t, x) for t, x in c.documents.values()]
    queries = [q for q in c.queries.values()][:limit]
    return docs, queries


def run(quick: bool) -> dict[str, Any]:
    with scratch_dir("models") as work:
        return _run(quick, work)


def _run(quick: bool, work: Path) -> dict[str, Any]:
    import numpy as np

    from memory_core.adapters.models.encoder_onnx import OnnxEncoderEmbedder, open_cross_encoder, open_embedder
    from memory_core.adapters.models.minilm import default_model_dir
    from memory_core.adapters.models.model_dir import read_model_dir

    rounds = QUICK["rounds"] if quick else ROUNDS
    round_docs = QUICK["round_docs"] if quick else ROUND_DOCS
    docs, queries = _texts(QUICK["queries"] if quick else QUERIES)
    cache = work / "cache"
    minilm = read_model_dir(default_model_dir())
    embedders: dict[str, Any] = {
        "all-MiniLM-L6-v2 (default, onnx-int8)": open_embedder(minilm, cache, "int8", query_cache_size=0),
        "all-MiniLM-L6-v2 (onnx-fp32)": open_embedder(minilm, cache, "fp32", query_cache_size=0),
    }
    build_seconds: dict[str, float] = {}
    specs = {}
    for label, shape in SHAPES.items():
        print(f"   building {label}", flush=True)
        specs[label] = read_model_dir(_build(work / label.split()[0], shape))
        for inference in ("fp32", "int8"):
            name = f"{label}, {inference}"
            embedders[name] = open_embedder(specs[label], cache, inference, query_cache_size=0)
            t0 = time.perf_counter()
            embedders[name].load()  # builds (and quantizes) the ONNX file once
            build_seconds[name] = time.perf_counter() - t0
    reference = next(iter(embedders))
    for embedder in embedders.values():
        embedder.embed_documents(docs[:4])  # loads the batch session; first-batch costs
    load_before = os.getloadavg()[0]

    print("   indexing", flush=True)
    rates = interleaved_rates(embedders, docs, 4, rounds, round_docs)

    print("   queries", flush=True)
    wall: dict[str, list[float]] = {name: [] for name in embedders}
    cpu: dict[str, list[float]] = {name: [] for name in embedders}
    for query in queries:
        for name, embedder in embedders.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            embedder._encode([query], 1)  # one thread, no cache: the cost of a new query
            wall[name].append((time.perf_counter() - t0) * 1000)
            cpu[name].append((time.thread_time() - c0) * 1000)

    # int8 against fp32 through the generic graph: MiniLM's real weights, then the random shapes.
    cosines: dict[str, dict[str, float]] = {}
    sample = docs[: QUICK["cosine_docs"] if quick else COSINE_DOCS]
    pairs = {"all-MiniLM-L6-v2 (generic graph)": minilm, **specs}
    for label, spec in pairs.items():
        a = np.stack(OnnxEncoderEmbedder(spec, cache, "fp32").embed_documents(sample))
        b = np.stack(OnnxEncoderEmbedder(spec, cache, "int8").embed_documents(sample))
        cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        cosines[label] = {"min": float(cos.min()), "median": float(np.median(cos))}

    print("   cross-encoder", flush=True)
    cross_label, cross_shape = CROSS_SHAPE
    cross = open_cross_encoder(read_model_dir(_build(work / "cross", cross_shape, classifier=True)), cache, batch=16)
    candidates = [_Candidate(d) for d in docs[:RERANK_DEPTH]]
    cross.rerank(queries[0], candidates[:4])
    rerank_ms = []
    for query in queries[: QUICK["cross_queries"] if quick else CROSS_QUERIES]:
        t0 = time.perf_counter()
        cross.rerank(query, candidates)
        rerank_ms.append((time.perf_counter() - t0) * 1000)

    rows = []
    for name in embedders:
        ratios = [a / b for a, b in zip(rates[name], rates[reference], strict=True)]
        cpu_ratios = [a / b for a, b in zip(cpu[name], cpu[reference], strict=True)]
        rows.append(
            {
                "model": name,
                "revision": embedders[name].revision,
                "dimensions": embedders[name].dimensions,
                "units_per_s": statistics.median(rates[name]),
                "ratio_to_default": statistics.median(ratios),
                "ratio_range": [min(ratios), max(ratios)],
                "query_wall_p50_ms": percentile(wall[name], 50),
                "query_wall_p95_ms": percentile(wall[name], 95),
                "query_cpu_p50_ms": percentile(cpu[name], 50),
                "query_cpu_ratio_p50": statistics.median(cpu_ratios),
                "build_s": build_seconds.get(name),
            }
        )
    result = {
        "quick": quick,
        "rounds": rounds,
        "round_docs": round_docs,
        "queries": len(queries),
        "rows": rows,
        "int8_cosine": cosines,
        "cross_encoder": {
            "model": cross_label,
            "depth": RERANK_DEPTH,
            "batch": 16,
            "queries": len(rerank_ms),
            "p50_ms": percentile(rerank_ms, 50),
            "p95_ms": percentile(rerank_ms, 95),
        },
        "loadavg_1m": [load_before, os.getloadavg()[0]],
    }
    return write_result(NAME, result)


@attrs.frozen
class _Candidate:
    """What the Reranker port reads of a candidate (``RerankInput``); only the text matters here."""

    text: str
    heading_path: tuple[str, ...] = ()
    exact_rank: int | None = None
    bm25_score: float | None = None
    dense_similarity: float | None = None
    rrf_score: float = 0.0
    resource_id: str = ""


def render(result: dict[str, Any]) -> str:
    lines = [
        "## Brought models: what a larger model costs",
        "",
        measured(result) + f"; 1-minute load average {result['loadavg_1m'][0]:.1f}–{result['loadavg_1m'][1]:.1f}. "
        "all-MiniLM-L6-v2 (the packaged default) against models of bge-small-en-v1.5's and bge-base-en-v1.5's "
        "shape, built by `benchmarks/models.py` with random weights and MiniLM's tokenizer and run as a "
        "user's model directory is (`read_model_dir`, `open_embedder`; CLS pooling, normalised, as bge). "
        "The cost depends on the shape, not on the weights, so it holds for the real models. "
        f"Indexing: Cranfield abstracts, {result['rounds']} rounds of {result['round_docs']} documents, "
        "model by model within each round, every core; the ratio to the default is per round (median "
        f"[min, max]). Query: {result['queries']} Cranfield queries, one thread, no query cache, model by model "
        "per query. Build: reading the weights, building the ONNX graph (and quantizing) once, cached after.",
        "",
        "| model | dims | units/s | × default [range] | query wall p50 / p95 ms | query CPU p50 ms | "
        "CPU × default | build s |",
        "|---|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in result["rows"]:
        build = "" if r["build_s"] is None else f"{r['build_s']:.1f}"
        lo, hi = r["ratio_range"]
        lines.append(
            f"| {r['model']} | {r['dimensions']} | {r['units_per_s']:.1f} | {r['ratio_to_default']:.2f} "
            f"[{lo:.2f}, {hi:.2f}] | {r['query_wall_p50_ms']:.1f} / {r['query_wall_p95_ms']:.1f} | "
            f"{r['query_cpu_p50_ms']:.1f} | {r['query_cpu_ratio_p50']:.2f} | {build} |"
        )
    ce = result["cross_encoder"]
    lines += [
        "",
        "int8 (dynamic, per-channel) against fp32 through the generic graph, cosine of each document's vectors: "
        + "; ".join(f"{k} min {v['min']:.4f}, median {v['median']:.4f}" for k, v in result["int8_cosine"].items())
        + ". Only MiniLM's figure speaks for a trained model (random weights quantize differently), which is why "
        "a brought model runs fp32 unless int8 is asked for (docs/models.md).",
        "",
        f"Cross-encoder of {ce['model']} (random weights, one logit), rescoring the top {ce['depth']} "
        f"documents of one query in batches of {ce['batch']} on every core ({ce['queries']} queries): "
        f"p50 {ce['p50_ms']:.0f} ms, "
        f"p95 {ce['p95_ms']:.0f} ms per query: whole Cranfield abstracts (about 200 tokens each, so 50 pairs "
        "cost about what embedding 50 documents with MiniLM fp32 does). Every Run records this as its `rerank` "
        "stage; a smaller `depth`, or a shorter `max_tokens`, bounds it (docs/models.md).",
        "",
    ]
    return "\n".join(lines)
