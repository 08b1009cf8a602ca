"""The hexagon's import direction, checked: the core imports only the stdlib and attrs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "memory_core"
ALLOWED_THIRD_PARTY = {"attrs"}
FORBIDDEN = {"apsw", "cattrs", "pyserini", "usearch", "torch", "transformers", "jnius", "numpy"}


def core_files() -> list[Path]:
    # The symlinked adapters/ and entrypoints/ are not core; __main__ is the `python -m` entry shim.
    return sorted(p for p in CORE.glob("*.py") if p.name != "__main__.py")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", core_files(), ids=lambda p: p.name)
def test_core_imports_only_stdlib_attrs_and_core(path: Path) -> None:
    for module in imported_modules(path):
        top = module.split(".")[0]
        if module.startswith(("memory_core.adapters", "memory_core.entrypoints")):
            pytest.fail(f"{path.name} imports {module}: the core must not depend on adapters or entrypoints")
        assert top not in FORBIDDEN, f"{path.name} imports {module}"
        assert top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY or top == "memory_core", (
            f"{path.name} imports third-party {module}"
        )


def test_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom memory_core.adapters.system.home import x\nimport torch\n")
    assert {"memory_core.adapters.system.home", "torch"} <= imported_modules(bad)


def test_importing_the_engine_loads_no_heavy_library() -> None:
    code = (
        "import sys, memory_core.services.engine, memory_core.services.indexing, memory_core.entrypoints.cli.main;"
        "heavy = {'torch', 'transformers', 'jnius', 'pyserini', 'usearch', 'apsw'} & set(sys.modules);"
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
