"""reports/commands/bound.py: the text report does not import rich's console (a large part of
its start-up); its bytes at every width are tests/test_reports_golden_widths.py's."""

from __future__ import annotations

import subprocess
import sys

from rmsnorm_eps.bound import SEED_RATIOS, bound_for_delta, figures_for_ratios

RESULTS = [
    bound_for_delta(0.01),
    bound_for_delta(1e-6, eps=1e-5),
    bound_for_delta(0.5, eps=3.0),
    figures_for_ratios(SEED_RATIOS),
    figures_for_ratios((0.5, 49.2512562814, 1e12), eps=1e-6),
]


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
