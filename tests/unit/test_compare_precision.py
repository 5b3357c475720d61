"""rmsnorm_eps.compare.precision: eps as stored in each dtype, and the absorption thresholds
checked by rounding ``q + eps`` in that dtype (numpy's own casts)."""

from __future__ import annotations

import numpy as np
import pytest

from rmsnorm_eps.compare.precision import precision_report, precision_row

DTYPES = {"float16": np.float16, "float32": np.float32}


@pytest.mark.parametrize("eps", [1e-6, 1e-5, 1e-8])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_stored_eps_and_absorption(eps: float, dtype: str) -> None:
    t = DTYPES[dtype]
    row = precision_row(eps, dtype)
    stored = float(t(eps))
    assert row.stored == stored
    # signed, stored / eps - 1 (its own rounding is about 1e-16, relative to 1)
    assert row.relative_error == pytest.approx((stored - eps) / eps, rel=1e-6, abs=1e-15)
    assert row.rounds_to_zero == (stored == 0.0)
    if row.absorbed_from is not None and stored > 0:
        q = t(row.absorbed_from)
        assert t(q + t(stored)) == q  # from here on q + eps rounds to q
        below = np.nextafter(q, t(0))
        assert t(below + t(stored)) != below or row.always_absorbed_from != row.absorbed_from
    assert row.max == float(np.finfo(t).max)
    assert row.smallest_normal == float(np.finfo(t).smallest_normal)


def test_report_has_a_row_per_dtype() -> None:
    report = precision_report(1e-6)
    assert [r.dtype for r in report.rows] == ["float16", "bfloat16", "float32"]
    assert precision_report(1e-6, ("float32",)).rows[0] == precision_row(1e-6, "float32")
