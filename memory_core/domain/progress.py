"""Progress callbacks: (stage, done, total), called by long work such as indexing."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str, int, int], None]  # (stage, done, total)




def no_progress(stage: str, done: int, total: int) -> None:
    return None
