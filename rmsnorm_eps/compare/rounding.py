"""Correctly rounded conversion of float64 values to float16, bfloat16 and float32.

:func:`round_to` rounds every value of a float64 array to the nearest value of a binary
floating-point format (round to nearest, ties to even, gradual underflow, overflow to inf),
returning float64 arrays that hold the rounded values exactly. It is one algorithm for all three
formats, so arithmetic "in dtype T" is modelled as: compute the exact (or float64) result, round
it with ``round_to(., T)``. The bfloat16 path is cross-checked in the tests against
:func:`bfloat16_from_float32_bits` (round-to-nearest-even on the float32 bit pattern) and
against ``ml_dtypes.bfloat16`` (:func:`bfloat16_ml_dtypes`, optional extra ``[bf16]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmsnorm_eps.errors import InvalidParameterError, MissingExtraError

__all__ = [
    "FORMATS",
    "FloatFormat",
    "bfloat16_from_float32_bits",
    "bfloat16_ml_dtypes",
    "get_format",
    "round_to",
]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class FloatFormat:
    """A binary format: ``precision`` significand bits (implicit bit included), normal
    exponents ``emin..emax``: normal values are ``m * 2**e`` with ``1 <= m < 2``."""

    name: str
    precision: int
    emin: int
    emax: int

    @property
    def max(self) -> float:
        """Largest finite value ``(2 - 2**(1-p)) * 2**emax``."""
        return float((2.0 - 2.0 ** (1 - self.precision)) * 2.0**self.emax)

    @property
    def smallest_normal(self) -> float:
        return float(2.0**self.emin)

    @property
    def smallest_subnormal(self) -> float:
        return float(2.0 ** (self.emin - self.precision + 1))


FORMATS: dict[str, FloatFormat] = {
    "float16": FloatFormat("float16", 11, -14, 15),
    "bfloat16": FloatFormat("bfloat16", 8, -126, 127),
    "float32": FloatFormat("float32", 24, -126, 127),
}


def get_format(name: str) -> FloatFormat:
    """The :class:`FloatFormat` called ``name`` (float16, bfloat16 or float32)."""
    try:
        return FORMATS[name]
    except KeyError:
        raise InvalidParameterError(
            f"dtype must be one of {', '.join(FORMATS)}, got {name!r}"
        ) from None


def round_to(x: npt.ArrayLike, fmt: FloatFormat | str) -> FloatArray:
    """Round float64 values to the nearest value of ``fmt`` (ties to even), as float64.

    With ``|x| = m * 2**E`` (``1 <= m < 2``) the quantum is ``2**(max(E, emin) - p + 1)``;
    ``rint(x / quantum) * quantum`` is the correctly rounded value (both scalings are exact
    powers of two, ``rint`` rounds half to even). A result of ``2**(emax+1)`` or more is
    ``inf``. Zeros keep their sign, NaN and inf pass through.
    """
    f = get_format(fmt) if isinstance(fmt, str) else fmt
    arr = np.asarray(x, dtype=np.float64)
    out = np.array(arr, dtype=np.float64, copy=True)
    finite = np.isfinite(arr) & (arr != 0.0)
    if not np.any(finite):
        return out
    v = arr[finite]
    _, e = np.frexp(v)  # |v| = m * 2**e with 0.5 <= m < 1, so E = e - 1
    qexp = np.maximum(e - 1, f.emin) - (f.precision - 1)
    r = np.ldexp(np.rint(np.ldexp(v, -qexp)), qexp)
    r = np.where(np.abs(r) >= 2.0 ** (f.emax + 1), np.copysign(np.inf, v), r)
    out[finite] = r
    return out


def bfloat16_from_float32_bits(x: npt.ArrayLike) -> FloatArray:
    """bfloat16 rounding by bit manipulation: keep the top 16 bits of the float32 pattern after
    adding ``0x7FFF + lsb`` (lsb = bit 16), which is round to nearest, ties to even; a carry
    into the exponent gives the next binade or inf. NaN stays NaN (quiet). Input is rounded to
    float32 first (exact for float32 input)."""
    f32 = np.asarray(x, dtype=np.float32)
    bits = f32.view(np.uint32).astype(np.uint64)
    lsb = (bits >> np.uint64(16)) & np.uint64(1)
    rounded = ((bits + np.uint64(0x7FFF) + lsb) & np.uint64(0xFFFF0000)).astype(np.uint32)
    with np.errstate(invalid="ignore"):
        out = rounded.view(np.float32).astype(np.float64)
    return np.where(np.isnan(f32), np.nan, out)


def bfloat16_ml_dtypes(x: npt.ArrayLike) -> FloatArray:
    """bfloat16 rounding by ``ml_dtypes`` (optional extra ``[bf16]``), returned as float64.

    ml_dtypes before 0.7 converts float64 through float32, so for float64 input it can differ
    from the correctly rounded :func:`round_to` by double rounding (about 1 in 1e5 random
    values; 0.7 rounds once); for float32-representable input the two agree exactly.
    """
    try:
        import ml_dtypes
    except ImportError:
        raise MissingExtraError("ml_dtypes", "bf16", "bfloat16 via ml_dtypes") from None
    arr = np.asarray(x, dtype=np.float64)
    out: FloatArray = arr.astype(ml_dtypes.bfloat16).astype(np.float64)
    return out
