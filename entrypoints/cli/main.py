"""``memcore``: the command line. Thin: parse, call the engine, render; map errors to exit codes."""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.domain.model import Layer
from memory_core.entrypoints.cli.common import COMMAND_NAMES as COMMAND_NAMES  # the parser test reads it here
from memory_core.entrypoints.cli.common import hint
from memory_core.entrypoints.daemon import cli as daemon_cli  # argparse only: cheap
from memory_core.entrypoints.wire_input import check_arguments, encodable

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
HOME_HELP = "data directory (default: $MEMORY_CORE_HOME or the user data dir); before or after the command"
JSON_HELP = "print JSON for scripts (errors too: {\"error\": {\"code\", \"message\", \"details\"}} on stdout)"
# Whether this invocation asked for JSON: argparse's own errors (before any Namespace exists) need it.
_JSON_ERRORS: contextvars.ContextVar[bool] = contextvars.ContextVar("json_errors", default=False)


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors in the JSON error envelope under ``--json`` (exit 2 either way).
    Subparsers are this class too (``add_subparsers`` uses the parent's class)."""

    def error(self, message: str) -> Any:
        if _JSON_ERRORS.get():
            _emit_error(InvalidRequest(message, usage=self.format_usage().strip()))
            raise SystemExit(EXIT_USAGE)
        super().error(message)


def _package_version() -> str:
    from memory_core.domain.version import package_version

    return package_version()


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser under ``parser`` (commands and their actions), depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases share a parser
                yield child
                yield from _subparsers(child)


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """``--home`` and ``--json`` on the main parser and on every command, in one place, so they may
    come before or after the command (as uv's and ruff's do). Below the main parser they default
    to SUPPRESS: a subcommand's default must not overwrite a value given before it."""
    parser.add_argument("--home", help=HOME_HELP)
    parser.add_argument("--json", action="store_true", default=False, help=JSON_HELP)
    for child in _subparsers(parser):
        options = child._option_string_actions
        if "--home" not in options:
            child.add_argument("--home", default=argparse.SUPPRESS, help=HOME_HELP)
        if "--json" in options:  # a command's own --json (with its own help, if any)
            options["--json"].default = argparse.SUPPRESS
            options["--json"].help = options["--json"].help or JSON_HELP
        else:
            child.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="memcore", description="Local, explainable memory for AI agents.")
    parser.add_argument("--version", action="version", version=f"memcore {_package_version()}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help="what to do (memcore COMMAND --help for its options)")

    project = sub.add_parser("project", help="manage projects").add_subparsers(
        dest="action", required=True, help="what to do with projects")
    add = project.add_parser("add", help="add a project with ordered sources")
    add.add_argument("name", help="the project's id: a lowercase slug, 1-63 characters")
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
    add.add_argument("--json", action="store_true", help="print the added project as JSON")
    for name, text in (("list", "list projects"), ("show", "show a project"), ("remove", "remove a project")):
        p = project.add_parser(name, help=text)
        if name != "list":
            p.add_argument("name", help="the project's id")
        if name == "remove":
            p.add_argument(
                "--purge", action="store_true", help="also delete its Evaluation Cases and their pinned Runs"
            )
            p.add_argument("--yes", action="store_true", help="do not ask for confirmation (with --purge)")
        p.add_argument("--json", action="store_true")
    storage = project.add_parser(
        "storage", help="Project Local Storage: show, move or clear (Runs and Cases are never touched)"
    ).add_subparsers(dest="storage_action", required=True, help="what to do with its Local Storage")
    for name, text in (
        ("show", "where it is, its size and its generations"),
        ("move", "copy the generations to an empty or new directory and use it from now on"),
        ("clear", "delete the generations; the next `memcore index` rebuilds them"),
    ):
        p = storage.add_parser(name, help=text)
        p.add_argument("name", help="the project's id")
        if name == "move":
            p.add_argument("destination", help="an empty or new directory (made owner-only)")
        p.add_argument("--json", action="store_true")
    from memory_core.entrypoints.cli import profile_commands

    profile_commands.add_project_parser(project)
    from memory_core.entrypoints.cli import model_commands

    model_commands.add_project_parser(project)  # project set: its embedding model and reranker
    model_commands.add_parser(sub)  # memcore model add|list|show|remove

    index = sub.add_parser("index", help="build the project's commit generation (no-op when unchanged)")
    index.add_argument("name", help="the project's id")
    index.add_argument("--force", action="store_true", help="rebuild even when nothing changed")
    index.add_argument("--watch", action="store_true",
                       help="then keep it current: re-index on every change until Ctrl-C (with a daemon: follow its)")
    index.add_argument("--json", action="store_true")

    act = sub.add_parser("activate", help="activate memory for a query, as an agent would")
    act.add_argument("project", help="the project's id")
    act.add_argument("query", help="what the agent asks, in words")
    act.add_argument("--budget", type=int, help="token budget for returned fragments")
    act.add_argument("--state", help="activation state JSON file (what the agent already holds)")
    act.add_argument("--save-state", help="write the next activation state to this file")
    act.add_argument("--rows", type=int, default=25, help="candidate rows to show (table mode)")
    act.add_argument("--json", action="store_true", help="print the full response and trace as JSON")

    runs = sub.add_parser("runs", help="Retrieval Runs: list, show, clear").add_subparsers(
        dest="action", required=True, help="what to do with Runs")
    rl = runs.add_parser("list", help="recent Runs, newest first")
    rl.add_argument("--project", help="only this project's Runs")
    rl.add_argument("--status", choices=["running", "succeeded", "failed"], help="only Runs in this state")
    rl.add_argument("--query", help="only Runs whose query contains this text")
    rl.add_argument("--since", help="ISO-8601 time, inclusive")
    rl.add_argument("--until", help="ISO-8601 time, exclusive")
    rl.add_argument("--limit", type=int, default=20, help="Runs per page (default: 20)")
    rl.add_argument("--cursor", help="next_cursor of the previous page")
    rl.add_argument("--json", action="store_true")
    rs = runs.add_parser("show", help="one Run's full trace")
    rs.add_argument("run_id", help="the Run's id (runs list shows them)")
    rs.add_argument("--rows", type=int, default=25, help="candidate rows to show (table mode; default: 25)")
    rs.add_argument("--manifest", action="store_true", help="with the Effective Memory the Run saw at activation")
    rs.add_argument("--json", action="store_true")
    rc = runs.add_parser("clear", help="Clear History: delete unpinned Runs and unreferenced blobs")
    scope = rc.add_mutually_exclusive_group()
    scope.add_argument("--project", help="only this project's Runs (default: every project)")
    scope.add_argument("--all", action="store_true", help="every project's Runs (the default, said explicitly)")
    rc.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    rc.add_argument("--json", action="store_true")

    from memory_core.entrypoints.cli import eval_commands

    eval_commands.add_parser(sub)
    daemon_cli.add_cli_commands(sub)  # memcore serve, memcore contracts generate

    demo = sub.add_parser("demo", help="index the embedded demo memory and run example activations")
    demo.add_argument("--json", action="store_true", help="print the activations as JSON")
    add_global_options(parser)  # last: every command exists by now
    return parser


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
    argv = sys.argv[1:] if argv is None else list(argv)
    _JSON_ERRORS.set("--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv)
    args = build_parser().parse_args(argv)
    _JSON_ERRORS.set(bool(args.json))
    _HOME.set(args.home)
    from memory_core.entrypoints.cli import commands  # imported late: keeps --help instant

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


_HOME: contextvars.ContextVar[str | None] = contextvars.ContextVar("home", default=None)


def _error(exc: MemoryCoreError) -> None:
    _emit_error(exc)


def _emit_error(exc: MemoryCoreError) -> None:
    """Under ``--json``, the error envelope the daemon answers (on stdout, as the answer would
    have been); else ``error[code]: message {details}`` on stderr. Hints name the same home."""
    message = hint(exc.message, _HOME.get())
    if _JSON_ERRORS.get():
        envelope = {"error": {"code": exc.code, "message": message, "details": exc.details}}
        sys.stdout.write(json.dumps(encodable(envelope), indent=2, ensure_ascii=False, default=str) + "\n")
        return
    details = f" {json.dumps(exc.details, default=str)}" if exc.details else ""
    print(f"error[{exc.code}]: {message}{details}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
