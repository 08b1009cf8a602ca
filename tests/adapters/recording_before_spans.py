"""Recording Runs as a store before migration 7 did (issue 18 item 3), for the tests that populate
an older database with the current store."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

from memory_core.adapters.sqlite import run_rows


@contextlib.contextmanager
def recording_before_spans() -> Iterator[None]:
    """``SqliteRunStore`` writes candidates as it did before migration 7: without their span, into
    the columns a schema 6 (or older) database has. Settle the store inside the block: its writer
    thread looks the statement up when it writes."""
    insert = run_rows.INSERT_CANDIDATE.replace(", span_start, span_end", "").replace(", ?, ?)", ")")
    assert insert != run_rows.INSERT_CANDIDATE

    def rows(*args: Any) -> list[tuple[Any, ...]]:
        return [row[:-2] for row in run_rows.candidate_rows(*args)]  # the span is the row's end

    with (
        mock.patch("memory_core.adapters.sqlite.runs.INSERT_CANDIDATE", insert),
        mock.patch("memory_core.adapters.sqlite.runs.candidate_rows", rows),
    ):
        yield
