"""rmsnorm_eps.compare.factor: each variant's denominator in float64 is its formula, and the
factor between two variants is their ratio (with a scale: ``c den_from(q) / den_to(c^2 q)``)."""

from __future__ import annotations

import numpy as np
import pytest

from rmsnorm_eps.compare.factor import change, denominator, factor
from rmsnorm_eps.compare.spec import EpsSpec

Q = np.array([0.0, 1e-12, 3e-7, 1e-5, 0.25, 1.0, 1e6])


def _spec(eps: float, placement: str = "inside", dim: int | None = None) -> EpsSpec:
    return EpsSpec(text="t", eps=eps, placement=placement, dim=dim)


@pytest.mark.parametrize(
    ("placement", "formula"),
    [
        ("inside", lambda q, e: np.sqrt(q + e)),
        ("outside", lambda q, e: np.sqrt(q) + e),
        ("clamp", lambda q, e: np.maximum(np.sqrt(q), e)),
        ("sum", lambda q, e: np.sqrt((8 * q + e) / 8)),
    ],
)
def test_float64_denominators(placement: str, formula) -> None:  # type: ignore[no-untyped-def]
    spec = _spec(1e-5, placement, 8 if placement == "sum" else None)
    got = denominator(Q, spec)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, formula(Q, 1e-5), rtol=1e-15, atol=0)


def test_factor_and_change_between_two_specs() -> None:
    a, b = _spec(1e-6), _spec(1e-5, "outside")
    q = Q[1:]
    want = np.sqrt(q + 1e-6) / (np.sqrt(q) + 1e-5)
    np.testing.assert_allclose(factor(q, a, b), want, rtol=1e-15, atol=0)
    np.testing.assert_allclose(change(q, a, b), want - 1, rtol=1e-12, atol=1e-16)
    np.testing.assert_array_equal(factor(q, a, a), np.ones_like(q))


def test_scale_c_is_eps_over_c_squared_inside() -> None:
    c, q = 4.0, Q[1:]
    scaled = factor(q, _spec(1e-6), _spec(1e-5), scale=c)
    want = c * np.sqrt(q + 1e-6) / np.sqrt(c * c * q + 1e-5)
    np.testing.assert_allclose(scaled, want, rtol=1e-15, atol=0)
    np.testing.assert_allclose(
        scaled, factor(q, _spec(1e-6), _spec(1e-5 / c**2)), rtol=1e-14, atol=0
    )
