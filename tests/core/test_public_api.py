"""``import memory_core`` is the library's surface: ``open`` (a context-managed Engine), the value
types and typed errors a caller needs, and ``__version__``; importing it loads no heavy library."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import memory_core

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"torch", "transformers", "jnius", "pyserini", "usearch", "apsw"}


def test_every_public_name_resolves() -> None:
    assert "open" in memory_core.__all__ and "MemoryCoreError" in memory_core.__all__
    for name in memory_core.__all__:
        assert getattr(memory_core, name) is not None, name
    assert isinstance(memory_core.__version__, str) and memory_core.__version__
    for name in memory_core.__all__:
        value = getattr(memory_core, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, memory_core.MemoryCoreError), name


def test_the_package_is_typed() -> None:
    assert (ROOT / "memory_core" / "py.typed").is_file()


def test_importing_the_package_loads_no_heavy_library() -> None:
    code = f"import sys, memory_core; print(sorted(set({sorted(HEAVY)!r}) & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_the_engine_is_a_context_manager_that_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[object] = []
    monkeypatch.setattr(memory_core.Engine, "close", lambda self: closed.append(self))
    engine = memory_core.Engine.__new__(memory_core.Engine)
    with engine as entered:
        assert entered is engine
    assert closed == [engine]


def _notes(root: Path) -> Path:
    notes = root / "notes"
    notes.mkdir(parents=True)
    (notes / "deploy.md").write_text(
        "# Deploys\n\n## Rollback\n\nTo roll back a deploy, run `make rollback` and watch the canary.\n", "utf-8"
    )
    (notes / "team.md").write_text("# Team\n\nThe on-call rotation changes every Monday.\n", "utf-8")
    return notes


@pytest.mark.slow
def test_open_indexes_and_activates_then_closes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    notes = _notes(tmp_path)
    with memory_core.open(home) as engine:
        assert isinstance(engine, memory_core.Engine)
        engine.add_project("notes", [memory_core.Source(str(notes))])
        report = engine.index("notes")
        assert report.units > 0
        activation = engine.activate("notes", "how do we roll back a deploy?", budget=800)
        assert any("rollback" in (f.text or "") for f in activation.response.fragments)
        run_id = activation.response.run_id
    with memory_core.open(home) as again:  # closed: the home opens again and kept the Run
        assert run_id is not None and again.get_run(run_id).summary.run_id == run_id
        with pytest.raises(memory_core.ProjectNotFound):
            again.show_project("absent")


def _readme_library_example() -> str:
    text = (ROOT / "README.md").read_text("utf-8")
    found = re.search(r"<!-- library example[^\n]*-->\n```python\n(.*?)\n```", text, re.S)
    assert found, "README.md has no python block after <!-- library example ... -->"
    return found.group(1)


def test_the_readme_library_example_uses_the_public_entry() -> None:
    example = _readme_library_example()
    assert "memory_core.open(" in example and "bootstrap" not in example
    compile(example, "README.md", "exec")


@pytest.mark.slow
def test_the_readme_library_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # ~/notes and ~/memcore-home in a temp folder
    _notes(tmp_path)
    exec(compile(_readme_library_example(), "README.md", "exec"), {"__name__": "readme_example"})
    assert (tmp_path / "memcore-home").is_dir()
