"""Evaluation at scale (brief §9, issue 8): report, export and import time at 1,000 cases.

A real home (apsw, CAS blobs, Lucene, MiniLM) holds a ~1,000-unit synthetic project. Each case
comes the way a person makes one: an activation (a recorded Run), ``create_evaluation_case`` on
it, then ``replace_evaluation_judgments`` with a few judgments (three units of the trace and one
resource of the corpus). Then the B1-B4 report over every case, the fixture export, its import
into a fresh home, the import again (everything already present) and the report there; the two
reports must agree. The report is timed again there (``REPORT_RUNS`` runs), and one more run under
cProfile says where its seconds go (reading the cases, rankings, grading and metrics, statistics).
"""

from __future__ import annotations

import cProfile
import pstats
import random
import statistics
import time
from typing import Any

from benchmarks.common import measured, percentile, scratch_dir, write_result
from benchmarks.synthetic import cranfield_queries, write_synthetic_memory

NAME = "evaluation_scale"
PROJECT = "bench"
UNITS = 1_000
REPORT_RUNS = 3

# The report's parts, by the functions that do them (module path, function): their cumulative time
# under cProfile. Profiling slows Python-level code more than C-level code, so shares, not seconds.
REPORT_PARTS = {
    "reading the cases": ("services/evaluation.py", "case_inputs"),
    "variant rankings": ("evaluation/report.py", "variant_rankings"),
    "grading and metrics": ("evaluation/report.py", "ranking_metrics"),
    "returned metrics": ("evaluation/report.py", "returned_metrics"),
    "bootstrap intervals": ("evaluation/statistics.py", "paired_bootstraps"),
    "randomization tests": ("evaluation/statistics.py", "paired_randomization_ps"),
    "missed evidence": ("evaluation/report.py", "missed_evidence"),
    "latency": ("evaluation/report.py", "latency_report"),
}


def _timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - t0


def judgments_for(activation: Any, rng: random.Random) -> list[dict[str, Any]]:
    """Three judged units of the trace and one judged resource: what a quick review gives."""
    candidates = list(activation.candidates)
    picked = rng.sample(candidates[:20], k=min(3, len(candidates)))
    out: list[dict[str, Any]] = [{"unit_id": c.unit.unit_id, "relevance": rng.randint(0, 3)} for c in picked]
    out.append({"resource_id": rng.choice(candidates).unit.resource_id, "relevance": rng.randint(1, 3)})
    return out


def report_means(report: Any) -> dict[str, float | None]:
    from memory_core.evaluation.report import LEVELS, NDCG, VARIANT_NAMES

    return {f"{level.value}/{v}": report.mean(level, v, NDCG) for level in LEVELS for v in VARIANT_NAMES}


def profile_report(engine: Any) -> dict[str, float]:
    """Cumulative seconds of the report and of each of ``REPORT_PARTS`` in one profiled run."""
    profiler = cProfile.Profile()
    profiler.enable()
    engine.evaluation_report(PROJECT)
    profiler.disable()
    stats: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    out = {"total": sum(tt for _, _, tt, _, _ in stats.values())}
    for part, (path, function) in REPORT_PARTS.items():
        out[part] = sum(v[3] for (file, _, name), v in stats.items() if name == function and file.endswith(path))
    return out


def run(quick: bool) -> dict[str, Any]:
    from benchmarks.recording_overhead import index_folder, loadavg
    from memory_core.entrypoints.bootstrap import bootstrap

    cases = 200 if quick else 1_000
    queries = cranfield_queries()
    rng = random.Random(0)
    with scratch_dir("eval") as work:
        memory = write_synthetic_memory(work / "memory", UNITS)
        print("   indexing", flush=True)
        engine = index_folder(work / "home", PROJECT, memory.folder)
        create_ms: list[float] = []
        judge_ms: list[float] = []
        load = [loadavg()]
        try:
            print(f"   {cases:,} activations -> cases -> judgments", flush=True)
            t_all = time.perf_counter()
            for i in range(cases):
                activation = engine.activate(PROJECT, queries[i % len(queries)])
                case, s = _timed(engine.create_evaluation_case, activation.response.run_id)
                create_ms.append(s * 1000)
                _, s = _timed(engine.replace_evaluation_judgments, case.case_id, 0, judgments_for(activation, rng))
                judge_ms.append(s * 1000)
            build_s = time.perf_counter() - t_all
            load.append(loadavg())
            print("   report, export", flush=True)
            report, report_s = _timed(engine.evaluation_report, PROJECT)
            fixture, export_s = _timed(engine.export_evaluation_set, project_id=PROJECT)
            history, export_history_s = _timed(engine.export_evaluation_set, project_id=PROJECT, with_history=True)
            original = report_means(report)
            assert report.cases == cases
        finally:
            engine.close()
        print("   import into a fresh home", flush=True)
        other = bootstrap(work / "other")  # no model or JVM loads: import and report need neither
        try:
            imported, import_s = _timed(other.import_evaluation_set, fixture)
            again, reimport_s = _timed(other.import_evaluation_set, fixture)
            replayed, report2_s = _timed(other.evaluation_report, PROJECT)
            report_runs_s = [_timed(other.evaluation_report, PROJECT)[1] for _ in range(REPORT_RUNS)]
            load.append(loadavg())
            profile = profile_report(other)
        finally:
            other.close()
        load.append(loadavg())
    assert len(imported.cases_added) == cases and len(again.cases_unchanged) == cases
    result = {
        "quick": quick,
        "cases": cases,
        "units": UNITS,
        "judgments_per_case": 4,
        "build_s": round(build_s, 1),
        "create_case_ms": {
            "p50": percentile(create_ms, 50),
            "p95": percentile(create_ms, 95),
            "mean": statistics.fmean(create_ms),
        },
        "replace_judgments_ms": {
            "p50": percentile(judge_ms, 50),
            "p95": percentile(judge_ms, 95),
            "mean": statistics.fmean(judge_ms),
        },
        "report_s": report_s,
        "export_s": export_s,
        "export_with_history_s": export_history_s,
        "fixture_bytes": len(fixture),
        "fixture_with_history_bytes": len(history),
        "import_s": import_s,
        "import_again_s": reimport_s,
        "report_after_import_s": report2_s,
        "report_runs_s": report_runs_s,
        "report_profile_s": profile,
        "imported": {
            "cases_added": len(imported.cases_added),
            "corpora_added": imported.corpora_added,
            "blobs_written": imported.blobs_written,
            "unchanged_on_reimport": len(again.cases_unchanged),
        },
        "reports_agree": report_means(replayed) == original,
        "ndcg10_means": original,
        "loadavg_1m": load,
    }
    return write_result(NAME, result)


def render(result: dict[str, Any]) -> str:
    n = result["cases"]
    mib = 1024 * 1024
    lines = [
        "## Evaluation at scale",
        "",
        measured(result)
        + f". In process on a real home ({result['units']:,}-unit synthetic project): {n:,} activations, each "
        f"turned into a case and given {result['judgments_per_case']} judgments (three units of the trace, one "
        f"resource of the corpus); the {n:,} cases took {result['build_s']:.0f} s in all, activations included. "
        "The machine is shared and noisy (1-minute load average "
        f"{'–'.join(f'{x:.1f}' for x in result['loadavg_1m'])}).",
        "",
        "| operation | time |",
        "|---|---:|",
        f"| create a case from a Run (p50 / p95) | {result['create_case_ms']['p50']:.1f} / "
        f"{result['create_case_ms']['p95']:.1f} ms |",
        f"| replace a case's judgments (p50 / p95) | {result['replace_judgments_ms']['p50']:.1f} / "
        f"{result['replace_judgments_ms']['p95']:.1f} ms |",
        f"| report over {n:,} cases (B1–B4 and a variant per fusion, both levels, B4's paired intervals and p) | "
        f"{result['report_s']:.2f} s |",
        f"| export the fixture ({result['fixture_bytes'] / mib:.1f} MiB) | {result['export_s']:.2f} s |",
        f"| export with judgment history ({result['fixture_with_history_bytes'] / mib:.1f} MiB) | "
        f"{result['export_with_history_s']:.2f} s |",
        f"| import into a fresh home (every hash verified) | {result['import_s']:.2f} s |",
        f"| import again (all {result['imported']['unchanged_on_reimport']:,} cases already present) | "
        f"{result['import_again_s']:.2f} s |",
        f"| report in the importing home | {result['report_after_import_s']:.2f} s |",
        *_report_runs_row(result),
        "",
        f"The import added {result['imported']['cases_added']:,} cases, {result['imported']['corpora_added']} "
        f"corpus and {result['imported']['blobs_written']:,} blobs; the report there "
        + (
            "equals the original (nDCG@10 means of every variant at both levels)."
            if result["reports_agree"]
            else "**differs from the original**."
        )
        + " The fixture is one JSON document holding every case's full source trace (about 200 candidates "
        "with every stage's rank and score), which is what its size is made of.",
        "",
        *_profile_lines(result),
    ]
    return "\n".join(lines)


def _report_runs_row(result: dict[str, Any]) -> list[str]:
    runs = result.get("report_runs_s")
    if not runs:
        return []
    return [
        f"| report in the importing home, {len(runs)} more runs (median, min–max) | "
        f"{statistics.median(runs):.2f} s ({min(runs):.2f}–{max(runs):.2f}) |"
    ]


def _profile_lines(result: dict[str, Any]) -> list[str]:
    profile = result.get("report_profile_s")
    if not profile:
        return []
    total = profile["total"]
    shares = ", ".join(f"{part} {profile[part] / total:.0%}" for part in REPORT_PARTS if part in profile)
    return [
        f"Where a report's time goes (one run in the importing home under cProfile, {total:.1f} s profiled; "
        f"shares of it, the rest is assembling the report): {shares}. The B4 comparisons (one per other "
        "variant and level, 2,000 resamples each) share their resamples and sign flips, drawn once for "
        "all comparisons with as many paired cases, and each draw sums every comparison at once "
        "(`evaluation/statistics.py`).",
        "",
    ]
