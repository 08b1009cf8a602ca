"""The demo's copy of its memory is owner-only like the rest of the home (issue 14 item 10),
under a permissive umask (022, a common shell default) and whatever the package's own modes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from memory_core.entrypoints.cli import demo
from tests.reliability.test_security import loose_paths


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_demo_copy_is_owner_only_under_umask_022(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    # The shipped memory with the modes pip installs it with, 0755 directories and 0644 files
    # (shutil.copytree kept those), whatever this checkout's own modes are.
    source = Path(shutil.copytree(demo.demo_source_root(), tmp_path / "package"))
    for path in [source, *source.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    monkeypatch.setattr(demo, "demo_source_root", lambda: source)
    previous = os.umask(0o022)
    try:
        memory = demo.prepare_memory(home)
        (memory / "stale.md").write_text("left from an earlier run\n")
        os.chmod(memory, 0o755)
        memory = demo.prepare_memory(home)  # a second run replaces the copy whole
    finally:
        os.umask(previous)
    assert loose_paths(home) == []
    assert _files(memory) == _files(source) and len(_files(memory)) > 5
