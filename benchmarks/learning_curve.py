"""How many judged cases ``memcore eval learn`` needs (issue 32, item 2): a learning curve.

``benchmarks/learning.py`` grades the learner with all of a collection's judged cases; here the
same learning is run on random subsets of n of them, on the two development collections where it
wins with all: scifact-train and locomo-dev, imported as ``benchmarks/learning.py`` imports them
(``MEMCORE_LEARNING_HOME`` reused when set). For each n in ``DRAWS`` (50, 100, 200, 400, all)
there are ``DRAWS[n]`` independent draws without replacement (not nested in one another), each
seeded by ``random.Random(f"{SEED}:{collection}:{n}:{draw}")`` (n "all" for all), among the cases
``eval learn`` learns from (``learns_from``: a recorded window and a relevant item); on locomo-dev
each draw takes from every conversation its proportional share (largest remainder), so all five
conversations are in every subset and the folds stay whole conversations (``conversation``).

Each subset goes through the product's own ``learn`` (``memory_core/evaluation/learning.py``),
as ``Engine.learn_project`` calls it, with the engine's learner and the project's ranking now
(the default fusion), nothing stored: nested cross-validation (5 outer folds, each with the
setting a 3-fold cross-validation on its training folds chose among ``SETTINGS``), the held-out
resource-level nDCG@10 gain over the default on the same recorded windows with its paired 95 %
bootstrap interval and sign-flip p, and ``proposed``: what ``learn`` decides (the final choice is
a model and the interval's lower bound is above 0). With all cases this is exactly the learning
``benchmarks/learning.py`` reports. ``quick``: CISI (75 cases), 50 and all, one draw each.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from benchmarks.common import CISI, LOCOMO_DEV, SCIFACT_TRAIN, measured, scratch_dir, write_result
from benchmarks.learning import OUTER_FOLDS, _config, _import, conversation

NAME = "learning_curve"
COLLECTIONS = (("scifact-train", SCIFACT_TRAIN, "train"), ("locomo-dev", LOCOMO_DEV, "test"))
QUICK = (("cisi", CISI, "test"),)
ALL = 0  # the size "all cases"
DRAWS = {50: 5, 100: 5, 200: 5, 400: 5, ALL: 1}  # n: draws (the collections have some 800 cases)
QUICK_DRAWS = {50: 1, ALL: 1}
SEED = 32  # issue 32


def _pool(engine: Any, name: str) -> list[Any]:
    """The project's ``LearningCase``s as ``learn_project`` makes them, those ``learn`` learns from."""
    from memory_core.evaluation.learning import learning_cases, learns_from
    from memory_core.evaluation.metrics import MetricLevel

    service = engine.evaluations()
    usable = service.cases_to_learn_from(name, include_unreviewed=False, verb="learn", use="to learn from")
    cases = learning_cases(service.case_inputs(usable), [c.query for c in usable], service.blobs.get)
    if name == "locomo-dev":
        cases = [attrs.evolve(c, group=conversation(c)) for c in cases]
    return [c for c in cases if learns_from(len(c.window), c.judgments, MetricLevel.RESOURCE)]


def draw(pool: Sequence[Any], n: int, rng: random.Random, by_group: bool) -> list[Any]:
    """``n`` of ``pool`` without replacement, in the pool's order; ``by_group``: each group its
    proportional share (largest remainder, at least one), so every group is drawn from."""
    if n == ALL or n >= len(pool):
        return list(pool)
    if not by_group:
        return [pool[i] for i in sorted(rng.sample(range(len(pool)), n))]
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(pool):
        groups.setdefault(c.group, []).append(i)
    exact = {g: n * len(members) / len(pool) for g, members in groups.items()}
    share = {g: max(1, int(e)) for g, e in exact.items()}
    for g in sorted(groups, key=lambda g: (-(exact[g] - int(exact[g])), g))[: n - sum(share.values())]:
        share[g] += 1
    return [pool[i] for i in sorted(j for g, members in groups.items() for j in rng.sample(members, share[g]))]


def _curve(engine: Any, name: str, draws: dict[int, int]) -> dict[str, Any]:
    from memory_core.evaluation.learning import SETTINGS, learn, setting_label

    pool = _pool(engine, name)
    learner, current = engine.learner, engine.profile_ranking(name).reranker
    index = {setting_label(s): i for i, s in enumerate(SETTINGS)}
    rows = []
    for n, times in draws.items():
        for d in range(times):
            seed = f"{SEED}:{name}:{n or 'all'}:{d}"
            subset = draw(pool, n, random.Random(seed), by_group=name == "locomo-dev")
            result, _ = learn(subset, fit=lambda data, s: learner.with_setting(s).fit(data), load=learner.load,
                              current=current.rerank, current_revision=current.revision,
                              trainer=lambda s: learner.with_setting(s).revision, learn_id=f"curve-{seed}",
                              project_id=name, created_at="", folds=OUTER_FOLDS)  # fmt: skip
            now, cv = result.current_metrics, result.cross_validated
            assert now is not None and cv is not None and result.chosen_setting is not None, result.verdict
            rows.append({"n": n or len(pool), "all": n == ALL, "draw": d, "seed": seed, "cases": result.cases,
                         "groups": result.groups, "default": now.ndcg_at_10, "learned": cv.ndcg_at_10,
                         "gain": result.gain, "low": result.gain_low, "high": result.gain_high, "p": result.p_value,
                         "proposed": result.proposed, "fold_settings": [index[s] for s in result.fold_settings],
                         "chosen": index[result.chosen_setting], "seconds": result.seconds})  # fmt: skip
            print(f"   {name} n={rows[-1]['n']} draw {d}: {result.verdict}", flush=True)
    return {"pool": len(pool), "draws": rows}


def run(quick: bool) -> dict[str, Any]:
    from memory_core.entrypoints.bootstrap import bootstrap

    t0 = time.perf_counter()
    collections, draws = (QUICK, QUICK_DRAWS) if quick else (COLLECTIONS, DRAWS)
    reused = os.environ.get("MEMCORE_LEARNING_HOME")
    with scratch_dir(NAME) as tmp:
        engine = bootstrap(reused or tmp / "home")
        try:
            for name, root, split in collections if not reused else ():
                print(f"   importing {name}", flush=True)
                _import(engine, Path(tmp), name, root, split)
            curves = {name: _curve(engine, name, draws) for name, _, _ in collections}
        finally:
            engine.close()
    from memory_core.evaluation.learning import FEATURE_REVISION

    return write_result(NAME, {"quick": quick, "seed": SEED, "feature_revision": FEATURE_REVISION,
                               "collections": curves, "seconds": round(time.perf_counter() - t0, 1)})  # fmt: skip


def _spread(gains: list[float]) -> str:
    if len(gains) < 2:
        return "one draw"
    return f"{min(gains):+.3f} … {max(gains):+.3f}, sd {statistics.stdev(gains):.3f}"


def _draw(r: dict[str, Any]) -> str:
    mark = " *" if r["low"] > 0 else (" *below 0*" if r["high"] < 0 else "")
    return f"{r['gain']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]{mark}"


def _chosen(rows: list[dict[str, Any]]) -> str:
    folds = [s for r in rows for s in r["fold_settings"]]
    counts = ", ".join(f"{s}×{folds.count(s)}" for s in sorted(set(folds)))
    return f"{counts}; final {', '.join(str(r['chosen']) for r in rows)}"


def render(result: dict[str, Any]) -> str:
    from memory_core.evaluation.learning import INNER_FOLDS, SETTINGS

    lines = [
        "## How many judged cases `memcore eval learn` needs (learning curve)",
        "",
        f"{measured(result)}, features `{result['feature_revision']}`: the learning of the section above (`learn`, "
        f"nested cross-validation: {OUTER_FOLDS} outer folds, each with the setting a {INNER_FOLDS}-fold "
        f"cross-validation on its training folds chose among the {len(SETTINGS)} settings listed there; by "
        "conversation on locomo-dev) run on random subsets of "
        "n of a collection's judged cases, several seeded draws at small n (on locomo-dev each conversation gives "
        "its proportional share, so all five are in every subset). Per n: the default's nDCG@10 (mean over the "
        "draws), the learned ranker's mean held-out gain over it and the draws' spread, each draw's gain with its "
        "paired 95 % bootstrap interval (`*`: above 0; *below 0*: the learned ranker significantly worse; every "
        "other gain is not significant), how many draws `eval learn` would have *proposed* a model for (the "
        "final choice a model and the interval's lower bound above 0), and the settings chosen (grid index: "
        "count over the draws' outer folds; then each draw's final choice, 0 = no model). "
        "`benchmarks/learning_curve.py` says how.",
        "",
        "| collection | n | draws | default | mean gain | draws' spread | each draw's gain [95 % CI] | proposed | "
        "settings chosen |",
        "|---|---:|---:|---:|---:|---|---|---:|---|",
    ]  # fmt: skip
    order = [name for name, _, _ in COLLECTIONS + QUICK]
    for name, curve in sorted(result["collections"].items(), key=lambda item: order.index(item[0])):
        by_n: dict[int, list[dict[str, Any]]] = {}
        for r in curve["draws"]:
            by_n.setdefault(r["n"], []).append(r)
        for n, rows in by_n.items():
            gains = [r["gain"] for r in rows]
            size = f"{n} (all)" if rows[0]["all"] else str(n)
            default = statistics.fmean(r["default"] for r in rows)
            proposed = sum(r["proposed"] for r in rows)
            lines.append(f"| {name} | {size} | {len(rows)} | {default:.3f} | {statistics.fmean(gains):+.3f} | "
                         f"{_spread(gains)} | {'; '.join(map(_draw, rows))} | {proposed} of {len(rows)} | "
                         f"{_chosen(rows)} |")  # fmt: skip
    lines += ["", "Settings: " + "; ".join(f"{i} = {_config(c)}" for i, c in enumerate(SETTINGS)) + "."]
    seconds = sum(r["seconds"] for c in result["collections"].values() for r in c["draws"])
    seed = f'random.Random("{result["seed"]}:<collection>:<n>:<d>")'
    lines += ["", f"Seeds: draw d of n cases of a collection is `{seed}` (draws independent, not nested); "
                  f"the learnings took {seconds:.0f} s in all, on one core."]  # fmt: skip
    return "\n".join(lines) + "\n"
