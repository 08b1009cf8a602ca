"""Readable terminal output (rich): projects, index reports and the per-stage ranking table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from memory_core.evaluation.cases import CaseDetail
from memory_core.evaluation.report import JUDGED_METRICS
from memory_core.retrieval.pipeline import SELECTED
from memory_core.runs.records import RunDetail, RunPage
from memory_core.services.activation import Activation
from memory_core.services.engine import ProjectInfo
from memory_core.services.indexing import IndexReport
from memory_core.services.local_storage import ProjectStorage


def _rank(rank: int | None, score: float | None, digits: int = 3) -> str:
    if rank is None:
        return "-"
    return f"{rank} ({score:.{digits}f})" if score is not None else str(rank)


def projects_table(infos: Sequence[ProjectInfo]) -> Table:
    table = Table(title="Projects")
    for col in ("project", "sources", "index revision", "resources", "units"):
        table.add_column(col)
    for info in infos:
        g = info.generation
        sources = "\n".join(f"{s.layer.value}: {s.path}" for s in info.project.sources)
        table.add_row(
            info.project.project_id,
            sources,
            g.index_revision if g else "(not indexed)",
            str(g.resource_count) if g else "-",
            str(g.unit_count) if g else "-",
        )
    return table


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = n / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def storage_table(storage: ProjectStorage) -> Table:
    where = "default" if storage.default_location else "moved"
    table = Table(
        title=f"Local Storage of {storage.project_id}",
        caption=f"{storage.location} ({where}), {_size(storage.size_bytes)}",
    )
    for col in ("generation", "role", "size", "directory"):
        table.add_column(col, overflow="fold")
    for g in storage.generations:
        table.add_row(g.index_revision, g.role, _size(g.size_bytes), g.directory)
    if not storage.generations:
        table.add_row("(none)", "-", "-", f"run `memcore index {storage.project_id}` to build one")
    return table


def index_summary(report: IndexReport) -> str:
    if report.status == "unchanged":
        return (
            f"{report.project_id}: unchanged (index revision {report.index_revision}, "
            f"{report.resources} resources, {report.units} units) in {report.seconds:.2f}s"
        )
    return (
        f"{report.project_id}: built index revision {report.index_revision}: {report.resources} resources, "
        f"{report.units} units ({report.embedded} embedded, {report.reused_embeddings} reused) "
        f"in {report.seconds:.2f}s"
    )


def stage_table(title: str, caption: str, candidates: Sequence[Any], rows: int) -> Table:
    """Rank (score) per stage, disposition and code or action: for live Candidates and for
    stored CandidateRecords alike (they share the field names)."""
    table = Table(title=title, caption=caption)
    for col in ("final", "unit", "exact", "bm25", "dense", "rrf", "rerank", "disposition", "code / action"):
        table.add_column(col, overflow="fold")
    shown = list(candidates[:rows]) + [c for c in candidates[rows:] if c.disposition == SELECTED]
    for c in shown:
        selected = c.disposition == SELECTED
        table.add_row(
            str(c.final_rank),
            c.unit_id,
            _rank(c.exact_rank, c.exact_score, 2),
            _rank(c.bm25_rank, c.bm25_score, 2),
            _rank(c.dense_rank, c.dense_score),
            _rank(c.rrf_rank, c.rrf_score, 4),
            _rank(c.rerank_rank, c.rerank_score),
            "[green]selected[/]" if selected else "excluded",
            (c.delta_action or "") if selected else (c.exclusion_code or ""),
        )
    return table


def candidates_table(activation: Activation, rows: int) -> Table:
    r = activation.response
    return stage_table(
        f"{r.project_id}: {r.query!r}  (run {r.run_id or '-'})",
        f"{r.totals['selected']} selected of {r.totals['candidates']} candidates, "
        f"{r.totals['tokens']}/{r.totals['budget']} tokens, {r.totals['reused']} reused; "
        f"latency {r.latency_ms.get('total', 0):.1f} ms",
        activation.candidates,
        rows,
    )


def runs_table(page: RunPage) -> Table:
    table = Table(title="Retrieval Runs (newest first)", caption=f"next cursor: {page.next_cursor or '-'}")
    for col in ("run", "project", "status", "started", "query", "fragments", "tokens", "ms", "pinned"):
        table.add_column(col, overflow="fold")
    for r in page.runs:
        status = {"succeeded": "[green]succeeded[/]", "failed": "[red]failed[/]"}.get(r.status, r.status)
        table.add_row(
            r.run_id,
            r.project_id,
            status,
            r.started_at,
            r.query[:60],
            str(r.fragment_count),
            str(r.token_count),
            f"{r.total_ms:.1f}" if r.total_ms is not None else "-",
            "yes" if r.pinned else "",
        )
    return table


def run_detail(detail: RunDetail, rows: int) -> list[Any]:
    s = detail.summary
    lines: list[Any] = [
        f"run {s.run_id}  project {s.project_id}  status {s.status}  warm {s.warm}",
        f"query: {s.query!r}",
        f"started {s.started_at}  finished {s.finished_at}  state fingerprint {s.state_fingerprint[:16]}",
        "revisions: " + ", ".join(f"{k}={v}" for k, v in sorted(detail.revisions.items())),
        "latency ms: " + ", ".join(f"{k} {v:.1f}" for k, v in detail.latency_ms.items()),
    ]
    if s.status == "failed":
        lines.append(f"[red]error[/] stage {s.error_stage}, code {s.error_code}: {s.error_summary}")
    lag = detail.lag()
    if lag is not None and detail.manifest is not None:
        stale, missing = lag
        lines.append(
            f"Effective Memory at activation: {len(detail.manifest)} resources"
            + (f"; [yellow]index behind[/]: stale {', '.join(stale) or 'none'}, missing {', '.join(missing) or 'none'}"
               if stale or missing else "; the index matched it")
        )  # fmt: skip
    if detail.candidates:
        lines.append(
            stage_table(
                "candidates (final order)",
                f"{s.fragment_count} fragments, {s.token_count}/{s.token_budget} tokens",
                detail.candidates,
                rows,
            )
        )
    return lines


def case_detail(detail: CaseDetail) -> list[Any]:
    """``eval case show`` for a person: the case, then every candidate as a judge reads it: rank,
    disposition, judgment, heading path and its text from the frozen corpus (or why not)."""
    c = detail.case
    judged = {j.unit_id: j.relevance for j in detail.judgments.judgments if j.unit_id is not None}
    lines: list[Any] = [
        Text(f"case {c.case_id}  project {c.project_id}  provenance {c.provenance}  source run {c.source_run_id}"),
        Text(f"query: {c.query!r}"),
        Text(
            f"corpus {c.corpus_id[:12]} ({detail.corpus_resources} resources, frozen)  judgments v{c.judgment_version}"
            + (" (reviewed)" if c.reviewed else "")
        ),
    ]
    resources = [j for j in detail.judgments.judgments if j.resource_id is not None]
    if resources:
        lines.append(Text("resource judgments: " + ", ".join(f"{j.resource_id} {j.relevance}" for j in resources)))
    for level, variants in detail.metrics.items():  # B4 here; --json has every variant
        b4 = variants.get("b4_reranked", {})
        values = ", ".join(f"{m} {'-' if b4.get(m) is None else format(b4[m], '.3f')}" for m in JUDGED_METRICS)
        lines.append(Text(f"{level} level, B4 reranked: {values}"))
    if detail.missed:
        missed = ", ".join(f"{m.resource_id} ({m.category.replace('_', ' ')})" for m in detail.missed)
        lines.append(Text(f"missed evidence: {missed}"))
    ranks = {r.unit_id: r for r in detail.trace.candidates}
    for p in detail.passages:
        r = ranks[p.unit_id]
        outcome = f"selected ({r.delta_action})" if r.disposition == SELECTED else f"excluded ({r.exclusion_code})"
        grade = f"  judged {judged[p.unit_id]}" if p.unit_id in judged else ""
        span = f"  [{p.start}, {p.end})" if p.start is not None else ""
        lines.append(Text(f"\n#{r.final_rank} {p.unit_id}  {outcome}{grade}{span}", style="bold"))
        if p.heading_path:
            lines.append(Text("   " + " › ".join(p.heading_path), style="cyan"))
        if p.text is not None:
            lines.append(Text("\n".join("   │ " + line for line in p.text.splitlines() or [""])))
        else:
            lines.append(Text(f"   ({p.note})", style="yellow"))
    return lines


def latency_line(activation: Activation) -> str:
    parts = [f"{k} {v:.1f}" for k, v in activation.response.latency_ms.items()]
    return "latency ms: " + ", ".join(parts)


def console() -> Console:
    """A console that keeps the stage table readable when output is piped (rich defaults to 80)."""
    import sys

    return Console() if sys.stdout.isatty() else Console(width=160)
