"""``memcore``: the command line. Thin: parse, call the engine, render; map errors to exit codes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memory_core.canonical import printable
from memory_core.entrypoints.daemon import cli as daemon_cli  # argparse only: cheap
from memory_core.entrypoints.wire_input import check_arguments
from memory_core.errors import InvalidRequest, MemoryCoreError
from memory_core.model import Layer, Source, validate_source_path

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _parse_source(raw: str, default_layer: Layer) -> Source:
    """``[LAYER=]PATH``; a path that merely contains ``=`` is kept whole. What cannot be a source
    (``~nouser``, a name that is not UTF-8) is InvalidRequest, before anything is stored."""
    layer_name, sep, path = raw.partition("=")
    layer = default_layer
    if sep and layer_name in {known.value for known in Layer}:
        raw, layer = path, Layer(layer_name)
    validate_source_path(raw)
    try:
        resolved = str(Path(raw).expanduser().resolve())
    except (RuntimeError, OSError) as exc:  # RuntimeError: an unknown ~user, or a symlink loop
        raise InvalidRequest(f"cannot resolve source path '{printable(raw)}': {exc}", path=printable(raw)) from exc
    return Source(validate_source_path(resolved), layer)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memcore", description="Local, explainable memory for AI agents.")
    parser.add_argument("--home", help="data directory (default: $MEMORY_CORE_HOME or the user data dir)")
    sub = parser.add_subparsers(dest="command", required=True)

    project = sub.add_parser("project", help="manage projects").add_subparsers(dest="action", required=True)
    add = project.add_parser("add", help="add a project with ordered sources")
    add.add_argument("name")
    add.add_argument(
        "--source",
        action="append",
        required=True,
        metavar="[LAYER=]PATH",
        help="a memory folder (repeatable, in order); LAYER is organization, project or local",
    )
    add.add_argument(
        "--layer",
        choices=[layer.value for layer in Layer],
        default="project",
        help="default layer for sources without LAYER=",
    )
    add.add_argument("--json", action="store_true")
    for name, text in (("list", "list projects"), ("show", "show a project"), ("remove", "remove a project")):
        p = project.add_parser(name, help=text)
        if name != "list":
            p.add_argument("name")
        if name == "remove":
            p.add_argument(
                "--purge", action="store_true", help="also delete its Evaluation Cases and their pinned Runs"
            )
            p.add_argument("--yes", action="store_true", help="do not ask for confirmation (with --purge)")
        p.add_argument("--json", action="store_true")
    storage = project.add_parser(
        "storage", help="Project Local Storage: show, move or clear (Runs and Cases are never touched)"
    ).add_subparsers(dest="storage_action", required=True)
    for name, text in (
        ("show", "where it is, its size and its generations"),
        ("move", "copy the generations to an empty or new directory and use it from now on"),
        ("clear", "delete the generations; the next `memcore index` rebuilds them"),
    ):
        p = storage.add_parser(name, help=text)
        p.add_argument("name")
        if name == "move":
            p.add_argument("destination", help="an empty or new directory (made owner-only)")
        p.add_argument("--json", action="store_true")

    index = sub.add_parser("index", help="build the project's commit generation (no-op when unchanged)")
    index.add_argument("name")
    index.add_argument("--force", action="store_true", help="rebuild even when nothing changed")
    index.add_argument("--watch", action="store_true",
                       help="then keep it current: re-index on every change until Ctrl-C (with a daemon: follow its)")
    index.add_argument("--json", action="store_true")

    act = sub.add_parser("activate", help="activate memory for a query, as an agent would")
    act.add_argument("project")
    act.add_argument("query")
    act.add_argument("--budget", type=int, help="token budget for returned fragments")
    act.add_argument("--state", help="activation state JSON file (what the agent already holds)")
    act.add_argument("--save-state", help="write the next activation state to this file")
    act.add_argument("--rows", type=int, default=25, help="candidate rows to show (table mode)")
    act.add_argument("--json", action="store_true", help="print the full response and trace as JSON")

    runs = sub.add_parser("runs", help="Retrieval Runs: list, show, clear").add_subparsers(dest="action", required=True)
    rl = runs.add_parser("list", help="recent Runs, newest first")
    rl.add_argument("--project")
    rl.add_argument("--status", choices=["running", "succeeded", "failed"])
    rl.add_argument("--query", help="only Runs whose query contains this text")
    rl.add_argument("--since", help="ISO-8601 time, inclusive")
    rl.add_argument("--until", help="ISO-8601 time, exclusive")
    rl.add_argument("--limit", type=int, default=20)
    rl.add_argument("--cursor", help="next_cursor of the previous page")
    rl.add_argument("--json", action="store_true")
    rs = runs.add_parser("show", help="one Run's full trace")
    rs.add_argument("run_id")
    rs.add_argument("--rows", type=int, default=25)
    rs.add_argument("--manifest", action="store_true", help="with the Effective Memory the Run saw at activation")
    rs.add_argument("--json", action="store_true")
    rc = runs.add_parser("clear", help="Clear History: delete unpinned Runs and unreferenced blobs")
    rc.add_argument("--project", help="only this project's Runs (default: every project)")
    rc.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    rc.add_argument("--json", action="store_true")

    from memory_core.entrypoints import eval_commands

    eval_commands.add_parser(sub)
    daemon_cli.add_cli_commands(sub)  # memcore serve, memcore contracts generate

    demo = sub.add_parser("demo", help="index the embedded demo memory and run example activations")
    demo.add_argument("--json", action="store_true")
    return parser


def _emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


# Arguments that are only files this process opens (any bytes make a file name), and --source,
# which validate_source_path checks itself; every other string becomes an id, a query or a
# stored path and must be text.
LOCAL_PATH_ARGUMENTS = frozenset(
    {"home", "file", "fixture", "baseline", "out", "state", "save_state", "folder", "source"}
)


def main(argv: Sequence[str] | None = None) -> int:
    # Owner-only files everywhere, also those the CLI writes outside the home (an exported
    # fixture holds the memory's bodies).
    os.umask(0o077)
    args = build_parser().parse_args(argv)
    from memory_core.entrypoints import commands  # imported late: keeps --help instant

    try:
        check_arguments(vars(args), local_paths=LOCAL_PATH_ARGUMENTS)  # ids and queries must be text
        if args.command in daemon_cli.COMMANDS:
            return daemon_cli.handle(args)
        return commands.run(args)
    except InvalidRequest as exc:
        _error(exc)
        return EXIT_USAGE
    except MemoryCoreError as exc:
        _error(exc)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _error(exc: MemoryCoreError) -> None:
    details = f" {json.dumps(exc.details, default=str)}" if exc.details else ""
    print(f"error[{exc.code}]: {exc.message}{details}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
