"""rmsnorm_eps.compare.rounding: round_to equals numpy's own (correctly rounded) casts for
float16 and float32, and the bfloat16 rounding equals the float32 bit rule and ml_dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from rmsnorm_eps.compare.rounding import (
    bfloat16_from_float32_bits,
    get_format,
    round_to,
)
from rmsnorm_eps.errors import InvalidParameterError

RNG = np.random.default_rng(7)


def _values() -> np.ndarray:
    x = 10.0 ** RNG.uniform(-46, 39, 4000) * RNG.choice([-1.0, 1.0], 4000)
    specials = [0.0, -0.0, 65504.0, 65520.0, 6.1e-5, 5.96e-8, 2.98e-8, 3.4e38, np.inf, -np.inf]
    return np.concatenate([x, specials])


@pytest.mark.parametrize(("name", "np_dtype"), [("float16", np.float16), ("float32", np.float32)])
def test_round_to_equals_numpys_cast(name: str, np_dtype: type) -> None:
    x = _values()
    with np.errstate(over="ignore"):
        want = x.astype(np_dtype).astype(np.float64)
    got = round_to(x, name)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want)


def test_bfloat16_three_ways() -> None:
    with np.errstate(over="ignore"):
        x32 = _values().astype(np.float32).astype(np.float64)  # bfloat16 of a float32 value
    got = round_to(x32, "bfloat16")
    np.testing.assert_array_equal(got, bfloat16_from_float32_bits(x32))
    ml_dtypes = pytest.importorskip("ml_dtypes")
    np.testing.assert_array_equal(got, x32.astype(ml_dtypes.bfloat16).astype(np.float64))


def test_formats() -> None:
    f = get_format("bfloat16")
    assert (f.precision, f.emin, f.emax) == (8, -126, 127)
    assert get_format("float16").precision == 11 and get_format("float32").precision == 24
    with pytest.raises((InvalidParameterError, KeyError, ValueError)):
        get_format("float8")
