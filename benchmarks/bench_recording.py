"""Recording cost against corpus size (brief §5, §9): start + complete of a Run with 200
candidates whose Effective Memory manifest has 1,000 vs 50,000 resources.

The manifest is recorded once, at index time (``record_manifest``), so a Run only refers to it by
hash: the ratio of the medians should stay at most 1.2. ``python -m benchmarks.bench_recording``.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, measured, percentile, write_result
from memory_core.adapters.sqlite import SqliteCatalog, open_database
from memory_core.adapters.sqlite.runs import SqliteRunStore
from memory_core.domain.model import EffectiveMemory, Layer, ManifestEntry, Unit, unit_hash_of
from memory_core.retrieval.pipeline import ADD, EXCLUDED, SELECTED, TOKEN_BUDGET_EXHAUSTED, Candidate, apply_rerank
from memory_core.runs.records import RunStart, RunTrace

NAME = "recording"
CANDIDATES = 200
RERANK_WINDOW = 50
SIZES = (1_000, 50_000)
TARGET_RATIO = 1.2


def _digest(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def synthetic_memory(size: int) -> EffectiveMemory:
    entries = [
        ManifestEntry(
            i, f"docs/{i // 100:04d}/{i}.md", Layer.PROJECT, f"file:///memory/docs/{i // 100:04d}/{i}.md",
            _digest(f"resource-{size}-{i}"), 1_000 + i % 5_000, "text/markdown",
        )
        for i in range(size)
    ]  # fmt: skip
    return EffectiveMemory.from_entries("bench", entries)


def synthetic_candidates(n: int = CANDIDATES) -> list[Candidate]:
    """A fused recall set shaped like a real one: every stage filled for the head, 8 selected."""
    out = []
    for i in range(n):
        text = f"section {i} about boundary layer transition and wing flutter " * 4
        rid = f"docs/{i // 3:04d}.md"
        unit = Unit(
            f"{rid}#{i % 3}", rid, i % 3, 0, len(text), ("Title", f"Section {i}"), text, 120,
            unit_hash_of(text, 0, len(text)), _digest(rid),
        )  # fmt: skip
        c = Candidate(unit)
        c.exact_rank, c.exact_score = (1, 3.0) if i == 0 else (None, None)
        c.bm25_rank, c.bm25_score = (i + 1, 20.0 - i * 0.05) if i < 100 else (None, None)
        c.lexical_rank = i + 1 if i < 100 else None
        c.dense_rank, c.dense_score = (n - i, 0.9 - i / 1000) if i >= 100 or i % 2 else (None, None)
        c.dense_similarity = 0.5 + i / 1000
        c.rrf_rank, c.rrf_score = i + 1, 1 / (61 + i)
        if i < 8:
            c.disposition, c.delta_action = SELECTED, ADD
        else:
            c.disposition, c.exclusion_code = EXCLUDED, TOKEN_BUDGET_EXHAUSTED
        out.append(c)
    # rerank and final fields as the pipeline sets them: a window of 50, scores falling with rank
    return apply_rerank(out, RERANK_WINDOW, [1.0 - i / 100 for i in range(RERANK_WINDOW)])


class _Home:
    """One local.db with a store whose manifest was recorded at index time."""

    def __init__(self, root: Path, size: int) -> None:
        self.conn = open_database(root / f"local-{size}.db")
        self.store = SqliteRunStore(self.conn)
        self.memory = synthetic_memory(size)
        started = time.perf_counter()
        SqliteCatalog(self.conn).put_manifest(self.memory)
        self.catalog_manifest_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        self.store.record_manifest(self.memory)
        self.record_manifest_ms = (time.perf_counter() - started) * 1000

    def record_once(self, candidates: list[Candidate], i: int) -> float:
        started = time.perf_counter()
        run_id = self.store.start(RunStart("bench", f"query {i}", "f" * 64, 1200, f"2025-01-01T00:00:{i:06d}Z"))
        self.store.complete(
            run_id,
            RunTrace(
                effective_memory_hash=self.memory.hash,
                index_revision="bench-revision",
                revisions={"parser": "p", "chunker": "c", "embedding_model": "e", "ranking_profile": "r"},
                candidates=candidates,
                latency_ms={"bm25": 1.0, "dense": 1.0, "total": 5.0},
                warm=True,
                fragment_count=8,
                token_count=960,
                finished_at="2025-01-01T00:00:01Z",
            ),
        )
        return (time.perf_counter() - started) * 1000

    def first_run_copy_ms(self, candidates: list[Candidate]) -> float:
        """The fallback when the indexer did not record the manifest: copied once, from the catalog."""
        self.conn.execute("DELETE FROM retrieval_run_resources")
        return self.record_once(candidates, 999_999)

    def close(self) -> None:
        self.conn.close()


def run(quick: bool = False, repeats: int | None = None) -> dict[str, Any]:
    repeats = repeats or (30 if quick else 200)
    sizes = (1_000, 10_000) if quick else SIZES
    candidates = synthetic_candidates()
    with tempfile.TemporaryDirectory(prefix="bench-recording-") as tmp:
        homes = {size: _Home(Path(tmp), size) for size in sizes}
        try:
            for home in homes.values():  # warm-up: page cache, statement cache
                for i in range(10):
                    home.record_once(candidates, i)
            times: dict[int, list[float]] = {size: [] for size in sizes}
            for i in range(repeats):  # interleaved, so drift hits both sizes alike
                for size, home in homes.items():
                    times[size].append(home.record_once(candidates, 10 + i))
            copies = {size: home.first_run_copy_ms(candidates) for size, home in homes.items()}
        finally:
            for home in homes.values():
                home.close()
    small, large = sizes
    per_size = {
        str(size): {
            "resources": size,
            "median_ms": round(statistics.median(times[size]), 3),
            "p95_ms": round(percentile(times[size], 95), 3),
            "record_manifest_ms": round(homes[size].record_manifest_ms, 1),
            "catalog_manifest_ms": round(homes[size].catalog_manifest_ms, 1),
            "first_run_copy_ms": round(copies[size], 1),
        }
        for size in sizes
    }
    ratio = statistics.median(times[large]) / statistics.median(times[small])
    result = {
        "name": NAME,
        "candidates": CANDIDATES,
        "repeats": repeats,
        "quick": quick,
        "sizes": per_size,
        "ratio_of_medians": round(ratio, 3),
        "target_ratio": TARGET_RATIO,
        "within_target": ratio <= TARGET_RATIO,
    }
    return write_result(NAME, result)


def render(result: dict[str, Any]) -> str:
    lines = [
        "## Recording cost against corpus size",
        "",
        f"{measured(result)}: start + complete of one Run with {result['candidates']} candidates, median of "
        f"{result['repeats']} (interleaved). The manifest is recorded once at index time and shared by hash; the "
        "one-off copy is the fallback when it was not.",
        "",
        "| resources | median ms | p95 ms | record manifest once (ms) | first-Run copy fallback (ms) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for s in result["sizes"].values():
        lines.append(
            f"| {s['resources']:,} | {s['median_ms']:.2f} | {s['p95_ms']:.2f} | {s['record_manifest_ms']:.0f} "
            f"| {s['first_run_copy_ms']:.0f} |"
        )
    verdict = "within" if result["within_target"] else "OVER"
    lines += [
        "",
        f"Ratio of medians: **{result['ratio_of_medians']:.3f}** ({verdict} the target of {result['target_ratio']}).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_recording")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    result = run(quick=args.quick, repeats=args.repeats)
    print(render(result))
    print(f"wrote {RESULTS / (NAME + '.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
