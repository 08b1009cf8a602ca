"""Latency through the daemon against the afternoon peer, on the four development collections (issue 32 item 3).

Each collection (Cranfield, CISI, LoCoMo dev, SciFact train) is written one markdown resource per
document and indexed with the real components (``index_folder``, the suite's embedding cache),
then served by a real daemon started as ``memcore serve`` starts it (watcher and UI on, every
activation recorded). Every judged query an activation accepts (duplicates once: a repeated
text would hit the query-embedding cache) is asked, in one run, of:

- the peer, in process: SQLite FTS5 BM25 (porter, each query word quoted and OR-ed) over whole
  documents, a brute-force numpy cosine over one vector per document, RRF (k 60) of the two
  top-100 lists, the query embedded by all-MiniLM-L6-v2 as a user would run it (torch fp32,
  warm, one thread). Its document vectors are the normalised mean of memory-core's unit vectors of
  each document: the same shape and type as a whole-document embedding, so the same cost (its
  quality is dev_collections' business, not this one's);
- memory-core through the daemon's socket with the typed client (``DaemonClient.activate_memory``:
  the answer decoded into ``ActivationResponse``) and with ``call_json`` (the JSON as it is, what
  ``memcore mcp`` forwards).

The three take turns query by query in an order that rotates, so a busy moment of the shared
machine falls on all of them. Ratios are of p50 (and p95) over the same queries, with a 95 %
bootstrap interval that resamples queries with their pairs kept. Queries are also split by length
(words). The daemon's and the client's CPU per request come from /proc over the whole run.

``ablation``: in process on Cranfield, the two engine changes of this issue undone one at a time
(BM25 read as one wrapped ``ScoredDoc`` per hit; the query embedded inline after BM25), the
variants taking turns query by query.

``MEMCORE_LATENCY_BEFORE=/a/checkout`` (with ``MEMCORE_LATENCY_NOW=/another``, else this tree):
instead of the above, the peer and two daemons, one running each copy of the code (``PYTHONPATH``),
each over its own copy of the same indexed home, take turns query by query: a change's before and
after through the daemon in one run (``daemon_latency_before_after.json``, what was undone in
``MEMCORE_LATENCY_BEFORE_NOTE``), after ``MEMCORE_LATENCY_WARMUP`` queries to each (default 20;
another number: ``daemon_latency_before_after_warmN.json``): the JVM compiles Lucene's code over
the first few hundred searches of a daemon. ``MEMCORE_LATENCY_PAUSE_MS=40`` waits that long before
every call (``daemon_latency_before_after_pause40.json``): isolated calls, as an agent makes them,
with nothing of the last call (a Run written behind its answer) still running.

``MEMCORE_LATENCY_WORK=/some/folder`` keeps the indexed homes between runs;
``MEMCORE_LATENCY_COLLECTIONS=cranfield,cisi`` measures only those (no ablation unless Cranfield is
one; ``MEMCORE_LATENCY_ABLATION=0`` leaves it out): a smaller run to compare a change, whose result
is written as ``daemon_latency_subset.json``, never over the full run's.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import measured, percentile, read_result, scratch_dir, write_result

NAME = "daemon_latency"
PROJECT = "memory"
WARMUP = 20
BUCKETS = ((1, 5), (6, 10), (11, 20), (21, 10_000))  # words per query
SYSTEMS = ("peer", "daemon", "daemon_json")
GOAL = 0.5


def bucket_of(text: str) -> str:
    words = len(text.split())
    for low, high in BUCKETS:
        if low <= words <= high:
            return f"{low}-{high}" if high < 10_000 else f"{low}+"
    return f"{BUCKETS[-1][0]}+"


def quantile_ratio_interval(
    ours: Sequence[float], peer: Sequence[float], q: float, resamples: int = 2000
) -> list[float]:
    """95 % bootstrap interval of quantile_q(ours) / quantile_q(peer) (nearest rank), resampling
    queries with their pairs kept (each query was timed on both sides back to back)."""
    if len(ours) < 2:
        return [float("nan"), float("nan")]
    rng = np.random.default_rng(0)
    a, b = np.asarray(ours), np.asarray(peer)
    picks = rng.integers(0, len(a), size=(resamples, len(a)))
    num = np.quantile(a[picks], q, axis=1, method="inverted_cdf")
    den = np.quantile(b[picks], q, axis=1, method="inverted_cdf")
    ratios = num / den
    return [float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))]


def summary(ours: Sequence[float], peer: Sequence[float]) -> dict[str, Any]:
    p50o, p50p = percentile(list(ours), 50), percentile(list(peer), 50)
    p95o, p95p = percentile(list(ours), 95), percentile(list(peer), 95)
    return {
        "n": len(ours),
        "p50": p50o,
        "p95": p95o,
        "peer_p50": p50p,
        "peer_p95": p95p,
        "ratio_p50": p50o / p50p,
        "ratio_p50_ci95": quantile_ratio_interval(ours, peer, 0.5),
        "ratio_p95": p95o / p95p,
        "ratio_p95_ci95": quantile_ratio_interval(ours, peer, 0.95),
    }


def _process_cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _doc_vectors(engine: Any) -> tuple[list[str], np.ndarray]:
    """One vector per document: the normalised mean of its units' stored vectors."""
    from benchmarks.cranfield_quality import doc_id
    from benchmarks.peer_comparison import resource_of
    from memory_core.adapters.search.usearch_index import IDS_FILE, VECTORS_FILE
    from memory_core.services.indexing import VECTOR_DIR

    directory = Path(engine.catalog.current_generation(PROJECT).directory) / VECTOR_DIR
    unit_ids = json.loads((directory / IDS_FILE).read_text(encoding="utf-8"))
    vectors = np.load(directory / VECTORS_FILE)
    rows: dict[str, list[int]] = {}
    for row, uid in enumerate(unit_ids):
        rows.setdefault(doc_id(resource_of(uid)), []).append(row)
    ids = list(rows)
    matrix = np.stack([vectors[r].mean(axis=0) for r in rows.values()]).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return ids, matrix


class _Doc:
    def __init__(self, unit_id: str, text: str) -> None:
        self.unit_id, self.text = unit_id, text


def _texts(col: Any, quick: bool) -> list[str]:
    from memory_core.retrieval.profile import MAX_QUERY_CHARS

    texts = list(dict.fromkeys(
        col.queries[q] for q in col.queries if q in col.qrels and len(col.queries[q].strip()) <= MAX_QUERY_CHARS
    ))  # fmt: skip
    return texts[:60] if quick else texts


def _indexed_home(name: str, work: Path, col: Any) -> Path:
    from benchmarks.cranfield_quality import Cranfield
    from benchmarks.recording_overhead import index_folder

    home = work / f"home-{name}"
    if not (home / "local.db").exists():
        memory = work / f"mem-{name}"
        Cranfield(col.documents, col.queries, col.qrels).write_memory(memory)
        print(f"   indexing {name}", flush=True)
        index_folder(home, PROJECT, memory).close()
    return home


def _peer(home: Path, col: Any) -> tuple[Any, int]:
    """The peer over the collection's documents, and how many units memory-core serves."""
    from benchmarks.peer_comparison import PeerIndex
    from memory_core.entrypoints.bootstrap import bootstrap

    engine = bootstrap(home)
    try:
        doc_ids, matrix = _doc_vectors(engine)
        generation = engine.catalog.current_generation(PROJECT)
        assert generation is not None
        units = engine.generations.load_units(Path(generation.directory))
    finally:
        engine.close()
    bodies = [_Doc(d, f"{t} {x}".strip()) for d, (t, x) in col.documents.items()]
    return PeerIndex(bodies, doc_ids, matrix, "porter unicode61"), len(units)  # FTS5 rows: every document


def measure_collection(
    name: str, work: Path, embed: Callable[[str], Any], quick: bool, *, index_only: bool = False
) -> dict[str, Any]:
    from threadpoolctl import threadpool_limits

    from benchmarks.api_overhead import start_daemon, stop_daemon
    from benchmarks.dev_collections import COLLECTIONS, Collection
    from benchmarks.recording_overhead import loadavg

    col = Collection.load(*COLLECTIONS[name])
    texts = _texts(col, quick)
    home = _indexed_home(name, work, col)
    if index_only:
        return {}
    peer, units = _peer(home, col)
    daemon, client = start_daemon(home)
    lat: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    engine_total: list[float] = []
    stages: dict[str, list[float]] = {}
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            for i, text in enumerate(texts[:WARMUP]):
                peer.search(text, embed)
                client.activate_memory(PROJECT, f"warm-up {i}: {text}")
            load = [loadavg()]
            cpu0, client0 = _process_cpu_ms(daemon.pid), time.process_time()
            for i, text in enumerate(texts):
                order = SYSTEMS[i % 3 :] + SYSTEMS[: i % 3]
                for system in order:
                    t0 = time.perf_counter()
                    if system == "peer":
                        peer.search(text, embed)
                    elif system == "daemon":
                        answer = client.activate_memory(PROJECT, text)
                    else:
                        # A different text, so the daemon's query-embedding cache never answers it:
                        # the same words to search (the analyzers drop punctuation), one more token.
                        client.call_json("activate_memory", {"project_id": PROJECT, "query": text + "?"})
                    lat[system].append((time.perf_counter() - t0) * 1000)
                engine_total.append(answer.latency_ms["total"])
                for stage, ms in answer.latency_ms.items():
                    stages.setdefault(stage, []).append(ms)
            # The client's CPU includes the peer's (same process): only the daemon's is per request.
            daemon_cpu = (_process_cpu_ms(daemon.pid) - cpu0) / (2 * len(texts))
            load.append(loadavg())
            transport = transport_ab(client.socket_path, texts) if name == "cranfield" else None
    finally:
        client.close()
        stop_daemon(daemon)
        peer.close()
    buckets: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys(bucket_of(t) for t in sorted(texts, key=lambda t: len(t.split()))):
        picked = [i for i, t in enumerate(texts) if bucket_of(t) == key]
        buckets[key] = {
            "daemon": summary([lat["daemon"][i] for i in picked], [lat["peer"][i] for i in picked]),
            "daemon_json": summary([lat["daemon_json"][i] for i in picked], [lat["peer"][i] for i in picked]),
        }
    beyond = [w - e for w, e in zip(lat["daemon"], engine_total, strict=True)]
    return {
        "queries": len(texts),
        "documents": len(col.documents),
        "units": units,
        "words_median": statistics.median(len(t.split()) for t in texts),
        "all": {
            "daemon": summary(lat["daemon"], lat["peer"]),
            "daemon_json": summary(lat["daemon_json"], lat["peer"]),
        },
        "buckets": buckets,
        "engine_stages_p50": {k: percentile(v, 50) for k, v in stages.items()},
        "engine_total_p50": percentile(engine_total, 50),
        "outside_engine_p50": percentile(beyond, 50),
        "transport": transport,
        "daemon_cpu_ms_per_request": daemon_cpu,
        "client_process_cpu_s": time.process_time() - client0,
        "loadavg_1m": load,
    }


def _importer(checkout: Path, cwd: Path) -> Path:
    """Where a process started with ``PYTHONPATH=checkout`` imports memory_core from."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", "import memory_core; print(memory_core.__file__)"],
        env={**os.environ, "PYTHONPATH": str(checkout)}, cwd=cwd, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Path(out.stdout.strip()).resolve()


def before_after(
    name: str, work: Path, embed: Callable[[str], Any], quick: bool, checkouts: Mapping[str, Path | None]
) -> dict[str, Any]:
    """Memory-core as two copies of the code have it (``checkouts["now"]``, None for this tree, and
    ``checkouts["before"]``, e.g. with a change undone), each its own daemon over its own copy of the
    same indexed home, and the peer: the three take turns query by query in a rotating order, so
    the machine's load falls on all of them alike."""
    import shutil

    from threadpoolctl import threadpool_limits

    from benchmarks.api_overhead import start_daemon, stop_daemon
    from benchmarks.dev_collections import COLLECTIONS, Collection
    from benchmarks.recording_overhead import loadavg

    col = Collection.load(*COLLECTIONS[name])
    texts = _texts(col, quick)
    warmup = int(os.environ.get("MEMCORE_LATENCY_WARMUP", WARMUP))  # a different file: run()
    pause_s = pause_ms() / 1000
    home = _indexed_home(name, work, col)
    homes = {"now": home, "before": work / f"home-{name}-before"}
    if not (homes["before"] / "local.db").exists():
        shutil.rmtree(homes["before"], ignore_errors=True)
        shutil.copytree(home, homes["before"], symlinks=True, ignore=shutil.ignore_patterns("run"))
    for which, checkout in checkouts.items():
        if checkout is not None and not _importer(checkout, homes[which]).is_relative_to(checkout.resolve()):
            raise RuntimeError(f"PYTHONPATH={checkout} does not override the installed memory_core")
    print(f"   {name}: now and before", flush=True)
    peer, units = _peer(home, col)
    systems = ("peer", "now", "before")
    daemons: dict[str, Any] = {}
    clients: dict[str, Any] = {}
    lat: dict[str, list[float]] = {s: [] for s in systems}
    stages: dict[str, dict[str, list[float]]] = {"now": {}, "before": {}}
    saved = os.environ.get("PYTHONPATH")
    try:
        for which, checkout in checkouts.items():
            if checkout is not None:
                os.environ["PYTHONPATH"] = str(checkout)  # the daemon imports the checkout's code
            try:
                daemons[which], clients[which] = start_daemon(homes[which])
            finally:
                if saved is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = saved
        with threadpool_limits(limits=1, user_api="blas"):
            for i in range(warmup):  # the judged texts again and again, never the same one twice
                text = f"warm-up {i}: {texts[i % len(texts)]}"
                peer.search(text, embed)
                for which in ("now", "before"):
                    clients[which].activate_memory(PROJECT, text)
            load = [loadavg()]
            for i, text in enumerate(texts):
                for system in systems[i % 3 :] + systems[: i % 3]:
                    if pause_s:
                        time.sleep(pause_s)
                    t0 = time.perf_counter()
                    if system == "peer":
                        peer.search(text, embed)
                    else:
                        answer = clients[system].activate_memory(PROJECT, text)
                    lat[system].append((time.perf_counter() - t0) * 1000)
                    if system != "peer":
                        for stage, ms in answer.latency_ms.items():
                            stages[system].setdefault(stage, []).append(ms)
            load.append(loadavg())
    finally:
        for which in list(daemons):
            clients[which].close()
            stop_daemon(daemons[which])
        peer.close()
    buckets: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys(bucket_of(t) for t in sorted(texts, key=lambda t: len(t.split()))):
        picked = [i for i, t in enumerate(texts) if bucket_of(t) == key]
        buckets[key] = {
            which: summary([lat[which][i] for i in picked], [lat["peer"][i] for i in picked])
            for which in ("now", "before")
        }
    return {
        "queries": len(texts),
        "units": units,
        "words_median": statistics.median(len(t.split()) for t in texts),
        "warmup": warmup,
        "pause_ms": pause_ms(),
        "now": summary(lat["now"], lat["peer"]),
        "before": summary(lat["before"], lat["peer"]),
        "now_over_before": summary(lat["now"], lat["before"]),
        "paired_median_diff": statistics.median(a - b for a, b in zip(lat["now"], lat["before"], strict=True)),
        "buckets": buckets,
        "engine_stages_p50": {w: {k: percentile(v, 50) for k, v in st.items()} for w, st in stages.items()},
        "loadavg_1m": load,
    }


def transport_ab(socket_path: Path, texts: Sequence[str]) -> dict[str, Any]:
    """The client's HTTP: httpx (before) and the standard library's (``daemon/transport.py``), the
    same ``call_json`` taking turns on the same daemon; the caller's thread CPU and wall per call."""
    import httpx

    from memory_core.entrypoints.daemon.client import CONNECT_TIMEOUT_S, DaemonClient

    clients = {
        "httpx": DaemonClient(socket_path, http=httpx.Client(
            transport=httpx.HTTPTransport(uds=str(socket_path)), base_url="http://localhost",
            timeout=httpx.Timeout(120, connect=CONNECT_TIMEOUT_S),
        )),
        "stdlib": DaemonClient(socket_path, timeout=120),
    }  # fmt: skip
    cpu: dict[str, list[float]] = {k: [] for k in clients}
    wall: dict[str, list[float]] = {k: [] for k in clients}
    try:
        for i, text in enumerate(texts):
            for name in list(clients) if i % 2 else list(clients)[::-1]:
                t0, c0 = time.perf_counter(), time.thread_time()
                clients[name].call_json("activate_memory", {"project_id": PROJECT, "query": f"{text} ({name})"})
                cpu[name].append((time.thread_time() - c0) * 1000)
                wall[name].append((time.perf_counter() - t0) * 1000)
    finally:
        for client in clients.values():
            client.close()
    return {
        "queries": len(texts),
        "cpu_p50": {k: percentile(v, 50) for k, v in cpu.items()},
        "wall_p50": {k: percentile(v, 50) for k, v in wall.items()},
        "wall_paired_median_diff": statistics.median(a - b for a, b in zip(wall["stdlib"], wall["httpx"], strict=True)),
    }


def ablation(work: Path, quick: bool) -> dict[str, Any]:
    """In process on Cranfield: the current engine, and each of this issue's two changes undone."""
    from benchmarks.dev_collections import COLLECTIONS, Collection
    from benchmarks.recording_overhead import loadavg
    from memory_core.entrypoints.bootstrap import bootstrap
    from memory_core.retrieval.profile import MAX_QUERY_CHARS
    from memory_core.services import activation

    col = Collection.load(*COLLECTIONS["cranfield"])
    texts = [col.queries[q] for q in col.queries if q in col.qrels and len(col.queries[q]) <= MAX_QUERY_CHARS]
    texts = texts[:60] if quick else texts
    engine = bootstrap(work / "home-cranfield")
    helper: Any = activation._BESIDE
    beside = helper.run

    def inline(work_: Callable[[str], Any], arg: str) -> Any:
        timed = activation._Timed(work_, arg)
        timed()
        return timed

    try:
        engine.activate(PROJECT, "warm-up")
        lexical: Any = engine._open._open[PROJECT].lexical  # the served generation's LuceneSearcher
        history = engine.history
        assert history is not None
        arrays = lexical._top_hits
        java = lexical._java

        def wrapped(text: str, depth: int) -> tuple[list[str], list[float]]:
            hits = [(h.docid, h.score) for h in java.search(text, depth)]  # before: one ScoredDoc per hit
            return [d for d, _ in hits], [s for _, s in hits]

        variants: dict[str, tuple[Any, Any]] = {
            "now": (arrays, beside),
            "bm25 as ScoredDoc objects": (wrapped, beside),
            "query embedded after bm25": (arrays, inline),
            "both undone (before)": (wrapped, inline),
        }
        lat: dict[str, list[float]] = {v: [] for v in variants}
        for text in texts[:WARMUP]:
            for top_hits, run in variants.values():
                lexical._top_hits, helper.run = top_hits, run
                engine.activate(PROJECT, f"{text} (warm-up)")
                history.settle()
        load = [loadavg()]
        names = list(variants)
        for i, text in enumerate(texts):
            for name in names[i % 4 :] + names[: i % 4]:
                lexical._top_hits, helper.run = variants[name]
                t0 = time.perf_counter()
                engine.activate(PROJECT, text + "?" * (1 + names.index(name)))  # never the query cache
                lat[name].append((time.perf_counter() - t0) * 1000)
                history.settle()
        load.append(loadavg())
    finally:
        helper.__dict__.pop("run", None)  # the method again
        engine.close()
    return {
        "queries": len(texts),
        "variants": {
            name: {
                **summary(v, lat["both undone (before)"]),
                "paired_median_diff_to_now": statistics.median(a - b for a, b in zip(v, lat["now"], strict=True)),
            }
            for name, v in lat.items()
        },
        "loadavg_1m": load,
    }


def run(quick: bool) -> dict[str, Any]:
    from threadpoolctl import threadpool_limits

    from benchmarks.dev_collections import COLLECTIONS
    from memory_core.adapters.models.minilm import MiniLMEmbedder

    kept = os.environ.get("MEMCORE_LATENCY_WORK")
    with scratch_dir(NAME) as scratch:
        work = Path(kept) if kept else scratch
        work.mkdir(parents=True, exist_ok=True)
        collections = {}
        chosen = os.environ.get("MEMCORE_LATENCY_COLLECTIONS")
        names = [n for n in COLLECTIONS if not chosen or n in chosen.split(",")]
        undone: dict[str, Any] | None = None
        plain_minilm: MiniLMEmbedder | None = None
        checkout = os.environ.get("MEMCORE_LATENCY_BEFORE")
        if checkout:
            now = os.environ.get("MEMCORE_LATENCY_NOW")
            checkouts = {"now": Path(now) if now else None, "before": Path(checkout)}
            plain_minilm = MiniLMEmbedder(query_cache_size=0)
            plain_minilm.load()
            ab = {n: before_after(n, work, plain_minilm.embed_query, quick, checkouts) for n in names}
            note = os.environ.get("MEMCORE_LATENCY_BEFORE_NOTE", "")
            warm = int(os.environ.get("MEMCORE_LATENCY_WARMUP", WARMUP))
            named = f"{NAME}_before_after" + (f"_warm{warm}" if warm != WARMUP else "") + (
                f"_pause{pause_ms()}" if pause_ms() else ""
            )
            return write_result(named, {"quick": quick, "undone": note, "warmup": warm, "collections": ab})
        for name in names:
            print(f"   {name}", flush=True)
            if name == "cranfield" and os.environ.get("MEMCORE_LATENCY_ABLATION") != "0":
                collections[name] = measure_collection(name, work, lambda _: None, quick, index_only=True)
                print("   ablation (cranfield, in process)", flush=True)
                with threadpool_limits(limits=1, user_api="blas"):
                    undone = ablation(work, quick)
            if plain_minilm is None:  # in process, after the ablation: torch is not loaded for it
                plain_minilm = MiniLMEmbedder(query_cache_size=0)  # torch fp32: what a user would write
                plain_minilm.load()
            collections[name] = measure_collection(name, work, plain_minilm.embed_query, quick)
        result = {"quick": quick, "collections": collections, "ablation": undone}
    return write_result(NAME if names == list(COLLECTIONS) else f"{NAME}_subset", result)


# -- the report -------------------------------------------------------------------------------
# Measured outside ``run`` (earlier full runs, kept under their own names): how much the ratios
# move between runs. Fixed text; the rest of the closing prose is computed from the result.
BETWEEN_RUNS = """The ratios move with the load, with the machine a run lands on and, on CISI's 75 queries, from
run to run. This run (8a90329, after the JVM's C1 change of run 9) had a quiet machine, load
0.6-1.9, freshly started. The full run before it (dc15343, after the Run writer's changes of runs
6-8, before the C1 change, another machine, load 1.5-2.1, `daemon_latency_dc15343.json`) gave p50
ratios of 0.50 [0.48, 0.52] on Cranfield, 0.49 [0.42, 0.63] on CISI, 0.52 [0.51, 0.53] on LoCoMo
dev and 0.44 [0.44, 0.45] on SciFact train. Between the two, memory-core's own p50 fell on every
collection (Cranfield 9.4 to 8.3 ms, CISI 14.8 to 10.5, LoCoMo dev 8.6 to 7.9, SciFact train 11.5
to 9.0) but the peer's fell more on the short-query collections (Cranfield 18.7 to 15.1, LoCoMo
dev 16.6 to 12.4, SciFact train 26.1 to 19.7): on this machine its torch fp32 query embedding is
relatively cheaper, so the same code's ratio is higher (LoCoMo dev 0.64 against 0.52). The full run
before that (before the Run writer's changes, load 4.4-15.3 from other engineers' jobs,
`benchmarks/results/daemon_latency_loaded.json`) gave p50 ratios of 0.43 [0.40, 0.47] on
Cranfield, 0.51 [0.44, 0.68] on CISI, 0.60 [0.59, 0.62] on LoCoMo dev and 0.41 [0.39, 0.43] on
SciFact train, where the busy cores stretched the peer's fp32 query embedding most; on a quieter
machine then (load 1.5-2.4) LoCoMo dev was 0.67-0.72 (below). The one before it (the BM25 read before
597fd8f, load 5.1-7.2, `benchmarks/results/daemon_latency_previous.json`) gave p50 ratios of 0.52
[0.48, 0.57] on Cranfield, 0.68 [0.49, 0.80] on CISI, 0.48 [0.46, 0.50] on LoCoMo dev and 0.44
[0.42, 0.46] on SciFact train; the one before it (load 5.9-7.2, `daemon_latency_earlier.json`)
0.45, 0.73, 0.48 and 0.41, and CISI alone right after it (`daemon_latency_cisi_repeat.json`) 0.47
[0.41, 0.61] at a load of 4.1; the session before (load 4.7-5.5) 0.52, 0.54, 0.49 and 0.43, and at
a load of 7-9 (`benchmarks/results/daemon_latency_busier.json`) 0.39, 0.48, 0.46 and 0.36. Between
runs, then, the ratios differ by the load more than by the code: the before/after runs above put
both versions of the code in one run. The peer's torch fp32
query embedding needs several times the CPU of memory-core's int8 one, so the busier the cores, the
more the peer stretches; the issue's 0.80x was measured on a quieter machine. The shortest queries
are the hardest: the peer's embedding of a few words is cheap, while memory-core's fixed costs (the
hand-offs between threads, the HTTP, the Run) are the same for any query."""

# Measured with the before/after runs above (2026-12-07), fixed text: what they show.
BEFORE_AFTER = """What the BM25 read bought (597fd8f: each hit's id from the sort's `id` doc value
instead of its stored document, and the whole search one call into Java). In process, one thread
(five runs of a process's first 800 or 1,600 depth-100 searches on Cranfield, medians over stretches
of them): from about the 500th search on, 0.5-0.8 ms against 0.9-1.3 for the two-array read it
replaces; before that both are slower while the JVM compiles (1.3-5 ms over searches 20-250, either
read), and the process used less CPU in all, JIT included (3.2-4.0 against 4.3-4.6 s for 800
searches and the JVM's start, three runs each); the hits, order and scores are the same
(`tests/adapters/test_lucene_hits.py`). Through the daemon the `bm25` stage's p50 fell by 0.5-1.5 ms
in every run but one (table; CISI's 75 queries in run 2: +0.3), where two A/A runs (both daemons the
same code, LoCoMo dev) differed by 0.03 and 0.47 ms. But BM25 runs beside the query embedding, which
stays on the critical path, so a whole call's p50 moved within the spread between runs: now / before
0.90-1.04 on Cranfield and CISI, 1.01 on SciFact, and on LoCoMo dev 1.12 [1.07, 1.16] in run 3 but
0.96 [0.94, 0.98] in run 4 at a lower load; the A/A runs gave 0.99 [0.96, 1.01] and 1.01 [0.99,
1.04] for p50, and 0.87 [0.79, 0.98] and 0.97 [0.91, 1.08] for p95 (the first one's file was
overwritten: its figures are from its log), so differences of a few percent, and a p95 interval that
excludes 1, are within what the benchmark's two daemons differ by anyway. Not significant overall.
What moves the goal's ratio far more is the machine's load and the JVM's warm-up: Cranfield 0.56
[0.50, 0.61] after 20 warm-up queries and 0.49 [0.45, 0.52] after 600 (runs 1 and 2, load 2.3-3.9);
LoCoMo dev 0.51 [0.48, 0.53] at a load of 3.9 (run 3), 0.67-0.70 at 1.7-3.2 (run 4, A/A) and 0.60 at
6.6-9.0 (the full run above, whose peer was unusually quick). An on-demand daemon that exits after
10 idle minutes starts cold again: warming its JVM with searches of its own after a start would help
every first few hundred activations.

That warm-up (825eb48, run 5): after loading the embedding model a daemon runs up to 400 BM25 searches
of its own (4 s at most), each the first words of one of a project's units, on a searcher it closes
after (`open_generations.warm_lexical`; the engine keeps nothing open, no Run is recorded). Against
the same code without it, at a load of 1.4-1.6, 20 queries after the start: the `bm25` stage's p50
1.38 against 3.09 ms on Cranfield and 3.75 against 5.94 on CISI; a whole call's Cranfield now /
before p50 0.92 [0.88, 0.97] (paired median -0.80 ms), the ratio to the peer 0.55 [0.53, 0.59]
against 0.60 [0.58, 0.63]; CISI 0.90 [0.85, 1.03] (-0.59 ms, not significant), 0.48 [0.43, 0.57]
against 0.54 [0.46, 0.62]. So the goal of 0.5x is still missed on Cranfield at this load. Both
daemons of run 5 already hold the lock that 9955fd7 put around every call on the searchers' Java
classes: pyjnius shares a Java method's object among the instances of a
class (kivy/pyjnius#287), and since 597fd8f two searchers opened at once (two projects' first
activations, or the warm-up beside the watcher) could fail with Java errors or crash the JVM
(`tests/adapters/test_lucene_threads.py`: 2 of 3 runs crashed without the lock, none with it)."""

REMAINS = """What remains, short queries first (the stage table): the query embedding (one int8 ONNX run:
0.5-1.0 ms of CPU for 3-14 tokens with its weights in the cache, 2.4-3.1 ms p50 in the daemon,
below; a faster one changes the vectors, which is the model's business, issue 33, and the critical
path beside which BM25 runs), the JVM's first searches (C1 only since run 9: its compiler is done
after a few hundred searches, which the daemon's warm-up runs before the first query), the exact dense
product (memory-bound at SciFact's size), fusion's ~180 candidates in Python
(`retrieval/pipeline.fuse`, 0.21 ms of CPU unloaded on Cranfield), and outside the engine (2-3 ms on
a quiet machine, where the peer has none) the hand-offs between threads, h11's pure-Python HTTP
parsing on the event loop (httptools with uvloop, tried through the daemon in one run: 0.99 [0.91,
1.05] of h11 on Cranfield, 1.06 on LoCoMo dev, so not installed), the typed client's decoding and
the Run writer's CPU (about 2.5 ms a Run, now written behind the answer but still on the same two
cores). The catalog's reads are not it: the project, the current generation and the ranking profile
take 0.05 ms together unloaded, though the `validate` and `load` stages around them take 0.26 and
0.16 ms p50 in the daemon, where each SQLite statement hands the GIL to the threads beside it. A
shorter GIL switch interval in the daemon (0.5 ms against 5, set by a `sitecustomize` in one of two
otherwise equal daemons, load 1.5-2.4, `daemon_latency_switch_interval.json`) bought nothing: p50
0.96 [0.91, 1.01] of the default's on Cranfield, 1.03 [1.00, 1.06] on LoCoMo dev. At that load the
ratios to the peer were 0.64-0.67 on Cranfield and 0.70-0.72 on LoCoMo dev, before the Run writer's
changes (runs 6-8: recording had cost 1.27x of a call); the quiet run after them (dc15343) had 0.50
and 0.52, and this one, on a machine where the peer is faster, 0.55 and 0.64. The overall p50 is
within 0.5x on CISI and SciFact train, over it on Cranfield and LoCoMo dev, and by length the goal
is missed on every collection, most on the shortest queries (1-5 words: 0.74 on LoCoMo dev, 0.66
on SciFact train), where the peer's embedding of a few words is cheap and memory-core's fixed costs
are not: in this run the query embedding alone is 2.4-3.1 ms p50 inside the daemon (4.8 on CISI's
long queries) (its weights are read from memory again each call, other work having pushed
them out of the cache: the same ONNX run takes 0.9 ms of CPU in a loop and 1.5 ms with the cache
emptied between runs) and the daemon's path outside the engine about 2.1 ms. Starting the
embedding before the Run's start and the generation's load (tried in two A/B runs, at the start of
`activate`, where it slowed the validation beside it, and after its validation, run 10) saved about
0.3 ms in the engine and nothing measurable per call: 0.98 [0.96, 1.01] of before on Cranfield,
0.99 [0.98, 1.01] on LoCoMo dev; not kept."""


def _closing(result: Mapping[str, Any]) -> str:
    """What the changes bought, from this run's ablation and client A/B."""
    ab = result["ablation"]["variants"]
    now = ab["now"]
    t = next((c["transport"] for c in result["collections"].values() if c.get("transport")), None)
    client = (
        f"the client's HTTP {t['cpu_p50']['httpx'] - t['cpu_p50']['stdlib']:.1f} ms of the caller's CPU and "
        f"{-t['wall_paired_median_diff']:.1f} ms of wall per call (paired median); "
        if t is not None
        else ""
    )
    return (
        "What the earlier changes bought, each against itself undone in the same run: "
        + client
        + "in the engine (the ablation, in process; there is no watcher in process, so every variant also runs "
        "the live-memory stat walk) undoing the BM25 read moved a query by "
        f"{ab['bm25 as ScoredDoc objects']['paired_median_diff_to_now']:+.2f} ms and embedding the query inline after "
        f"BM25 by {ab['query embedded after bm25']['paired_median_diff_to_now']:+.2f} ms (paired medians; positive: "
        f"slower undone), and the engine now takes {_ratio(now, 'ratio_p50')} of its time before. The answers are "
        "unchanged: every candidate's ranks and scores and every fragment of all 1,869 judged queries of the four "
        "collections equal those with both engine changes undone, and `tests/adapters/test_lucene_hits.py` holds "
        "the BM25 read to Anserini's; the read of 597fd8f gave the same hits, order and scores as "
        "`SimpleSearcher.search` (ids from the stored fields) for all 1,867 judged queries of the four collections "
        "at depths 1, 10, 100 and 200 on their indexes here (7,468 searches, 580,247 hits)."
    )


# A one-off profile, not re-measured by ``run``: what it found is what the changes above act on.
PROFILE = """**Profile of the request path** (2026-12-07, Cranfield through a real daemon, 150 queries after a
warm-up, load average 4-8 on the 2 cores: cProfile of the engine's worker thread and of the event
loop, per-thread CPU from `/proc/<pid>/task`, micro-benchmarks of each stage with `time.thread_time`):

- *Per request, by thread* (CPU ms, inflated by the load): the engine's worker thread about 12, the
  Run writer about 2.8 (the `running` insert and the retention prune while the pipeline ranks, the
  trace behind the answer), the event loop about 1.4 (h11, Starlette, the request's log line), and the
  JVM's C2 compiler for the first few hundred searches after a start.
- *BM25 at depth 100* (2.3-2.6 ms CPU before): Lucene's search itself 0.45 ms, `ScoredDocs.fromTopDocs`
  reading each hit's stored id 0.75 ms, and about 1 ms for pyjnius to wrap one `ScoredDoc` per hit and
  read its two fields a JNI call at a time. At depth 10 the whole call took 0.6 ms: the cost is per hit.
  Then the hits crossed as two arrays, identical hits and scores, 1.4 ms; now (597fd8f) the ids come
  from the sort's doc values, never the stored documents, and the search is one call (above).
- *embed_query*: one ONNX Runtime int8 run (about 1.6 ms CPU unloaded) and the Rust tokenizer (0.2 ms).
  Both release the GIL, as the JVM does during a search, so the query is now embedded on a helper
  thread while the exact and BM25 stages run (`services/activation._BESIDE`): on two free cores the
  shorter of the two is hidden.
- *dense* (exact cosine): a float32 matrix-vector product that reads the whole matrix (14.7 MB at
  SciFact's 9,576 units, about 1 ms, memory-bound); the top-k selection 0.1 ms. Unchanged: fewer bytes
  (float16) would change scores.
- *The response*: cattrs' unstructure of `ActivationResponse` 0.06 ms and `json.dumps` 0.14 ms: the
  JSON is not where the time goes, so orjson (not installed) would buy nothing measurable.
- *Recording*: already off the answer's path since issue 17 (a writer thread with its own connection;
  `--sync-history` commits first). On the request thread it costs `start` 0.08 ms and `complete` 0.4 ms
  (the ~180 candidates become rows there, so what is stored is what was answered); deferring more would
  not change the promise but would not save time either. What it does cost is the writer thread's CPU
  competing with the next answer on two cores.
- *The client*: httpx took about 1.5 ms of the caller's CPU per call, the standard library's HTTP 0.6
  (the table above measures it again); decoding the answer into `ActivationResponse` adds about 0.4.
- *Hand-offs*: a request goes from the client to the event loop, to the engine's worker thread (and
  its helper, and back), to the event loop and to the client; each hand-off is a wake-up, which costs
  microseconds on an idle machine and milliseconds when other jobs hold both cores, which is most of
  what `beyond the engine` measures under load.

**Second pass** (2026-12-07, later; a real daemon with `memcore serve`'s defaults, time stamps along
the request path on Cranfield, load 5-8; per-thread CPU from `/proc/<pid>/task` with the threads named):

- *Along the path* (p50, ms): client to the event loop 0.4, event loop to the worker thread 0.3,
  worker to the ranking (validation, the Run's start) 0.6, the ranking 11-12 (the embedding about
  6 of it, BM25's 3 beside it), the Run's `complete` 0.4, response and JSON 0.2, the worker's
  result back on the event loop 1.2-1.4, the answer to the caller 0.8-1.8.
- *The Run writer* costs about 0.8 ms of CPU per Run for the `running` insert with the retention
  prune (0.5 of it: at 500 Runs each insert deletes the oldest Run's ~180 candidates) and 1.0 for
  the trace. apsw hands the GIL back and forth at each SQLite call, so a thread writing a trace
  slows the Python threads beside it (a pure-Python loop went from 0.74 to 1.23 ms p50, p90 11.8,
  beside a writer thread): it was the 1.2-1.4 ms wait for the event loop to resume after the
  worker. Parking a trace completed while an activation's answer was sent (810b090) cut that wait
  to 0.3-0.4 ms, and with a 30 ms pause between queries (an agent's pace) a whole call went from
  20.4 to 19.0 ms p50 (p90 58 to 44, one run); in this benchmark's back-to-back pattern the A/B was
  within noise (Cranfield -0.7 ms, SciFact +0.8 at load 6-8). It was reverted (f19a54c): parking
  lasted while any activation request was open, so one client that never sent its body kept every
  other Run's trace unwritten until 16 piled up (a kill then lost them as interrupted), and a read
  racing the drain could see a Run still running. The tables above were measured with it in.
- *The JVM's compilers* keep compiling Lucene's long tail for thousands of searches: about 2.7 ms
  of C1/C2 CPU per search over the first 400 (this benchmark's whole window), still about 1 ms
  after 2,000-4,000, on the other core. C1 only (`-XX:TieredStopAtLevel=1`) stops that but a
  search then cost 2.2-2.4 ms of CPU against 0.9-1.2; C2 only (`-XX:-TieredCompilation`) is done
  after ~1,600 searches but slower over the first 800. Neither was kept then. That was BM25's read
  before 597fd8f (each hit's id read from its stored fields, many Java calls a search) in that pass, at a load of
  5-8; with the one-call search since, C1's code is about 10 % slower than C2's once compiled and
  C1 only is kept (run 9, "The JVM's second compiler" above).
- *The query embedding* (int8, one thread) cost about 2.6 ms + 0.11 ms per token of CPU in this
  pass (load 5-8; on a quiet machine 0.5-1.0 ms for 3-14 tokens with its weights in the cache). Two
  intra-op threads give bit-identical vectors (all 1,870 judged queries of the four collections)
  but were slower at a load of 4-5 (7.6 against 6.7 ms p50): no core is free for the second.
  Whether the embedding beside BM25 pays depends on the load the same way: in process, at a load of
  2.3 the inline order was faster (paired +0.7 ms on Cranfield, +1.2 on CISI), at 3-4 the two were
  equal, and at the ablation's higher load the helper saves time (below); choosing per query from
  the runnable tasks (`/proc/loadavg`) was not significantly better than either, so it is unchanged.

**Third pass** (2026-12-07, after the JVM's C1 change; LoCoMo dev's 2,760 turns in a home of their
own, a real daemon, 300 `call_json` activations back to back after 100 warm-up ones, wall-clock
stamps at the caller, at the ASGI app's edge and around the dispatch table's call, load 1.6-2.1
with one experiment on the other core):

- *Outside the engine* (p50, ms; a call took 8.0-8.4, the dispatch table's call 6.6-6.8, of which
  the engine's own total 6.4-6.6): caller to the app 0.24; the app to the call (the body read,
  decoded and checked, the hop to a worker thread) 0.33; the answer's encoding on the worker (its
  unstructure and 6.4 KB of JSON) 0.09; the hop back to the event loop 0.14; the request's log
  line 0.09; the response's start through Starlette and h11 0.26; its body 0.07; the caller's
  read 0.16. A call that does nothing (`list_projects`) takes 0.47-0.59 ms there and back.
  Decoding the answer into `ActivationResponse` took 0.05 ms (300 answers; the 0.4 above was at
  a load of 5-8). No piece is over 0.35 ms: what is left outside the engine (about 1.4 ms) is
  spread over the hops and the HTTP framing, each a tenth of a millisecond or two.
- *The trace's rows beside the next answer*: a pure-Python loop timed beside a thread writing
  ~180-row traces every 4 ms took 0.69-0.73 ms p50 whether the rows went in by `executemany`
  (a GIL hand-off at each row) or as multi-row `INSERT ... VALUES` statements of 60 rows (three
  hand-offs), and 0.66-0.78 alone: the row insert no longer slows the threads beside it, so it
  is unchanged."""


def _ratio(s: Mapping[str, Any], key: str) -> str:
    low, high = s[f"{key}_ci95"]
    return f"{s[key]:.2f} [{low:.2f}, {high:.2f}]"


ORDER = ("cranfield", "cisi", "locomo-dev", "scifact-train")
VARIANT_ORDER = ("now", "bm25 as ScoredDoc objects", "query embedded after bm25", "both undone (before)")


def _buckets(c: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return sorted(c["buckets"].items(), key=lambda kv: int(kv[0].split("-")[0].rstrip("+")))


# The before/after runs kept (``MEMCORE_LATENCY_BEFORE``; each file renamed after its run), in the order run.
BEFORE_AFTER_RUNS = (
    ("1", "before_after_first"),
    ("2", "before_after_warm600"),
    ("3", "before_after"),
    ("4", "before_after_repeat"),
    ("A/A", "before_after_aa"),
    ("5", "before_after_warmup_searches"),
    ("6", "before_after_recording"),
    ("6 isolated", "before_after_recording_pause40"),
    ("7", "before_after_rows_behind"),
    ("8", "before_after_writer_final"),
    ("8 isolated", "before_after_writer_final_pause40"),
    ("9", "before_after_c1"),
    ("9 isolated", "before_after_c1_pause40"),
    ("10", "before_after_early_embedding"),
    ("11", "before_after_embedding_inline"),  # benchmarks/query_embedding.py reads 11 and 12 by label
    ("12", "before_after_bm25_beside"),
)


RECORDING = """**Recording behind the answer** (ec97a70; runs 6 and 6 isolated). Recording every Run was
the largest cost left outside the ranking: the same daemon with no Run recorded (a checkout whose
engine has a `NullRecorder`, through this harness, LoCoMo dev, load 1.4-1.6) answered in 9.7
against 12.3 ms p50, 1.27x [1.24, 1.30] of it without. Per request, the daemon's Run writer
thread took 2.5 ms of CPU (`/proc` per thread, 2,000 calls); on it, the `running` row's
transaction took 3.4 ms p50, in the ranking's window beside the query embedding, of which the
retention prune (a count over the project's 500 Runs and the deletion of the oldest one's ~180
candidate rows) was most (the same transaction alone on a copy of the database: 0.7 ms); and
the trace was written the moment the answer was built, beside the event loop sending it. Now
the prune is its own write behind the answer, and every write behind the answer starts 3 ms
after it was queued (`BEHIND_GRACE_S`), or at once when the next Run's insert or a reader comes:
writes land in the order queued (an answered Run's trace before the next Run's insert, so a
crash keeps what was answered, `tests/reliability/test_crash_safety.py`), and every read
settles first (`tests/adapters/test_run_writer.py`; the retention tests of
`tests/contracts/test_run_store.py` read right after a Run starts). Back to back (run 6) 0.88x of before on
Cranfield and 0.93x on LoCoMo dev, both significant; one caveat: two daemons taking turns, a
write one daemon puts off can fall in the other's call, which flatters the later writer. With
40 ms before every call (run 6 isolated, nothing of the last call still running, as an agent
calls), the difference is within noise in that run (0.99 and 0.95, load above 2 while the suite
ran beside it); in a quiet A/B of isolated calls before it (the same two daemons, 500 LoCoMo
queries, 40 ms apart) 0.91x [0.90, 0.93]. A Run reads `running` up to 3 ms longer; a reader of
this process never sees it so (it settles). Then (39dfea5, run 7) a trace's candidates become
rows on the writer thread too, behind the answer, instead of on the agent's (~10% of the request
thread's CPU, sampled with py-spy): 0.91x of before on Cranfield and 0.96x on LoCoMo dev, both
significant, measured while the suite ran beside it. Review then found the hand-made writer
thread of ec97a70 could hang a close racing a new Run and outlived unclosed stores; the writer is
again one `ThreadPoolExecutor` thread, a write behind waiting its grace on a condition that every
insert and reader ends (same order, same grace). Runs 8 and 8 isolated measure it against the
writer before ec97a70, on a quiet machine (load under 1): back to back 0.87x [0.85, 0.91] on
Cranfield and 0.89x [0.87, 0.90] on LoCoMo dev, isolated calls 0.89x [0.87, 0.92] and 0.90x
[0.89, 0.91]; to the peer's p50, back to back, 0.50 on Cranfield and 0.55 on LoCoMo dev."""


SECOND_COMPILER = """**The JVM's second compiler** (runs 9 and 9 isolated). Per-thread CPU of a daemon on LoCoMo dev
(`/proc/<pid>/task`, 120 calls at a time after its 400 warm-up searches) showed the JVM's C2
compiler thread busy through the first 700 calls: 0.5 s of CPU over the first 120 calls, still
0.1 s over calls 600-720, one to four milliseconds of a core per call on a machine of two,
where the query embedding runs beside BM25. In a plain search loop over the same index (no
embedding) C2 was still compiling after 1,800 searches (0.3-0.5 ms of compiler CPU per search)
to make a 0.3 ms search about 10 % faster (0.27-0.30 against 0.29-0.34 ms p50); with C1 alone
(`-XX:TieredStopAtLevel=1`) the compiler was done after 200 searches and the first 400 were
faster (0.74-0.81 against 0.90-1.01 ms p50). On a 55,200-unit index (LoCoMo dev's units twenty
times) C2's code is faster once compiled, 0.69-0.78 against 0.93-1.17 ms a search, still behind
the query embedding, while its compiler spent about 1 ms of CPU per search after 1,600
searches; building that index took the same time either way (1.2-1.6 s). So the daemon's JVM
(every process's, in fact) compiles with C1 only (`adapters/search/jvm.py`). Through the daemon,
measured while another engineer's experiment kept one core busy (load 1.4-2.7, which is why
every ratio to the peer is higher than in the quiet runs): back to back 0.95x [0.93, 0.97] of
before on LoCoMo dev (p95 0.87x [0.80, 0.92]), 1.00x [0.97, 1.03] on Cranfield (not
significant); isolated calls on LoCoMo dev 0.97x [0.96, 0.99] (p95 0.86x [0.82, 0.91]). With two
daemons taking turns, the C2 compiler of the one before also takes CPU from the one after, so
these understate what one daemon alone gains."""


def pause_ms() -> int:
    """``MEMCORE_LATENCY_PAUSE_MS``: the wait before every call of a before/after run (0: none)."""
    return int(os.environ.get("MEMCORE_LATENCY_PAUSE_MS", "0"))


def _before_after_lines() -> list[str]:
    """The saved before/after runs, one row per collection and run."""
    runs = [(label, r) for label, name in BEFORE_AFTER_RUNS if (r := read_result(f"{NAME}_{name}"))]
    if not runs:
        return []
    lines = [
        "",
        "**Before and after, through the daemon**: two daemons, one running each copy of the code over its own "
        "copy of the same indexed home, and the peer, taking turns query by query (`MEMCORE_LATENCY_BEFORE`); "
        "p50 / p95 in ms; ratios to the peer, and of now to before, with 95 % bootstrap intervals over queries; "
        "the paired median difference now − before in ms; the `bm25` stage's p50 as each daemon reports it. "
        "Before: "
        + "; ".join(
            f"{undone} (run {', '.join(label for label, r in runs if r['undone'] == undone)})"
            for undone in dict.fromkeys(r["undone"] for _, r in runs)
        )
        + ".",
        "",
        "| run | collection | warm-up queries | pause before each call (ms) | queries | peer p50 / p95 | now p50 / p95 "
        "| before p50 / p95 | now p50 ratio | before p50 ratio | now / before p50 | now / before p95 | paired median "
        "| bm25 now / before | load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|---|---:|---:|---:|",
    ]
    for label, r in runs:
        for name in ORDER:
            c = r["collections"].get(name)
            if c is None:
                continue
            now, before, ab = c["now"], c["before"], c["now_over_before"]
            bm25, warm = c["engine_stages_p50"], c.get("warmup", WARMUP)  # the first run kept no count: the default
            lines.append(
                f"| {label} | {name} | {warm} | {c.get('pause_ms', 0)} | {c['queries']} | {now['peer_p50']:.1f} / "
                f"{now['peer_p95']:.1f} | {now['p50']:.1f} / {now['p95']:.1f} | {before['p50']:.1f} / "
                f"{before['p95']:.1f} | {_ratio(now, 'ratio_p50')} | {_ratio(before, 'ratio_p50')} "
                f"| {_ratio(ab, 'ratio_p50')} | {_ratio(ab, 'ratio_p95')} | {c['paired_median_diff']:+.2f} "
                f"| {bm25['now']['bm25']:.2f} / {bm25['before']['bm25']:.2f} "
                f"| {'–'.join(f'{x:.1f}' for x in c['loadavg_1m'])} |"
            )
    lines += ["", BEFORE_AFTER, "", RECORDING, "", SECOND_COMPILER]
    return lines


def render(result: dict[str, Any]) -> str:
    cols = {n: result["collections"][n] for n in ORDER if n in result["collections"]}
    lines = [
        "## Through the daemon, on short queries and long (issue 32 item 3)",
        "",
        measured(result) + ". `benchmarks/daemon_latency.py`: each development collection indexed with the real "
        "components and served by a real daemon (`memcore serve`'s defaults: watcher, UI, every activation recorded); "
        "every judged query (once each) asked of the peer in process (FTS5 BM25 + numpy cosine over whole documents, "
        "RRF k 60, the query embedded by torch fp32 MiniLM on one thread) and of the daemon with the typed client "
        "(`DaemonClient.activate_memory`) and with `call_json` (what `memcore mcp` forwards), the three taking turns "
        "query by query. Milliseconds at the caller; ratios are memory-core over the peer on the same queries, in "
        "brackets a 95 % bootstrap interval over queries. The 2 cores are shared with other engineers' jobs: "
        "`load` is the 1-minute load average before and after (2.0 = both cores busy); read the ratios, not the "
        "absolute times.",
        "",
        "| collection | queries | words (median) | peer p50 / p95 | daemon p50 / p95 | p50 ratio | p95 ratio "
        "| `call_json` p50 ratio | load |",
        "|---|---:|---:|---:|---:|---|---|---|---:|",
    ]
    for name, c in cols.items():
        d, j = c["all"]["daemon"], c["all"]["daemon_json"]
        lines.append(
            f"| {name} | {c['queries']} | {c['words_median']:g} | {d['peer_p50']:.1f} / {d['peer_p95']:.1f} "
            f"| {d['p50']:.1f} / {d['p95']:.1f} | {_ratio(d, 'ratio_p50')} | {_ratio(d, 'ratio_p95')} "
            f"| {_ratio(j, 'ratio_p50')} | {'–'.join(f'{x:.1f}' for x in c['loadavg_1m'])} |"
        )
    lines += [
        "",
        "By query length (words), typed client; p50 / p95 in ms, then the ratios to the peer on the same queries:",
        "",
        "| collection | words | queries | peer p50 / p95 | daemon p50 / p95 | p50 ratio | p95 ratio |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for name, c in cols.items():
        for key, b in _buckets(c):
            d = b["daemon"]
            lines.append(
                f"| {name} | {key} | {d['n']} | {d['peer_p50']:.1f} / {d['peer_p95']:.1f} | {d['p50']:.1f} / "
                f"{d['p95']:.1f} | {_ratio(d, 'ratio_p50')} | {_ratio(d, 'ratio_p95')} |"
            )
    stage_names = ("validate", "load", "exact", "bm25", "embed_query", "dense", "fusion", "rerank", "select",
                   "live_memory")  # fmt: skip
    lines += [
        "",
        "Where a request's time goes through the daemon (p50 over the typed requests, ms): the engine's stages as "
        "the answer reports them (`bm25` and `embed_query` now overlap: each is its own time), the engine's "
        "total, and what the caller waited beyond it (the socket, HTTP, the worker-thread hop, the answer's "
        "JSON both ways and its decoding into `ActivationResponse`); the daemon's CPU per request is its "
        "process's whole CPU time over the run (every thread: the engine's, the event loop, the Run writer, "
        "the JVM's) divided by the requests.",
        "",
        "| collection | " + " | ".join(stage_names) + " | engine total | beyond the engine | daemon CPU/request |",
        "|---|" + "---:|" * (len(stage_names) + 3),
    ]
    for name, c in cols.items():
        st = c["engine_stages_p50"]
        lines.append(
            f"| {name} | "
            + " | ".join(f"{st.get(s, float('nan')):.2f}" for s in stage_names)
            + f" | {c['engine_total_p50']:.2f} | {c['outside_engine_p50']:.2f} | {c['daemon_cpu_ms_per_request']:.1f} |"
        )
    ab = result["ablation"]
    lines += [
        "",
        f"**What each change bought** (in process on Cranfield, recorded, {ab['queries']} queries, the four variants "
        "taking turns query by query; load "
        f"{'–'.join(f'{x:.1f}' for x in ab['loadavg_1m'])}): p50 / p95 in ms, the ratio of p50 to the engine as it "
        "was before (both undone), and the median paired difference to the engine now.",
        "",
        "| engine | p50 / p95 | p50 / before | paired median − now |",
        "|---|---:|---|---:|",
    ]
    for name in VARIANT_ORDER:
        v = ab["variants"][name]
        lines.append(
            f"| {name} | {v['p50']:.1f} / {v['p95']:.1f} | {_ratio(v, 'ratio_p50')} "
            f"| {v['paired_median_diff_to_now']:+.2f} |"
        )
    t = next((c["transport"] for c in cols.values() if c.get("transport")), None)
    if t is not None:
        lines += [
            "",
            f"**The client's HTTP** (Cranfield, {t['queries']} `call_json` calls each, taking turns on one daemon): "
            f"httpx {t['cpu_p50']['httpx']:.2f} ms of the caller's CPU per call (p50), the standard library's "
            f"(`entrypoints/daemon/transport.py`, now `DaemonClient`'s) {t['cpu_p50']['stdlib']:.2f} ms; wall p50 "
            f"{t['wall_p50']['httpx']:.1f} against {t['wall_p50']['stdlib']:.1f} ms, paired median difference "
            f"{t['wall_paired_median_diff']:+.2f} ms.",
        ]
    lines += _before_after_lines()
    lines += ["", PROFILE]
    met = [n for n, c in cols.items() if c["all"]["daemon"]["ratio_p50"] <= GOAL]
    misses = [
        f"{n} {k} words ({b['daemon']['ratio_p50']:.2f}, {b['daemon']['n']} queries)"
        for n, c in cols.items()
        for k, b in _buckets(c)
        if b["daemon"]["n"] >= 10 and b["daemon"]["ratio_p50"] > GOAL
    ]
    p95 = [c["all"]["daemon"]["ratio_p95"] for c in cols.values()]
    lines += [
        "",
        f"**Goal** (at most {GOAL}x the peer's p50 through the daemon on every dev collection, queries of every "
        "length): overall p50 "
        + ("at or below it on all four" if len(met) == len(cols) else f"at or below it on {', '.join(met) or 'none'}")
        + "; by length (buckets of 10 queries or more) "
        + (f"above it in {'; '.join(misses)}" if misses else "at or below it in every bucket")
        + f"; p95 ratios {min(p95):.2f}-{max(p95):.2f} (reported, not the goal's measure). "
        + ("So the goal is met in this run. " if len(met) == len(cols) and not misses else "So the goal is not met. ")
        + BETWEEN_RUNS,
        "",
        _closing(result),
        "",
        REMAINS,
        "",
    ]
    return "\n".join(lines)
