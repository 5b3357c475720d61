"""Golden files: the exact output of every format for every command that reports findings
(ratio, bound, compare, precision, parity, config diff, merge) on the shipped examples.

Regenerate after an intended change with ``RMSNORM_EPS_REGEN_GOLDEN=1 python -m pytest
tests/test_reports_golden.py`` and review the diff (docs/DEVELOPING.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rmsnorm_eps.reports import FORMATS
from tests.helpers import GOLDEN_CASES as CASES

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
REGEN = os.environ.get("RMSNORM_EPS_REGEN_GOLDEN", "") not in ("", "0")
EXT = {
    "text": "txt",
    "json": "json",
    "markdown": "md",
    "github": "github.txt",
    "junit": "junit.xml",
    "sarif": "sarif",
}


def test_every_format_has_a_golden_extension() -> None:
    assert set(EXT) == set(FORMATS)


@pytest.mark.parametrize("fmt", sorted(EXT))
@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, case: str, fmt: str
) -> None:
    monkeypatch.chdir(ROOT)
    for var in ("RMSNORM_EPS_FORMAT", "GITHUB_STEP_SUMMARY", "NO_COLOR", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    args, code = CASES[case]
    res = cli(*args, "--format", fmt)
    assert res.exit_code == code, res
    path = GOLDEN / f"{case}.{EXT[fmt]}"
    if REGEN:
        path.write_text(res.stdout, encoding="utf-8")
    assert path.is_file(), f"missing {path}; run with RMSNORM_EPS_REGEN_GOLDEN=1"
    assert res.stdout == path.read_text(encoding="utf-8")
