"""The numerics of epsilon in RMSNorm: pure, vectorized float64 functions.

Notation (used in every docstring below):

* ``x``: one input vector of dimension ``d``; ``q = mean(x**2)`` over the normalized axis.
* ``eps``: the epsilon added to ``q`` inside the square root: ``y = g * x / sqrt(q + eps)``.
* ``r = q / eps``: the ratio that alone decides how much eps changes the output.
* ``A(r) = sqrt(q / (q + eps)) = sqrt(r / (r + 1)) = 1 / sqrt(1 + 1/r)``: the common factor by
  which eps attenuates every component (for every gain ``g``: the per-element relative change
  caused by eps is exactly ``A``).
* ``delta``: the tolerated attenuation loss; an input passes when ``A >= 1 - delta``, which is
  equivalent to ``r >= (1 - delta)**2 / (delta * (2 - delta))``.

Every function accepts scalars or arrays and returns float64 (a Python ``float`` for scalar
input). Domain errors raise :class:`~rmsnorm_eps.errors.InvalidParameterError`.
"""

from __future__ import annotations

import math
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.scalar import (  # one copy of the scalar math, no numpy there
    attenuation_of,
    loss_of,
    min_ratio_dd,
    validate_delta,
    validate_eps,
    validate_ratio,
)

ArrayLike = npt.ArrayLike
FloatArray = npt.NDArray[np.float64]

__all__ = [
    "attenuation",
    "attenuation_loss",
    "layernorm_reference",
    "min_q",
    "min_ratio",
    "min_ratio_textbook",
    "min_rms",
    "q_threshold",
    "rmsnorm_reference",
    "validate_delta",
    "validate_eps",
    "validate_ratio",
]


# --------------------------------------------------------------------------- helpers


@overload
def _out(a: np.floating[Any], scalar: bool) -> float: ...
@overload
def _out(a: FloatArray, scalar: bool) -> FloatArray | float: ...
def _out(a: Any, scalar: bool) -> Any:
    return float(a) if scalar else a


def _ratio_array(r: ArrayLike) -> tuple[FloatArray, bool]:
    arr = np.asarray(r, dtype=np.float64)
    if not (arr >= 0.0).all():  # NaN compares False: refused with the negative values
        raise InvalidParameterError("ratio q/eps must be >= 0 and not NaN")
    return arr, arr.ndim == 0


#: Up to this many ratios, :func:`attenuation` and :func:`attenuation_loss` compute element by
#: element with ``math`` (:mod:`rmsnorm_eps.scalar`: the same IEEE float64 operations,
#: correctly rounded ``sqrt`` in both: identical values), which saves numpy's per-call
#: overhead on the few values of a layer.
_SMALL = 16


def _small(arr: FloatArray, scalar: bool, fn: Any) -> Any:
    values = [fn(x) for x in arr.ravel().tolist()]
    return values[0] if scalar else np.array(values, np.float64).reshape(arr.shape)


# --------------------------------------------------------------------------- attenuation


def attenuation(r: ArrayLike) -> FloatArray | float:
    """Attenuation ``A(r) = sqrt(r / (r + 1)) = 1 / sqrt(1 + 1/r)`` for ``r = q/eps >= 0``.

    Exact limits: ``A(0) = 0`` and ``A(inf) = 1``. For ``r <= 1`` the first form is used (no
    overflow of ``1/r`` for subnormal ``r``), otherwise the second; both are accurate to ~1 ulp.
    """
    arr, scalar = _ratio_array(r)
    if arr.size <= _SMALL:
        return _small(arr, scalar, attenuation_of)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        small = arr <= 1.0
        a_small = np.sqrt(arr / (arr + 1.0))
        a_large = 1.0 / np.sqrt(1.0 + 1.0 / arr)
        out = np.where(small, a_small, a_large)
    return _out(out, scalar)


def attenuation_loss(r: ArrayLike) -> FloatArray | float:
    """Attenuation loss ``1 - A(r)`` (the inverse of :func:`min_ratio`), without cancellation.

    ``1 - sqrt(r/(r+1)) = (sqrt(r+1) - sqrt(r)) / sqrt(r+1)
    = 1 / (sqrt(r+1) * (sqrt(r+1) + sqrt(r)))``.
    The last form has no subtraction, so its relative error stays within a few ulp for every
    ``r``; for large ``r`` it tends to ``1/(2r)``. Limits: loss(0) = 1, loss(inf) = 0.
    """
    arr, scalar = _ratio_array(r)
    if arr.size <= _SMALL:
        return _small(arr, scalar, loss_of)
    with np.errstate(over="ignore"):
        s1 = np.sqrt(arr + 1.0)
        out = 1.0 / (s1 * (s1 + np.sqrt(arr)))
    return _out(out, scalar)


def min_ratio(delta: ArrayLike) -> FloatArray | float:
    """Smallest ``r = q/eps`` with ``A(r) >= 1 - delta``: ``(1-delta)**2 / (delta (2-delta))``.

    Derivation: ``1/sqrt(1 + 1/r) >= 1 - delta  <=>  1/r <= (1 - delta)**-2 - 1
    = delta (2 - delta) / (1 - delta)**2``, formed in double-double
    (:func:`rmsnorm_eps.scalar.min_ratio_dd`: within about half an ulp of the exact value for
    every ``delta`` in (0, 1)). ``min_ratio(0.01) = 49.2512562814...``.
    """
    arr = np.asarray(delta, dtype=np.float64)
    scalar = arr.ndim == 0
    if arr.size and not bool(np.all((arr > 0.0) & (arr < 1.0))):
        raise InvalidParameterError("delta must be in the open interval (0, 1)")
    return _out(min_ratio_dd(arr), scalar)


def min_ratio_textbook(delta: ArrayLike) -> FloatArray | float:
    """The textbook form ``1 / ((1 - delta)**-2 - 1)`` of :func:`min_ratio`.

    Mathematically identical, numerically poor: ``(1 - delta)**-2`` is close to 1 for small
    ``delta`` and the subtraction cancels (at ``delta = 1e-12`` only ~4 digits survive). Kept to
    document and test that contrast; never used for decisions.
    """
    arr = np.asarray(delta, dtype=np.float64)
    out = 1.0 / ((1.0 - arr) ** -2 - 1.0)
    return _out(out, arr.ndim == 0)


def min_q(eps: float, delta: ArrayLike) -> FloatArray | float:
    """Minimum mean square for ``A >= 1 - delta``: ``q_min = eps * min_ratio(delta)``."""
    e = validate_eps(eps)
    m = min_ratio(delta)
    return _out(np.asarray(m, dtype=np.float64) * e, np.ndim(m) == 0)


def min_rms(eps: float, delta: ArrayLike) -> FloatArray | float:
    """Minimum input RMS for ``A >= 1 - delta``: ``sqrt(q_min) = sqrt(eps * min_ratio(delta))``."""
    q = min_q(eps, delta)
    return _out(np.sqrt(np.asarray(q, dtype=np.float64)), np.ndim(q) == 0)


def q_threshold(eps: float, ratio: float) -> float:
    """Smallest float64 ``t`` such that ``fl(t / eps) >= ratio``, for any float64 ``q``.

    This turns the rule "``q/eps < ratio`` computed in float64" into the comparison ``q < t``
    with identical results for every float64 ``q`` (division by a positive constant is
    monotonic), so a chunk can be tested with one comparison instead of a division.
    Returns ``inf`` when no finite ``q`` reaches the ratio and ``0.0`` for ``ratio <= 0``.
    """
    eps = validate_eps(eps)
    if ratio <= 0.0:
        return 0.0
    if math.isinf(ratio):
        return math.inf
    t = ratio * eps
    if math.isinf(t):
        return math.inf
    # Walk to the exact boundary; at most a few steps since t is within 1 ulp of it.
    while t > 0.0 and (math.nextafter(t, 0.0) / eps) >= ratio:
        t = math.nextafter(t, 0.0)
    while (t / eps) < ratio:
        t = math.nextafter(t, math.inf)
        if math.isinf(t):
            return math.inf
    return t


# --------------------------------------------------------------------------- reference RMSNorm


def _scaled_rows(
    x: ArrayLike, eps: float, who: str
) -> tuple[float, FloatArray, FloatArray, FloatArray, FloatArray]:
    """``(eps, x, m, safe_m, x / safe_m)`` for a reference norm: eps and ``x`` checked (a
    non-empty last axis, finite values), ``m = max|x|`` per vector (``safe_m``: 1 where 0)."""
    e = validate_eps(eps)
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0:
        raise InvalidParameterError(f"{who} needs at least one axis")
    if arr.shape[-1] == 0:
        raise InvalidParameterError(f"{who} needs a non-empty last axis")
    if not bool(np.all(np.isfinite(arr))):
        raise InvalidParameterError(f"{who} needs finite input")
    m = np.max(np.abs(arr), axis=-1, keepdims=True)
    safe_m = np.where(m > 0.0, m, 1.0)
    return e, arr, m, safe_m, arr / safe_m


def rmsnorm_reference(
    x: ArrayLike,
    eps: float,
    gain: ArrayLike | None = None,
) -> FloatArray:
    """Reference RMSNorm over the last axis in float64: ``y = g * x / sqrt(q + eps)``.

    ``q = mean(x**2)`` is never formed directly. With ``m = max|x|`` per vector,
    ``rms = m * sqrt(mean((x/m)**2))`` cannot overflow (|x| up to 1e308) or underflow to 0/0
    (subnormal x), and the denominator ``sqrt(q + eps) = hypot(rms, sqrt(eps))`` puts the
    scale back inside the square root together with eps. A zero vector gives a zero output.
    ``gain`` (broadcast against the last axis) defaults to ones. Input must be finite.
    """
    e, arr, m, _, scaled = _scaled_rows(x, eps, "rmsnorm_reference")
    rms = m * np.sqrt(np.mean(scaled * scaled, axis=-1, keepdims=True))
    den = np.hypot(rms, math.sqrt(e))
    y = arr / den
    if gain is not None:
        g = np.asarray(gain, dtype=np.float64)
        y = y * g
    out: FloatArray = y
    return out


def layernorm_reference(
    x: ArrayLike,
    eps: float,
    gain: ArrayLike | None = None,
    bias: ArrayLike | None = None,
) -> FloatArray:
    """Reference LayerNorm over the last axis in float64: ``y = g * (x - mu) / sqrt(v + eps) + b``
    with ``mu = mean(x)`` and ``v = mean((x - mu)**2)`` (the biased variance).

    With ``m = max|x|`` per vector and ``s = x/m``: the mean is taken twice (``mu_s = mean(s)``,
    then corrected by the mean of ``s - mu_s``), so the centred values ``c = s - mu_s`` carry no
    cancellation error from the first pass; ``v = m**2 * mean(c**2)`` is never formed:
    ``sqrt(v + eps) = hypot(m * sqrt(mean(c**2)), sqrt(eps))`` and ``x - mu = m * c``. Nothing
    overflows (|x| up to 1e308) or underflows to 0/0. A constant vector has v = 0 exactly:
    its output is ``b`` (0 without bias), whatever eps. ``gain`` defaults to ones, ``bias`` to
    zeros (both broadcast against the last axis). Input must be finite.
    """
    e, _, _, safe_m, scaled = _scaled_rows(x, eps, "layernorm_reference")
    mu = np.mean(scaled, axis=-1, keepdims=True)
    mu = mu + np.mean(scaled - mu, axis=-1, keepdims=True)
    centred = scaled - mu
    std = safe_m * np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True))
    den = np.hypot(std, math.sqrt(e))
    num = safe_m * centred
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(num == 0.0, 0.0, num / np.where(den > 0.0, den, 1.0))
    if gain is not None:
        y = y * np.asarray(gain, dtype=np.float64)
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    out: FloatArray = y
    return out
