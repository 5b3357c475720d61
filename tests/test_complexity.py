"""The package stays readable: no function of cyclomatic complexity above 20 (radon's rank D or
worse: ``radon cc -n D rmsnorm_eps`` prints nothing), no function outside the CLI layer with
more than 8 parameters (options travel as one frozen object, or as its fields in a typed
``**fields``), and no module above 450 lines unless its docstring says why it stays one
piece."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rmsnorm_eps"
MAX_COMPLEXITY = 20
MAX_LINES = 450
MIN_MAINTAINABILITY = 20  # radon's maintainability index (``radon mi -s rmsnorm_eps``)
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


def test_no_module_below_maintainability_20() -> None:
    metrics = pytest.importorskip("radon.metrics")
    low = []
    for path in _modules():
        index = metrics.mi_visit(path.read_text(encoding="utf-8"), multi=True)
        if index < MIN_MAINTAINABILITY:
            low.append(f"{path.relative_to(PACKAGE)} ({index:.1f})")
    assert low == []


def test_long_modules_say_why() -> None:
    silent = []
    for path in _modules():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not any(w in doc for w in ("Why one module", "Why ~", "one piece")):
            silent.append(f"{path.relative_to(PACKAGE)} ({text.count(chr(10))} lines)")
    assert silent == []


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
