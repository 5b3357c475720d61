"""reports/commands/bound.py: without colour, the text report is written by the plain table
writer (``bound`` does not import rich's console, a large part of its start-up) and is byte
for byte what rich renders, for the bound and for A at given ratios, at every width."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rmsnorm_eps.bound import SEED_RATIOS, bound_for_delta, figures_for_ratios
from rmsnorm_eps.reports.commands import bound
from rmsnorm_eps.reports.options import RenderOptions

RESULTS = [
    bound_for_delta(0.01),
    bound_for_delta(1e-6, eps=1e-5),
    bound_for_delta(0.5, eps=3.0),
    figures_for_ratios(SEED_RATIOS),
    figures_for_ratios((0.5, 49.2512562814, 1e12), eps=1e-6),
]


def _rich(result: object, options: RenderOptions) -> str:
    from rmsnorm_eps.reports.formats.rich_text import render
    from rmsnorm_eps.reports.formats.text import strip_trailing_spaces

    figures = bound._figures(result)
    parts = (
        bound._ratio_figures_parts(figures) if figures is not None else bound._bound_parts(result)  # type: ignore[arg-type]
    )
    return "".join(strip_trailing_spaces(x) + "\n" for x in render(parts, options).splitlines())


@pytest.mark.parametrize("result", RESULTS, ids=range(len(RESULTS)))
@pytest.mark.parametrize("width", [None, 120, 80, 60, 40, 20])
def test_plain_text_is_what_rich_renders(result: object, width: int | None) -> None:
    options = RenderOptions(width=width)
    assert bound.BoundReporter(options).text(result) == _rich(result, options)  # type: ignore[arg-type]


def test_bound_imports_neither_rich_console_nor_numpy() -> None:
    """(``rich.cells``, the cell widths the plain writer measures with, is small.)"""
    code = (
        "import sys, runpy; sys.argv = ['rmsnorm-eps', 'bound', '--delta', '0.01'];\n"
        "try:\n    runpy.run_module('rmsnorm_eps', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy'\n"
        "             or m in ('rich.console', 'rich.table', 'rich.text')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"
    assert "min q/eps                            49.2512562814" in out
