"""``memcore project profile show|set|restore``, ``memcore eval tune`` (issue 18) and ``memcore eval
learn`` (issue 32): a project's own ranking settings, and the cross-validated tuning and learned
ranker that may propose them."""

from __future__ import annotations

import argparse
import json
from typing import Any

from memory_core.domain.errors import InvalidRequest
from memory_core.entrypoints.cli import render, wire
from memory_core.entrypoints.cli.common import emit_json, hint, progress_bar, read_json
from memory_core.entrypoints.cli.executor import job_progress
from memory_core.evaluation.learning import MIN_TEXT_SHARE, LearnResult
from memory_core.evaluation.tuning import DEFAULT_FOLDS, GRID_KEYS, TuneMetrics, TuneResult
from memory_core.operations.executor import Operations
from memory_core.services.profiles import ProfileView


def add_project_parser(project: Any) -> None:
    """``project profile ...`` under ``memcore project``."""
    profile = project.add_parser(
        "profile", help="a project's own ranking settings: show, set (a file or a tuning), restore"
    ).add_subparsers(dest="profile_action", required=True, help="what to do with its ranking profile")
    p = profile.add_parser("show", help="the settings in effect, the revisions Runs record, every version")
    p.add_argument("name", help="the project's id")
    p.add_argument("--json", action="store_true")
    p = profile.add_parser("set", help="use new settings: a JSON file of settings, or a tuning's proposal")
    p.add_argument("name", help="the project's id")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--file", metavar="F", help='a JSON object such as {"rrf_k": 30, "alpha": 0.5} (- for stdin)')
    source.add_argument("--from-tune", metavar="ID", help="apply the proposal of `memcore eval tune` ID")
    source.add_argument("--from-learn", metavar="ID", help="rank with the model `memcore eval learn` ID proposed")
    p.add_argument("--json", action="store_true")
    p = profile.add_parser("restore", help="put an earlier version back in use (kept as a new version)")
    p.add_argument("name", help="the project's id")
    p.add_argument("--version", type=int, help="the version to restore (0: the defaults; default: the previous)")
    p.add_argument("--json", action="store_true")


def add_tune_parser(ev: Any) -> None:
    """``eval tune`` under ``memcore eval``."""
    p = ev.add_parser("tune", help="search the project's fusion settings on its judged cases (cross-validated)")
    p.add_argument("project", help="the project's id")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help=f"values to search for one key (repeatable; others keep the default grid): "
                        f"{', '.join(GRID_KEYS)}")  # fmt: skip
    p.add_argument("--folds", type=int, default=DEFAULT_FOLDS, help=f"cross-validation folds (default {DEFAULT_FOLDS})")
    p.add_argument("--level", choices=("unit", "resource"), default="resource", help="grading level (default resource)")
    p.add_argument("--include-unreviewed", action="store_true", help="tune on unreviewed cases too")
    p.add_argument("--json", action="store_true")


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text  # normalisation's values are words


def parse_grid(items: list[str]) -> dict[str, list[Any]] | None:
    """``["alpha=0.2,0.4", "rrf_k=30"]`` as a grid; the core checks keys and values."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise InvalidRequest(f"--grid wants KEY=V1,V2, got {item!r}")
        grid[key.strip()] = [_number(v.strip()) for v in values.split(",")]
    return grid or None


def _profile_lines(view: ProfileView) -> list[str]:
    used = view.in_use
    where = f"version {used.version} ({used.source}, {used.created_at})" if used else "the engine's defaults"
    lines = [f"project {view.project_id} ranks with {where}",
             f"  ranking_profile {view.ranking_profile}", f"  reranker {view.reranker}"]  # fmt: skip
    lines += [f"  {k} = {v}" for k, v in view.settings.items()]
    if view.history:
        lines.append(f"versions (`memcore project profile restore {view.project_id} --version N` puts one back):")
        lines += [f"  {p.version}: {p.source} at {p.created_at}: {json.dumps(dict(p.settings), sort_keys=True)}"
                  for p in view.history]  # fmt: skip
    return lines


def project_profile(engine: Operations, args: argparse.Namespace) -> int:
    if args.profile_action == "set":
        if args.from_tune:
            view = engine.set_project_profile(args.name, from_tune=args.from_tune)
        elif args.from_learn:
            view = engine.set_profile_from_learning(args.name, args.from_learn)
        else:
            view = engine.set_project_profile(args.name, read_json(args.file, "profile file", document=True))
    elif args.profile_action == "restore":
        view = engine.restore_project_profile(args.name, args.version)
    else:
        view = engine.show_project_profile(args.name)
    if args.json:
        emit_json(wire.to_json(view))
        return 0
    render.console().print("\n".join(_profile_lines(view)), markup=False)
    return 0


def _metrics_line(label: str, metrics: TuneMetrics) -> str:
    """One row of a tuning's or a learning's comparison (``label`` carries its own alignment)."""
    return f"  {label} nDCG@10 {metrics.ndcg_at_10:.4f}  Recall@20 {metrics.recall_at_20:.4f}  MRR {metrics.mrr:.4f}"


def _apply_hint(proposed: bool, project_id: str, origin: str, home: str | None) -> list[str]:
    """How to apply a proposed tuning or learning (``origin``: its ``--from-…`` option); none otherwise."""
    return [hint(f"apply it: memcore project profile set {project_id} {origin}", home)] if proposed else []


def _print_result(result: Any, lines: list[str], as_json: bool) -> int:
    """A tuning's or a learning's result: its wire JSON with ``--json``, else its lines."""
    if as_json:
        emit_json(wire.to_json(result))
    else:
        render.console().print("\n".join(lines), markup=False)
    return 0


def _tune_lines(result: TuneResult, home: str | None) -> list[str]:
    lines = [f"tuning {result.tune_id} of project {result.project_id}: {result.cases} judged cases "
             f"({result.excluded_cases} without a relevant item left out), {result.grid_size} settings, "
             f"{result.folds}-fold cross-validation at {result.level} level, {result.seconds:.1f} s"]  # fmt: skip
    if result.current_metrics is not None and result.cross_validated is not None:
        now, cv = result.current_metrics, result.cross_validated
        lines += [_metrics_line("current      ", now), _metrics_line("tuned (held out)", cv)]
    lines.append(result.verdict)
    if result.best is not None:
        lines.append("best setting on all cases: " + ", ".join(f"{k}={v}" for k, v in result.best.items()))
    lines += [f"left out: {x}" for x in result.left_out]
    if result.estimated_similarities:
        lines.append(f"{result.estimated_similarities} cases used an estimated cosine for a candidate outside "
                     "their recorded window")  # fmt: skip
    lines.append(f"not searched (they change what is retrieved): {', '.join(result.not_searched)}")
    return lines + _apply_hint(result.proposed, result.project_id, f"--from-tune {result.tune_id}", home)


def tune(engine: Operations, args: argparse.Namespace) -> int:
    grid = parse_grid(args.grid)
    bar, progress = progress_bar(not args.json)
    with bar, job_progress(engine, "tune_project", args.project, progress):
        result = engine.tune_project(args.project, grid=grid, folds=args.folds, level=args.level,
                                     include_unreviewed=args.include_unreviewed)  # fmt: skip
    return _print_result(result, _tune_lines(result, args.home), args.json)


def add_learn_parser(ev: Any) -> None:
    """``eval learn`` under ``memcore eval``."""
    p = ev.add_parser("learn", help="learn a ranker from the project's judged cases (LightGBM lambdarank, its "
                                    "setting chosen by nested cross-validation)")  # fmt: skip
    p.add_argument("project", help="the project's id")
    p.add_argument("--folds", type=int, default=DEFAULT_FOLDS, help=f"cross-validation folds (default {DEFAULT_FOLDS})")
    p.add_argument("--level", choices=("unit", "resource"), default="resource", help="grading level (default resource)")
    p.add_argument("--include-unreviewed", action="store_true", help="learn from unreviewed cases too")
    p.add_argument("--group-by", metavar="SEP", help="fold cases together by the text before SEP in their first "
                   "judged resource's id ('/': by first folder; '-': LoCoMo's conversations); default: each case")
    p.add_argument("--json", action="store_true")


def _learn_lines(result: LearnResult, home: str | None) -> list[str]:
    lines = [f"learning {result.learn_id} of project {result.project_id}: {result.cases} judged cases "
             f"({result.excluded_cases} without a relevant item or window left out) in {result.groups} groups, "
             f"{result.training_rows:,} window units, {result.folds}-fold cross-validation at {result.level} level, "
             f"{result.seconds:.1f} s",
             f"  against {result.current}; features {result.feature_revision}; {result.trainer}"]  # fmt: skip
    lines += _text_lines(result)
    if result.current_metrics is not None and result.cross_validated is not None:
        now, cv = result.current_metrics, result.cross_validated
        lines += [_metrics_line("current         ", now), _metrics_line("learned (held out)", cv)]
    if result.fold_settings:
        lines.append(f"setting chosen per outer fold (a {result.inner_folds}-fold cross-validation on its training "
                     f"folds, among {len(result.settings)}): "
                     + "; ".join(f"{i} {s}" for i, s in enumerate(result.fold_settings, start=1)))  # fmt: skip
    if result.chosen_setting is not None:
        lines.append(f"final setting (cross-validation over all cases): {result.chosen_setting}")
    lines.append(result.verdict)
    if result.importances:
        lines.append("most important features (share of split gain): "
                     + ", ".join(f"{f.feature} {f.share:.2f}" for f in result.importances[:5]))  # fmt: skip
    if result.model_digest is not None:
        lines.append(f"model {result.model_digest} (kept; put in use only by `project profile set --from-learn`, "
                     "and only when proposed)")  # fmt: skip
    return lines + _apply_hint(result.proposed, result.project_id, f"--from-learn {result.learn_id}", home)


def _text_lines(result: LearnResult) -> list[str]:
    """How many window units learned from had their text, and a warning when a model was trained
    with too few of them (without a model nothing was trained on the missing columns)."""
    share = result.text_share
    if share is None:
        return []
    lines = [f"  text columns: {result.text_units:,} of {result.training_rows:,} window units had their text "
             f"({share:.1%})"]  # fmt: skip
    if share < MIN_TEXT_SHARE and result.model_digest is not None:
        # The reasons are candidate_passages' (evaluation/passages.py NOTES).
        lines.append(f"warning: only {share:.1%} of the window units learned from had their text (the others': no "
                     "span recorded, as their Run predates spans; the resource not in the frozen corpus; the "
                     "resource changed after it was indexed; or its frozen body unreadable): the model was trained "
                     "with their text columns missing, while every activation computes them; record new Runs and "
                     "learn again")  # fmt: skip
    return lines


def learn(engine: Operations, args: argparse.Namespace) -> int:
    bar, progress = progress_bar(not args.json)
    with bar, job_progress(engine, "learn_project", args.project, progress):
        result = engine.learn_project(args.project, folds=args.folds, level=args.level,
                                      include_unreviewed=args.include_unreviewed, group_by=args.group_by)  # fmt: skip
    return _print_result(result, _learn_lines(result, args.home), args.json)
