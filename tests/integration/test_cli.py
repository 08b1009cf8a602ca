"""``memcore`` as a user runs it: real adapters, a real home, subprocesses."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def memcore(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "memory_core", "--home", str(home), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_project_commands_and_their_errors(tmp_path: Path) -> None:
    home, notes = tmp_path / "home", tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nAlpha.\n")
    added = json.loads(memcore(home, "project", "add", "notes", "--source", f"local={notes}", "--json").stdout)
    assert added["project"]["sources"] == [{"path": str(notes), "layer": "local"}]
    assert added["generation"] is None
    listed = json.loads(memcore(home, "project", "list", "--json").stdout)
    assert [p["project"]["project_id"] for p in listed] == ["notes"]
    dup = memcore(home, "project", "add", "notes", "--source", str(notes), check=False)
    assert dup.returncode == 1 and "error[project_exists]" in dup.stderr
    bad = memcore(home, "project", "add", "Bad Name", "--source", str(notes), check=False)
    assert bad.returncode == 2 and "error[invalid_project_name]" in bad.stderr
    unknown = memcore(home, "project", "show", "nope", check=False)
    assert unknown.returncode == 1 and "error[project_not_found]" in unknown.stderr
    refused = memcore(home, "project", "add", "gone", "--source", str(tmp_path / "missing"), check=False)
    assert refused.returncode == 1 and "error[source_unavailable]" in refused.stderr  # nothing stored
    (tmp_path / "missing").mkdir()
    memcore(home, "project", "add", "gone", "--source", str(tmp_path / "missing"))
    (tmp_path / "missing").rmdir()  # a source that goes away after it was added
    missing = memcore(home, "index", "gone", check=False)
    assert missing.returncode == 1 and "error[source_unavailable]" in missing.stderr
    memcore(home, "project", "remove", "gone")
    # Owner-only permissions on everything the product created.
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "local.db").stat().st_mode) == 0o600


def test_unindexed_and_bad_activation_input(tmp_path: Path) -> None:
    home, notes = tmp_path / "home", tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nAlpha.\n")
    memcore(home, "project", "add", "notes", "--source", str(notes))
    result = memcore(home, "activate", "notes", "alpha", check=False)
    assert result.returncode == 1 and "error[project_not_indexed]" in result.stderr
    result = memcore(home, "activate", "notes", "   ", check=False)
    assert result.returncode == 2 and "error[invalid_query]" in result.stderr
    (tmp_path / "state.json").write_text('{"units": [{"unit_id": "a.md#0", "unit_hash": "xyz"}]}')
    result = memcore(home, "activate", "notes", "alpha", "--state", str(tmp_path / "state.json"), check=False)
    assert result.returncode == 2 and "error[invalid_activation_state]" in result.stderr


def test_cranfield_index_no_op_incremental_and_activate(cranfield_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    home, source = cranfield_home
    shown = json.loads(memcore(home, "project", "show", "cranfield", "--json").stdout)
    assert shown["generation"]["resource_count"] == 1400
    again = json.loads(memcore(home, "index", "cranfield", "--json").stdout)
    assert again["status"] == "unchanged"

    doc = source / "12.md"
    original = doc.read_text()
    try:
        doc.write_text(original + "\nA note added by a reviewer about boundary layers.\n")
        changed = json.loads(memcore(home, "index", "cranfield", "--json").stdout)
        assert changed["status"] == "built"
        # Only the changed file's units were embedded again.
        assert 1 <= changed["embedded"] <= 3 and changed["reused_embeddings"] >= changed["units"] - 3

        out = json.loads(
            memcore(home, "activate", "cranfield", "boundary layer transition on a flat plate", "--json").stdout
        )
        response, candidates = out["response"], out["candidates"]
        assert response["fragments"] and response["totals"]["tokens"] <= response["totals"]["budget"]
        selected = [c["unit_id"] for c in candidates if c["disposition"] == "selected"]
        assert selected == [f["unit_id"] for f in response["fragments"]]
        table = memcore(home, "activate", "cranfield", "boundary layer transition", "--rows", "5").stdout
        assert "rrf" in table and "selected" in table
    finally:
        doc.write_text(original)
        # Leave the shared project as the other tests expect it (the old generation is reused).
        memcore(home, "index", "cranfield")


def test_demo_shows_replace_and_reuse(tmp_path: Path) -> None:
    result = memcore(tmp_path / "home", "demo")
    assert "delta actions in the follow-up: add, replace, reuse" in result.stdout
    assert os.path.exists(tmp_path / "home" / "demo" / "memory" / "project" / "README.md")


def test_an_unknown_inference_path_is_refused_before_the_home_is_made(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = subprocess.run(
        [sys.executable, "-m", "memory_core", "--home", str(home), "project", "list"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env={**os.environ, "MEMORY_CORE_INFERENCE": "fp16"},
    )
    assert result.returncode == 2 and "error[invalid_request]" in result.stderr
    assert "torch-bf16" in result.stderr and not home.exists()
