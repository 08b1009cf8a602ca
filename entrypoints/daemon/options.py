"""The daemon's command-line options, for ``memcore serve`` and ``python -m
memory_core.entrypoints.daemon``: argparse only, below both the CLI and the server."""

from __future__ import annotations

import argparse
from typing import Any


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


def seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seconds, not {value!r}") from None
    if not seconds >= 0 or seconds == float("inf"):  # also NaN
        raise argparse.ArgumentTypeError(f"seconds, 0 or more, not {value}")
    return seconds


IDLE_EXIT_HELP = (
    "stop after this many seconds with no request, no connected `memcore mcp` or UI page and no "
    "re-index (0: never; default: never, or 600 with --on-demand)"
)
ON_DEMAND_IDLE_HELP = (
    "how long a daemon this command starts may stay idle (no request, no connected client, no re-index) "
    "before it stops (default: 600; 0: never)"
)


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    """The daemon's options, for ``memcore serve`` and ``python -m memory_core.entrypoints.daemon``."""
    serve.add_argument("--socket", help="socket path (default: <home>/run/memcore.sock)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                       help="the least severe JSON log line written to stderr (default: info)")
    serve.add_argument("--no-warm", action="store_true",
                       help="do not warm up before the first query (load the model, run BM25 searches)")
    serve.add_argument("--ui-port", type=_port, default=0, metavar="PORT",
                       help="Diagnostics UI port on 127.0.0.1 (default: 0, a free port)")
    serve.add_argument("--no-ui", action="store_true", help="do not serve the Diagnostics UI")
    serve.add_argument("--sync-history", action="store_true", help=SYNC_HISTORY_HELP)
    serve.add_argument("--no-watch", action="store_true", help=NO_WATCH_HELP)
    serve.add_argument("--idle-exit", type=seconds, metavar="SECONDS", help=IDLE_EXIT_HELP)
    serve.add_argument("--on-demand", action="store_true",
                       help="started by a client (memcore mcp, memcore ui): says so in status; implies --idle-exit 600")


def serve_options(args: argparse.Namespace) -> dict[str, Any]:
    """``serve``'s keyword arguments from parsed :func:`add_serve_arguments` options."""
    return {
        "warm": not args.no_warm, "ui_port": None if args.no_ui else args.ui_port,
        "sync_history": args.sync_history, "watch": not args.no_watch,
        "idle_exit_s": args.idle_exit, "on_demand": args.on_demand,
    }
