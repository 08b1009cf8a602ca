"""Side by side with the common local-memory-server design, on Cranfield, in the same run (issue 8).

The peer is what most local memory servers do: chunks in SQLite with an FTS5 table ranked by
``bm25()``, a brute-force numpy cosine over the chunk embeddings, and reciprocal-rank fusion
(k = 60) of the two top-100 lists. It gets exactly memory-core's chunks (the generation's units),
embeds them with plain fp32 MiniLM (through ONNX Runtime, whose vectors equal torch's to cosine
0.99999: the same vectors, built faster), and embeds each query with MiniLM in its plain form, as a
user would run it: torch fp32, warm, one thread. memory-core embeds both with its default path
(``adapters/models/inference.py``), so the latency includes each side's query embedding. Neither
caches query embeddings here (the queries repeat across warm-up and rounds).

Quality: all 225 queries, document level (the first unit of each document), trec_eval's
conventions via pytrec_eval on ``qrels/test.tsv``. Latency: warm, one query at a time, the three
systems interleaved query by query, BLAS limited to one thread for all (brief §11).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import CISI, CRANFIELD, measured, percentile, write_result
from memory_core.retrieval.profile import BM25_B, BM25_K1

NAME = "peer_comparison"
PROJECT = "cranfield"
DEPTH = 100
RRF_K = 60
WARMUP = 20
# memory-core's variants (brief §7) read from the same activations: B4 is what it returns.
OURS = {"ours_b4": "final_rank", "ours_b1": "lexical_rank", "ours_b3": "rrf_rank"}
TOKENIZERS = {"porter": "porter unicode61", "unicode61": "unicode61"}
_WORD = re.compile(r"\w+", re.UNICODE)


class PeerIndex:
    """SQLite FTS5 BM25 + brute-force numpy cosine + RRF over the same units and vectors."""

    def __init__(self, units: Sequence[Any], unit_ids: Sequence[str], vectors: np.ndarray, tokenizer: str) -> None:
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        self.conn.execute(f"CREATE VIRTUAL TABLE chunks USING fts5(unit_id UNINDEXED, body, tokenize='{tokenizer}')")
        with self.conn:
            self.conn.executemany(
                "INSERT INTO chunks(unit_id, body) VALUES (?, ?)", [(u.unit_id, u.text) for u in units]
            )
        self.unit_ids = list(unit_ids)
        self.matrix = np.ascontiguousarray(vectors, dtype=np.float32)

    @staticmethod
    def match_expression(query: str) -> str | None:
        """Every word quoted and OR-ed: what peers do so punctuation never breaks FTS5 syntax."""
        words = _WORD.findall(query.lower())
        return " OR ".join(f'"{w}"' for w in dict.fromkeys(words)) or None

    def bm25(self, query: str, depth: int = DEPTH) -> list[str]:
        expression = self.match_expression(query)
        if expression is None:
            return []
        rows = self.conn.execute(
            "SELECT unit_id FROM chunks WHERE chunks MATCH ? ORDER BY bm25(chunks) LIMIT ?", (expression, depth)
        )
        return [r[0] for r in rows]

    def dense(self, query_vector: np.ndarray, depth: int = DEPTH) -> list[str]:
        scores = self.matrix @ np.asarray(query_vector, dtype=np.float32)
        k = min(depth, scores.shape[0])
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]
        return [self.unit_ids[i] for i in top]

    @staticmethod
    def rrf(*lists: Sequence[str], k: int = RRF_K) -> list[str]:
        scores: dict[str, float] = {}
        for ranked in lists:
            for rank, uid in enumerate(ranked, start=1):
                scores[uid] = scores.get(uid, 0.0) + 1.0 / (k + rank)
        return sorted(scores, key=lambda u: -scores[u])

    def search(self, query: str, embed: Any) -> dict[str, list[str]]:
        lexical = self.bm25(query)
        dense = self.dense(embed(query))
        return {"bm25": lexical, "dense": dense, "rrf": self.rrf(lexical, dense)}

    def close(self) -> None:
        self.conn.close()


def resource_of(unit_id: str) -> str:
    return unit_id.rpartition("#")[0]


def documents(unit_ids: Sequence[str]) -> list[str]:
    """Document level: the first unit of each document, in order."""
    from benchmarks.cranfield_quality import doc_id

    return list(dict.fromkeys(doc_id(resource_of(u)) for u in unit_ids))


def load_generation(engine: Any) -> tuple[list[Any], list[str], np.ndarray]:
    """The current generation's units, and its vectors in row order (the files usearch_index writes)."""
    from memory_core.adapters.search.usearch_index import IDS_FILE, VECTORS_FILE
    from memory_core.services.indexing import VECTOR_DIR

    generation = engine.catalog.current_generation(PROJECT)
    directory = Path(generation.directory)
    units = engine.generations.load_units(directory)
    unit_ids = json.loads((directory / VECTOR_DIR / IDS_FILE).read_text(encoding="utf-8"))
    vectors = np.load(directory / VECTOR_DIR / VECTORS_FILE)
    assert len(unit_ids) == vectors.shape[0] == len(units)
    return units, unit_ids, vectors


def stats(values: Sequence[float]) -> dict[str, float]:
    return {"p50": percentile(list(values), 50), "p95": percentile(list(values), 95), "mean": statistics.fmean(values)}


def run(quick: bool) -> dict[str, Any]:
    """Cranfield (where the default profile was tuned) at the top level, as before, and CISI (held
    out from that tuning) under ``held_out``, each measured the same way."""
    os.umask(0o077)
    result = measure_collection(CRANFIELD, quick)
    result["held_out"] = {"cisi": measure_collection(CISI, quick)}
    return write_result(NAME, result)


def measure_collection(root: Path, quick: bool) -> dict[str, Any]:
    from threadpoolctl import threadpool_limits

    from benchmarks.api_overhead import start_daemon, stop_daemon
    from benchmarks.cranfield_quality import Cranfield, TrecEval, document_ranking, means, ordered
    from benchmarks.recording_overhead import index_folder, loadavg
    from memory_core.evaluation.statistics import paired_bootstrap, paired_randomization_p
    from memory_core.retrieval.profile import MAX_QUERY_CHARS
    from memory_core.runs.records import NullRecorder

    cranfield = Cranfield.load(root)  # any BEIR collection; the class is named for the first one
    trec = TrecEval(cranfield.qrels)
    # Judged queries only (CISI: 76 of 112), and those an activation accepts: a few CISI queries
    # are longer than MAX_QUERY_CHARS, which an activation refuses (as BEIR import does).
    judged = [q for q in cranfield.queries if q in cranfield.qrels]
    qids = [q for q in judged if len(cranfield.queries[q]) <= MAX_QUERY_CHARS]
    with tempfile.TemporaryDirectory(prefix="memcore-bench-peer-") as tmp:
        root = Path(tmp)
        cranfield.write_memory(root / "memory")
        print("   indexing Cranfield (memory-core)", flush=True)
        t0 = time.perf_counter()
        from memory_core.adapters.models.inference import DEFAULT_INFERENCE, minilm_embedder
        from memory_core.adapters.models.minilm import MiniLMEmbedder
        from memory_core.adapters.models.onnx_minilm import OnnxMiniLMEmbedder

        ours_embedder = minilm_embedder(DEFAULT_INFERENCE, root / "models", query_cache_size=0)
        engine = index_folder(root / "home", PROJECT, root / "memory", embedder=ours_embedder)
        ours_index_s = time.perf_counter() - t0
        try:
            units, unit_ids, _ = load_generation(engine)
            # The peer embeds the same units with plain fp32 MiniLM (ONNX here: torch fp32's
            # vectors to cosine 0.99999, faster to build), whatever path memory-core uses.
            t0 = time.perf_counter()
            by_id = {u.unit_id: u.search_text for u in units}
            plain_documents = OnnxMiniLMEmbedder(cache_dir=root / "models", query_cache_size=0)
            vectors = np.stack(plain_documents.embed_documents([by_id[i] for i in unit_ids]))
            peer_embed_s = time.perf_counter() - t0
            peers = {}
            build_s = {}
            for label, tokenizer in TOKENIZERS.items():
                t0 = time.perf_counter()
                peers[label] = PeerIndex(units, unit_ids, vectors, tokenizer)
                build_s[label] = time.perf_counter() - t0
            peer = peers["porter"]
            plain_minilm = MiniLMEmbedder(query_cache_size=0)  # torch fp32: what a user would write
            plain_minilm.load()
            embed = plain_minilm.embed_query
            history = engine.history
            # The daemon on the same home, as `memcore mcp` starts it. It keeps its query-embedding
            # cache (keyed by the whitespace-normalised text), so it warms up on other texts and each
            # later round asks with `?` appended: a text it has not embedded, the same words to
            # search (the analyzers drop punctuation), one more token for MiniLM.
            daemon, client = start_daemon(root / "home")
            with threadpool_limits(limits=1, user_api="blas"):
                for text in [cranfield.queries[q][:1_900] for q in qids[:WARMUP]]:
                    peer.search(text, embed)
                    engine.activate(PROJECT, text)
                    client.activate_memory(PROJECT, f"{text} (warm-up)")
                load = [loadavg()]
                lat: dict[str, list[float]] = {"peer": [], "ours": [], "ours_recorded": [], "ours_daemon": []}
                ours_rankings: dict[str, dict[str, list[str]]] = {v: {} for v in OURS}
                peer_lists: dict[str, dict[str, list[str]]] = {}
                rounds = 1 if quick else 2
                for r in range(rounds):
                    for i, q in enumerate(qids):
                        text = cranfield.queries[q]
                        order = ["peer", "ours", "ours_recorded", "ours_daemon"]
                        if (i + r) % 2:
                            order.reverse()
                        for system in order:
                            t0 = time.perf_counter()
                            if system == "peer":
                                lists = peer.search(text, embed)
                            elif system == "ours_daemon":
                                client.activate_memory(PROJECT, text + "?" * r)
                            else:
                                engine.recorder = history if system == "ours_recorded" else NullRecorder()
                                activation = engine.activate(PROJECT, text)
                            lat[system].append((time.perf_counter() - t0) * 1000)
                            history.settle()  # a trace written behind its answer lands before the next timing
                            if system == "peer":
                                peer_lists[q] = lists
                            elif system == "ours":
                                for variant, attr in OURS.items():
                                    ours_rankings[variant][q] = document_ranking(ordered(activation.candidates, attr))
                load.append(loadavg())
            unicode_lists = {q: peers["unicode61"].search(cranfield.queries[q], embed) for q in qids}
        finally:
            if "daemon" in locals():
                client.close()
                stop_daemon(daemon)
            for p in locals().get("peers", {}).values():
                p.close()
            engine.close()

    per_query = {
        **{variant: trec.per_query(rankings) for variant, rankings in ours_rankings.items()},
        "peer_rrf": trec.per_query({q: documents(v["rrf"]) for q, v in peer_lists.items()}),
        "peer_bm25": trec.per_query({q: documents(v["bm25"]) for q, v in peer_lists.items()}),
        "peer_dense": trec.per_query({q: documents(v["dense"]) for q, v in peer_lists.items()}),
        "peer_rrf_unicode61": trec.per_query({q: documents(v["rrf"]) for q, v in unicode_lists.items()}),
        "peer_bm25_unicode61": trec.per_query({q: documents(v["bm25"]) for q, v in unicode_lists.items()}),
    }
    ours_ndcg = [per_query["ours_b4"][q]["ndcg_cut_10"] for q in qids]
    peer_ndcg = [per_query["peer_rrf"][q]["ndcg_cut_10"] for q in qids]
    interval = paired_bootstrap(ours_ndcg, peer_ndcg)
    latency = {k: stats(v) for k, v in lat.items()}
    return {
        "collection": root.name,
        "inference": DEFAULT_INFERENCE,
        "quick": quick,
        "queries": len(qids),
        "queries_too_long": len(judged) - len(qids),
        "units": len(unit_ids),
        "level": "document (first unit of each document); trec_eval conventions via pytrec_eval",
        "quality": {k: means(v) for k, v in per_query.items()},
        "ndcg10_ours_minus_peer": {
            "mean_diff": interval.mean_diff,
            "ci95": [interval.low, interval.high],
            "p_randomization": paired_randomization_p(ours_ndcg, peer_ndcg),
            "wins": sum(a > b for a, b in zip(ours_ndcg, peer_ndcg, strict=True)),
            "losses": sum(a < b for a, b in zip(ours_ndcg, peer_ndcg, strict=True)),
        },
        "latency_ms": latency,
        "latency_samples": len(lat["peer"]),
        "ratio_p50_ours_over_peer": latency["ours"]["p50"] / latency["peer"]["p50"],
        "ratio_p50_ours_recorded_over_peer": latency["ours_recorded"]["p50"] / latency["peer"]["p50"],
        "ratio_p50_ours_daemon_over_peer": latency["ours_daemon"]["p50"] / latency["peer"]["p50"],
        "ratio_p50_ci95": {
            "ours": p50_ratio_interval(lat["ours"], lat["peer"]),
            "ours_recorded": p50_ratio_interval(lat["ours_recorded"], lat["peer"]),
            "ours_daemon": p50_ratio_interval(lat["ours_daemon"], lat["peer"]),
        },
        "build_s": {
            "ours_index": round(ours_index_s, 1),
            "peer_embed": round(peer_embed_s, 1),
            **{f"peer_fts5_{k}": round(v, 2) for k, v in build_s.items()},
        },
        "loadavg_1m": load,
    }


def p50_ratio_interval(ours: Sequence[float], peer: Sequence[float], resamples: int = 2000) -> list[float]:
    """95 % bootstrap interval of p50(ours) / p50(peer), resampling the queries with their pairs
    kept (each query was timed on both sides back to back, so a noisy moment hits both)."""
    rng = np.random.default_rng(0)
    a, b = np.asarray(ours), np.asarray(peer)
    picks = rng.integers(0, len(a), size=(resamples, len(a)))
    ratios = np.median(a[picks], axis=1) / np.median(b[picks], axis=1)
    return [float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))]


LABELS = {
    "ours_b4": "memory-core (default profile, B4 final order)",
    "ours_b3": "memory-core B3 (RRF of Lucene BM25 and the dense list)",
    "ours_b1": f"memory-core B1 (exact + Lucene BM25, k1 {BM25_K1:g}, b {BM25_B:g})",
    "peer_rrf": "peer: FTS5 BM25 (porter) + numpy cosine + RRF k 60",
    "peer_bm25": "peer: FTS5 BM25 alone (porter)",
    "peer_dense": "peer: numpy cosine alone (plain fp32 MiniLM vectors)",
    "peer_rrf_unicode61": "peer with FTS5's default tokenizer (unicode61): RRF",
    "peer_bm25_unicode61": "peer with FTS5's default tokenizer (unicode61): BM25 alone",
}


def _compare(ours: dict[str, float], peer: dict[str, float], who: str, what: str) -> str | None:
    names = (("ndcg_cut_10", "nDCG@10"), ("recall_100", "Recall@100"), ("recip_rank", "MRR"))
    better = [name for key, name in names if peer[key] > ours[key]]
    if not better:
        return None
    return f"{who} is better than {what} on {', '.join(better)}"


def _verdict(result: dict[str, Any]) -> str:
    """Who wins what, from the figures (so the sentences never contradict the tables)."""
    q, lat, g = result["quality"], result["latency_ms"], result["ndcg10_ours_minus_peer"]
    significant = g["ci95"][0] > 0 or g["ci95"][1] < 0
    parts = []
    if g["mean_diff"] > 0:
        parts.append(
            f"memory-core's returned order (B4) has the higher nDCG@10 (+{g['mean_diff']:.3f}), "
            + (
                "and the 95 % interval excludes 0"
                if significant
                else "but the 95 % interval includes 0: the two are not distinguishable"
            )  # fmt: skip
        )
    else:
        parts.append(
            f"the peer has the higher nDCG@10 ({g['mean_diff']:+.3f} for memory-core)"
            + ("" if significant else ", within noise (the 95 % interval includes 0)")
        )
    for ours_key, peer_key, what in (
        ("ours_b4", "peer_rrf", "memory-core's B4"),
        ("ours_b3", "peer_rrf", "memory-core's own RRF (B3)"),
        ("ours_b1", "peer_bm25", "memory-core's Lucene lexical list (B1)"),
    ):
        who = "the peer's FTS5 BM25 alone" if peer_key == "peer_bm25" else "the peer"
        sentence = _compare(q[ours_key], q[peer_key], who, what)
        if sentence:
            parts.append(sentence)
    if lat["peer"]["p50"] < lat["ours"]["p50"]:
        parts.append(
            f"the peer is faster: {lat['ours']['p50'] - lat['peer']['p50']:.1f} ms less at p50 "
            f"(memory-core takes {result['ratio_p50_ours_over_peer']:.2f}× the peer's p50 unrecorded, "
            f"{result['ratio_p50_ours_recorded_over_peer']:.2f}× recorded)"
        )
    else:
        parts.append("memory-core is not slower at p50")
    return "; ".join(parts) + "."


def _peer_embed(result: dict[str, Any]) -> str:
    seconds = result["build_s"].get("peer_embed")
    if seconds is None:
        return " (the vectors were reused, not re-embedded)"
    return f", embedding its units {seconds:.0f} s"


def _latency_row(label: str, v: dict[str, float]) -> str:
    return f"| {label} | {v['p50']:.1f} | {v['p95']:.1f} | {v['mean']:.1f} |"


def render(result: dict[str, Any]) -> str:
    from benchmarks.plots import link

    lines = [
        "## Side by side with the common local-memory-server design",
        "",
        measured(result) + ", in one process and one run per collection. The peer is the design most local memory "
        "servers use: the chunks in a SQLite FTS5 table ranked by `bm25()` (each query word quoted and OR-ed), a "
        f"brute-force numpy cosine over the chunk embeddings, and RRF (k {RRF_K}) of the two top-{DEPTH} lists. It "
        "gets memory-core's own units, embeds them with plain fp32 MiniLM (through ONNX Runtime: torch fp32's vectors "
        "to cosine 0.99999) and each query with MiniLM in its plain form (torch fp32, warm, one thread); "
        f"memory-core embeds both with its default path (`{result.get('inference', 'onnx-fp32')}`). Each latency "
        "includes that side's query embedding. Neither caches query embeddings here. "
        f"Level: {result['level']}.",
        "",
    ]
    lines += _render_collection(result, "Cranfield 1400 (the default profile was tuned on it)")
    for name, held in result.get("held_out", {}).items():
        title = f"{name.upper()} (held out from the fusion tuning; the BM25 parameters were checked on it too)"
        lines += ["", *_render_collection(held, title)]
    lines += [
        "",
        "The peer does less per query: no exact-identity stage, no reranking, no selection against a token budget, "
        "no delta against what the agent holds, no trace; FTS5 runs in process where Lucene is reached through the "
        f"JVM. Both use BM25 with k1 {BM25_K1:g} and b {BM25_B:g} (FTS5's `bm25()` defaults; memory-core's since "
        "issue 17, docs/ranking.md), FTS5 with the porter stemmer, Lucene with its English analyzer. "
        "What the peer cannot do at any speed is explain a ranking afterwards or turn it into an evaluation case.",
        "",
        link(NAME, "memory-core vs the peer design"),
        "",
    ]
    return "\n".join(lines)


def _render_collection(result: dict[str, Any], title: str) -> list[str]:
    q = result["quality"]
    lat = result["latency_ms"]
    g = result["ndcg10_ours_minus_peer"]
    ci = result.get("ratio_p50_ci95", {})

    def ratio(key: str, system: str) -> str:
        low_high = ci.get(system)
        interval = f" (95 % CI {low_high[0]:.2f}–{low_high[1]:.2f})" if low_high else ""
        return f"{result[key]:.2f}×{interval}"

    lines = [
        f"### {title}",
        "",
        f"{result['units']} units, {result['queries']} judged queries"
        + (
            f" ({result['queries_too_long']} more are longer than an activation accepts and are left out)."
            if result.get("queries_too_long")
            else "."
        ),
        "",
        "| ranking | nDCG@10 | Recall@100 | MRR |",
        "|---|---:|---:|---:|",
    ]
    for key, label in LABELS.items():
        v = q[key]
        lines.append(f"| {label} | {v['ndcg_cut_10']:.3f} | {v['recall_100']:.3f} | {v['recip_rank']:.3f} |")
    lines += [
        "",
        f"nDCG@10, memory-core − peer: {g['mean_diff']:+.4f}, paired bootstrap 95 % CI "
        f"[{g['ci95'][0]:+.4f}, {g['ci95'][1]:+.4f}], sign-flip p {g['p_randomization']:.3f}, "
        f"{g['wins']} queries better / {g['losses']} worse.",
        "",
        f"Warm latency per query, milliseconds ({result['latency_samples']} queries, the systems interleaved "
        "query by query, BLAS limited to one thread for all, the query embedding included in each):",
        "",
        "| system | p50 | p95 | mean |",
        "|---|---:|---:|---:|",
        _latency_row("peer (FTS5 + numpy + RRF, torch MiniLM)", lat["peer"]),
        _latency_row("memory-core, unrecorded", lat["ours"]),
        _latency_row("memory-core, recorded (the default)", lat["ours_recorded"]),
        *(
            [_latency_row("memory-core through its daemon (socket, recorded)", lat["ours_daemon"])]
            if "ours_daemon" in lat
            else []
        ),
        "",
        f"p50 of memory-core over the peer's: {ratio('ratio_p50_ours_over_peer', 'ours')} unrecorded, "
        f"{ratio('ratio_p50_ours_recorded_over_peer', 'ours_recorded')} recorded"
        + (
            f", {ratio('ratio_p50_ours_daemon_over_peer', 'ours_daemon')} through the daemon"
            if "ours_daemon" in lat
            else ""
        )
        + " (bootstrap over queries). "
        f"1-minute load average {'–'.join(f'{x:.1f}' for x in result['loadavg_1m'])} before and after: the "
        "machine is shared, so read the ratios, not the absolute figures. Building the peer's FTS5 table took "
        f"{result['build_s']['peer_fts5_porter']:.1f} s{_peer_embed(result)}. With FTS5's "
        "default `unicode61` tokenizer (no stemming) the peer's nDCG@10 is "
        f"{q['peer_rrf_unicode61']['ndcg_cut_10']:.3f}.",
        "",
        "**Verdict.** " + _verdict(result),
    ]
    return lines
