"""``memcore serve``, ``memcore ui``, ``memcore mcp`` and ``memcore contracts generate``, for the main
CLI to mount.

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

COMMANDS = frozenset({"serve", "ui", "mcp", "contracts"})


def _port(value: str) -> int:
    port = int(value)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, not {value}")
    return port


SYNC_HISTORY_HELP = (
    "commit each Retrieval Run's trace before answering (an answered Run survives a crash at once; "
    "about 10%% more activation latency at 10,000 units) instead of right behind the answer"
)


NO_WATCH_HELP = (
    "do not follow the projects' sources (by default changed projects re-index in the background, "
    "debounced; see `memcore project show`)"
)


def add_cli_commands(subparsers: Any) -> None:
    """Add ``serve``, ``ui``, ``mcp`` and ``contracts generate`` to the main parser's subparsers."""
    serve = subparsers.add_parser("serve", help="run the daemon for this home on a Unix socket")
    serve.add_argument("--socket", help="socket path (default: <home>/run/memcore.sock)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--no-warm", action="store_true", help="do not load the model before the first query")
    serve.add_argument("--ui-port", type=_port, default=0, metavar="PORT",
                       help="Diagnostics UI port on 127.0.0.1 (default: 0, a free port)")
    serve.add_argument("--no-ui", action="store_true", help="do not serve the Diagnostics UI")
    serve.add_argument("--sync-history", action="store_true", help=SYNC_HISTORY_HELP)
    serve.add_argument("--no-watch", action="store_true", help=NO_WATCH_HELP)

    ui = subparsers.add_parser(
        "ui", help="print the Diagnostics page's address (with this daemon start's token) and open it"
    )
    ui.add_argument("--no-open", action="store_true", help="only print the address")
    ui.add_argument("--json", action="store_true", help="print {url, base_url, port, pid} as JSON")
    ui.add_argument("--start-timeout", type=float, default=60.0, metavar="SECONDS",
                    help="how long to wait for a daemon this command starts (default: 60)")

    mcp = subparsers.add_parser(
        "mcp", help="serve the activate_memory MCP tool on stdio (starts the daemon when none runs)"
    )
    mcp.add_argument("--start-timeout", type=float, default=60.0, metavar="SECONDS",
                     help="how long to wait for a daemon this command starts (default: 60)")
    mcp.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                     help="logs go to stderr (stdout is the MCP protocol)")

    contracts = subparsers.add_parser("contracts", help="the daemon's API contract and the MCP tool's schema")
    actions = contracts.add_subparsers(dest="action", required=True)
    generate = actions.add_parser(
        "generate", help="write contracts/openapi.json and contracts/mcp-activate_memory.schema.json"
    )
    generate.add_argument("--output", type=Path,
                          help="write only the OpenAPI document, there (default: both, in the checkout's contracts/)")
    generate.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is out of date")


def handle(args: argparse.Namespace) -> int:
    """Run a command added by :func:`add_cli_commands`; returns the exit status."""
    if args.command == "serve":
        from .server import configure_logging, serve

        configure_logging(args.log_level)
        return serve(
            args.home, args.socket, warm=not args.no_warm, ui_port=None if args.no_ui else args.ui_port,
            sync_history=args.sync_history, watch=not args.no_watch,
        )  # fmt: skip
    if args.command == "ui":
        from memory_core.entrypoints.ui.launch import main as ui_main

        return ui_main(args.home, open_browser=not args.no_open, start_timeout_s=args.start_timeout,
                       print_json=args.json)
    if args.command == "mcp":
        from memory_core.entrypoints.mcp_server import main

        return main(args.home, start_timeout_s=args.start_timeout, log_level=args.log_level)
    if args.command == "contracts" and args.action == "generate":
        return _generate(args.output, check=args.check)
    raise ValueError(f"not a daemon command: {args.command}")


def _generate(output: Path | None, *, check: bool) -> int:
    from memory_core.entrypoints import mcp_server

    from . import openapi

    # (path, is it current, write it)
    targets = [(output or openapi.default_path(), openapi.is_current, openapi.write)]
    if output is None:
        targets.append((mcp_server.default_schema_path(), mcp_server.schema_is_current, mcp_server.write_schema))
    if check:
        stale = [path for path, current, _ in targets if not current(path)]
        for path in stale:
            print(f"{path} is out of date: run `memcore contracts generate`", file=sys.stderr)
        if not stale:
            print(" and ".join(str(path) for path, _, _ in targets) + " current")
        return 1 if stale else 0
    for path, _, write in targets:
        print(f"wrote {write(path)}")
    return 0
