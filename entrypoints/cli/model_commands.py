"""``memcore model add|list|show|remove`` and ``memcore project set`` (issue 33): the home's
registered models, and the embedding model and cross-encoder each project (or the home, by
default) uses. A new embedding model re-embeds the project in the background while its current
generation keeps serving; ``memcore project show`` shows the progress."""

from __future__ import annotations

import argparse
from typing import Any, cast

from memory_core.domain.models import POOLINGS, ModelOverrides
from memory_core.domain.progress import no_progress
from memory_core.entrypoints.cli import render, wire
from memory_core.entrypoints.cli.common import callers_path, emit_json, hint, progress_bar
from memory_core.services.models import ModelView, ProjectModels


def add_parser(sub: Any) -> None:
    """``memcore model ...``."""
    model = sub.add_parser("model", help="your own models: add a local model directory, list, show, remove")
    actions = model.add_subparsers(dest="action", required=True, help="what to do with models")
    p = actions.add_parser("add", help="register a model directory (config.json, tokenizer, safetensors weights)")
    p.add_argument("name", help="a name for it: a lowercase slug (minilm and none are reserved)")
    p.add_argument("path", help="the model's directory, as a model cache holds it")
    p.add_argument("--pooling", choices=POOLINGS, help="override the pooling the model declares (embedding models)")
    p.add_argument("--max-tokens", type=int, help="override the maximum input length in tokens")
    p.add_argument("--query-prefix", help='text put before every query (e5: "query: ")')
    p.add_argument("--document-prefix", help='text put before every document (e5: "passage: ")')
    p.add_argument("--no-normalize", action="store_true", help="do not L2-normalise the vectors")
    p.add_argument("--replace", action="store_true", help="in place of the model of that name (its files changed); "
                   "the projects using it re-embed")  # fmt: skip
    p.add_argument("--json", action="store_true")
    actions.add_parser("list", help="every model: the built-in minilm and those added").add_argument(
        "--json", action="store_true"
    )
    p = actions.add_parser("compare", help="replay a project's judged cases under other models, side by side with "
                           "paired intervals (each frozen corpus re-embedded into a scratch project)")  # fmt: skip
    p.add_argument("project", help="the project whose reviewed cases are replayed")
    p.add_argument("--embedding", action="append", default=[], metavar="MODEL",
                   help="an embedding model to compare (repeatable: one variant each)")  # fmt: skip
    p.add_argument("--reranker", action="append", default=[], metavar="MODEL",
                   help="a cross-encoder (or none) to compare (repeatable: one variant each)")  # fmt: skip
    p.add_argument("--level", choices=("unit", "resource"), default="resource", help="grading level (default resource)")
    p.add_argument("--include-unreviewed", action="store_true", help="compare on unreviewed cases too")
    p.add_argument("--json", action="store_true")
    for name, text in (("show", "one model's settings, revision and users"), ("remove", "forget a model not in use")):
        p = actions.add_parser(name, help=text)
        p.add_argument("name", help="the model's name")
        p.add_argument("--json", action="store_true")


def add_project_parser(project: Any) -> None:
    """``memcore project set NAME|--default --embedding MODEL --reranker MODEL|none``."""
    p = project.add_parser("set", help="choose a project's (or the home default's) embedding model and reranker")
    p.add_argument("name", nargs="?", help="the project's id (omit with --default)")
    p.add_argument("--default", action="store_true", help="set the home default, for projects that chose nothing")
    p.add_argument("--embedding", metavar="MODEL", help="an embedding model (memcore model list; minilm: built in)")
    p.add_argument("--reranker", metavar="MODEL", help="a cross-encoder model, or none")
    p.add_argument("--json", action="store_true")


def _overrides(args: argparse.Namespace) -> ModelOverrides:
    return ModelOverrides(pooling=args.pooling, normalize=False if args.no_normalize else None,
                          max_tokens=args.max_tokens, query_prefix=args.query_prefix,
                          document_prefix=args.document_prefix)  # fmt: skip


def model_lines(view: ModelView) -> list[str]:
    users = ", ".join("the home default" if u == "" else u for u in view.used_by) or "nobody"
    lines = [f"model {view.name} ({'built in' if view.builtin else 'added ' + str(view.added_at)})",
             f"  kind {view.kind}, {view.family} ({view.architecture}), from {view.path}",
             f"  revision {view.revision}"]  # fmt: skip
    if view.kind == "embedding":
        normalised = "normalised" if view.normalize else "not normalised"
        lines.append(f"  {view.dimensions} dimensions, {view.pooling} pooling, {normalised}, "
                     f"at most {view.max_tokens} tokens")  # fmt: skip
        lines.append(f"  query prefix {view.query_prefix!r}, document prefix {view.document_prefix!r}")
    else:
        lines.append(f"  at most {view.max_tokens} tokens per query and passage")
    lines.append(f"  chosen by: {users}")
    return lines


def models_table(views: list[ModelView]) -> Any:
    from rich.table import Table

    table = Table("name", "kind", "dims", "pooling", "max tokens", "revision", "chosen by")
    for v in views:
        users = ", ".join("(default)" if u == "" else u for u in v.used_by) or "-"
        name = f"{v.name} (built in)" if v.builtin else v.name
        dims = str(v.dimensions) if v.kind == "embedding" else "-"
        table.add_row(name, v.kind, dims, v.pooling if v.kind == "embedding" else "-", str(v.max_tokens),
                      v.revision[:16], users)  # fmt: skip
    return table


def project_models_lines(models: ProjectModels) -> list[str]:
    """What ``project set`` and ``project show`` print of a project's models."""
    chosen = models.chosen
    own = "its own" if chosen.embedding else "the home default"
    who = "the home default" if models.project_id is None else f"project {models.project_id}"
    lines = [f"{who} embeds with {models.embedding} ({own}; revision {models.embedding_revision[:16]}, "
             f"{models.dimensions} dimensions)",
             f"reranker (cross-encoder): {models.reranker}"
             + (f" (revision {models.reranker_revision[:16]})" if models.reranker_revision else "")]  # fmt: skip
    if models.reembedding:
        lines.append(f"re-embedding: its current generation serves the vectors of {models.serving_revision} until "
                     f"a generation of {models.embedding} is built (the daemon does it in the background; without "
                     f"one: memcore index {models.project_id})")  # fmt: skip
    return lines


def compare(engine: Any, args: argparse.Namespace) -> int:
    """``model compare``: runs in this process (it indexes scratch projects, as ``eval replay``)."""
    from memory_core.entrypoints.bootstrap import FolderSources, HomeLayout, resolve_home
    from memory_core.evaluation.metrics import MetricLevel
    from memory_core.ports.models import ModelChoice
    from memory_core.services.beir_import import EngineWorkspace
    from memory_core.services.model_comparison import compare_models

    variants = [ModelChoice(embedding=e) for e in args.embedding] + [ModelChoice(reranker=r) for r in args.reranker]
    workspace = EngineWorkspace(engine, FolderSources(HomeLayout.at(resolve_home(args.home)).evaluation_sources_dir))
    bar, progress = progress_bar(not args.json)
    with bar:
        result = compare_models(engine, workspace, args.project, variants, level=MetricLevel(args.level),
                                include_unreviewed=args.include_unreviewed,
                                progress=progress or no_progress)  # fmt: skip
    if args.json:
        emit_json(wire.to_json(result))
        return 0
    from rich.table import Table

    table = Table("variant", "embedding", "reranker", "nDCG@10", "vs current [95% interval]", "p",
                  title=f"project {result.project_id}: {result.compared} judged cases ({result.excluded} without a "
                  f"relevant item left out), {result.level} level")  # fmt: skip
    for v in result.variants:
        mean = "-" if v.mean_ndcg_at_10 is None else f"{v.mean_ndcg_at_10:.4f}"
        if v.diff is None or v.diff_low is None or v.diff_high is None:
            diff, p = "", ""
        else:
            said = "" if v.significant else " (not significant)"
            diff, p = f"{v.diff:+.4f} [{v.diff_low:+.4f}, {v.diff_high:+.4f}]{said}", f"{v.p_value:.3f}"
        table.add_row(v.name, v.embedding, v.reranker, mean, diff, p)
    render.console().print(table)
    return 0


def shown_models(engine: Any, project_id: str) -> ProjectModels | None:
    """What ``project show`` says of the project's models; None from a daemon that predates them."""
    from memory_core.domain.errors import MemoryCoreError
    from memory_core.entrypoints.cli.executor import operations

    try:
        return cast(ProjectModels, operations(engine).show_project_models(project_id))
    except MemoryCoreError as exc:
        if exc.code == "unknown_method":
            return None
        raise


def model(engine: Any, args: argparse.Namespace) -> int:
    if args.action == "compare":
        return compare(engine, args)
    from memory_core.entrypoints.cli.executor import operations

    ops = operations(engine)  # the daemon's, when one runs
    if args.action == "list":
        views = list(ops.list_models().models)
        if args.json:
            emit_json([wire.to_json(v) for v in views])
        else:
            render.console().print(models_table(views))
        return 0
    if args.action == "add":
        view = ops.add_model(args.name, callers_path(args.path), _overrides(args), args.replace)
    elif args.action == "remove":
        view = ops.remove_model(args.name)
    else:
        view = ops.show_model(args.name)
    if args.json:
        emit_json(wire.to_json(view))
        return 0
    lines = model_lines(view)
    if args.action == "add":
        role = "embedding" if view.kind == "embedding" else "reranker"
        lines.append(hint(f"use it: memcore project set NAME --{role} {view.name}", args.home))
    elif args.action == "remove":
        lines = [f"removed model {view.name} (its files and cached vectors stay)"]
    render.console().print("\n".join(lines), markup=False)
    return 0


def project_set(engine: Any, args: argparse.Namespace) -> int:
    from memory_core.domain.errors import InvalidRequest

    if args.default == (args.name is not None):
        raise InvalidRequest("give a project's id or --default, not both or neither")
    from memory_core.entrypoints.cli.executor import operations

    models = operations(engine).set_project_models(args.name, args.embedding, args.reranker)
    if args.json:
        emit_json(wire.to_json(models))
        return 0
    render.console().print("\n".join(project_models_lines(models)), markup=False)
    return 0
