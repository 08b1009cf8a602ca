"""What every command module shares: hints that name the same home, JSON on stdout, a source
argument, a JSON file argument and the progress bar. Its own module, below ``main`` and the
command modules, so that none of them imports another's helpers (no import cycle)."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from memory_core.domain.canonical import printable
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.model import Layer, Source, validate_source_path
from memory_core.domain.progress import Progress
from memory_core.entrypoints.wire_input import decode_json

# The commands, for hints: "memcore index notes" is one, "a memcore daemon" is not (a test holds
# this equal to the parser's).
COMMAND_NAMES = (
    "activate", "contracts", "demo", "eval", "index", "mcp", "model", "project", "runs", "serve", "status", "ui",
)  # fmt: skip
_COMMAND = re.compile(rf"\bmemcore (?=(?:{'|'.join(COMMAND_NAMES)})\b)")


def hint(text: str, home: str | None) -> str:
    """``text`` with every ``memcore <command>`` it suggests run against the same home: with
    ``--home H`` when the command was given one. The one place hints get it, whoever wrote them
    (the engine's errors know no home)."""
    if not home:
        return text
    return _COMMAND.sub(lambda _: f"memcore --home {shlex.quote(home)} ", text)


def parse_source(raw: str, default_layer: Layer) -> Source:
    """``[LAYER=]PATH``; a path that merely contains ``=`` is kept whole. What cannot be a source
    (``~nouser``, a name that is not UTF-8) is InvalidRequest, one that is not a readable folder
    SourceUnavailable, before anything is stored."""
    layer_name, sep, path = raw.partition("=")
    layer = default_layer
    if sep and layer_name in {known.value for known in Layer}:
        raw, layer = path, Layer(layer_name)
    validate_source_path(raw)
    try:
        resolved = str(Path(raw).expanduser().resolve())
    except (RuntimeError, OSError) as exc:  # RuntimeError: an unknown ~user, or a symlink loop
        raise InvalidRequest(f"cannot resolve source path '{printable(raw)}': {exc}", path=printable(raw)) from exc
    from memory_core.entrypoints.bootstrap import source_root

    source_root(resolved)  # a folder that is not there (or not a folder, or unreadable): source_unavailable
    return Source(validate_source_path(resolved), layer)


def callers_path(raw: str) -> str:
    """``raw`` made absolute here, where the user typed it: a daemon resolves nothing against its
    own working directory."""
    return os.path.abspath(os.path.expanduser(raw))


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def read_bytes(path: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path!r}: {exc.strerror or exc}", path=path) from exc


def read_json(path: str, what: str, *, document: bool = False) -> Any:
    """A JSON file (``-``: stdin) through the boundary decoder the daemon and MCP use."""
    value = decode_json(read_bytes(path), what=f"{what} {path!r}")
    if document and not isinstance(value, dict):
        raise InvalidRequest(f"{what} {path!r} must be a JSON object", path=path)
    return value


def progress_bar(enabled: bool) -> tuple[AbstractContextManager[Any], Progress | None]:
    from memory_core.entrypoints.cli import render  # rich: loaded only by a command that draws

    # Only on a terminal: piped, rich's transient bar leaves a blank line ahead of the output.
    if not enabled or not render.console().is_terminal:
        return nullcontext(), None
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.progress import Progress as Bar

    bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
              TextColumn("eta"), TimeRemainingColumn(), transient=True)  # fmt: skip
    tasks: dict[str, Any] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total)
        bar.update(tasks[stage], completed=done, total=total)

    return bar, update
