"""Numerics against the reference document's figures and against mpmath (independent)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmsnorm_eps import numerics as nm
from rmsnorm_eps.errors import InvalidParameterError

ULP = 2.0**-52


# ----------------------------------------------------------------------------- seed figures


@pytest.mark.parametrize(
    ("ratio", "expected"),
    [(0.01, 0.099504), (0.1, 0.301511), (1.0, 0.707107), (10.0, 0.953463), (100.0, 0.995037)],
)
def test_seed_attenuation_table(ratio: float, expected: float) -> None:
    assert round(nm.attenuation(ratio), 6) == expected


def test_seed_bound_for_one_percent() -> None:
    r = nm.min_ratio(0.01)
    assert r == pytest.approx(49.2512562814, rel=1e-12)
    assert r == 49.25125628140703
    assert nm.attenuation(r) == pytest.approx(0.99, rel=1e-15)


def test_seed_two_element_vector_eps_change_and_placement() -> None:
    x = np.array([0.001, 0.001])
    assert round(float(nm.rmsnorm_reference(x, 1e-6)[0]), 6) == 0.707107
    assert round(float(nm.rmsnorm_reference(x, 1e-4)[0]), 6) == 0.099504
    assert float(nm.rmsnorm_reference(x, 1e-4)[0]) == pytest.approx(1 / math.sqrt(101), rel=1e-15)
    # Documented contrast: eps added outside the square root (x / (sqrt(q) + eps)).
    outside = 0.001 / (math.sqrt(0.001**2) + 1e-6)
    assert round(outside, 6) == 0.999001
    assert round(float(nm.rmsnorm_reference(x, 1e-6)[0]), 6) != round(outside, 6)


def test_reference_zero_and_huge_inputs() -> None:
    assert np.array_equal(nm.rmsnorm_reference([0.0, 0.0], 1e-6), [0.0, 0.0])
    y = nm.rmsnorm_reference([1e200, -1e200], 1e-6)
    assert y[0] == pytest.approx(1.0, rel=1e-15) and y[1] == pytest.approx(-1.0, rel=1e-15)
    y = nm.rmsnorm_reference([1e300, 1e300, -1e300], 1e-6)
    assert np.allclose(y, [1.0, 1.0, -1.0], rtol=1e-15)


def test_reference_tiny_inputs_no_zero_over_zero() -> None:
    x = np.array([1e-200, -2e-200])
    y = nm.rmsnorm_reference(x, 1e-6)
    # q is negligible against eps: y = x / sqrt(eps)
    assert np.allclose(y, x / math.sqrt(1e-6), rtol=1e-14)
    assert np.all(np.isfinite(y))


def test_reference_gain_and_batch_against_mpmath() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 7)) * np.array([[1e-4], [1.0], [1e3], [1e-6]])
    g = rng.uniform(0.5, 2.0, 7)
    y = nm.rmsnorm_reference(x, 1e-5, g)
    mpmath.mp.dps = 40
    for i in range(4):
        q = mpmath.fsum(mpmath.mpf(float(v)) ** 2 for v in x[i]) / 7
        den = mpmath.sqrt(q + mpmath.mpf(1e-5))
        for j in range(7):
            exact = mpmath.mpf(float(g[j])) * mpmath.mpf(float(x[i, j])) / den
            assert abs(float(exact) - y[i, j]) <= 4 * ULP * abs(float(exact))


def test_reference_rejects_bad_input() -> None:
    for bad, eps in [
        ([], 1e-6),
        ([float("nan")], 1e-6),
        ([1.0], 0.0),
        ([1.0], -1e-6),
        ([float("inf")], 1e-6),
        ([1.0], float("nan")),
    ]:
        with pytest.raises(InvalidParameterError):
            nm.rmsnorm_reference(bad, eps)


# ----------------------------------------------------------------------------- accuracy


def _loguniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    return 10.0 ** rng.uniform(math.log10(lo), math.log10(hi), n)


def test_attenuation_and_loss_within_ulps_of_mpmath() -> None:
    rng = np.random.default_rng(11)
    r = np.concatenate(
        [
            _loguniform(rng, 1e-300, 1e300, 1500),
            [1e-300, 1e300, 1.0, 0.5, 2.0, 49.25125628140703, 1e-16, 1e16],
        ]
    )
    a = nm.attenuation(r)
    loss = nm.attenuation_loss(r)
    worst_a = worst_l = 0.0
    with mpmath.workdps(700):
        for ri, ai, li in zip(r.tolist(), a.tolist(), loss.tolist()):
            R = mpmath.mpf(ri)
            exact_a = mpmath.sqrt(R / (R + 1))
            exact_l = 1 - exact_a
            worst_a = max(worst_a, float(abs(mpmath.mpf(ai) - exact_a) / exact_a) / ULP)
            worst_l = max(worst_l, float(abs(mpmath.mpf(li) - exact_l) / exact_l) / ULP)
    assert worst_a <= 2.0
    assert worst_l <= 4.0


def test_attenuation_limits() -> None:
    assert nm.attenuation(0.0) == 0.0
    assert nm.attenuation(math.inf) == 1.0
    assert nm.attenuation_loss(0.0) == 1.0
    assert nm.attenuation_loss(math.inf) == 0.0
    assert nm.attenuation_loss(1000.0) == pytest.approx(1 / (2 * 1000.0), rel=1e-3)  # ~1/(2r)
    with mpmath.workdps(50):
        exact = float(1 - mpmath.sqrt(mpmath.mpf(1000) / 1001))
    assert nm.attenuation_loss(1000.0) == pytest.approx(exact, rel=1e-15)
    assert round(nm.attenuation(1000.0), 4) == 0.9995


def test_min_ratio_within_two_ulps_of_mpmath() -> None:
    rng = np.random.default_rng(12)
    d = np.concatenate([_loguniform(rng, 1e-15, 0.999, 3000), [1e-15, 0.999, 0.5, 0.01, 0.1]])
    got = nm.min_ratio(d)
    worst = 0.0
    with mpmath.workdps(60):
        for di, gi in zip(d.tolist(), got.tolist()):
            D = mpmath.mpf(di)
            exact = (1 - D) ** 2 / (D * (2 - D))
            worst = max(worst, float(abs(mpmath.mpf(gi) - exact) / exact) / ULP)
    assert worst <= 2.0


def test_textbook_min_ratio_loses_digits_for_small_delta() -> None:
    delta = 1e-12
    with mpmath.workdps(60):
        D = mpmath.mpf(delta)
        exact = float((1 - D) ** 2 / (D * (2 - D)))
    good = nm.min_ratio(delta)
    bad = nm.min_ratio_textbook(delta)
    assert abs(good - exact) / exact < 1e-15
    assert abs(bad - exact) / exact > 1e-6  # ~1e-5: only about five digits survive


def test_inverses() -> None:
    r = nm.min_ratio(0.01)
    assert nm.attenuation_loss(r) == pytest.approx(0.01, rel=1e-14)
    assert nm.min_q(1e-6, 0.01) == pytest.approx(49.2512562814e-6, rel=1e-12)
    assert nm.min_rms(1e-6, 0.01) == pytest.approx(math.sqrt(49.2512562814e-6), rel=1e-12)
    assert nm.attenuation(nm.min_q(1e-5, 0.05) / 1e-5) == pytest.approx(0.95, rel=1e-15)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1e-12, max_value=0.999))
def test_min_ratio_roundtrip(delta: float) -> None:
    assert nm.attenuation_loss(nm.min_ratio(delta)) == pytest.approx(delta, rel=1e-9)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0.0, max_value=1e300), st.floats(min_value=0.0, max_value=1e300))
def test_attenuation_monotone(r1: float, r2: float) -> None:
    lo, hi = sorted([r1, r2])
    assert nm.attenuation(lo) <= nm.attenuation(hi)
    assert nm.attenuation_loss(lo) >= nm.attenuation_loss(hi)


def test_q_threshold_is_exact_boundary() -> None:
    rng = np.random.default_rng(5)
    for eps in [1e-5, 1e-6, 3.3e-7, 1.1920928955078125e-07, 7e-300]:
        for ratio in [nm.min_ratio(0.01), 1.0, 0.3, 1e10]:
            t = nm.q_threshold(eps, ratio)
            assert t / eps >= ratio
            assert math.nextafter(t, 0.0) / eps < ratio
    assert nm.q_threshold(1e-6, 0.0) == 0.0
    del rng


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, "abc", True])
def test_validate_eps(bad: object) -> None:
    with pytest.raises(InvalidParameterError):
        nm.validate_eps(bad)


@pytest.mark.parametrize("bad", [0.0, 1.0, 2.0, -0.1, math.nan])
def test_validate_delta(bad: float) -> None:
    with pytest.raises(InvalidParameterError):
        nm.validate_delta(bad)
    with pytest.raises(InvalidParameterError):
        nm.min_ratio(bad)


def test_negative_or_nan_ratio_refused() -> None:
    for bad in (-1.0, [1.0, -1e-30], [math.nan]):
        with pytest.raises(InvalidParameterError):
            nm.attenuation(bad)
