"""``memcore activate --save-state PATH`` (issue 14 item 10): a path that cannot be written as a
file is refused before activating, so no Run is recorded for an answer nobody could keep; a good
one gets the next state, owner-only, by an atomic rename."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from .test_cli import memcore

pytestmark = pytest.mark.slow


def _run_count(home: Path) -> int:
    page = json.loads(memcore(home, "runs", "list", "--json").stdout)
    return len(page["runs"])


def test_save_state_checks_its_path_before_activating(tmp_path: Path) -> None:
    home, notes = tmp_path / "home", tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Alpha\n\nAlpha particles and the alpha release.\n")
    memcore(home, "project", "add", "notes", "--source", str(notes))
    memcore(home, "index", "notes")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it to write would block until a reader came

    for path, says in [
        (tmp_path, "is a directory"),
        (tmp_path / "missing" / "state.json", "is not an existing directory"),
        (tmp_path / "notes" / "a.md" / "state.json", "is not an existing directory"),
        (fifo, "is not a regular file"),
    ]:
        refused = memcore(home, "activate", "notes", "alpha", "--save-state", str(path), check=False)
        assert refused.returncode == 2, refused.stderr
        assert "error[invalid_request]" in refused.stderr and says in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
    assert _run_count(home) == 0  # refused before the engine recorded anything
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "home", "notes"]  # no temporary left

    saved = tmp_path / "state.json"
    memcore(home, "activate", "notes", "alpha", "--save-state", str(saved))
    state = json.loads(saved.read_text(encoding="utf-8"))
    assert state["units"] and stat.S_IMODE(saved.stat().st_mode) == 0o600
    # The saved state is the next request's state, and saving over it again replaces it whole.
    memcore(home, "activate", "notes", "alpha", "--state", str(saved), "--save-state", str(saved))
    assert json.loads(saved.read_text(encoding="utf-8"))["units"]
    assert _run_count(home) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "home", "notes", "state.json"]
