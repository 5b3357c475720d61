"""rmsnorm_eps.parity.diagnose: one line, PASS or FAIL first, naming what to inspect."""

from __future__ import annotations

from rmsnorm_eps.parity.api import check_parity
from rmsnorm_eps.parity.diagnose import diagnose
from tests.unit.parity_impls import rms


def test_pass_and_fail_lines() -> None:
    ok = check_parity(rms(1e-6), dim=16, eps=1e-6)
    line = diagnose(ok.categories, ok.inference, 16)
    assert line == ok.diagnosis and line.startswith("PASS") and "\n" not in line
    bad = check_parity(rms(1e-4), dim=16, eps=1e-6)
    line = diagnose(bad.categories, bad.inference, 16)
    assert line.startswith("FAIL") and "\n" not in line and "eps" in line
