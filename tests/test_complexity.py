"""The package stays readable: no function of cyclomatic complexity above 20 (radon's rank D or
worse: ``radon cc -n D rmsnorm_eps`` prints nothing) and no function outside the CLI layer with
more than 8 parameters (options travel as one frozen object, or as its fields in a typed
``**fields``).

There is no module-length or maintainability-index gate: the projects we learn from (nox,
Polygraphy) keep cohesive modules of 1,000-2,000 lines, and those gates had led to modules split
by size, joined again only by private names imported across them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rmsnorm_eps"
MAX_COMPLEXITY = 20
MAX_PARAMETERS = 8  # self/cls not counted; *args and **kwargs count one each


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_function_is_rated_d_or_worse() -> None:
    radon = pytest.importorskip("radon.complexity")
    worst = []
    for path in _modules():
        for block in radon.cc_visit(path.read_text(encoding="utf-8")):
            if block.complexity > MAX_COMPLEXITY:
                worst.append(f"{path.relative_to(PACKAGE)}:{block.lineno} {block.name}")
    assert worst == []


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


def test_no_function_outside_the_cli_takes_more_than_8_parameters() -> None:
    many = []
    for path in _modules():
        if "cli" in path.relative_to(PACKAGE).parts:
            continue  # typer declares one parameter per option
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if _parameters(node) > MAX_PARAMETERS:
                many.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert many == []


def test_the_parameter_count_sees_every_kind() -> None:
    (fn,) = ast.parse("def f(self, a, /, b, *c, d, **e): pass").body
    assert isinstance(fn, ast.FunctionDef) and _parameters(fn) == 5
