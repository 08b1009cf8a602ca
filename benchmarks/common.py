"""Shared helpers: where results go, the machine and date every figure states."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# The development collections live in the repository (data/README.md), so a clone alone runs
# every test and benchmark.
DATA = ROOT / "data"
CRANFIELD = DATA / "cranfield"
CISI = DATA / "cisi"
SCIFACT_TRAIN = DATA / "scifact-train"  # train claims only: import with --split train
LOCOMO_DEV = DATA / "locomo-dev"


@contextlib.contextmanager
def scratch_dir(name: str) -> Iterator[Path]:
    """A temporary folder for a benchmark's homes and corpora, removed afterwards. Sets the CLI's
    umask (077) first, so what the benchmark writes is owner-only, as in a real home."""
    os.umask(0o077)
    with tempfile.TemporaryDirectory(prefix=f"memcore-bench-{name}-") as tmp:
        yield Path(tmp)


def machine() -> dict[str, Any]:
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
    }


def measured(result: dict[str, Any], *, quick_note: str = ", quick run") -> str:
    """The opening of a report's paragraph: when and on what it ran (and whether a quick run)."""
    m = result["machine"]
    where = f"Measured {m['date']} on {m['cpus']} CPUs ({m['processor']}, {m['platform']}, Python {m['python']})"
    return where + (quick_note if result.get("quick") else "")


def write_result(name: str, result: dict[str, Any]) -> dict[str, Any]:
    RESULTS.mkdir(parents=True, exist_ok=True)
    result = {"machine": machine(), **result}
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return result


def read_result(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def proposal_figures(result: Any, chosen: str) -> dict[str, Any]:
    """A cross-validated proposal's figures, as ``tune`` and ``learn`` results both carry them: the
    cases graded and left out, the time, the current ranking's metrics and the chosen one's
    (under ``chosen``), the nDCG@10 gain with its paired 95 % interval and sign-flip p, whether it
    was proposed and the verdict. (``write_result`` sorts the keys.)"""
    import attrs

    return {
        "cases": result.cases,
        "excluded_cases": result.excluded_cases,
        "seconds": result.seconds,
        "current": attrs.asdict(result.current_metrics) if result.current_metrics else None,
        chosen: attrs.asdict(result.cross_validated) if result.cross_validated else None,
        "gain": result.gain,
        "gain_interval": [result.gain_low, result.gain_high],
        "p_value": result.p_value,
        "proposed": result.proposed,
        "verdict": result.verdict,
    }
