"""``memcore serve``, ``memcore ui``, ``memcore mcp`` and ``memcore contracts generate``, for the main
CLI to mount.

In ``memory_core.entrypoints.cli.main``::

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

from memory_core.entrypoints.daemon.options import ON_DEMAND_IDLE_HELP, add_serve_arguments, seconds, serve_options

COMMANDS = frozenset({"serve", "ui", "mcp", "contracts", "status"})


def add_cli_commands(subparsers: Any) -> None:
    """Add ``serve``, ``ui``, ``mcp`` and ``contracts generate`` to the main parser's subparsers."""
    add_serve_arguments(subparsers.add_parser("serve", help="run the daemon for this home on a Unix socket"))

    ui = subparsers.add_parser(
        "ui", help="print the Diagnostics page's address (with this daemon start's token) and open it"
    )
    ui.add_argument("--no-open", action="store_true", help="only print the address")
    ui.add_argument("--json", action="store_true", help="print {url, base_url, port, pid} as JSON")
    ui.add_argument("--start-timeout", type=float, default=60.0, metavar="SECONDS",
                    help="how long to wait for a daemon this command starts (default: 60)")
    ui.add_argument("--idle-exit", type=seconds, default=None, metavar="SECONDS", help=ON_DEMAND_IDLE_HELP)

    mcp = subparsers.add_parser(
        "mcp", help="serve the activate_memory and list_projects MCP tools on stdio (starts the daemon when none runs)"
    )
    mcp.add_argument("--start-timeout", type=float, default=60.0, metavar="SECONDS",
                     help="how long to wait for a daemon this command starts (default: 60)")
    mcp.add_argument("--idle-exit", type=seconds, default=None, metavar="SECONDS", help=ON_DEMAND_IDLE_HELP)
    mcp.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                     help="logs go to stderr (stdout is the MCP protocol)")

    status = subparsers.add_parser(
        "status", help="is this home's daemon running: pid, uptime, started on demand or not, idle timeout"
    )
    status.add_argument("--json", action="store_true", help="print it as JSON ({running: false, ...} when none runs)")

    contracts = subparsers.add_parser("contracts", help="the daemon's API contract and the MCP tool's schema")
    actions = contracts.add_subparsers(dest="action", required=True, help="what to do with the contracts")
    generate = actions.add_parser(
        "generate", help="write contracts/openapi.json and contracts/mcp-activate_memory.schema.json"
    )
    generate.add_argument("--output", type=Path,
                          help="write only the OpenAPI document, there (default: both, in the checkout's contracts/)")
    generate.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is out of date")


def handle(args: argparse.Namespace) -> int:
    """Run a command added by :func:`add_cli_commands`; returns the exit status."""
    if args.command == "serve":
        from memory_core.entrypoints.daemon.server import configure_logging, serve

        configure_logging(args.log_level)
        return serve(args.home, args.socket, **serve_options(args))
    if args.command == "ui":
        from memory_core.entrypoints.ui.launch import main as ui_main

        return ui_main(args.home, open_browser=not args.no_open, start_timeout_s=args.start_timeout,
                       print_json=args.json, idle_exit_s=args.idle_exit)
    if args.command == "mcp":
        from memory_core.entrypoints.mcp.server import main

        return main(args.home, start_timeout_s=args.start_timeout, log_level=args.log_level,
                    idle_exit_s=args.idle_exit)
    if args.command == "status":
        return _status(args.home, as_json=args.json)
    if args.command == "contracts" and args.action == "generate":
        return _generate(args.output, check=args.check)
    raise ValueError(f"not a daemon command: {args.command}")


def lifetime(on_demand: bool, idle_exit_s: float | None) -> str:
    """Whether a daemon stops by itself, in words (``memcore status``; the Runtime page says the same)."""
    started = "started on demand (memcore mcp or ui)" if on_demand else "started by memcore serve"
    if idle_exit_s:
        return f"{started}; stops after {idle_exit_s:g} s idle (no request, connected client or re-index)"
    return f"{started}; runs until stopped"


def _status(home: str | None, *, as_json: bool) -> int:
    """``memcore status``: the home's daemon, or that none runs (exit 0 either way)."""
    import json

    from memory_core.entrypoints.bootstrap import resolve_home
    from memory_core.entrypoints.daemon.client import DaemonClient

    root = resolve_home(home)
    client = DaemonClient.running(root, timeout=10)
    if client is None:
        if as_json:
            print(json.dumps({"running": False, "home": str(root)}, indent=2))
        else:
            from memory_core.entrypoints.cli.common import hint

            print(hint(f"daemon: not running for {str(root)!r} (commands run in process; `memcore serve` starts "
                       "one, as `memcore mcp` and `memcore ui` do on demand)", home))
        return 0
    with client:
        st = client.runtime_status()
        running = [job for job in client.list_jobs().jobs if job.state in ("queued", "running")]
    if as_json:
        from memory_core.domain.canonical import plain

        print(json.dumps({
            "running": True, "home": st.home, "pid": st.pid, "socket": st.socket, "version": st.version,
            "started_at": st.started_at, "uptime_seconds": st.uptime_seconds, "on_demand": st.on_demand,
            "idle_exit_seconds": st.idle_exit_seconds, "watching": st.watching, "jobs": plain(tuple(running)),
        }, indent=2))  # fmt: skip
        return 0
    print(f"daemon: running for {st.home!r}, pid {st.pid}, up {st.uptime_seconds:.0f} s (since {st.started_at})")
    print(f"lifetime: {lifetime(st.on_demand, st.idle_exit_seconds)}")
    print(f"socket: {st.socket}; watching sources: {'yes' if st.watching else 'no'}")
    for job in running:  # what runs beside activations (list_jobs); cancel_job stops the cancellable
        since = f" since {job.started_at}" if job.started_at else ""
        at = f", {job.progress}" if job.progress else ""
        state = " (queued)" if job.state == "queued" else ""
        print(f"job: {job.operation}{state} {job.project_id or ''}{since}{at} (id {job.job_id})".replace("  ", " "))
    return 0


def _require_checkout(default: Path) -> None:
    """The default targets are a source checkout's ``contracts/``: in an installed package they
    would land in site-packages, so refuse there (``--output`` still writes the document)."""
    from memory_core.domain.errors import InvalidRequest

    root = default.parent.parent
    if not ((root / "pyproject.toml").is_file() and default.parent.is_dir()):
        raise InvalidRequest(
            f"`memcore contracts generate` writes a source checkout's contracts/, and this memory-core is "
            f"installed at {str(root)!r}, not a checkout: pass --output FILE for the OpenAPI document",
            installed_at=str(root),
        )


def _generate(output: Path | None, *, check: bool) -> int:
    from memory_core.entrypoints.daemon import openapi
    from memory_core.entrypoints.mcp import tools as mcp_tools

    if output is None:
        _require_checkout(openapi.default_path())
    # (path, is it current, write it)
    targets = [(output or openapi.default_path(), openapi.is_current, openapi.write)]
    if output is None:
        targets += mcp_tools.schema_targets()  # one contract per MCP tool
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
