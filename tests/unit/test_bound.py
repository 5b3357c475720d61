"""rmsnorm_eps.bound: the q/eps bound for a delta and A at given ratios, against mpmath."""

from __future__ import annotations

import math

import mpmath
import pytest

from rmsnorm_eps.bound import bound_for_delta, figures_for_ratios
from rmsnorm_eps.errors import InvalidParameterError

mpmath.mp.dps = 50


@pytest.mark.parametrize("delta", [1e-6, 1e-3, 0.01, 0.1, 0.5, 0.9])
def test_min_ratio_is_where_a_reaches_one_minus_delta(delta: float) -> None:
    got = bound_for_delta(delta)
    d = mpmath.mpf(delta)
    want = (1 - d) ** 2 / (d * (2 - d))
    assert got.min_ratio == pytest.approx(float(want), rel=1e-14, abs=0)
    # A(min_ratio) = 1 - delta exactly in exact arithmetic
    r = mpmath.mpf(got.min_ratio)
    assert float(mpmath.sqrt(r / (r + 1))) == pytest.approx(1 - delta, rel=1e-14, abs=0)
    assert got.eps is None and got.min_q is None and got.min_rms is None


def test_with_eps_the_bound_is_a_q_and_an_rms() -> None:
    got = bound_for_delta(0.01, 1e-5)
    assert got.min_ratio == pytest.approx(49.2512562814, rel=1e-11, abs=0)
    assert got.min_q == pytest.approx(1e-5 * got.min_ratio, rel=1e-15, abs=0)
    assert got.min_rms == pytest.approx(math.sqrt(got.min_q), rel=1e-15, abs=0)


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.1, math.nan, math.inf])
def test_delta_outside_zero_one_is_refused(delta: float) -> None:
    with pytest.raises(InvalidParameterError):
        bound_for_delta(delta)


def test_figures_for_ratios_match_mpmath() -> None:
    ratios = [0.0, 1e-300, 0.5, 1.0, 49.25, 1e12, math.inf]
    figures = figures_for_ratios(ratios, 1e-5)
    assert [f.ratio for f in figures] == ratios
    for f in figures:
        r = mpmath.mpf(f.ratio)
        a = 1.0 if math.isinf(f.ratio) else float(mpmath.sqrt(r / (r + 1)))
        loss = 0.0 if math.isinf(f.ratio) else float(1 - mpmath.sqrt(r / (r + 1)))
        assert f.attenuation == pytest.approx(a, rel=1e-15, abs=0)
        assert f.loss == pytest.approx(loss, rel=1e-14, abs=0)
        assert f.q == f.ratio * 1e-5
    # 1 - A for a huge ratio is computed without cancellation: 1/(2r) - 3/(8r^2) + ...
    assert figures[5].loss == pytest.approx(1 / 2e12 - 3 / 8e24, rel=1e-12, abs=0)


def test_figures_without_eps_have_no_q_and_negative_ratios_fail() -> None:
    (f,) = figures_for_ratios([4.0])
    assert f.eps is None and f.q is None
    assert f.attenuation == pytest.approx(math.sqrt(0.8), rel=1e-15, abs=0)
    with pytest.raises(InvalidParameterError):
        figures_for_ratios([-1.0])
