"""Readable terminal output (rich): projects, index reports and the per-stage ranking table."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from memory_core.engine import Activation, ProjectInfo
from memory_core.indexing import IndexReport
from memory_core.pipeline import SELECTED, Candidate


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


def candidates_table(activation: Activation, rows: int) -> Table:
    r = activation.response
    table = Table(
        title=f"{r.project_id}: {r.query!r}  (run {r.run_id or '-'})",
        caption=(
            f"{r.totals['selected']} selected of {r.totals['candidates']} candidates, "
            f"{r.totals['tokens']}/{r.totals['budget']} tokens, {r.totals['reused']} reused; "
            f"latency {r.latency_ms.get('total', 0):.1f} ms"
        ),
    )
    for col in ("final", "unit", "exact", "bm25", "dense", "rrf", "rerank", "disposition", "code / action"):
        table.add_column(col, overflow="fold")
    shown: list[Candidate] = [c for c in activation.candidates[:rows]]
    shown += [c for c in activation.candidates[rows:] if c.disposition == SELECTED]
    for c in shown:
        selected = c.disposition == SELECTED
        table.add_row(
            str(c.final_rank),
            c.unit.unit_id,
            _rank(c.exact_rank, c.exact_score, 2),
            _rank(c.bm25_rank, c.bm25_score, 2),
            _rank(c.dense_rank, c.dense_score),
            _rank(c.rrf_rank, c.rrf_score, 4),
            _rank(c.rerank_rank, c.rerank_score),
            "[green]selected[/]" if selected else "excluded",
            (c.delta_action or "") if selected else (c.exclusion_code or ""),
        )
    return table


def latency_line(activation: Activation) -> str:
    parts = [f"{k} {v:.1f}" for k, v in activation.response.latency_ms.items()]
    return "latency ms: " + ", ".join(parts)


def console() -> Console:
    """A console that keeps the stage table readable when output is piped (rich defaults to 80)."""
    import sys

    return Console() if sys.stdout.isatty() else Console(width=160)
