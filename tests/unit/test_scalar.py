"""rmsnorm_eps.scalar: the pure-Python formulas equal numpy's rmsnorm_eps.numerics and mpmath."""

from __future__ import annotations

import math

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmsnorm_eps import numerics, scalar
from rmsnorm_eps.errors import InvalidParameterError

mpmath.mp.dps = 40


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.0, max_value=1e300, allow_nan=False))
def test_attenuation_and_loss_match_numpy_and_mpmath(r: float) -> None:
    a, loss = scalar.attenuation(r), scalar.attenuation_loss(r)
    assert a == pytest.approx(float(numerics.attenuation(r)), rel=1e-15, abs=0)
    assert loss == pytest.approx(float(numerics.attenuation_loss(r)), rel=1e-14, abs=0)
    m = mpmath.mpf(r)
    assert a == pytest.approx(float(mpmath.sqrt(m / (m + 1))), rel=1e-15, abs=0)
    exact_loss = 1 / (mpmath.sqrt(m + 1) * (mpmath.sqrt(m + 1) + mpmath.sqrt(m)))
    assert loss == pytest.approx(float(exact_loss), rel=1e-14, abs=0)


def test_numpy_vector_path_is_bit_identical_to_the_scalar_one() -> None:
    # above numerics._SMALL values numpy computes A, 1 - A and min_ratio vectorized; element by
    # element the same IEEE operations as the scalar functions, so the values are identical
    r = [0.0, 5e-324, 1e-300, 0.5, 1.0, 1.0000001, 49.25, 1e10, 1e300, math.inf] * 3
    assert numerics.attenuation(r).tolist() == [scalar.attenuation(x) for x in r]  # type: ignore[union-attr]
    assert numerics.attenuation_loss(r).tolist() == [scalar.attenuation_loss(x) for x in r]  # type: ignore[union-attr]
    deltas = [1e-12, 1e-9, 0.01, 0.3, 0.5, 0.999, 1 - 2**-53] * 3
    assert numerics.min_ratio(deltas).tolist() == [scalar.min_ratio(d) for d in deltas]  # type: ignore[union-attr]


def test_end_points() -> None:
    assert scalar.attenuation(0.0) == 0.0 and scalar.attenuation(math.inf) == 1.0
    assert scalar.attenuation_loss(0.0) == 1.0 and scalar.attenuation_loss(math.inf) == 0.0


@pytest.mark.parametrize("delta", [1e-9, 0.01, 0.3, 0.999])
def test_min_ratio_matches_numpy(delta: float) -> None:
    assert scalar.min_ratio(delta) == pytest.approx(
        float(numerics.min_ratio(delta)), rel=1e-15, abs=0
    )


@pytest.mark.parametrize(
    ("fn", "good", "bad"),
    [
        (scalar.validate_eps, [1e-300, 1.0, "1e-6"], [0.0, -1.0, math.inf, math.nan, "x"]),
        (scalar.validate_delta, [1e-9, 0.5], [0.0, 1.0, math.nan, -0.5]),
        (scalar.validate_ratio, [0.0, 1.0, math.inf], [-1e-9, math.nan]),
    ],
)
def test_validators(fn, good: list[object], bad: list[object]) -> None:  # type: ignore[no-untyped-def]
    for value in good:
        assert fn(value) == float(value)  # type: ignore[arg-type]
    for value in bad:
        with pytest.raises(InvalidParameterError):
            fn(value)
