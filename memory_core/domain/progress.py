"""Progress callbacks: (stage, done, total), called by long work such as indexing."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def no_progress(stage: str, done: int, total: int) -> None:
    return None


def progress_text(stage: str, done: int, total: int) -> str:
    """A stage as a running re-index's health record (``ProjectHealth.progress``) and a running
    job's record (``JobInfo.progress``) show it."""
    return f"{stage} {done}/{total}"


def parse_progress(text: str | None) -> tuple[str, int, int] | None:
    """``progress_text`` read back (the CLI draws it as a bar); None for anything else."""
    stage, _, counts = (text or "").rpartition(" ")
    done, _, total = counts.partition("/")
    if not stage or not done.isdigit() or not total.isdigit():
        return None
    return stage, int(done), int(total)
