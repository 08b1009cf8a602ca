"""What the tests that check a recorded Run share."""

from __future__ import annotations

from memory_core.runs.records import RunDetail


def outcome(run: RunDetail) -> tuple[str, str | None, str | None]:
    """The Run's status, error stage and error code, as its summary records them."""
    return run.summary.status, run.summary.error_stage, run.summary.error_code
