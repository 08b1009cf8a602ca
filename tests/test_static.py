"""Lint and types are part of the suite, so CI checks them on every submission."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "memory_core", "adapters", "entrypoints", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_checks_all_code() -> None:
    """Strict on the core, checked (not strict) in adapters, entrypoints and benchmarks:
    ``-p memory_core`` follows the symlinked ``memory_core/adapters`` and
    ``memory_core/entrypoints``, and the composition root hands each adapter to a parameter typed
    by its port. The benchmarks publish the performance figures, so they are checked too."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "-p", "memory_core", "-p", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    files = [p for top in ("adapters", "entrypoints", "benchmarks") for p in (ROOT / top).rglob("*.py")]
    core = [
        p
        for p in (ROOT / "memory_core").rglob("*.py")
        if p.relative_to(ROOT / "memory_core").parts[0] not in ("adapters", "entrypoints")
    ]
    checked = re.search(r"no issues found in (\d+) source files", result.stdout)
    assert checked and int(checked[1]) >= len(files) + len(core), result.stdout
