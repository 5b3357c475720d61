"""No import cycle anywhere in rmsnorm_eps, counting module-level and function-level imports.

The graph is built from the source with ``ast`` (nothing is imported): an edge A -> B for every
``import B`` / ``from B import x`` in A, at any depth (inside functions, ``if TYPE_CHECKING``
blocks included: a cycle there is still a tangle of responsibilities). ``from P import m``
where ``P.m`` is a module of the package is an edge to ``P.m``, else to ``P``. A relative
import is resolved against A's package. Edges to modules outside the package are dropped.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rmsnorm_eps"


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in its source)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            for target in targets:
                # `import a.b.c` names a.b.c (its parents run too, but as packages, whose
                # own imports are edges of their own)
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_finder_sees_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.b"]]


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "rmsnorm_eps.reports" in graph and graph["rmsnorm_eps.cli._app"]
    assert find_cycles(graph) == []


def test_no_library_module_imports_the_reports() -> None:
    """Results flow up to the reports, never back: outside ``reports/`` and the front ends (the
    CLI, and ``api``/``testing``, which hand a result to a reporter as the CLI does), no module
    imports ``rmsnorm_eps.reports`` (the parity record once imported its reporter)."""
    graph = import_graph()
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if not module.startswith(("rmsnorm_eps.reports", "rmsnorm_eps.cli"))
        and module not in ("rmsnorm_eps.api", "rmsnorm_eps.testing")
        for target in targets
        if target.startswith("rmsnorm_eps.reports")
    )
    assert upward == []
