"""One re-index of a one-note edit at 10,000 units, in process, stage by stage (issue 15).

The watcher's save-to-served time is mostly its re-index and the first activation after it.
This indexes a synthetic project (``benchmarks/synthetic.py``) with the real adapters, builds the
daemon's background indexer (``background_indexer``: its own connections), runs one warm-up
re-index (the daemon's memos are then as after its first), and then ``--edits`` times: append a
word to one note (editor-style: temp file, rename), re-index, and activate once for it. Each
port call the indexer makes is timed (summed per re-index), and so is the activation.

``python -m benchmarks.reindex_profile [--units N] [--edits N]``: prints a table; not part of
``./dev bench`` (the figures it gives are quoted in the watcher section of docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

PROJECT = "bench"

# (attribute of the indexer, methods of it timed as a stage)
STAGES = {
    "scanner": ("scan", "read"),
    "blobs": ("put", "exists"),
    "chunker": ("chunk",),
    "embedding_cache": ("get_many", "put_many"),
    "embedder": ("embed_documents",),
    "lexical": ("build",),
    "vectors": ("build",),
    "generations": ("write_units", "publish", "verify", "load_units", "prune", "stage", "reuse_units"),
    "manifests": ("get_manifest", "put_manifest"),
    "catalog": ("set_current_generation", "current_generation", "get_project"),
    "corpus": ("record_manifest", "record_blob"),
}


class _Timed:
    """Wraps one object: the named methods add their wall time to ``times``."""

    def __init__(self, inner: Any, name: str, methods: tuple[str, ...], times: dict[str, float]) -> None:
        self._inner, self._name, self._methods, self._times = inner, name, methods, times

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if attr not in self._methods or not callable(value):
            return value
        key = f"{self._name}.{attr}"

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self._times[key] += time.perf_counter() - t0

        return timed


def _instrument(indexer: Any, times: dict[str, float]) -> Any:
    import attrs

    parts = {}
    for name, methods in STAGES.items():
        inner = getattr(indexer, name, None)
        if inner is not None:
            parts[name] = _Timed(inner, name, methods, times)
    timed = attrs.evolve(indexer, **parts)
    return timed


def _edit(path: Path, word: str) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(path.read_text(encoding="utf-8").rstrip("\n") + f" {word} .\n", encoding="utf-8")
    os.replace(temp, path)


def profile(units: int, edits: int, cprofile: bool = False) -> dict[str, Any]:
    from benchmarks.recording_overhead import index_folder
    from benchmarks.synthetic import write_synthetic_memory
    from memory_core.entrypoints.daemon.background import background_indexer

    with tempfile.TemporaryDirectory(prefix="bench-reindex-") as tmp:
        work = Path(tmp)
        memory = write_synthetic_memory(work / "memory", units)
        engine = index_folder(work / "home", PROJECT, memory.folder)
        try:
            base, close = background_indexer(engine, work / "home")
            times: dict[str, float] = defaultdict(float)
            # The engine's opening of a new generation, stage by stage too.
            for name in ("generations", "lexical", "vectors", "manifests"):
                methods = ("verify", "load_units", "open", "get_manifest")
                setattr(engine, name, _Timed(getattr(engine, name), f"open:{name}", methods, times))
            indexer = _instrument(base, times)
            engine.activate(PROJECT, "warm up the searchers")
            _edit(memory.files[0], "warmupword")
            indexer.index(PROJECT)  # the daemon's first re-index seeds its memos
            engine.activate(PROJECT, "warmupword")
            rows = []
            for i in range(edits):
                word = f"profileword{i:03d}x"
                _edit(memory.files[(i * 37 + 11) % len(memory.files)], word)
                times.clear()
                t0 = time.perf_counter()
                if cprofile and i == edits - 1:
                    import cProfile
                    import pstats

                    with cProfile.Profile() as prof:
                        report = indexer.index(PROJECT)
                    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
                else:
                    report = indexer.index(PROJECT)
                reindex = time.perf_counter() - t0
                t1 = time.perf_counter()
                response = engine.activate(PROJECT, word).response
                activation = time.perf_counter() - t1
                served = any(word in (f.text or "") for f in response.fragments)
                rows.append(
                    {
                        "reindex_s": reindex,
                        "first_activation_s": activation,
                        "served": served,
                        "embedded": report.embedded,
                        "stages": dict(times),
                        "load_ms": response.latency_ms.get("load", 0.0),
                    }
                )
            close()
        finally:
            engine.close()
    return {"units": units, "rows": rows, "loadavg_1m": os.getloadavg()[0]}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reindex_profile")
    parser.add_argument("--units", type=int, default=10_000)
    parser.add_argument("--edits", type=int, default=5)
    parser.add_argument("--cprofile", action="store_true", help="print cProfile's top functions of the last re-index")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()}", flush=True)
    result = profile(args.units, args.edits, args.cprofile)
    rows = result["rows"]
    keys = sorted(
        {k for r in rows for k in r["stages"]}, key=lambda k: -statistics.median(r["stages"].get(k, 0.0) for r in rows)
    )
    print(f"units {result['units']}, edits {len(rows)}, load after {os.getloadavg()}")
    print(
        "re-index s:",
        " ".join(f"{r['reindex_s']:.3f}" for r in rows),
        f"median {statistics.median(r['reindex_s'] for r in rows):.3f}",
    )
    print(
        "first activation s:",
        " ".join(f"{r['first_activation_s']:.3f}" for r in rows),
        f"median {statistics.median(r['first_activation_s'] for r in rows):.3f}",
    )
    print("load stage ms:", " ".join(f"{r['load_ms']:.0f}" for r in rows))
    print("served:", all(r["served"] for r in rows), "embedded:", [r["embedded"] for r in rows])
    for k in keys:
        print(f"  {k:36s} median {statistics.median(r['stages'].get(k, 0.0) for r in rows):.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
