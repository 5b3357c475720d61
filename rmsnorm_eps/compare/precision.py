"""Epsilon in low precision: how it is stored, where ``q + eps`` absorbs it, range limits of q.

For a dtype ``T`` with ``p`` significand bits (float16 11, bfloat16 8, float32 24):

* **stored eps** ``e = R(eps)`` (round to nearest even): 1e-6 is 1.0132789611816406e-06 in
  float16, 9.98377799987793e-07 in bfloat16, 9.999999974752427e-07 in float32. An eps below half
  the smallest subnormal rounds to **zero** (1e-8 in float16); one below the smallest normal is
  **subnormal** (fewer significant bits).
* **absorption**: for ``q`` in T with exponent ``E`` (ulp ``2**(E-p+1)``), ``fl(q + e) == q``
  exactly when ``e < ulp/2``, or ``e == ulp/2`` and q's last significand bit is 0 (ties to
  even). With ``e = m * 2**F`` (``1 <= m < 2``): every ``q >= 2**(F+p+1)`` absorbs eps
  (``always_absorbed_from``), and the first q that absorbs it is ``2**(F+p)`` when ``m == 1``
  (a tie), else the same ``2**(F+p+1)`` (``absorbed_from``). Below ``absorbed_from`` eps acts
  on ``q + eps``; above ``always_absorbed_from`` it has no effect at all in T. Both thresholds
  are verified by adding in T (numpy float16/float32; ml_dtypes bfloat16 when installed,
  otherwise :func:`~rmsnorm_eps.dtypes.round_to` of the float64 sum) on the 2048
  consecutive T values either side of each threshold.
* **range of q**: q rounds to inf from ``max + ulp(max)/2`` on; ``x*x`` is finite up to
  ``square_finite_max`` (float16: 255.875; from 256 on it overflows); q at or below half the
  smallest subnormal flushes to zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from rmsnorm_eps.dtypes import FORMATS, FloatFormat, get_format, round_to
from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.numerics import attenuation_loss, validate_eps

__all__ = ["PrecisionReport", "PrecisionRow", "absorption_thresholds", "precision_report"]

_WINDOW = 2048


@dataclass(frozen=True)
class PrecisionRow:
    """eps in one dtype. Thresholds are None when they exceed the dtype's range."""

    dtype: str
    precision_bits: int
    stored: float
    relative_error: float  # stored / eps - 1
    rounds_to_zero: bool
    subnormal: bool
    overflows: bool
    absorbed_from: float | None  # smallest q in T with fl(q + e) == q (0.0 when e == 0)
    always_absorbed_from: float | None  # fl(q + e) == q for every q >= this
    loss_at_absorption: float | None  # 1 - A at q = absorbed_from, in exact arithmetic
    verified: bool  # thresholds confirmed by adding in T
    max: float
    smallest_normal: float
    smallest_subnormal: float
    q_flush_to_zero_at_or_below: float  # half the smallest subnormal
    square_finite_max: float  # largest x in T with fl(x*x) finite
    square_overflow_from: float  # next T value: its square overflows

    @property
    def vanishes(self) -> bool:
        """eps is unusable in this dtype: it rounds to 0 or to inf."""
        return self.rounds_to_zero or self.overflows


@dataclass(frozen=True)
class PrecisionReport:
    """The result of :func:`precision_report`."""

    command: ClassVar[str] = "precision"  # names its reporter (rmsnorm_eps.reports)

    eps: float
    rows: tuple[PrecisionRow, ...]
    # What every "q" of the rows is: q = mean(x^2) (RMSNorm) or v = mean((x - mean x)^2)
    # (LayerNorm, norm "layer"): a LayerNorm stores eps and absorbs it in v + eps the same way.
    quantity: str = "q"

    @property
    def vanishing(self) -> tuple[str, ...]:
        return tuple(r.dtype for r in self.rows if r.vanishes)


def _next_up(x: float, f: FloatFormat) -> float:
    """The next larger value of T after a positive T value ``x``."""
    _, e = math.frexp(x)
    return x + 2.0 ** (max(e - 1, f.emin) - f.precision + 1)


def _next_down(x: float, f: FloatFormat) -> float:
    """The next smaller value of T before a positive T value ``x`` (x > smallest subnormal)."""
    _, e = math.frexp(x)
    ex = e - 1
    if x == 2.0**ex and ex > f.emin:
        ex -= 1  # at a power of two the spacing below is half
    return x - 2.0 ** (max(ex, f.emin) - f.precision + 1)


def absorption_thresholds(stored: float, f: FloatFormat) -> tuple[float | None, float | None]:
    """``(absorbed_from, always_absorbed_from)`` for a stored eps ``e`` (see module docstring)."""
    if stored == 0.0:
        return 0.0, 0.0
    m, e = math.frexp(stored)  # stored = m 2**e, 0.5 <= m < 1 -> F = e - 1
    big = e - 1 + f.precision
    always = math.ldexp(1.0, big + 1)
    first = math.ldexp(1.0, big) if m == 0.5 else always
    top = f.max

    def cap(v: float) -> float | None:
        return v if v <= top else None

    return cap(first), cap(always)


def _add_in(dtype: str, a: np.ndarray, b: float) -> np.ndarray:
    """``fl(a + b)`` computed by the dtype's own arithmetic (a, b are values of the dtype)."""
    native = {"float16": np.float16, "float32": np.float32}.get(dtype)
    if native is not None:
        with np.errstate(over="ignore"):
            total = a.astype(native) + native(b)
        return total.astype(np.float64)
    try:
        import ml_dtypes
    except ImportError:
        return round_to(a + b, "bfloat16")
    bf = ml_dtypes.bfloat16
    with np.errstate(over="ignore"):
        sbf = a.astype(bf) + np.asarray(b).astype(bf)
    return np.asarray(sbf).astype(np.float64)


def _window(center: float, f: FloatFormat) -> np.ndarray:
    """Up to ``_WINDOW`` consecutive T values below ``center`` and ``_WINDOW`` from it up."""
    below: list[float] = []
    x = center
    while len(below) < _WINDOW and x > f.smallest_subnormal:
        x = _next_down(x, f)
        below.append(x)
    above: list[float] = []
    x = center
    while len(above) < _WINDOW and x <= f.max:
        above.append(x)
        x = _next_up(x, f)
    return np.array(below[::-1] + above, np.float64)


def _verify(dtype: str, stored: float, first: float | None, always: float | None) -> bool:
    f = FORMATS[dtype]
    if stored == 0.0:
        vals = _window(1.0, f)
        return bool(np.all(_add_in(dtype, vals, 0.0) == vals))
    ok = True
    if first is not None:
        vals = _window(first, f)
        absorbed = _add_in(dtype, vals, stored) == vals
        ok &= not bool(np.any(absorbed[vals < first])) and bool(absorbed[vals == first].all())
    if always is not None:
        vals = _window(always, f)
        absorbed = _add_in(dtype, vals, stored) == vals
        ok &= bool(np.all(absorbed[vals >= always]))
        below = vals[vals < always]
        ok &= below.size == 0 or not bool(absorbed[vals < always][-1])
    return ok


def _square_finite_max(f: FloatFormat) -> float:
    x = float(round_to(math.sqrt(f.max), f))
    while not math.isfinite(float(round_to(x * x, f))):
        x = _next_down(x, f)
    while math.isfinite(float(round_to(_next_up(x, f) ** 2, f))):
        x = _next_up(x, f)
    return x


def precision_row(eps: float, dtype: str) -> PrecisionRow:
    """eps as stored in ``dtype`` (float16, bfloat16 or float32) and what follows from it."""
    e = validate_eps(eps)
    f = get_format(dtype)
    stored = float(round_to(e, f))
    first, always = absorption_thresholds(stored, f) if math.isfinite(stored) else (None, None)
    loss = (
        float(attenuation_loss(first / stored))
        if first is not None and stored > 0 and math.isfinite(stored)
        else None
    )
    sq = _square_finite_max(f)
    return PrecisionRow(
        dtype=dtype,
        precision_bits=f.precision,
        stored=stored,
        relative_error=stored / e - 1.0,
        rounds_to_zero=stored == 0.0,
        subnormal=0.0 < stored < f.smallest_normal,
        overflows=math.isinf(stored),
        absorbed_from=first,
        always_absorbed_from=always,
        loss_at_absorption=loss,
        verified=_verify(dtype, stored, first, always) if math.isfinite(stored) else True,
        max=f.max,
        smallest_normal=f.smallest_normal,
        smallest_subnormal=f.smallest_subnormal,
        q_flush_to_zero_at_or_below=f.smallest_subnormal / 2.0,
        square_finite_max=sq,
        square_overflow_from=_next_up(sq, f),
    )


def precision_report(
    eps: float, dtypes: tuple[str, ...] | None = None, norm: str = "rms"
) -> PrecisionReport:
    """:func:`precision_row` for each dtype (default: float16, bfloat16, float32).

    ``norm="layer"`` (LayerNorm) changes no figure, only what they refer to: the variance
    ``v = mean((x - mean x)**2)`` in ``v + eps`` instead of q (``quantity`` "v")."""
    e = validate_eps(eps)
    if norm not in ("rms", "layer"):
        raise InvalidParameterError(f"norm must be 'rms' or 'layer', got {str(norm)[:40]!r}")
    names = dtypes or ("float16", "bfloat16", "float32")
    quantity = "v" if norm == "layer" else "q"
    return PrecisionReport(e, tuple(precision_row(e, d) for d in names), quantity)
