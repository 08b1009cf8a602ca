"""``memcore eval tune`` (issue 18): what tuning finds on the shared collections, and its cost.

Each collection (Cranfield, on which the default fusion settings were chosen, and CISI, held
out) is imported with ``import_beir`` through the real engine (Lucene, MiniLM on ONNX, usearch,
SQLite): one reviewed case per judged query, its Run's trace stored. ``Engine.tune_project``
then searches the default grid (``memory_core/evaluation/tuning.py``) with 5-fold
cross-validation at resource level, as ``memcore eval tune`` does; the figures are its own:
the current setting's and the cross-validated choice's nDCG@10, Recall@20 and MRR, the paired
95 % bootstrap interval of the nDCG@10 gain and the sign-flip p.

One default for both (issue 17, item 1): each collection's best setting on all its cases is
graded on the *other* collection against the shipped default, case by case (paired bootstrap
interval and sign-flip p): a setting chosen on one collection and graded on data it never saw.

Cost: ``tune`` over 1,000 cases (the two collections' cases repeated under new ids until there
are 1,000), timed, and its peak Python allocation measured in a second run (tracemalloc slows
what it traces, so the time comes from the first).
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path
from typing import Any

import attrs

from benchmarks.common import CISI, CRANFIELD, measured, proposal_figures, scratch_dir, write_result

NAME = "tuning"
SCALE_CASES = 1_000


def _accepted(root: Path, into: Path) -> Path:
    """The collection without the queries an activation refuses (longer than MAX_QUERY_CHARS:
    3 of CISI's), as the peer comparison leaves them out; the corpus is linked, not copied."""
    import csv
    import json

    from memory_core.retrieval.profile import MAX_QUERY_CHARS

    into.mkdir(parents=True)
    (into / "qrels").mkdir()
    (into / "corpus.jsonl").symlink_to(root / "corpus.jsonl")
    kept = set()
    with (root / "queries.jsonl").open(encoding="utf-8") as src, (into / "queries.jsonl").open("w") as dst:
        for line in src:
            query = json.loads(line)
            if 1 <= len(query["text"].strip()) <= MAX_QUERY_CHARS:
                kept.add(str(query["_id"]))
                dst.write(line)
    with (root / "qrels" / "test.tsv").open(encoding="utf-8") as src, (into / "qrels" / "test.tsv").open("w") as dst:
        rows = csv.reader(src, delimiter="\t")
        out = csv.writer(dst, delimiter="\t", lineterminator="\n")
        out.writerow(next(rows))
        out.writerows(r for r in rows if r[0] in kept)
    return into


def _import(home: Path, root: Path, project: str, engine: Any) -> list[Any]:
    from memory_core.adapters.files.evaluation_sources import FolderSources
    from memory_core.services.beir_import import EngineWorkspace, import_beir

    workspace = EngineWorkspace(engine, FolderSources(home.parent / f"{project}-sources"))
    import_beir(engine.evaluations(), workspace, root, project, reviewed=True)
    service = engine.evaluations()
    cases: list[Any] = service.case_inputs(service.list_cases(project))
    return cases


def _figures(result: Any) -> dict[str, Any]:
    return {
        **proposal_figures(result, "cross_validated"),
        "grid_size": result.grid_size,
        "best": dict(result.best) if result.best else None,
        "estimated_similarities": result.estimated_similarities,
        "left_out": list(result.left_out),
    }


def _transfer(cases: list[Any], setting: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """nDCG@10 (resource level, as ``tune`` grades) of ``setting`` against ``current`` on ``cases``."""
    from memory_core.evaluation.metrics import MetricLevel, grade, ndcg_at
    from memory_core.evaluation.statistics import paired_bootstrap, paired_randomization_p
    from memory_core.evaluation.tuning import final_order

    level = MetricLevel.RESOURCE
    judged = [c for c in cases if grade([], c.judgments, level).relevant > 0]

    def ndcg(case: Any, s: dict[str, Any]) -> float:
        return ndcg_at(grade(final_order(case, s), case.judgments, level), 10) or 0.0

    new, now = [ndcg(c, setting) for c in judged], [ndcg(c, current) for c in judged]
    ci = paired_bootstrap(new, now)
    return {"cases": len(judged), "current": sum(now) / len(now), "setting": sum(new) / len(new),
            "gain": ci.mean_diff, "low": ci.low, "high": ci.high, "p": paired_randomization_p(new, now)}  # fmt: skip


def run(quick: bool) -> dict[str, Any]:
    from memory_core.entrypoints.bootstrap import bootstrap
    from memory_core.evaluation.tuning import current_setting, tune
    from memory_core.retrieval.fusion import Fusion, is_fusion

    collections: dict[str, Any] = {}
    inputs: list[Any] = []
    by_name: dict[str, list[Any]] = {}
    with scratch_dir(NAME) as tmp:
        engine = bootstrap(tmp / "home")
        try:
            for name, root in (("cranfield", CRANFIELD), ("cisi", CISI)):
                print(f"   importing {name}", flush=True)
                cases = _import(tmp / "home", _accepted(root, tmp / f"{name}-data"), name, engine)
                inputs += cases
                by_name[name] = cases
                print(f"   tuning {name} ({len(cases)} cases)", flush=True)
                collections[name] = _figures(engine.tune_project(name, folds=5))
            ranking = engine.ranking_for("cranfield")
            assert is_fusion(ranking.reranker)  # a registered fusion: tuning grids its settings
            fusion: Fusion = ranking.reranker  # type: ignore[assignment]
            current = current_setting(ranking.profile.rrf_k, ranking.profile.rerank_depth, fusion)
        finally:
            engine.close()
    transfer = {}
    for a in by_name:
        for b in by_name:
            best = collections[a]["best"]
            if a != b and best:
                transfer[f"{a} -> {b}"] = {"setting": best, **_transfer(by_name[b], best, current)}
    total = 200 if quick else SCALE_CASES
    scaled = [attrs.evolve(inputs[i % len(inputs)], case_id=f"scale-{i:05d}") for i in range(total)]
    print(f"   tune over {total} cases", flush=True)
    t0 = time.perf_counter()
    timed = tune(scaled, current, tune_id="scale", project_id="scale", created_at="now")
    seconds = time.perf_counter() - t0
    tracemalloc.start()
    tune(scaled, current, tune_id="scale", project_id="scale", created_at="now")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    scale = {"cases": total, "judged": timed.cases, "grid_size": timed.grid_size, "seconds": round(seconds, 2),
             "peak_mib": round(peak / 2**20, 1)}  # fmt: skip
    return write_result(NAME, {"quick": quick, "collections": collections, "current": current,
                               "transfer": transfer, "scale": scale})  # fmt: skip


def _row(name: str, c: dict[str, Any]) -> str:
    now, cv = c["current"], c["cross_validated"]
    low, high = c["gain_interval"]
    return (f"| {name} | {c['cases']} | {now['ndcg_at_10']:.3f} / {cv['ndcg_at_10']:.3f} | "
            f"{now['recall_at_20']:.3f} / {cv['recall_at_20']:.3f} | {now['mrr']:.3f} / {cv['mrr']:.3f} | "
            f"{c['gain']:+.4f} [{low:+.4f}, {high:+.4f}] | {c['p_value']:.3f} | "
            f"{'yes' if c['proposed'] else 'no'} | {c['seconds']:.1f} s |")  # fmt: skip


def render(result: dict[str, Any]) -> str:
    s = result["scale"]
    lines = [
        "## Tuning a project's ranking (`memcore eval tune`)",
        "",
        f"{measured(result)}: each collection imported as reviewed cases through the real engine, then "
        f"`Engine.tune_project` with the default grid ({result['collections']['cranfield']['grid_size']:,} settings "
        "of rrf_k, rerank_depth, normalisation, cosine_floor and alpha), 5-fold cross-validation by case at "
        "resource level. Current / cross-validated (each fold's choice graded on its held-out cases); the gain is "
        "in nDCG@10 with its paired 95 % bootstrap interval and sign-flip p. CISI's 3 queries longer than an "
        "activation accepts are left out (as in the peer comparison). `benchmarks/tuning.py` says how.",
        "",
        "| collection | judged cases | nDCG@10 | Recall@20 | MRR | gain [95 % CI] | p | proposed | time |",
        "|---|---:|---|---|---|---|---:|---|---:|",
    ]
    lines += [_row(name, c) for name, c in result["collections"].items()]
    lines += [""]
    lines += [f"- {name}: {c['verdict']}" + (f"; best on all cases: {c['best']}" if c["best"] else "")
              for name, c in result["collections"].items()]  # fmt: skip
    if result.get("transfer"):
        lines += [
            "",
            "One default for both collections (issue 17): each collection's best setting on all its cases, "
            f"graded on the other collection against the shipped default {result['current']} (nDCG@10 at resource "
            "level, paired 95 % bootstrap interval, sign-flip p):",
            "",
            "| chosen on -> graded on | cases | default | chosen setting | gain [95 % CI] | p |",
            "|---|---:|---:|---:|---|---:|",
        ]
        for pair, t in result["transfer"].items():
            lines.append(f"| {pair} | {t['cases']} | {t['current']:.3f} | {t['setting']:.3f} | "
                         f"{t['gain']:+.4f} [{t['low']:+.4f}, {t['high']:+.4f}] | {t['p']:.3f} |")  # fmt: skip
        carried = [pair for pair, t in result["transfer"].items() if t["low"] > 0]
        verdict = (
            f"Carried over with an interval above 0: {', '.join(carried)}."
            if carried
            else "No setting chosen on one collection beats the shipped default on the other with an interval "
            "above 0, so the default stays; a project with judged cases gets its own (`memcore eval tune`)."
        )
        lines += ["", verdict]
    lines += [
        "",
        f"Cost: `tune` over {s['cases']:,} cases ({s['judged']:,} with a relevant item; {s['grid_size']:,} settings) "
        f"took {s['seconds']:.1f} s on one core, peak Python allocation {s['peak_mib']:.1f} MiB. The grades are "
        "memoised by the ranks that decide nDCG@10, so settings that order the top alike cost one grading.",
        "",
    ]
    return "\n".join(lines)
