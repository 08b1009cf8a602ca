"""``memcore eval learn`` (issue 32, item 2): a learned ranker against the project's ranking, by
cross-validation on each development collection.

Each collection is imported with ``import_beir`` through the real engine (Lucene, MiniLM on ONNX,
usearch, SQLite) as reviewed cases, one per judged query, its Run's trace stored: Cranfield and
CISI (their test qrels, queries an activation refuses left out as in ``benchmarks/tuning.py``),
scifact-train (its train split: 809 claims over 5,183 abstracts) and locomo-dev (five LoCoMo
conversations). ``Engine.learn_project`` then does what ``memcore eval learn`` does: nested
cross-validation (``memory_core/evaluation/learning.py``): 5 outer folds, each graded with the
LightGBM lambdarank setting that a 3-fold cross-validation on its training folds alone chose among
the product's grid (``SETTINGS``; the first is no model, the current ranking kept), at resource
level, against the ranking the project has now (the default fusion) on the same recorded windows;
the gain is in nDCG@10 with its paired 95 % bootstrap interval and sign-flip p. On locomo-dev the
folds are whole conversations (a case's group is the ``c<conversation>`` prefix of its corpus
ids), so no model is graded on a conversation it learned. (Results saved before the grid moved
into the product graded one fixed setting there.)

Learned against the default and both peers (``nested``): the same selection, the product's own
``nested_cv`` over the same outer folds, so its held-out grades are those ``eval learn`` pairs;
here they are paired per case with the default's (the project's fusion on the recorded window)
and with the two afternoon peers' of ``benchmarks/dev_collections.py`` (FTS5 BM25 + MiniLM over
whole documents, RRF k 60 or convex min-max 0.5; their lists read from that benchmark's
recordings, ``MEMCORE_DEV_WORK``), resource level with the engine's own metric and judgments,
with paired 95 % bootstrap intervals and sign-flip p.

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

from benchmarks.common import (
    CISI,
    CRANFIELD,
    LOCOMO_DEV,
    SCIFACT_TRAIN,
    measured,
    proposal_figures,
    scratch_dir,
    write_result,
)

NAME = "learning"
COLLECTIONS = (("cranfield", CRANFIELD, "test"), ("cisi", CISI, "test"), ("scifact-train", SCIFACT_TRAIN, "train"),
               ("locomo-dev", LOCOMO_DEV, "test"))  # fmt: skip


def conversation(case: Any) -> str:
    """locomo-dev's fold unit: the conversation its judged turns belong to (``c26-D1:3.md`` -> ``c26``),
    the product's own rule (``eval learn --group-by -``)."""
    from memory_core.evaluation.learning import group_by_separator

    return group_by_separator("-")(case)


def _import(engine: Any, base: Path, name: str, root: Path, split: str) -> None:
    from benchmarks.tuning import _accepted
    from memory_core.adapters.files.evaluation_sources import FolderSources
    from memory_core.services.beir_import import EngineWorkspace, import_beir

    folder = _accepted(root, base / f"{name}-data") if name in ("cranfield", "cisi") else root
    workspace = EngineWorkspace(engine, FolderSources(base / f"{name}-sources"))
    import_beir(engine.evaluations(), workspace, folder, name, split=split, reviewed=True)


def _figures(result: Any) -> dict[str, Any]:
    return {
        **proposal_figures(result, "learned"),
        "groups": result.groups,
        "training_rows": result.training_rows,
        "current_reranker": result.current,
        "trainer": result.trainer,
        "importances": [[f.feature, f.share] for f in result.importances[:5]],
        "fold_settings": list(result.fold_settings),
        "chosen_setting": result.chosen_setting,
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
        window: list[FeatureInput] = list(learning_case(trace, case.query, service.blobs.get).window)
        t0 = time.perf_counter()
        reranker.rerank(case.query, window)
        times.append((time.perf_counter() - t0) * 1000)
    return {"p50": round(percentile_nearest_rank(times, 50) or 0.0, 3),
            "p95": round(percentile_nearest_rank(times, 95) or 0.0, 3)}  # fmt: skip


# The grid and the nested selection are the product's own (``memory_core.evaluation.learning``:
# ``SETTINGS``, ``nested_cv``), so what ``memcore eval learn`` does is what is graded here; only
# the peers' grades are this benchmark's. The 5 outer folds are ``eval learn``'s default.
OUTER_FOLDS = 5


def _resource_of(doc: str) -> str:
    """A BEIR document id as ``import_beir`` names its resource (``c26-D1:3`` -> ``c26-D1-3.md``)."""
    return doc.replace(":", "-") + ".md"


def _peer_rankings(name: str) -> dict[str, dict[str, list[str]]]:
    """Per BEIR query id, the two peers' whole-document orders (``dev_collections``' recordings)."""
    from benchmarks.dev_collections import peer_orders, record

    work = os.environ.get("MEMCORE_DEV_WORK")
    if work:
        recorded = record(name, Path(work))
    else:
        with scratch_dir("learning-peers") as tmp:
            recorded = record(name, tmp)
    return {q: peer_orders(p) for q, p in recorded["peer"].items()}


def _ndcg(order: list[Any], judgments: Any) -> float:
    from memory_core.evaluation.metrics import MetricLevel, grade, ndcg_at

    return ndcg_at(grade(order, judgments, MetricLevel.RESOURCE), 10) or 0.0


def nested(engine: Any, name: str) -> dict[str, Any]:
    """Learned (settings chosen on inner folds only) vs the default and both peers, on held-out folds."""
    from memory_core.adapters.learning.lightgbm_ranker import LightGBMRanker
    from memory_core.evaluation.learning import (
        INNER_FOLDS,
        SETTINGS,
        Trainer,
        graded,
        learning_case,
        nested_cv,
        reordered,
    )
    from memory_core.evaluation.metrics import RankedItem, grade
    from memory_core.evaluation.statistics import paired_bootstrap, paired_randomization_p

    service = engine.evaluations()
    listed = service.list_cases(name)
    inputs = service.case_inputs(listed)
    current = engine.ranking_for(name).reranker
    cases = []
    for case, trace in zip(listed, inputs, strict=True):
        lc = learning_case(trace, case.query, service.blobs.get)
        if name == "locomo-dev":
            lc = attrs.evolve(lc, group=conversation(lc))
        if lc.window and grade([], lc.judgments, _level()).relevant > 0:
            cases.append((case, trace, lc))
    peers = _peer_rankings(name)
    prefix = f"beir-{name}-"
    cases = [t for t in cases if t[0].case_id.removeprefix(prefix) in peers]
    learning = [lc for _, _, lc in cases]
    now = [graded(reordered(c, current.rerank(c.query, list(c.window))), c.judgments, _level()) for c in learning]
    ranker = LightGBMRanker()
    trainer = Trainer(lambda data, setting: ranker.with_setting(setting).fit(data), ranker.load, _level())
    graded_cv = nested_cv(learning, now, SETTINGS, trainer, folds=OUTER_FOLDS, inner_folds=INNER_FOLDS)
    chosen = []
    for k, (best, means) in enumerate(zip(graded_cv.choices, graded_cv.inner_means, strict=True)):
        chosen.append({"fold": k, "setting": best, "inner_ndcg": [round(m, 4) for m in means]})
        print(f"   {name} outer fold {k}: inner nDCG@10 {list(means)} -> setting {best}", flush=True)
    default = [g[0] for g in now]
    rows: dict[str, list[float]] = {"default": default, "learned (nested)": [g[0] for g in graded_cv.held_out]}
    for which, label in (("peer_rrf", "peer RRF"), ("peer_convex", "peer convex")):
        values = []
        for case, trace, lc in cases:
            docs = peers[case.case_id.removeprefix(prefix)][which]
            order = [RankedItem(f"{r}#0", r, trace.corpus_hashes.get(r, "")) for r in map(_resource_of, docs)]
            values.append(_ndcg(order, lc.judgments))
        rows[label] = values

    def vs(a: str, b: str) -> dict[str, float]:
        interval = paired_bootstrap(rows[a], rows[b])
        return {"diff": interval.mean_diff, "low": interval.low, "high": interval.high,
                "p": paired_randomization_p(rows[a], rows[b])}  # fmt: skip

    return {
        "cases": len(learning),
        "groups": len({c.group for c in learning}),
        "means": {k: sum(v) / len(v) for k, v in rows.items()},
        "learned_vs": {other: vs("learned (nested)", other) for other in ("default", "peer RRF", "peer convex")},
        "default_vs": {other: vs("default", other) for other in ("peer RRF", "peer convex")},
        "chosen": chosen,
    }


def _level() -> Any:
    from memory_core.evaluation.metrics import MetricLevel

    return MetricLevel.RESOURCE


def _learn_all(engine: Any, quick: bool) -> dict[str, Any]:
    out = {}
    for name, _, _ in COLLECTIONS:
        if quick and name != "cisi":
            continue
        print(f"   learning {name}", flush=True)
        group = {"group_of": conversation} if name == "locomo-dev" else {}
        result = engine.learn_project(name, folds=OUTER_FOLDS, **group)
        out[name] = _figures(result)
        if result.model_digest is not None:  # None: the grid kept the current ranking, no model to time
            out[name]["rerank_ms"] = _rerank_ms(engine, name, result.model_digest)
        if os.environ.get("MEMCORE_LEARNING_NESTED", "1") != "0":
            out[name]["nested"] = nested(engine, name)
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


def _ci(c: dict[str, float]) -> str:
    mark = "" if c["low"] <= 0 <= c["high"] else " *"
    return f"{c['diff']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]{mark}"


def _config(setting: Any) -> str:
    if setting is None:
        return "the default fusion, no model"
    r = setting
    sampled = f", {r.feature_fraction:g} of the features a tree" if r.feature_fraction < 1 else ""
    return f"{r.leaves} leaves, {r.min_data_in_leaf} rows a leaf, {r.rounds} rounds, base {r.base_weight:g}{sampled}"


def _picked(chosen: dict[str, Any]) -> str:
    """The grid index a fold chose: recorded as ``setting``, or (results before the grid moved
    into the core) as the setting's fields, ``config``."""
    from memory_core.evaluation.learning import SETTINGS, LearnerSetting

    if "setting" in chosen:
        return str(chosen["setting"])
    config = chosen["config"]
    setting = None if config is None else LearnerSetting(**config)
    return str(SETTINGS.index(setting)) if setting in SETTINGS else "?"


def render(result: dict[str, Any]) -> str:
    from memory_core.evaluation.learning import INNER_FOLDS, SETTINGS

    collections = result["collections"]
    first = next(iter(collections.values()))
    # Results saved since the grid moved into the product record its choice: their folds are nested.
    how = (f"nested cross-validation ({OUTER_FOLDS} outer folds, each with the setting a {INNER_FOLDS}-fold "
           f"cross-validation on its training folds chose among the {len(SETTINGS)} below)"
           if "chosen_setting" in first else "5-fold cross-validation")  # fmt: skip
    lines = [
        "## A ranker learned from judgments (`memcore eval learn`)",
        "",
        f"{measured(result)}: each development collection imported as reviewed cases through the real engine, "
        f"then `Engine.learn_project` as `memcore eval learn` runs it: {first['trainer']} over the features of every "
        f"candidate of the recorded rerank window (`memory_core/evaluation/learning.py`), {how} "
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
        chose = f"; final setting: {c['chosen_setting']}" if c.get("chosen_setting") else ""
        lines.append(f"- {name}: {c['verdict']}{chose}; most important features: {top or 'none (no model)'}")
    nested_rows = {name: c["nested"] for name, c in collections.items() if "nested" in c}
    if nested_rows:
        lines += ["", "**Learned against the default and both peers, with nested cross-validation** (`nested`): "
                      f"{OUTER_FOLDS} outer folds (by conversation on locomo-dev); in each, the learner's settings are "
                      f"chosen among {len(SETTINGS)} (0: no model, the default ranking kept) by a {INNER_FOLDS}-fold "
                      "cross-validation on the training folds alone, the model is trained on them and graded on the "
                      "held-out fold. The default (the "
                      "project's fusion on the recorded window) and the peers (FTS5 BM25 + MiniLM fp32 over whole "
                      "documents, RRF k 60 or convex min-max 0.5; `benchmarks/dev_collections.py`) are graded on "
                      "the same cases with the same resource-level nDCG@10. Paired 95 % bootstrap intervals; `*` "
                      "marks one that excludes 0, every other difference is not significant.", "",
                  "| collection | cases | default | learned (nested) | peer RRF | peer convex | learned − default | "
                  "learned − peer RRF | learned − peer convex | settings chosen per fold |",
                  "|---|---:|---:|---:|---:|---:|---|---|---|---|"]  # fmt: skip
        for name, n in nested_rows.items():
            m, v = n["means"], n["learned_vs"]
            picks = ", ".join(_picked(c) for c in n["chosen"])
            lines.append(f"| {name} | {n['cases']} | {m['default']:.3f} | {m['learned (nested)']:.3f} | "
                         f"{m['peer RRF']:.3f} | {m['peer convex']:.3f} | {_ci(v['default'])} | {_ci(v['peer RRF'])} | "
                         f"{_ci(v['peer convex'])} | {picks} |")  # fmt: skip
        lines += ["", "Settings: " + "; ".join(f"{i} = {_config(c)}" for i, c in enumerate(SETTINGS)) + "."]
    if all("rerank_ms" in c for c in collections.values()):
        said = "; ".join(f"{name} {c['rerank_ms']['p50']:.2f} / {c['rerank_ms']['p95']:.2f} ms"
                         for name, c in collections.items())  # fmt: skip
        lines += ["", "What ranking with the learned model costs an activation: its rerank stage (the window's "
                      "features and the model's scores, up to 50 units) p50 / p95 over each collection's cases: "
                      f"{said}."]  # fmt: skip
    return "\n".join(lines) + "\n"
