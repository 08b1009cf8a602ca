"""SVG charts for docs/performance.md (matplotlib, Agg), written to ``docs/performance/``.

Each drawing function takes a saved result (``benchmarks/results/<name>.json``) and returns the
chart's path relative to ``docs/``, or ``None`` when there is nothing to draw. ``draw_all`` (called
by ``python -m benchmarks``) draws every chart whose result exists; ``render()`` functions only
link to them (``link``), so rendering writes no file. The SVGs are deterministic (no date, fixed
hash salt): an unchanged result gives unchanged bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmarks.common import ROOT, read_result

DOCS = ROOT / "docs"
FOLDER = DOCS / "performance"
COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "memory-core", "svg.fonttype": "none", "font.size": 9})
    return plt


def _save(fig: Any, name: str) -> str:
    FOLDER.mkdir(parents=True, exist_ok=True)
    path = FOLDER / name
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
    _pyplot().close(fig)
    return str(path.relative_to(DOCS))


def _caption(result: Mapping[str, Any]) -> str:
    m = result["machine"]
    return f"{m['date']}, {m['cpus']} CPUs" + (", quick run" if result.get("quick") else "")


def _bars(
    ax: Any, groups: list[str], series: Mapping[str, list[float]], *, errors: Mapping[str, list[float]] | None = None
) -> None:
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, values, width, label=label, color=COLORS[i % len(COLORS)])
        if errors is not None:
            # p95 as a tick above the p50 bar
            ax.scatter(xs, errors[label], marker="_", s=120, color="black", zorder=3)
        for bar, v in zip(bars, values, strict=True):
            ax.annotate(
                f"{v:.3g}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=7,
                xytext=(0, 1),
                textcoords="offset points",
            )
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    # Headroom above the tallest mark, so the legend never hides a bar or a tick.
    top = max(max(v) for v in (errors or series).values())
    ax.set_ylim(0, top * 1.3 if top > 0 else 1)


# -- per-stage latency (activation_latency.json) --------------------------------------------------
LATENCY_STAGES = ("exact", "bm25", "embed_query", "dense", "fusion", "rerank", "select", "other", "total")


def latency_plot(result: Mapping[str, Any] | None) -> str | None:
    """Warm p50 per stage (bars) and p95 (ticks), default reranker, one series per corpus size."""
    if not result or not result.get("rows"):
        return None
    rows = [r for r in result["rows"] if r["reranker"].startswith("default")]
    if not rows:
        return None
    stages = [s for s in LATENCY_STAGES if all(s in r["stages_ms"] for r in rows)]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    series = {f"{r['units']:,} units": [r["stages_ms"][s]["p50"] for s in stages] for r in rows}
    p95 = {f"{r['units']:,} units": [r["stages_ms"][s]["p95"] for s in stages] for r in rows}
    _bars(ax, list(stages), series, errors=p95)
    ax.set_ylabel("ms (bar p50, tick p95)")
    ax.set_title(f"Warm activation latency per stage, default reranker ({_caption(result)})")
    ax.legend()
    return _save(fig, "activation_latency.svg")


# -- quality (cranfield_quality.json) -------------------------------------------------------------
QUALITY = (("plain_bm25", "plain BM25"), ("B1", "B1 lexical"), ("B2", "B2 dense"), ("B3", "B3 RRF"), ("B4", "B4 final"))
MEASURES = (("ndcg_cut_10", "nDCG@10"), ("recall_100", "Recall@100"), ("recip_rank", "MRR"))


def quality_plot(result: Mapping[str, Any] | None) -> str | None:
    """nDCG@10, Recall@100 and MRR of plain BM25 and B1-B4 on Cranfield (document level)."""
    if not result or "all" not in result:
        return None
    present = [(k, label) for k, label in QUALITY if k in result["all"]]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.4))
    series = {label: [result["all"][k][m] for m, _ in MEASURES] for k, label in present}
    _bars(ax, [label for _, label in MEASURES], series)
    ax.set_ylim(0, 1.12)
    ax.set_title(f"Cranfield, 225 queries, document level ({_caption(result)})")
    ax.legend(ncols=len(series), loc="upper left", fontsize=7)
    return _save(fig, "cranfield_quality.svg")


# -- ours vs the peer design (peer_comparison.json) ------------------------------------------------
def peer_plot(result: Mapping[str, Any] | None) -> str | None:
    """Quality (nDCG@10, Recall@100, MRR) and warm latency p50/p95, memory-core vs the peer."""
    if not result or "quality" not in result:
        return None
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), gridspec_kw={"width_ratios": [3, 2]})
    systems = {"memory-core B4": "ours_b4", "peer FTS5+numpy+RRF": "peer_rrf", "peer FTS5 BM25": "peer_bm25"}
    _bars(
        left,
        [label for _, label in MEASURES],
        {label: [result["quality"][k][m] for m, _ in MEASURES] for label, k in systems.items()},
    )
    left.set_ylim(0, 1.15)
    left.set_title("Cranfield quality (document level)")
    left.legend(fontsize=7, loc="upper center", ncols=3)
    lat = result["latency_ms"]
    ways = {"peer": "peer", "memory-core": "ours", "memory-core\nrecorded": "ours_recorded"}
    _bars(
        right,
        list(ways),
        {"p50": [lat[k]["p50"] for k in ways.values()], "p95": [lat[k]["p95"] for k in ways.values()]},
    )
    right.set_ylabel("ms")
    right.set_title("Warm latency per query")
    right.legend(fontsize=7)
    fig.suptitle(f"memory-core vs the common local-memory-server design ({_caption(result)})", fontsize=9)
    return _save(fig, "peer_comparison.svg")


# -- recording overhead (recording_overhead.json) ---------------------------------------------------
def recording_plot(result: Mapping[str, Any] | None) -> str | None:
    """Warm activation p50/p95, recorded vs unrecorded, per corpus size."""
    if not result or not result.get("rows"):
        return None
    rows = result["rows"]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    groups = [f"{r['units']:,} units" for r in rows]
    modes = [m for m in ("unrecorded", "recorded", "recorded_sync") if all(m in r["wall_ms"] for r in rows)]
    series = {mode.replace("_", ", "): [r["wall_ms"][mode]["p50"] for r in rows] for mode in modes}
    p95 = {mode.replace("_", ", "): [r["wall_ms"][mode]["p95"] for r in rows] for mode in modes}
    _bars(ax, groups, series, errors=p95)
    ax.set_ylabel("ms (bar p50, tick p95)")
    ax.set_title(f"Activation, recorded vs unrecorded ({_caption(result)})")
    ax.legend()
    return _save(fig, "recording_overhead.svg")


# -- drawing and linking -----------------------------------------------------------------------------
CHARTS = {
    "activation_latency": latency_plot,
    "cranfield_quality": quality_plot,
    "peer_comparison": peer_plot,
    "recording_overhead": recording_plot,
}
# Results whose own sections (other modules) do not link their chart: linked under "Charts".
UNLINKED = {
    "activation_latency": "warm activation latency per stage",
    "cranfield_quality": "B1-B4 quality on Cranfield",
}


def link(name: str, alt: str) -> str:
    """The markdown image for chart ``name`` (drawn by ``draw_all`` as ``performance/<name>.svg``)."""
    return f"![{alt}]({FOLDER.relative_to(DOCS).as_posix()}/{name}.svg)"


def draw_all() -> list[str]:
    """Draw every chart whose result exists; the paths written, relative to ``docs/``."""
    drawn = [CHARTS[name](read_result(name)) for name in CHARTS]
    return [path for path in drawn if path is not None]


def charts_section() -> str | None:
    """Links to the charts of results whose sections have none; None when no such result exists."""
    found = [(name, alt) for name, alt in UNLINKED.items() if read_result(name) is not None]
    if not found:
        return None
    lines = ["## Charts", "", "Drawn from the JSON behind the sections above (`benchmarks/plots.py`).", ""]
    for name, alt in found:
        lines += [link(name, alt), ""]
    return "\n".join(lines)


def main() -> int:
    for path in draw_all():
        print(DOCS / path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
