"""The house's floor plan, as a test: nothing reaches up, and no package imports in a circle.

The engine (`lakehouse`, quality suites included) and the jobs are what the bundle deploys: they must
not import the app (`cdc_enrich`), the local stack (`devstack`) or the test kit (`testkit`),
not even inside a function. The test kit may use the engine and the local stack; the app may
use everything. Imports are read from the source (every `import` statement, at any depth).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("lakehouse", "jobs", "devstack", "testkit", "cdc_enrich")
#: What each package may import of the project's other packages.
ALLOWED = {
    "lakehouse": {"lakehouse"},
    "jobs": {"lakehouse", "jobs"},
    "devstack": {"lakehouse", "devstack"},
    "testkit": {"lakehouse", "devstack", "testkit"},
    "cdc_enrich": set(PACKAGES),
}


def project_imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every import of a project package in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)]
    return [(line, name) for line, name in found if name.split(".")[0] in PACKAGES]


def modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_imports_a_layer_above_it(package: str) -> None:
    wrong = [
        f"{path.relative_to(REPO)}:{line}: imports {name}"
        for path in modules(package)
        for line, name in project_imports(path)
        if name.split(".")[0] not in ALLOWED[package]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_rule_catches_an_engine_module_importing_the_local_stack(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from devstack.broker import broker_status\n", encoding="utf-8")
    assert [name for _, name in project_imports(bad)] == ["devstack.broker"]
    assert "devstack" not in ALLOWED["lakehouse"]


def import_graph(anywhere: bool) -> dict[str, set[str]]:
    """Module -> the project modules it imports: at module level, or `anywhere` (inside functions too)."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in modules(package):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = set()
            for node in ast.walk(tree) if anywhere else tree.body:
                if isinstance(node, ast.Import):
                    names |= {a.name for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names.add(node.module)
            graph[module_name(path)] = {n for n in names if n.split(".")[0] in PACKAGES}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each circle found, as `a -> b -> a` (a module importing its own package is not one)."""
    known = set(graph)

    def edges(module: str) -> set[str]:
        # `from pkg.mod import x` depends on pkg.mod; a package's __init__ is reached by its name
        return {n for n in graph.get(module, ()) if n in known and n != module}

    cycles = []
    state: dict[str, int] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(edges(module)):
            if state.get(nxt) == 1 and not module.startswith(nxt + "."):
                cycles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[module] = 2

    for module in sorted(known):
        if module not in state:
            visit(module, [module])
    return cycles


def test_no_import_cycles_between_modules_at_import_time() -> None:
    """Module-level imports: a circle there fails at import."""
    cycles = import_cycles(import_graph(anywhere=False))
    assert not cycles, "\n".join(cycles)


def test_no_import_cycles_even_through_imports_inside_functions() -> None:
    """A function-level import is laziness (Spark, the local stack, loaded when a command needs
    them), never a way around a circle: two modules that need each other share a third instead."""
    cycles = import_cycles(import_graph(anywhere=True))
    assert not cycles, "\n".join(cycles)


def test_the_cycle_rule_sees_a_circle_closed_inside_a_function() -> None:
    graph = {"lakehouse.a": {"lakehouse.b"}, "lakehouse.b": {"lakehouse.a"}, "lakehouse": {"lakehouse.a"}}
    assert import_cycles(graph) == ["lakehouse.a -> lakehouse.b -> lakehouse.a"]
    assert import_cycles({"lakehouse": {"lakehouse.a"}, "lakehouse.a": {"lakehouse"}}) == []


def test_every_project_import_resolves_also_inside_functions() -> None:
    """`from pkg import name` anywhere (a function-level import runs only when its command does)
    names a module or an attribute that exists: a moved module cannot hide in a rarely run path."""
    import importlib

    broken = []
    for package in PACKAGES:
        for path in modules(package):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                    continue
                if node.module.split(".")[0] not in PACKAGES:
                    continue
                module = importlib.import_module(node.module)
                for alias in node.names:
                    if not hasattr(module, alias.name):
                        try:
                            importlib.import_module(f"{node.module}.{alias.name}")
                        except ModuleNotFoundError:
                            broken.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.module} has no {alias.name}")
    assert not broken, "\n".join(broken)
