"""reports/commands/precision.py: eps as each dtype stores it (the values numpy gives), where
``q + eps == q`` starts (checked by adding in that dtype), one check per dtype failing exactly
when eps rounds to 0 or overflows, and the text table's rows."""

from __future__ import annotations

import numpy as np
import pytest

from rmsnorm_eps.compare.precision import precision_report
from rmsnorm_eps.reports.commands.precision import (
    PRECISION_RULES,
    PrecisionReporter,
)
from rmsnorm_eps.reports.options import RenderOptions


def _bfloat16(x: float) -> float:
    """Round to nearest even on the top 16 bits of the float32 (bfloat16's definition)."""
    bits = int(np.array([x], np.float32).view(np.uint32)[0])
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return float(np.array([bits], np.uint32).view(np.float32)[0])


def test_document_stored_eps_is_what_numpy_stores() -> None:
    eps = 1e-6
    doc = PrecisionReporter().document(precision_report(eps))
    assert doc["command"] == "precision" and doc["eps"] == eps and doc["vanishing"] == []
    rows = {r["dtype"]: r for r in doc["dtypes"]}
    assert list(rows) == ["float16", "bfloat16", "float32"]
    assert rows["float16"]["stored"] == float(np.float16(eps))
    assert rows["float32"]["stored"] == float(np.float32(eps))
    assert rows["bfloat16"]["stored"] == _bfloat16(eps)
    assert rows["float16"]["relative_error"] == pytest.approx(float(np.float16(eps)) / eps - 1)
    assert rows["float16"]["subnormal"] is True  # below float16's smallest normal 2**-14
    assert float(np.float16(eps)) < 2.0**-14
    assert rows["float32"]["subnormal"] is False
    assert rows["float16"]["max"] == float(np.finfo(np.float16).max)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_absorption_point_is_where_adding_stops_acting(dtype: type[np.floating]) -> None:
    eps = 1e-6
    row = next(
        r
        for r in PrecisionReporter().document(precision_report(eps))["dtypes"]
        if r["dtype"] == dtype.__name__
    )
    q = dtype(row["absorbed_from"])
    e = dtype(eps)
    assert q + e == q  # absorbed there ...
    before = np.nextafter(q, dtype(0))
    assert before + e != before  # ... and not one step below


def test_checks_fail_exactly_when_eps_vanishes() -> None:
    ok = PrecisionReporter().checks(precision_report(1e-5))
    assert ok.passed and [c.level for c in ok.checks] == ["note"] * 3
    assert ok.rules == PRECISION_RULES
    zero = precision_report(1e-8)
    assert np.float16(1e-8) == 0 and np.float32(1e-8) != 0
    report = PrecisionReporter().checks(zero)
    assert not report.passed
    assert [(c.name, c.passed, c.level) for c in report.checks] == [
        ("float16", False, "error"),
        ("bfloat16", True, "note"),
        ("float32", True, "note"),
    ]
    assert report.checks[0].numbers["stored"] == 0.0
    assert report.verdict == "eps 1e-08 vanishes in float16"
    assert PrecisionReporter().document(zero)["vanishing"] == ["float16"]
    big = PrecisionReporter().checks(precision_report(1e6, ("float16", "float32")))
    with np.errstate(over="ignore"):
        assert np.isinf(np.float16(1e6))
    assert [c.passed for c in big.checks] == [False, True]
    assert big.checks[0].message == "float16: eps 1000000 overflows (max 65504)"


def test_check_message_states_the_stored_value_unrounded() -> None:
    report = PrecisionReporter().checks(precision_report(1e-6, ("float32",)))
    (chk,) = report.checks
    assert f"is stored as {float(np.float32(1e-6))!r}" in chk.message
    assert dict(report.facts)["eps"] == "1e-06"


def test_text_rows_and_notes() -> None:
    out = PrecisionReporter(RenderOptions()).text(precision_report(1e-8))
    lines = out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("eps = 1e-08"))
    assert header.split()[3:] == ["float16", "(p=11)", "bfloat16", "(p=8)", "float32", "(p=24)"]
    stored = next(line for line in lines if line.lstrip().startswith("stored eps"))
    assert stored.split()[2:] == ["0", f"{_bfloat16(1e-8):.9g}", f"{float(np.float32(1e-8)):.9g}"]
    eps_is = next(line for line in lines if line.lstrip().startswith("eps is"))
    assert eps_is.split()[2:] == ["ROUNDS", "TO", "ZERO", "normal", "normal"]
    assert any(line.startswith("float16: eps rounds to 0") for line in lines)


def test_layer_norm_names_the_variance() -> None:
    out = PrecisionReporter(RenderOptions()).text(
        precision_report(1e-6, ("float32",), norm="layer")
    )
    assert "v + eps == v from v =" in out
    assert "LayerNorm: v = mean((x - mean x)^2)" in out
    assert PrecisionReporter().document(precision_report(1e-6, norm="layer"))["quantity"] == "v"
