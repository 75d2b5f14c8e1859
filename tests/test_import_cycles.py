"""No import cycle in ``agora_optimizer``: the import graph, read from the source with ``ast``, is acyclic.

Every import counts, at module level and inside functions (a function-local import only delays
the cycle to the first call): ``import x.y`` and ``from x import y``, where ``x.y`` is the module
imported if it is one, else ``x``; relative imports are resolved. Imports under
``if TYPE_CHECKING:`` are left out (they never run). So is the implicit import of a package's
``__init__`` when one of its modules is imported: a package that imports its own modules (as
``agora_optimizer/cli/__init__.py`` does) would otherwise always be a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "agora_optimizer"


def module_names(package_dir: Path) -> dict[str, Path]:
    """Every module of the package under ``package_dir``, by dotted name (a package by its own name)."""
    modules: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """The dotted names a module imports (each with the names it takes from it), outside ``if TYPE_CHECKING:``."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.found: list[tuple[str, list[str]]] = []

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.extend((alias.name, []) for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            anchor = self.package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        self.found.append((base, [alias.name for alias in node.names]))


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (see the module docstring for what counts)."""
    modules = module_names(package_dir)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        visitor = _Imports(name, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        targets: set[str] = set()
        for base, names in visitor.found:
            submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
            if submodules:
                targets.update(submodules)
            if len(submodules) < len(names) or not names:  # names defined in ``base`` itself, or ``import base``
                while base and base not in modules:  # ``import a.b.c`` of a package's non-module: its module
                    base = base.rpartition(".")[0]
                if base:
                    targets.add(base)
        graph[name] = targets - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (its modules in import order, the first repeated at the end) per strongly connected
    component of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
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
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth first, inside the component)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in parents:
                    parents[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a strongly connected component always has one


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)
    # The graph is the real one: package-level, function-local and ``from package import module`` edges.
    assert {"agora_optimizer.cli.optimize", "agora_optimizer.cli.traces"} <= graph["agora_optimizer.cli"]
    assert "agora_optimizer.traces.store" in graph["agora_optimizer.cli.traces"]  # imported inside a command
    assert "agora_optimizer.integration.dag_shape" in graph["agora_optimizer.integration.usual_path"]


def fake_package(root: Path, files: dict[str, str]) -> Path:
    """A package ``fakepkg`` under ``root`` holding ``files`` (path inside the package -> source)."""
    package = root / "fakepkg"
    package.mkdir()
    for name, text in {"__init__.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def test_a_two_module_cycle_is_reported_even_through_a_function_local_import(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "a.py": "from fakepkg.b import helper\n\ndef used():\n    return helper()\n",
            "b.py": "def helper():\n    from fakepkg import a  # only when called\n\n    return a\n",
            "c.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from fakepkg.a import used\n",
            "d.py": "from . import c\n",
        },
    )
    graph = import_graph(package)
    assert graph["fakepkg.a"] == {"fakepkg.b"} and graph["fakepkg.b"] == {"fakepkg.a"}
    assert graph["fakepkg.c"] == set() and graph["fakepkg.d"] == {"fakepkg.c"}  # TYPE_CHECKING left out
    assert cycles(graph) == [["fakepkg.a", "fakepkg.b", "fakepkg.a"]]


def test_a_longer_cycle_through_relative_and_plain_imports_names_every_module(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {"x.py": "import fakepkg.y\n", "y.py": "from .z import value\n", "z.py": "from fakepkg import x\nvalue = 1\n"},
    )
    assert cycles(import_graph(package)) == [["fakepkg.x", "fakepkg.y", "fakepkg.z", "fakepkg.x"]]
