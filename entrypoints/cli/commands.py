"""Command handlers behind ``memcore``: each builds the engine, calls it and renders."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from memory_core.domain.errors import InvalidActivationState, InvalidRequest
from memory_core.domain.model import Layer
from memory_core.entrypoints.bootstrap import bootstrap
from memory_core.entrypoints.cli import executor, render, wire
from memory_core.entrypoints.cli.common import callers_path, emit_json, hint, parse_source, progress_bar
from memory_core.entrypoints.cli.output_file import OutputFile
from memory_core.entrypoints.wire_input import decode_json
from memory_core.operations.executor import Operations
from memory_core.operations.runs import ListRetrievalRunsRequest, list_retrieval_runs
from memory_core.runs.records import RunFilter
from memory_core.services.engine import Engine
from memory_core.services.freshness import Freshness

# Commands that build their own embedded engine even when a daemon runs (both processes share
# the home's database safely). The demo drives an Engine itself. ``eval import-beir`` and
# ``eval replay`` read local files and index projects for minutes with a progress bar: through the
# daemon's one serialised engine they would block every agent's activation meanwhile.
EMBEDDED_ONLY = frozenset({("demo", None), ("eval", "import-beir"), ("eval", "replay")})
# ``model compare`` indexes a scratch project per model and corpus, as ``eval replay`` does.
EMBEDDED_ONLY |= {("model", "compare")}


def run(args: argparse.Namespace) -> int:
    """Run a command against the home's daemon when one answers, else against an embedded engine."""
    key = (args.command, getattr(args, "action", None))
    handler = HANDLERS[key]
    engine: Any  # the table's operations (cli/executor.py), or the Engine for an embedded-only command
    if key in EMBEDDED_ONLY:
        engine = bootstrap(args.home)
    else:
        from memory_core.entrypoints.cli.executor import connect

        engine = connect(args.home, bootstrap)
    try:
        return handler(engine, args)
    finally:
        engine.close()


def project_add(engine: Operations, args: argparse.Namespace) -> int:
    default = Layer(args.layer)
    info = engine.add_project(args.name, tuple(parse_source(s, default) for s in args.source))
    project = info.project
    if args.json:
        emit_json(wire.project_to_json(info))
    else:
        render.console().print(
            hint(f"added project {project.project_id}; next: memcore index {project.project_id}", args.home)
        )
    return 0


def project_list(engine: Operations, args: argparse.Namespace) -> int:
    infos = list(engine.list_projects().projects)
    if args.json:
        emit_json([wire.project_to_json(i) for i in infos])
    else:
        render.console().print(render.projects_table(infos))
    return 0


def project_show(engine: Operations, args: argparse.Namespace) -> int:
    from memory_core.entrypoints.cli.watch_commands import show_health

    info = engine.show_project(args.name)
    models = _models().shown_models(engine, args.name)  # its models, and a re-embedding under way
    if args.json:
        shown = {"models": wire.to_json(models)} if models is not None else {}
        emit_json({**wire.project_to_json(info), **shown, **(show_health(engine, info, True) or {})})
    else:
        render.console().print(render.projects_table([info]))
        if models is not None:
            render.console().print("\n".join(_models().project_models_lines(models)), markup=False)
        show_health(engine, info, False)  # watching, last change, last re-index, pending, errors
    return 0


def project_remove(engine: Operations, args: argparse.Namespace) -> int:
    if (
        args.purge
        and not args.yes
        and not confirm(f"Delete project {args.name!r} with its Evaluation Cases and every one of its Runs?", "--purge")
    ):
        render.console().print("nothing deleted")
        return 0
    report = engine.remove_project(args.name, purge=args.purge)
    if args.json:
        emit_json({"removed": args.name, **wire.to_json(report)})
    else:
        kept = f", kept {report.kept_pinned} pinned Runs of its Evaluation Cases" if report.kept_pinned else ""
        cases = f", {report.deleted_cases} Evaluation Cases" if args.purge else ""
        render.console().print(
            f"removed project {args.name}: {report.deleted_runs} Runs{cases}, {report.deleted_blobs} unreferenced "
            f"blobs and its Local Storage{kept}"
        )
    return 0


def project_storage(engine: Operations, args: argparse.Namespace) -> int:
    """``project storage show|move|clear``: Runs, Cases and blobs are never touched."""
    if args.storage_action == "move":
        bar, progress = progress_bar(not args.json)
        with bar, executor.job_progress(engine, "move_project_storage", args.name, progress):
            storage = engine.move_project_storage(args.name, callers_path(args.destination))
    elif args.storage_action == "clear":
        storage = engine.clear_project_storage(args.name)
    else:
        storage = engine.show_project_storage(args.name)
    if args.json:
        emit_json(wire.to_json(storage))
        return 0
    out = render.console()
    out.print(render.storage_table(storage))
    if args.storage_action == "clear":
        out.print(
            hint(
                f"cleared; until `memcore index {args.name}` rebuilds it, activate answers project_not_indexed",
                args.home,
            )
        )
    return 0


def index(engine: Operations, args: argparse.Namespace) -> int:
    bar, progress = progress_bar(not args.json)
    from memory_core.entrypoints.cli.executor import index_progress

    with bar, index_progress(engine, args.name, progress):
        report = engine.index_project(args.name, force=args.force)
    out = render.console()
    for warning in report.warnings:
        # stderr and no markup: --json output stays one document, and a file named "[b].md" prints as is.
        print(f"warning: {warning}", file=sys.stderr)
    if args.json and args.watch:  # JSON lines: this report, then one line per re-index
        sys.stdout.write(json.dumps(wire.index_report_to_json(report), ensure_ascii=False) + "\n")
    elif args.json:
        emit_json(wire.index_report_to_json(report))
    else:
        out.print(render.index_summary(report))
    if args.watch:
        from memory_core.entrypoints.cli.watch_commands import index_watch

        return index_watch(engine, args)
    return 0


def load_state(path: str | None) -> Any:
    if path is None:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidActivationState(f"cannot read activation state from {path!r}: {exc.strerror or exc}") from exc
    return decode_json(data, what=f"activation state file {path!r}")  # the daemon's and MCP's decoder


def activate(engine: Operations, args: argparse.Namespace) -> int:
    state = load_state(args.state)
    # Checked before activating: a --save-state path that cannot be written fails with no Run.
    with OutputFile(args.save_state, "--save-state") if args.save_state else nullcontext() as saved:
        activation = executor.activate(engine, args.project, args.query, budget=args.budget, state=state)
        if saved is not None:
            saved.write(json.dumps(wire.to_json(activation.response.activation_state), indent=2).encode("utf-8"))
    warning = freshness_warning(args.project, activation.response.freshness)
    if warning:
        print(f"warning: {hint(warning, args.home)}", file=sys.stderr)  # stderr: --json output stays one document
    if args.json:
        emit_json(
            {
                "response": wire.response_to_json(activation.response),
                "candidates": wire.candidates_to_json(activation.candidates),
            }
        )
        return 0
    out = render.console()
    out.print(render.candidates_table(activation, args.rows))
    out.print(render.latency_line(activation))
    return 0


def freshness_warning(project: str, freshness: Freshness) -> str | None:
    """What to tell a person whose answer came from an index behind the sources, or None."""
    if not freshness.live:
        return f"could not compare the index with the sources: {freshness.error}"
    if not freshness.index_behind:
        return None
    said = [f"{freshness.changed_resources} resource(s) changed since it was built"]
    if freshness.stale_resources:
        said.append("edited since: " + ", ".join(freshness.stale_resources))
    if freshness.missing_resources:
        said.append("deleted since: " + ", ".join(freshness.missing_resources))
    fix = "a re-index is under way" if freshness.reindex_pending else f"run `memcore index {project}`"
    return f"the index of {project!r} is behind its sources ({'; '.join(said)}): {fix}"


def runs_list(engine: Operations, args: argparse.Namespace) -> int:
    run_filter = RunFilter(
        project_id=args.project, status=args.status, since=args.since, until=args.until, query_contains=args.query
    )
    request = ListRetrievalRunsRequest.of(run_filter, limit=args.limit, cursor=args.cursor)
    page = engine.call(list_retrieval_runs, request)
    if args.json:
        emit_json(wire.to_json(page))
    else:
        render.console().print(render.runs_table(page))
    return 0


def runs_show(engine: Operations, args: argparse.Namespace) -> int:
    detail = engine.get_retrieval_run(args.run_id, manifest=args.manifest)
    if args.json:
        emit_json(wire.to_json(detail))
    else:
        out = render.console()
        for line in render.run_detail(detail, args.rows):
            out.print(line)
    return 0


def confirm(question: str, what: str = "to clear history") -> bool:
    import sys

    if not sys.stdin.isatty():
        raise InvalidRequest(f"refusing {what} without confirmation: pass --yes")
    return input(f"{question} [y/N] ").strip().lower() in {"y", "yes"}


def runs_clear(engine: Operations, args: argparse.Namespace) -> int:
    scope = f"project {args.project!r}" if args.project else "every project"  # --all says the default
    if not args.yes and not confirm(f"Delete the unpinned Retrieval Runs of {scope}?"):
        render.console().print("nothing deleted")
        return 0
    report = engine.clear_retrieval_runs(args.project) if args.project else engine.clear_retrieval_runs(all=True)
    if args.json:
        emit_json(wire.to_json(report))
    else:
        render.console().print(
            f"deleted {report.deleted_runs} unpinned Runs, kept {report.kept_pinned} pinned, "
            f"removed {report.deleted_blobs} unreferenced blobs"
        )
    return 0


def _profiles() -> Any:
    from memory_core.entrypoints.cli import profile_commands

    return profile_commands


def _models() -> Any:
    from memory_core.entrypoints.cli import model_commands

    return model_commands


def evaluation(engine: Operations | Engine, args: argparse.Namespace) -> int:
    from memory_core.entrypoints.bootstrap import resolve_home
    from memory_core.entrypoints.cli import eval_commands

    return eval_commands.handle(engine, args, resolve_home(args.home))


def demo(engine: Engine, args: argparse.Namespace) -> int:
    from memory_core.entrypoints.bootstrap import resolve_home
    from memory_core.entrypoints.cli.demo import run_demo

    return run_demo(engine, resolve_home(args.home), as_json=args.json)


HANDLERS: dict[tuple[str, str | None], Callable[[Any, argparse.Namespace], int]] = {
    ("project", "add"): project_add,
    ("project", "list"): project_list,
    ("project", "show"): project_show,
    ("project", "remove"): project_remove,
    ("project", "storage"): project_storage,
    ("project", "profile"): lambda engine, args: _profiles().project_profile(engine, args),
    ("project", "set"): lambda engine, args: _models().project_set(engine, args),
    **{
        ("model", action): lambda engine, args: _models().model(engine, args)
        for action in ("add", "list", "show", "remove", "compare")
    },  # fmt: skip
    ("eval", "tune"): lambda engine, args: _profiles().tune(engine, args),
    ("eval", "learn"): lambda engine, args: _profiles().learn(engine, args),
    ("index", None): index,
    ("activate", None): activate,
    ("runs", "list"): runs_list,
    ("runs", "show"): runs_show,
    ("runs", "clear"): runs_clear,
    ("demo", None): demo,
    **{
        ("eval", action): evaluation
        for action in ("case", "judge", "review", "report", "export", "import", "import-beir", "replay")
    },
}
