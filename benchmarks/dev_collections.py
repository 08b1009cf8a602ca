"""Every fusion, B1-B4 and both afternoon peers on the four development collections (issue 32 item 1).

Each collection (Cranfield, CISI, LoCoMo dev, SciFact train) is written one markdown resource per
document and indexed once with the real components (``index_folder``: chunker, Lucene, MiniLM);
every judged query then goes through ``Engine.activate`` with a profile that reranks the whole
fused set (the union of the lexical and dense lists), so every candidate carries its BM25 score,
its stored-vector cosine, its exact rank and its RRF score. Every fusion is then applied offline
to those same candidates with the registered component itself (``retrieval.fusion``), as the
pipeline applies it to its rerank window, so each variant costs seconds, not a re-index.

The peers are the issue's: SQLite FTS5 BM25 (porter, OR of the query words) over whole documents
and all-MiniLM-L6-v2 (fp32 ONNX, mean pooling) over whole documents, top 100 each, fused by RRF
(k 60) or by a convex combination of min-max normalised scores (weight 0.5, Bruch et al. 2023).

Document level (the first unit of each document), trec_eval conventions via pytrec_eval; a query
with nothing retrieved scores 0. Intervals: paired bootstrap 95 % over queries and the sign-flip
p (``memory_core.evaluation.statistics``). The default is chosen by leave-one-collection-out
cross-validation over a grid of fusions (``GRID``): for each collection, the setting with the
best worst-case nDCG@10 gain over the shipped B4 on the other three is graded on it.

``MEMCORE_DEV_WORK=/some/folder`` keeps the homes and the recorded candidates there between runs
(re-indexing SciFact's 5,183 abstracts takes minutes); without it a scratch folder is used.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from benchmarks.common import CISI, CRANFIELD, LOCOMO_DEV, SCIFACT_TRAIN, measured, scratch_dir, write_result

NAME = "dev_collections"
COLLECTIONS: Mapping[str, tuple[Path, str]] = {
    "cranfield": (CRANFIELD, "test"),
    "cisi": (CISI, "test"),
    "locomo-dev": (LOCOMO_DEV, "test"),
    "scifact-train": (SCIFACT_TRAIN, "train"),
}
MEASURES = ("ndcg_cut_10", "recall_100", "recip_rank")
LABELS = {"ndcg_cut_10": "nDCG@10", "recall_100": "R@100", "recip_rank": "MRR"}
DEPTH = 100
RRF_K = 60
FIELDS = ("exact_rank", "bm25_rank", "bm25_score", "lexical_rank", "dense_rank", "dense_similarity", "rrf_rank")
UNION = 1_000  # a rerank depth past every fused set here (<= 200 units): the union of both lists
# The resource-level lexical list (issue 32 item 1): Lucene BM25 (the product's adapter and
# analysis) over each resource's whole text, deep enough to score every recorded candidate's resource.
RESOURCE_DEPTH = 1_000
RESOURCE_BM25 = (0.25, 0.5, 0.75, 1.0)  # the weights of the whole-resource score measured


def grid() -> list[tuple[dict[str, Any], int]]:
    """The settings the default is chosen among: every fusion, alpha, resource weight and window."""
    alphas = [round(0.05 * i, 2) for i in range(5, 13)]
    out: list[tuple[dict[str, Any], int]] = [({"fusion": "rrf"}, 50)]
    for depth in (50, UNION):
        for rw in (0.0, 0.25, 0.5):
            for a in alphas:
                out.append(({"fusion": "convex_floor", "alpha": a, "resource_weight": rw}, depth))
                out.append(({"fusion": "convex_minmax", "alpha": a, "resource_weight": rw}, depth))
                out.append(({"fusion": "dbsf", "alpha": a, "resource_weight": rw}, depth))
    for rb in RESOURCE_BM25[:3]:  # the resource-level lexical list, in the default's window
        for a in alphas:
            out.append(({"fusion": "convex_floor", "alpha": a, "resource_bm25": rb}, 50))
    return out


def setting_key(setting: Mapping[str, Any], depth: int) -> str:
    window = "union" if depth >= UNION else str(depth)
    params = ",".join(f"{k}={v}" for k, v in sorted(setting.items()) if k != "fusion")
    return f"{setting['fusion']}({params}) window {window}"


# -- the collection and its recorded candidates ---------------------------------------------------
@attrs.frozen
class Collection:
    documents: Mapping[str, tuple[str, str]]
    queries: Mapping[str, str]
    qrels: Mapping[str, Mapping[str, int]]

    @classmethod
    def load(cls, root: Path, split: str) -> Collection:
        with (root / "corpus.jsonl").open(encoding="utf-8") as f:
            documents = {d["_id"]: (d.get("title") or "", d["text"]) for d in map(json.loads, f)}
        with (root / "queries.jsonl").open(encoding="utf-8") as f:
            queries = {q["_id"]: q["text"] for q in map(json.loads, f)}
        qrels: dict[str, dict[str, int]] = {}
        with (root / "qrels" / f"{split}.tsv").open(encoding="utf-8") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
        return cls(documents, queries, qrels)


def record(name: str, work: Path) -> dict[str, Any]:
    """The collection's candidates for every judged query, and the peers' scored lists (kept in ``work``)."""
    saved = work / f"{name}.pkl"
    if saved.exists():
        with saved.open("rb") as f:
            recorded: dict[str, Any] = pickle.load(f)  # our own file, written below
        return recorded
    import numpy as np

    from benchmarks.cranfield_quality import EVAL_PROFILE, PROJECT, Cranfield, doc_id
    from benchmarks.peer_comparison import PeerIndex
    from benchmarks.recording_overhead import index_folder
    from memory_core.adapters.models.onnx_minilm import OnnxMiniLMEmbedder
    from memory_core.retrieval.profile import MAX_QUERY_CHARS
    from memory_core.runs.records import NullRecorder

    root, split = COLLECTIONS[name]
    col = Collection.load(root, split)
    qids = [q for q in col.queries if q in col.qrels and len(col.queries[q]) <= MAX_QUERY_CHARS]
    memory = work / f"mem-{name}"
    Cranfield(col.documents, col.queries, col.qrels).write_memory(memory)
    print(f"   indexing {name}", flush=True)
    t0 = time.perf_counter()
    engine = index_folder(work / f"home-{name}", PROJECT, memory, profile=EVAL_PROFILE)
    index_s = time.perf_counter() - t0
    try:
        engine.recorder = NullRecorder()
        acts = {}
        for q in qids:
            activation = engine.activate(PROJECT, col.queries[q])
            acts[q] = [(c.unit.unit_id, doc_id(c.unit.resource_id), *(getattr(c, k) for k in FIELDS))
                       for c in activation.candidates]  # fmt: skip
    finally:
        engine.close()
    print(f"   the peers' whole-document lists for {name}", flush=True)
    embedder = OnnxMiniLMEmbedder(cache_dir=work / "models", query_cache_size=0)
    ids = list(col.documents)
    bodies = [f"{col.documents[i][0]} {col.documents[i][1]}".strip() for i in ids]
    vectors = np.stack(embedder.embed_documents(bodies)).astype(np.float32)
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE d USING fts5(id UNINDEXED, body, tokenize='porter unicode61')")
    conn.executemany("INSERT INTO d VALUES (?, ?)", list(zip(ids, bodies, strict=True)))
    peer = {}
    for q in qids:
        expression = PeerIndex.match_expression(col.queries[q])
        lexical = [] if expression is None else [(r[0], -r[1]) for r in conn.execute(
            "SELECT id, bm25(d) FROM d WHERE d MATCH ? ORDER BY bm25(d) LIMIT ?", (expression, DEPTH))]  # fmt: skip
        scores = vectors @ np.asarray(embedder.embed_query(col.queries[q]), dtype=np.float32)
        top = np.argsort(-scores, kind="stable")[:DEPTH]
        peer[q] = {"bm25": lexical, "dense": [(ids[i], float(scores[i])) for i in top]}
    conn.close()
    recorded = {"qids": qids, "qrels": col.qrels, "acts": acts, "peer": peer, "index_s": round(index_s, 1)}
    with saved.open("wb") as f:
        pickle.dump(recorded, f)
    return recorded


def resource_lexical(name: str, work: Path, recorded: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per query, the whole-resource BM25 of the top ``RESOURCE_DEPTH`` resources (by document id),
    from a Lucene index the product's adapter builds over one document per resource (kept in ``work``)."""
    saved = work / f"{name}-resource-bm25.pkl"
    if saved.exists():
        with saved.open("rb") as f:
            kept: dict[str, dict[str, float]] = pickle.load(f)  # our own file, written below
        return kept
    from benchmarks.cranfield_quality import Cranfield, doc_id
    from memory_core.adapters.search.lucene_index import LuceneIndexFactory

    root, split = COLLECTIONS[name]
    col = Collection.load(root, split)
    factory = LuceneIndexFactory()
    directory = work / f"resource-lucene-{name}"
    factory.build(directory, Cranfield(col.documents, col.queries, col.qrels).whole_document_units())
    searcher = factory.open(directory)
    try:
        out = {}
        for q in recorded["qids"]:
            hits = searcher.search(col.queries[q], RESOURCE_DEPTH)
            out[q] = {doc_id(uid.rpartition("#")[0]): score for uid, score in hits}
    finally:
        searcher.close()
    with saved.open("wb") as f:
        pickle.dump(out, f)
    return out


# -- offline ranking with the registered fusions --------------------------------------------------
@attrs.define(slots=True)
class Recorded:
    """One recorded candidate, as a fusion reads it (``RerankInput``)."""

    unit_id: str
    resource_id: str
    exact_rank: int | None
    bm25_score: float | None
    dense_similarity: float | None
    lexical_rank: int | None
    dense_rank: int | None
    rrf_rank: int
    rrf_score: float
    text: str = ""
    heading_path: tuple[str, ...] = ()
    resource_bm25_score: float | None = None


def candidates(rows: Sequence[Sequence[Any]], resource_bm25: Mapping[str, float] | None = None) -> list[Recorded]:
    """In RRF order (the fusion stage's), as the pipeline hands them to the reranker."""
    from memory_core.retrieval.pipeline import rrf_score

    out = []
    for uid, doc, exact_rank, _bm25_rank, bm25_score, lexical_rank, dense_rank, sim, rrf_rank in rows:
        score = rrf_score(lexical_rank, dense_rank, RRF_K)
        whole = None if resource_bm25 is None else resource_bm25.get(doc)
        out.append(Recorded(uid, doc, exact_rank, bm25_score, sim, lexical_rank, dense_rank, rrf_rank, score,
                            resource_bm25_score=whole))  # fmt: skip
    return sorted(out, key=lambda c: c.rrf_rank)


def documents(order: Sequence[Recorded]) -> list[str]:
    return list(dict.fromkeys(c.resource_id for c in order))


def fused(cands: Sequence[Recorded], fusion: Any, depth: int) -> list[Recorded]:
    """``apply_rerank``'s order: the window by the fusion's score (ties in RRF order), then the rest."""
    head, tail = list(cands[:depth]), list(cands[depth:])
    scores = fusion.rerank("", head)
    return [head[i] for i in sorted(range(len(head)), key=lambda i: -scores[i])] + tail


def peer_orders(peer: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, list[str]]:
    rrf: dict[str, float] = {}
    convex: dict[str, float] = {}
    for ranked in (peer["bm25"], peer["dense"]):
        if not ranked:
            continue
        values = [v for _, v in ranked]
        lo, hi = min(values), max(values)
        for rank, (doc, value) in enumerate(ranked, start=1):
            rrf[doc] = rrf.get(doc, 0.0) + 1.0 / (RRF_K + rank)
            convex[doc] = convex.get(doc, 0.0) + 0.5 * ((value - lo) / (hi - lo) if hi > lo else 1.0)
    return {"peer_rrf": sorted(rrf, key=lambda d: -rrf[d]), "peer_convex": sorted(convex, key=lambda d: -convex[d])}


class Graded:
    """Per-query measures of any ranking of one collection's recorded queries."""

    def __init__(
        self, recorded: Mapping[str, Any], resource_bm25: Mapping[str, Mapping[str, float]] | None = None
    ) -> None:
        from benchmarks.cranfield_quality import TrecEval

        self.qids: list[str] = list(recorded["qids"])
        self.trec = TrecEval(recorded["qrels"])
        whole = resource_bm25 or {}
        self.cases = {q: candidates(rows, whole.get(q, {}) if resource_bm25 else None)
                      for q, rows in recorded["acts"].items()}  # fmt: skip
        self.peer = {q: peer_orders(p) for q, p in recorded["peer"].items()}

    def per_query(self, rankings: Mapping[str, Sequence[str]]) -> dict[str, list[float]]:
        graded = self.trec.per_query(rankings)
        return {q: [graded.get(q, {}).get(m, 0.0) for m in MEASURES] for q in self.qids}

    def stage(self, attr: str) -> dict[str, list[float]]:
        """B1-B3: the candidates one stage ranked, in its order."""

        def order(cs: Sequence[Recorded]) -> list[Recorded]:
            return sorted((c for c in cs if getattr(c, attr) is not None), key=lambda c: getattr(c, attr))

        return self.per_query({q: documents(order(cs)) for q, cs in self.cases.items()})

    def fusion(self, fusion: Any, depth: int) -> dict[str, list[float]]:
        return self.per_query({q: documents(fused(cs, fusion, depth)) for q, cs in self.cases.items()})

    def peers(self, which: str) -> dict[str, list[float]]:
        return self.per_query({q: p[which] for q, p in self.peer.items()})

    def single(self, lists: Mapping[str, Sequence[str]]) -> dict[str, list[float]]:
        """One ranked list of documents per query, alone (the lexical lists compared side by side)."""
        return self.per_query({q: lists.get(q, []) for q in self.qids})


def mean(per_query: Mapping[str, Sequence[float]], measure: int = 0) -> float:
    return sum(v[measure] for v in per_query.values()) / len(per_query)


def compare(a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]]) -> dict[str, dict[str, float]]:
    """a - b on every measure: mean, paired bootstrap 95 % interval, sign-flip p."""
    from memory_core.evaluation.statistics import paired_bootstrap, paired_randomization_p

    out = {}
    for i, m in enumerate(MEASURES):
        x, y = [a[q][i] for q in a], [b[q][i] for q in a]
        interval = paired_bootstrap(x, y)
        out[m] = {"diff": interval.mean_diff, "low": interval.low, "high": interval.high,
                  "p": paired_randomization_p(x, y)}  # fmt: skip
    return out


def run(quick: bool = False) -> dict[str, Any]:
    from memory_core.retrieval.exact import REVISION as EXACT_REVISION
    from memory_core.retrieval.fusion import DEFAULT_FUSION, FUSIONS, fusion_from_settings
    from memory_core.retrieval.profile import RankingProfile

    shipped_depth = RankingProfile().rerank_depth
    given = os.environ.get("MEMCORE_DEV_WORK")
    names = list(COLLECTIONS)[:2] if quick else list(COLLECTIONS)
    with scratch_dir(NAME) as tmp:
        work = Path(given) if given else tmp
        work.mkdir(parents=True, exist_ok=True)
        graded, lexical_lists, recorded_peer = {}, {}, {}
        for n in names:
            recorded = record(n, work)
            lexical_lists[n] = resource_lexical(n, work, recorded)
            recorded_peer[n] = recorded["peer"]
            graded[n] = Graded(recorded, lexical_lists[n])
    default = fusion_from_settings({})  # the shipped default: DEFAULT_FUSION at its defaults
    variants: dict[str, dict[str, dict[str, list[float]]]] = {}
    for n, g in graded.items():
        rows = {"B1": g.stage("lexical_rank"), "B2": g.stage("dense_rank"), "B3": g.stage("rrf_rank"),
                "B4": g.fusion(default, shipped_depth)}  # fmt: skip
        for fname in FUSIONS:
            rows[f"fusion {fname}"] = g.fusion(FUSIONS[fname](), shipped_depth)
            rows[f"fusion {fname}, union window"] = g.fusion(FUSIONS[fname](), UNION)
        for weight in RESOURCE_BM25:  # item 1: the resource-level lexical list blended into the default
            rows[f"B4 + resource BM25 {weight:g}"] = g.fusion(
                fusion_from_settings({"resource_bm25": weight}), shipped_depth
            )
        rows["peer RRF"] = g.peers("peer_rrf")
        rows["peer convex"] = g.peers("peer_convex")
        # Where the lexical gap lies: the same analysis over whole resources, and the peer's own list.
        whole = lexical_lists[n]
        rows["lexical alone: Lucene, whole resources"] = g.single(
            {q: sorted(whole.get(q, {}), key=lambda d: -whole[q][d])[:DEPTH] for q in g.qids}
        )
        rows["lexical alone: peer FTS5, whole documents"] = g.single(
            {q: [d for d, _ in p["bm25"]] for q, p in recorded_peer[n].items()}
        )
        variants[n] = rows
    # Leave one collection out: the grid's best worst-case gain over B4 on the others, graded on it.
    settings = grid()
    gains: dict[str, dict[str, float]] = {n: {} for n in names}
    scored: dict[str, dict[str, dict[str, list[float]]]] = {n: {} for n in names}
    for setting, depth in settings:
        key = setting_key(setting, depth)
        fusion = fusion_from_settings(setting)
        for n, g in graded.items():
            scored[n][key] = g.fusion(fusion, depth)
            gains[n][key] = mean(scored[n][key]) - mean(variants[n]["B4"])
    held_out = {}
    for n in names:
        others = [o for o in names if o != n]
        pick = max(gains[n], key=lambda k: (min(gains[o][k] for o in others), sum(gains[o][k] for o in others)))
        held_out[n] = {"setting": pick, "gain_on_others_worst": min(gains[o][pick] for o in others),
                       "vs_b4": compare(scored[n][pick], variants[n]["B4"])}  # fmt: skip
    overall = max(gains[names[0]], key=lambda k: (min(gains[o][k] for o in names), sum(gains[o][k] for o in names)))
    result: dict[str, Any] = {
        "quick": quick,
        "collections": {},
        "default": {
            "fusion": DEFAULT_FUSION,
            "revision": default.revision,
            "rerank_depth": shipped_depth,
            "exact": EXACT_REVISION,
        },  # fmt: skip
        "grid_size": len(settings),
        "held_out": held_out,
        "best_worst_case": {
            "setting": overall,
            "gains": {n: gains[n][overall] for n in names},
            "vs_b4": {n: compare(scored[n][overall], variants[n]["B4"]) for n in names},
            "vs_peer_convex": {n: compare(scored[n][overall], variants[n]["peer convex"]) for n in names},
        },  # fmt: skip
    }
    for n, rows in variants.items():
        result["collections"][n] = {
            "queries": len(graded[n].qids),
            "means": {v: [mean(pq, i) for i in range(len(MEASURES))] for v, pq in rows.items()},
            "vs_b4": {v: compare(pq, rows["B4"]) for v, pq in rows.items() if v != "B4"},
            "b4_vs_peer_convex": compare(rows["B4"], rows["peer convex"]),
            "b4_vs_peer_rrf": compare(rows["B4"], rows["peer RRF"]),
            "resource_bm25_vs_peer_convex": {
                f"{w:g}": compare(rows[f"B4 + resource BM25 {w:g}"], rows["peer convex"]) for w in RESOURCE_BM25
            },  # fmt: skip
        }
    return write_result(NAME, result)


# -- the report ---------------------------------------------------------------------------------
def _ci(c: Mapping[str, float]) -> str:
    mark = "" if c["low"] <= 0 <= c["high"] else " *"  # * : the interval excludes 0
    return f"{c['diff']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]{mark}"


def render(result: dict[str, Any]) -> str:
    lines = [
        "## Fusion functions, B1-B4 and both peers on the four development collections (issue 32)",
        "",
        f"{measured(result)}. Each collection indexed once with the real components; every judged query "
        "through `Engine.activate` reranking the whole fused set, then every registered fusion "
        "(`memory_core/retrieval/fusion.py`) applied offline to those candidates (`benchmarks/dev_collections.py`). "
        "Peers: FTS5 BM25 + MiniLM fp32 over whole documents, RRF k 60 or convex min-max weight 0.5. "
        "Document level, trec_eval conventions; in brackets the paired bootstrap 95 % interval of the "
        "difference with B4 (the shipped default: "
        f"`{result['default']['revision']}`, window {result['default']['rerank_depth']}; exact identity stage "
        f"`{result['default'].get('exact', 'exact-identity-v2')}`); "
        "`*` marks an interval that excludes 0, every other difference is not significant.",
        "",
    ]
    for n, c in result["collections"].items():
        lines += [f"**{n}** ({c['queries']} judged queries)", "",
                  "| ranking | nDCG@10 | R@100 | MRR | nDCG@10 − B4 | R@100 − B4 | MRR − B4 |",
                  "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for v, m in c["means"].items():
            d = c["vs_b4"].get(v)
            cells = [_ci(d[k]) for k in MEASURES] if d else ["", "", ""]
            lines.append(f"| {v} | {m[0]:.3f} | {m[1]:.3f} | {m[2]:.3f} | " + " | ".join(cells) + " |")
        convex, rrf = c["b4_vs_peer_convex"], c["b4_vs_peer_rrf"]
        whole = "; ".join(
            f"weight {w} {_ci(d['ndcg_cut_10'])}" for w, d in c.get("resource_bm25_vs_peer_convex", {}).items()
        )
        if whole:
            lines += ["", f"B4 with the whole-resource BM25 list (`resource_bm25`) − peer convex, nDCG@10: {whole}."]
        lines += ["", f"B4 − peer convex: nDCG@10 {_ci(convex['ndcg_cut_10'])}, R@100 {_ci(convex['recall_100'])}, "
                      f"MRR {_ci(convex['recip_rank'])}; B4 − peer RRF: nDCG@10 {_ci(rrf['ndcg_cut_10'])}, "
                      f"R@100 {_ci(rrf['recall_100'])}, MRR {_ci(rrf['recip_rank'])}.", ""]  # fmt: skip
    lines += [f"Choosing the default by leave-one-collection-out cross-validation over {result['grid_size']} "
              "settings (the best worst-case nDCG@10 gain over B4 on the other three, graded on the one left out):", "",
              "| held out | chosen on the others | their worst gain | nDCG@10 − B4 here |",
              "|---|---|---:|---:|"]  # fmt: skip
    for n, h in result["held_out"].items():
        here = _ci(h["vs_b4"]["ndcg_cut_10"])
        lines.append(f"| {n} | `{h['setting']}` | {h['gain_on_others_worst']:+.4f} | {here} |")
    b = result["best_worst_case"]
    lines += ["", f"Best worst case over all four: `{b['setting']}`: "
              + "; ".join(f"{n} {_ci(b['vs_b4'][n]['ndcg_cut_10'])} over B4, "
                          f"{_ci(b['vs_peer_convex'][n]['ndcg_cut_10'])} over the convex peer"
                          for n in b["gains"]) + ".", ""]  # fmt: skip
    return "\n".join(lines)
