"""``memcore eval learn`` (issue 32, item 2): a learned ranker against the project's ranking, by
cross-validation on each development collection.

Each collection is imported with ``import_beir`` through the real engine (Lucene, MiniLM on ONNX,
usearch, SQLite) as reviewed cases, one per judged query, its Run's trace stored: Cranfield and
CISI (their test qrels, queries an activation refuses left out as in ``benchmarks/tuning.py``),
scifact-train (its train split: 809 claims over 5,183 abstracts) and locomo-dev (five LoCoMo
conversations). ``Engine.learn_project`` then does what ``memcore eval learn`` does: 5-fold
cross-validation, each fold's LightGBM lambdarank model trained on the other folds and graded on
its held-out cases at resource level, against the ranking the project has now (the default
fusion) on the same recorded windows; the gain is in nDCG@10 with its paired 95 % bootstrap
interval and sign-flip p. On locomo-dev the folds are whole conversations (a case's group is the
``c<conversation>`` prefix of its corpus ids), so no model is graded on a conversation it learned.

Importing scifact-train takes minutes: ``MEMCORE_LEARNING_HOME`` names a home the four
collections were already imported into (as ``cranfield``, ``cisi``, ``scifact-train`` and
``locomo-dev``), which is reused; otherwise they are imported into a scratch home.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import attrs

from benchmarks.common import CISI, CRANFIELD, LOCOMO_DEV, SCIFACT_TRAIN, measured, scratch_dir, write_result

NAME = "learning"
COLLECTIONS = (("cranfield", CRANFIELD, "test"), ("cisi", CISI, "test"), ("scifact-train", SCIFACT_TRAIN, "train"),
               ("locomo-dev", LOCOMO_DEV, "test"))  # fmt: skip


def conversation(case: Any) -> str:
    """locomo-dev's fold unit: the conversation its judged turns belong to (``c26-D1:3.md`` -> ``c26``)."""
    judged = sorted(case.judgments.resource_relevance()) or [case.window[0].resource_id]
    return str(judged[0]).split("-", 1)[0]


def _import(engine: Any, base: Path, name: str, root: Path, split: str) -> None:
    from benchmarks.tuning import _accepted
    from memory_core.adapters.files.evaluation_sources import FolderSources
    from memory_core.services.beir_import import EngineWorkspace, import_beir

    folder = _accepted(root, base / f"{name}-data") if name in ("cranfield", "cisi") else root
    workspace = EngineWorkspace(engine, FolderSources(base / f"{name}-sources"))
    import_beir(engine.evaluations(), workspace, folder, name, split=split, reviewed=True)


def _figures(result: Any) -> dict[str, Any]:
    return {
        "cases": result.cases,
        "excluded_cases": result.excluded_cases,
        "groups": result.groups,
        "training_rows": result.training_rows,
        "seconds": result.seconds,
        "current_reranker": result.current,
        "trainer": result.trainer,
        "current": attrs.asdict(result.current_metrics) if result.current_metrics else None,
        "learned": attrs.asdict(result.cross_validated) if result.cross_validated else None,
        "gain": result.gain,
        "gain_interval": [result.gain_low, result.gain_high],
        "p_value": result.p_value,
        "proposed": result.proposed,
        "verdict": result.verdict,
        "importances": [[f.feature, f.share] for f in result.importances[:5]],
    }


def _rerank_ms(engine: Any, name: str, digest: str) -> dict[str, float]:
    """What the learned model adds to an activation: ``LearnedReranker.rerank`` (the window's
    features and the model's scores) over every case's recorded window, p50 and p95 in ms."""
    from memory_core.evaluation.learning import FeatureInput, learning_case
    from memory_core.evaluation.statistics import percentile_nearest_rank

    reranker = engine._profiles.load_model(name, digest)
    service = engine.evaluations()
    cases = service.list_cases(name)
    times = []
    for case, trace in zip(cases, service.case_inputs(cases), strict=True):
        window: list[FeatureInput] = list(learning_case(trace, case.query).window)
        t0 = time.perf_counter()
        reranker.rerank(case.query, window)
        times.append((time.perf_counter() - t0) * 1000)
    return {"p50": round(percentile_nearest_rank(times, 50) or 0.0, 3),
            "p95": round(percentile_nearest_rank(times, 95) or 0.0, 3)}  # fmt: skip


def _learn_all(engine: Any, quick: bool) -> dict[str, Any]:
    out = {}
    for name, _, _ in COLLECTIONS:
        if quick and name != "cisi":
            continue
        print(f"   learning {name}", flush=True)
        group = {"group_of": conversation} if name == "locomo-dev" else {}
        result = engine.learn_project(name, folds=5, **group)
        out[name] = {**_figures(result), "rerank_ms": _rerank_ms(engine, name, result.model_digest)}
    return out


def run(quick: bool) -> dict[str, Any]:
    from memory_core.entrypoints.bootstrap import bootstrap

    t0 = time.perf_counter()
    reused = os.environ.get("MEMCORE_LEARNING_HOME")
    if reused:
        engine = bootstrap(reused)
        try:
            collections = _learn_all(engine, quick)
        finally:
            engine.close()
    else:
        with scratch_dir(NAME) as tmp:
            engine = bootstrap(tmp / "home")
            try:
                for name, root, split in COLLECTIONS:
                    if not quick or name == "cisi":
                        print(f"   importing {name}", flush=True)
                        _import(engine, tmp, name, root, split)
                collections = _learn_all(engine, quick)
            finally:
                engine.close()
    return write_result(NAME, {"quick": quick, "collections": collections,
                               "seconds": round(time.perf_counter() - t0, 1)})  # fmt: skip


def _row(name: str, c: dict[str, Any]) -> str:
    now, cv = c["current"], c["learned"]
    low, high = c["gain_interval"]
    significant = "**yes**" if low > 0 else ("worse" if high < 0 else "no")
    return (f"| {name} | {c['cases']} ({c['groups']} groups) | {now['ndcg_at_10']:.3f} / {cv['ndcg_at_10']:.3f} | "
            f"{now['recall_at_20']:.3f} / {cv['recall_at_20']:.3f} | {now['mrr']:.3f} / {cv['mrr']:.3f} | "
            f"{c['gain']:+.4f} [{low:+.4f}, {high:+.4f}] | {c['p_value']:.3f} | {significant} | "
            f"{c['seconds']:.0f} s |")  # fmt: skip


def render(result: dict[str, Any]) -> str:
    collections = result["collections"]
    first = next(iter(collections.values()))
    lines = [
        "## A ranker learned from judgments (`memcore eval learn`)",
        "",
        f"{measured(result)}: each development collection imported as reviewed cases through the real engine, "
        f"then `Engine.learn_project` as `memcore eval learn` runs it: {first['trainer']} over the features of every "
        "candidate of the recorded rerank window (`memory_core/evaluation/learning.py`), 5-fold cross-validation "
        "at resource level (by conversation on locomo-dev), against the project's ranking now "
        f"(`{first['current_reranker']}`) on the same windows. Current / learned (each fold's model on its held-out "
        "cases); the gain is in nDCG@10 with its paired 95 % bootstrap interval and sign-flip p; *proposed* is "
        "the guard's verdict (lower bound above 0). Time: the whole learning (five folds, the final model, the "
        "bootstrap) on one core. `benchmarks/learning.py` says how.",
        "",
        "| collection | judged cases | nDCG@10 | Recall@20 | MRR | gain [95 % CI] | p | proposed | time |",
        "|---|---:|---|---|---|---|---:|---|---:|",
    ]
    lines += [_row(name, c) for name, c in collections.items()]
    lines += [""]
    for name, c in collections.items():
        top = ", ".join(f"{f} {share:.2f}" for f, share in c["importances"])
        lines.append(f"- {name}: {c['verdict']}; most important features: {top}")
    if all("rerank_ms" in c for c in collections.values()):
        said = "; ".join(f"{name} {c['rerank_ms']['p50']:.2f} / {c['rerank_ms']['p95']:.2f} ms"
                         for name, c in collections.items())  # fmt: skip
        lines += ["", "What ranking with the learned model costs an activation: its rerank stage (the window's "
                      "features and the model's scores, up to 50 units) p50 / p95 over each collection's cases: "
                      f"{said}."]  # fmt: skip
    return "\n".join(lines) + "\n"
