"""Denominators of the RMSNorm variants and the per-input factor between two of them.

For an input ``x`` with ``q = mean(x**2)`` (dimension ``d``) each variant computes
``y = g * x / den(q)``; the gain and ``x`` are common, so ``y_to / y_from = den_from(q) /
den_to(q)`` for every component: **factor** = ``den_from / den_to`` and **change** =
``factor - 1``. With ``scale = c`` the "to" side sees inputs ``c * x`` (q becomes ``c**2 q``),
and since ``y_to(c x) = c x / den_to(c**2 q)`` the factor is ``c * den_from(q) / den_to(c**2 q)``;
for eps inside the root this equals using ``eps / c**2``.

Denominators in exact (float64) arithmetic:

* inside: ``sqrt(q + eps)``; outside: ``sqrt(q) + eps``; clamp: ``max(sqrt(q), eps)``;
* sum: ``sqrt((d*q + eps) / d) = sqrt(q + eps/d)``.

Rounding model for ``dtype = T`` (float32, float16 or bfloat16); ``R`` = round to nearest T
(ties to even, overflow to inf, gradual underflow; :func:`~rmsnorm_eps.dtypes.round_to`):

* eps is stored as ``e = R(eps)``; q arrives as ``t = R(q)`` (``R(c**2 q)`` with a scale): the
  reduction that produced q is taken as exact and rounded once (its own rounding error, a few
  ulp of T, is not modelled);
* inside: ``R(sqrt(R(t + e)))``; outside: ``R(R(sqrt(t)) + e)``; clamp: ``max(R(sqrt(t)), e)``;
  sum: ``R(sqrt(R(R(R(d*q) + e) / d)))`` (``d`` exact);
* every operation is IEEE (correctly rounded) in T: the float64 result of an operation on T
  values rounded to T is exactly that (sums of two T values are exact or absorb in float64;
  sqrt and division are innocuous under double rounding since 53 >= 2p + 2);
* the final ``x / den`` (or ``x * rsqrt``) and the cast of ``y`` are not modelled: they add at
  most half an ulp of the output per element and do not depend on eps.

Overflow (``q`` beyond the dtype's range gives ``den = inf``, y = 0) and a vanished eps (q = 0 and
``e = 0`` gives ``den = 0``, y = 0/0) give a non-finite or zero factor, which the analysis counts.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rmsnorm_eps.compare.spec import EpsSpec
from rmsnorm_eps.dtypes import round_to
from rmsnorm_eps.numerics import validate_eps

__all__ = ["change", "denominator", "factor"]

FloatArray = npt.NDArray[np.float64]


def _exact(q: FloatArray, spec: EpsSpec) -> FloatArray:
    eps = spec.eps
    if spec.placement == "inside":
        return np.sqrt(q + eps)
    if spec.placement == "outside":
        return np.sqrt(q) + eps
    if spec.placement == "clamp":
        return np.maximum(np.sqrt(q), eps)
    assert spec.dim is not None
    return np.sqrt(q + eps / spec.dim)


def _rounded(q: FloatArray, spec: EpsSpec) -> FloatArray:
    t = spec.dtype
    e = spec.stored_eps
    if spec.placement == "sum":
        assert spec.dim is not None
        d = spec.dim
        s = round_to(d * q, t)
        return round_to(np.sqrt(round_to(round_to(s + e, t) / d, t)), t)
    qt = round_to(q, t)
    if spec.placement == "inside":
        return round_to(np.sqrt(round_to(qt + e, t)), t)
    root = round_to(np.sqrt(qt), t)
    if spec.placement == "outside":
        return round_to(root + e, t)
    return np.maximum(root, e)


def denominator(q: npt.ArrayLike, spec: EpsSpec) -> FloatArray:
    """``den(q)`` of ``spec`` (see the module docstring), float64, for ``q >= 0``."""
    arr = np.asarray(q, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if spec.dtype == "float64":
            return _exact(arr, spec)
        return _rounded(arr, spec)


def factor(
    q: npt.ArrayLike, spec_from: EpsSpec, spec_to: EpsSpec, scale: float = 1.0
) -> FloatArray:
    """``y_to / y_from = c * den_from(q) / den_to(c**2 q)`` per input (``c = scale``).

    ``q == 0`` means ``x == 0``: both outputs are 0, so the factor is 1 when both denominators
    are finite and > 0, and NaN (0/0 output) when one of them is 0.
    """
    c = validate_eps(scale, "scale")
    arr = np.asarray(q, dtype=np.float64)
    d_from = denominator(arr, spec_from)
    d_to = denominator(arr if c == 1.0 else arr * (c * c), spec_to)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        out = d_from / d_to if c == 1.0 else c * d_from / d_to
        zero = arr == 0.0
        if np.any(zero):
            ok = (d_from > 0) & (d_to > 0) & np.isfinite(d_from) & np.isfinite(d_to)
            out = np.where(zero, np.where(ok, 1.0, np.nan), out)
    result: FloatArray = out
    return result


def change(
    q: npt.ArrayLike, spec_from: EpsSpec, spec_to: EpsSpec, scale: float = 1.0
) -> FloatArray:
    """Relative change of every output component: ``factor - 1``."""
    return factor(q, spec_from, spec_to, scale) - 1.0
