"""The hexagon's import direction, checked: the core imports only the stdlib and attrs, and
each layer imports only the layers below it (docs/architecture.md, "Layers")."""

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
    # The symlinked adapters/ and entrypoints/ are not core; __main__ is the `python -m` entry shim,
    # the package's own __init__ the public surface (the top layer: its open() loads bootstrap).
    return sorted(p for p in CORE.rglob("*.py") if p.name != "__main__.py" and p != CORE / "__init__.py"
                  and p.relative_to(CORE).parts[0] not in {"adapters", "entrypoints"})  # fmt: skip


# The layers, lowest first: a module imports only from its own layer or those below it.
# retrieval < runs < evaluation: a Run records retrieval's candidates, evaluation judges Runs.
LAYERS = (
    ("domain",),
    ("retrieval",),
    ("runs",),
    ("evaluation",),
    ("ports",),
    ("services",),
    ("operations",),  # the table of operations: each use case declared once, over the services
    ("adapters",),
    ("entrypoints.bootstrap",),  # the composition root
    ("entrypoints",),
    ("",),  # memory_core itself: the public surface, memory_core.open and the re-exports
)


def layer_of(module: str) -> int | None:
    """The layer of ``memory_core.<...>`` (None: not a layered module, e.g. the package itself)."""
    if module == "memory_core":
        return len(LAYERS) - 1
    if not module.startswith("memory_core."):
        return None
    rest = module.removeprefix("memory_core.")
    matches = [(len(prefix), rank) for rank, prefixes in enumerate(LAYERS) for prefix in prefixes
               if prefix and (rest == prefix or rest.startswith(prefix + "."))]  # fmt: skip
    return max(matches)[1] if matches else None  # the longest prefix: entrypoints.bootstrap, not entrypoints


def module_name(path: Path) -> str:
    parts = path.resolve().relative_to(ROOT).with_suffix("").parts
    if parts[0] in {"adapters", "entrypoints"}:
        parts = ("memory_core", *parts)
    return ".".join(p for p in parts if p != "__init__")


def layered_files() -> list[Path]:
    found = [*core_files(), *(ROOT / "adapters").rglob("*.py"), *(ROOT / "entrypoints").rglob("*.py")]
    return sorted(p for p in found if "demo_memory" not in p.parts)


@pytest.mark.parametrize("path", layered_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_layer_imports_only_the_layers_below(path: Path) -> None:
    me = module_name(path)
    mine = layer_of(me)
    assert mine is not None, f"{me} is in no layer: add its folder to LAYERS"
    for module in imported_modules(path):
        theirs = layer_of(module)
        if theirs is not None and theirs > mine:
            pytest.fail(f"{me} (layer {LAYERS[mine][0]}) imports {module} (layer {LAYERS[theirs][0]})")


def test_the_layer_checker_sees_an_upward_import() -> None:
    assert layer_of("memory_core.domain.model") == 0
    assert layer_of("memory_core.entrypoints.bootstrap") == LAYERS.index(("entrypoints.bootstrap",))
    assert layer_of("memory_core.entrypoints.cli.main") == len(LAYERS) - 2
    assert layer_of("memory_core.services.engine") > layer_of("memory_core.ports.runs")  # type: ignore[operator]
    assert layer_of("memory_core.operations.projects") > layer_of("memory_core.services.engine")  # type: ignore[operator]


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


def test_the_fakes_depend_on_the_core_only() -> None:
    """adapters/in_memory implements the ports for fast tests with nothing but the core's rules."""
    for path in sorted((ROOT / "adapters" / "in_memory").rglob("*.py")):
        for module in imported_modules(path):
            assert not (module.startswith("memory_core.adapters") and not module.startswith(
                "memory_core.adapters.in_memory")), f"{path.name} imports {module}"


# -- import cycles ------------------------------------------------------------------------------
def import_graph() -> dict[str, set[str]]:
    """Every layered module and the layered modules it imports (lazy imports included: a cycle
    through a function-level import still ties the modules' meanings together). ``from m import
    x`` counts ``m.x`` when that is a module, else ``m``."""
    modules = {module_name(p): p for p in layered_files()}
    modules.setdefault("memory_core", CORE / "__init__.py")

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        graph[name] = {o for t in targets if t.startswith("memory_core") and (o := owner(t)) not in (None, name)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_anywhere() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_sees_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# -- finer rules, per subpackage ------------------------------------------------------------------
PURE_CORE = ("memory_core.domain", "memory_core.retrieval", "memory_core.runs", "memory_core.evaluation",
             "memory_core.ports")  # fmt: skip


def adapter_files() -> list[Path]:
    return sorted((ROOT / "adapters").rglob("*.py"))


@pytest.mark.parametrize("path", adapter_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_adapters_import_only_the_domain_ports_and_pure_rules(path: Path) -> None:
    """An adapter implements a port with the core's values and rules: never a use case
    (services), never a transport; and a real adapter never leans on a fake."""
    fake = "in_memory" in path.relative_to(ROOT).parts
    for module in imported_modules(path):
        if not module.startswith("memory_core") or module == "memory_core":
            continue
        if module.startswith("memory_core.adapters"):
            real_on_fake = not fake and module.startswith("memory_core.adapters.in_memory")
            assert not real_on_fake, f"{path.name} imports the fake {module}"
            continue
        assert module.startswith(PURE_CORE), f"{path.relative_to(ROOT)} imports {module}: not domain, ports or rules"


def entrypoint_files() -> list[Path]:
    return sorted(p for p in (ROOT / "entrypoints").rglob("*.py")
                  if "demo_memory" not in p.parts and p.name != "bootstrap.py")  # fmt: skip


@pytest.mark.parametrize("path", entrypoint_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_entrypoints_reach_adapters_only_through_the_composition_root(path: Path) -> None:
    """Nothing but ``entrypoints/bootstrap.py`` picks or builds an adapter; a transport asks it."""
    for module in imported_modules(path):
        assert not module.startswith("memory_core.adapters"), f"{path.relative_to(ROOT)} imports {module}"
