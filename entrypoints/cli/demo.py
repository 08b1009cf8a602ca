"""``memcore demo``: the main job on an embedded default.

Copies the shipped demo memory (two layers, one override) into the home, indexes it, runs
several activations, then edits one selected section, re-indexes (only that resource's units are
re-embedded) and repeats the first query with the activation state the agent got back: the
edited unit comes back as ``replace``, the unchanged ones as ``reuse``.
"""

from __future__ import annotations

import json
import os
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from memory_core.domain.errors import ProjectNotFound
from memory_core.domain.model import Layer, Source
from memory_core.entrypoints.bootstrap import DIR_MODE, FILE_MODE, HomeLayout
from memory_core.entrypoints.cli import render, wire
from memory_core.entrypoints.cli.common import progress_bar
from memory_core.services.activation import Activation
from memory_core.services.engine import Engine

PROJECT = "demo"
QUERIES = (
    "How do we make sure a retried posting isn't applied twice?",
    "What did the amendment to ADR-0004 change about lock key derivation?",
    "How many approvals does a pull request touching posting_engine need?",
    "What should I change in deploy/helm/values-prod.yaml to lower max_batch_size during consumer lag?",
)
# Overlaps the first question: the agent already holds some of the answer.
FOLLOW_UP = "Why did idempotency fail in the duplicate postings incident, and how were the duplicates corrected?"
# The section the teammate edits: one the first activation selects and the follow-up asks about,
# so the follow-up shows it as ``replace`` whatever inference path ranks the rest.
EDIT_RESOURCE = "incidents/2026-03-14-duplicate-postings.md"
EDIT_NOTE = (
    "\n\nReviewed on 2026-03-24 after the duplicate-postings incident: derive lock keys from the full idempotency key."
)


def demo_source_root() -> Path:
    return Path(str(resources.files("memory_core.entrypoints.cli") / "demo_memory"))


def prepare_memory(home: Path) -> Path:
    """A fresh, writable copy of the demo memory under the home (the package may be read-only),
    owner-only like the rest of the home (0700 directories, 0600 files) whatever the umask."""
    target = HomeLayout.at(home).demo_dir / "memory"
    if target.exists():
        shutil.rmtree(target)
    _private_dir(target.parent)
    _copy_owner_only(demo_source_root(), target)
    return target


def _private_dir(path: Path) -> None:
    path.mkdir(mode=DIR_MODE, exist_ok=True)
    os.chmod(path, DIR_MODE)  # mkdir's mode passes through the umask; an existing one may be looser


def _copy_owner_only(source: Path, target: Path) -> None:
    """Copy a tree with the home's modes: ``shutil.copytree`` would keep the package's 0755/0644."""
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames.sort()
        here = target / Path(dirpath).relative_to(source)
        _private_dir(here)
        for name in sorted(filenames):
            fd = os.open(here / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            with os.fdopen(fd, "wb") as out:
                os.fchmod(fd, FILE_MODE)
                out.write((Path(dirpath) / name).read_bytes())


def ensure_project(engine: Engine, memory: Path) -> None:
    sources = [
        Source(str(memory / "organization"), Layer.ORGANIZATION),
        Source(str(memory / "project"), Layer.PROJECT),
    ]
    try:
        existing = engine.show_project(PROJECT)
    except ProjectNotFound:
        engine.add_project(PROJECT, sources)
        return
    if list(existing.project.sources) != sources:
        engine.remove_project(PROJECT)
        engine.add_project(PROJECT, sources)


def edit_selected_unit(activation: Activation, memory: Path) -> str | None:
    """Append a sentence to a selected unit's section (of ``EDIT_RESOURCE`` when one is selected,
    else the first), as a teammate would."""
    chosen = [c for c in activation.candidates if c.disposition == "selected"]
    if not chosen:
        return None
    unit = next((c.unit for c in chosen if c.unit.resource_id == EDIT_RESOURCE), chosen[0].unit)
    for layer in ("project", "organization"):
        path = memory / layer / unit.resource_id
        if path.exists():
            text = path.read_text(encoding="utf-8")
            path.write_text(text[: unit.end] + EDIT_NOTE + text[unit.end :], encoding="utf-8")
            return unit.unit_id
    return None


def run_demo(engine: Engine, home: Path, *, as_json: bool = False) -> int:
    out = render.console()
    memory = prepare_memory(home)
    ensure_project(engine, memory)
    log: dict[str, Any] = {"activations": []}

    def index() -> None:
        bar, progress = progress_bar(not as_json)
        with bar:
            report = engine.index(PROJECT, progress=progress)
        log.setdefault("index", []).append(wire.index_report_to_json(report))
        if not as_json:
            out.print(render.index_summary(report))

    def show(activation: Activation, title: str) -> None:
        log["activations"].append(
            {
                "title": title,
                "response": wire.response_to_json(activation.response),
                "candidates": wire.candidates_to_json(activation.candidates),
            }
        )
        if not as_json:
            out.rule(title)
            out.print(render.candidates_table(activation, rows=12))
            for f in activation.response.fragments:
                path = " > ".join(f.heading_path)
                out.print(f"  [bold]{f.delta_action:7}[/] {f.unit_id}  [dim]{path}[/]  ({f.token_count} tokens)")
            out.print(render.latency_line(activation))

    if not as_json:
        out.rule("memory-core demo")
        out.print(f"demo memory copied to {memory} (organization + project layers)")
    index()
    first = None
    for i, query in enumerate(QUERIES, start=1):
        activation = engine.activate(PROJECT, query)
        first = first or activation
        show(activation, f"activation {i}: {query}")
    assert first is not None
    edited = edit_selected_unit(first, memory)
    if not as_json:
        out.rule("a teammate edits a section the agent already holds")
        out.print(f"edited {edited}; re-indexing re-embeds only the changed resource's units")
    index()
    follow = engine.activate(PROJECT, FOLLOW_UP, state=first.response.activation_state)
    show(follow, f"follow-up with the previous activation state: {FOLLOW_UP}")
    actions = sorted({f.delta_action for f in follow.response.fragments})
    if as_json:
        out.print_json(json.dumps(log))
    else:
        out.print(f"delta actions in the follow-up: {', '.join(actions)}")
        out.print('Next: memcore activate demo "your question"  (add --json for the full trace)')
    return 0
