"""``memcore serve`` and ``memcore contracts generate``, for the main CLI to mount.

In ``memory_core.entrypoints.cli``::

    from memory_core.entrypoints.daemon import cli as daemon_cli   # imports only argparse
    daemon_cli.add_cli_commands(sub)                                # build_parser(), after `sub = ...`
    if args.command in daemon_cli.COMMANDS:                         # main(), inside the try,
        return daemon_cli.handle(args)                              # before commands.run(args)

Only argparse is imported here; the server and the contract load when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

COMMANDS = frozenset({"serve", "contracts"})


def add_cli_commands(subparsers: Any) -> None:
    """Add ``serve`` and ``contracts generate`` to the main parser's subparsers."""
    serve = subparsers.add_parser("serve", help="run the daemon for this home on a Unix socket")
    serve.add_argument("--socket", help="socket path (default: <home>/run/memcore.sock)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--no-warm", action="store_true", help="do not load the model before the first query")

    contracts = subparsers.add_parser("contracts", help="the daemon's API contract")
    actions = contracts.add_subparsers(dest="action", required=True)
    generate = actions.add_parser("generate", help="write contracts/openapi.json from the dispatch table")
    generate.add_argument("--output", type=Path, help="where to write (default: the checkout's contracts/openapi.json)")
    generate.add_argument("--check", action="store_true", help="write nothing; exit 1 when the file is out of date")


def handle(args: argparse.Namespace) -> int:
    """Run a command added by :func:`add_cli_commands`; returns the exit status."""
    if args.command == "serve":
        from .server import configure_logging, serve

        configure_logging(args.log_level)
        return serve(args.home, args.socket, warm=not args.no_warm)
    if args.command == "contracts" and args.action == "generate":
        from . import openapi

        target = args.output or openapi.default_path()
        if args.check:
            if openapi.is_current(target):
                print(f"{target} is current")
                return 0
            print(f"{target} is out of date: run `memcore contracts generate`", file=sys.stderr)
            return 1
        print(f"wrote {openapi.write(target)}")
        return 0
    raise ValueError(f"not a daemon command: {args.command}")
