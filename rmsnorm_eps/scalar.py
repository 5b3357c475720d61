"""Scalar (pure-Python float) versions of the :mod:`rmsnorm_eps.numerics` formulas.

The small commands (``bound``) must start fast, and importing numpy alone costs about as much
as the whole rest of the start-up. These functions compute the same IEEE double operations in
the same order as their numpy counterparts, so the results are bit-for-bit identical (a test
checks this against :mod:`rmsnorm_eps.numerics` over many inputs). Notation as there:
``r = q/eps``, ``A(r) = sqrt(r/(r+1))``, ``delta = 1 - A``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeVar

from rmsnorm_eps.errors import InvalidParameterError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "attenuation",
    "attenuation_loss",
    "attenuation_of",
    "loss_of",
    "min_ratio",
    "min_ratio_dd",
    "validate_delta",
    "validate_eps",
    "validate_ratio",
]

# Error-free transformations (Dekker/Knuth), on floats or float64 arrays alike: they let
# min_ratio be correctly rounded to within a fraction of an ulp without extended precision.
_SPLITTER = 134217729.0  # 2**27 + 1
_N = TypeVar("_N", float, "npt.NDArray[np.float64]")


def _as_float(value: object, name: str) -> float:
    if isinstance(value, bool):
        raise InvalidParameterError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{name} must be a number, got {value!r}") from None


def validate_eps(eps: object, name: str = "eps") -> float:
    """``eps`` as a float after checking ``0 < eps < inf`` (NaN is rejected)."""
    value = _as_float(eps, name)
    if not math.isfinite(value) or value <= 0.0:
        raise InvalidParameterError(f"{name} must be finite and > 0, got {eps!r}")
    return value


def validate_delta(delta: object, name: str = "delta") -> float:
    """``delta`` as a float after checking ``0 < delta < 1``."""
    value = _as_float(delta, name)
    if not (0.0 < value < 1.0):
        raise InvalidParameterError(f"{name} must be in the open interval (0, 1), got {delta!r}")
    return value


def validate_ratio(ratio: object, name: str = "ratio") -> float:
    """A ratio ``q/eps`` as a float after checking ``ratio >= 0`` (inf allowed, NaN not)."""
    value = _as_float(ratio, name)
    if math.isnan(value) or value < 0.0:
        raise InvalidParameterError(f"{name} must be >= 0, got {ratio!r}")
    return value


def _two_prod(a: _N, b: _N) -> tuple[_N, _N]:
    """(p, e) with p = fl(a*b) and a*b = p + e exactly (Dekker's split; no overflow assumed)."""
    p = a * b
    ca = _SPLITTER * a
    ahi = ca - (ca - a)
    alo = a - ahi
    cb = _SPLITTER * b
    bhi = cb - (cb - b)
    blo = b - bhi
    e = ((ahi * bhi - p) + ahi * blo + alo * bhi) + alo * blo
    return p, e


def _fast_two_sum(a: float | _N, b: _N) -> tuple[_N, _N]:
    """(s, e) with s = fl(a+b) and a+b = s + e exactly, given |a| >= |b|."""
    s = a + b
    return s, b - (s - a)


def min_ratio_dd(d: _N) -> _N:
    """``(1 - d)**2 / (d (2 - d))`` for a validated ``d`` (a float, or a float64 array: the
    same IEEE operations element by element), the numerator and denominator formed as
    double-double values (error-free transformations), so the result is within about half an
    ulp of the exact value for every ``d`` in (0, 1)."""
    # a = 1 - d and b = 2 - d as unevaluated sums hi + lo (exact).
    a_hi, a_lo = _fast_two_sum(1.0, -d)
    b_hi, b_lo = _fast_two_sum(2.0, -d)
    # numerator a**2 = a_hi**2 + 2 a_hi a_lo (+ a_lo**2, below double-double precision)
    n_hi, n_lo = _two_prod(a_hi, a_hi)
    n_lo = n_lo + 2.0 * a_hi * a_lo
    n_hi, n_lo = _fast_two_sum(n_hi, n_lo)
    # denominator d * b
    d_hi, d_lo = _two_prod(d, b_hi)
    d_lo = d_lo + d * b_lo
    d_hi, d_lo = _fast_two_sum(d_hi, d_lo)
    # quotient: q0 = n_hi/d_hi, corrected by the exact residual n - q0*d.
    q0 = n_hi / d_hi
    p_hi, p_lo = _two_prod(q0, d_hi)
    resid = (((n_hi - p_hi) - p_lo) + n_lo) - q0 * d_lo
    return q0 + resid / d_hi


def min_ratio(delta: float) -> float:
    """Smallest ``r`` with ``A(r) >= 1 - delta``: ``(1 - delta)**2 / (delta (2 - delta))``
    (:func:`min_ratio_dd`)."""
    return min_ratio_dd(validate_delta(delta))


def attenuation_of(r: float) -> float:
    """``A(r)`` of a validated ``r``: ``sqrt(r/(r+1))`` for ``r <= 1`` (no overflow of ``1/r``
    for subnormal ``r``), else ``1/sqrt(1 + 1/r)``."""
    return math.sqrt(r / (r + 1.0)) if r <= 1.0 else 1.0 / math.sqrt(1.0 + 1.0 / r)


def loss_of(r: float) -> float:
    """``1 - A(r) = 1 / (sqrt(r+1) (sqrt(r+1) + sqrt(r)))`` of a validated ``r``, without
    cancellation (``r = inf`` gives 0)."""
    s1 = math.sqrt(r + 1.0)
    return 1.0 / (s1 * (s1 + math.sqrt(r)))


def attenuation(r: float) -> float:
    """``A(r) = sqrt(r/(r+1))`` (:func:`attenuation_of`); A(0) = 0, A(inf) = 1."""
    return attenuation_of(validate_ratio(r))


def attenuation_loss(r: float) -> float:
    """``1 - A(r)`` without cancellation (:func:`loss_of`); loss(0) = 1, loss(inf) = 0."""
    return loss_of(validate_ratio(r))
