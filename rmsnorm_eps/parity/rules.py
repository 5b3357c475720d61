"""Elementwise error rules and per-category figures.

With ``a`` the actual output, ``r`` the float64 reference, ``abs = |a - r|`` and
``rel = abs / |r|`` (``rel = 0`` where ``a == r == 0``, ``inf`` where only ``r == 0``):

* ``torch`` (torch.testing.assert_close): an element passes when ``abs <= atol + rtol * |r|``.
  Defaults per dtype (rtol, atol): float16 (1e-3, 1e-5), bfloat16 (1.6e-2, 1e-5),
  float32 (1.3e-6, 1e-5), float64 (1e-7, 1e-7).
* ``polygraphy`` (NVIDIA Polygraphy): an element fails only when ``abs > atol`` AND
  ``rel > rtol``; defaults atol = rtol = 1e-5.

Nonfinite values are checked separately and never pass through either formula: NaN always
fails; an infinity passes only against the same infinity.

The smallest tolerance that would have passed is given for each one with the other unchanged:
torch: ``atol_min = max(abs - rtol |r|)``, ``rtol_min = max over abs > atol of (abs - atol)/|r|``;
polygraphy: ``atol_min = max abs over rel > rtol``, ``rtol_min = max rel over abs > atol``.
Both are ``inf`` when a nonfinite element fails (no tolerance would pass it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rmsnorm_eps.dtypes import get_format
from rmsnorm_eps.errors import InvalidParameterError

__all__ = ["RULES", "CategoryResult", "Tolerance", "compare", "resolve_tolerance"]

RULES = ("torch", "polygraphy")
POLYGRAPHY_DEFAULT = 1e-5


@dataclass(frozen=True)
class Tolerance:
    """The rule, its thresholds and where they came from."""

    rule: str
    atol: float
    rtol: float
    source: str

    def formula(self) -> str:
        if self.rule == "torch":
            return "pass if |a - r| <= atol + rtol * |r|"
        return "fail only if |a - r| > atol and |a - r| / |r| > rtol"


def _check_tol(value: float, name: str) -> float:
    v = float(value)
    if not (v >= 0.0 and v < float("inf")):
        raise InvalidParameterError(f"{name} must be finite and >= 0, got {value!r}")
    return v


def resolve_tolerance(
    rule: str, dtype: str, atol: float | None = None, rtol: float | None = None
) -> Tolerance:
    """Thresholds for ``rule``: the given ones, else the rule's defaults for ``dtype``."""
    if rule not in RULES:
        raise InvalidParameterError(f"rule must be 'torch' or 'polygraphy', got {rule!r}")
    info = get_format(dtype)
    if rule == "torch":
        d_atol, d_rtol = info.torch_atol, info.torch_rtol
        default_source = f"torch.testing defaults for {dtype}"
    else:
        d_atol = d_rtol = POLYGRAPHY_DEFAULT
        default_source = "polygraphy defaults"
    a = d_atol if atol is None else _check_tol(atol, "atol")
    r = d_rtol if rtol is None else _check_tol(rtol, "rtol")
    if atol is None and rtol is None:
        source = default_source
    elif atol is not None and rtol is not None:
        source = "given"
    else:
        source = f"given {'atol' if atol is not None else 'rtol'}; other from {default_source}"
    return Tolerance(rule, a, r, source)


@dataclass(frozen=True)
class CategoryResult:
    """Figures for one probe category. Errors are over finite elements only (None if none)."""

    name: str
    rows: int
    elements: int
    failing: int
    failing_rows: int
    nan: int
    inf: int
    max_abs_error: float | None
    max_rel_error: float | None
    min_atol: float
    min_rtol: float

    @property
    def fraction_failing(self) -> float:
        return self.failing / self.elements if self.elements else 0.0

    @property
    def passed(self) -> bool:
        return self.failing == 0


def _max(values: np.ndarray) -> float:
    return float(np.max(values)) if values.size else 0.0


def compare(
    reference: np.ndarray,
    actual: np.ndarray,
    tol: Tolerance,
    category: np.ndarray,
    names: tuple[str, ...],
) -> tuple[CategoryResult, ...]:
    """Per-category results for ``actual`` against ``reference`` (both (n, d) float64)."""
    ref = np.asarray(reference, dtype=np.float64)
    act = np.asarray(actual, dtype=np.float64)
    finite = np.isfinite(act)
    same_inf = np.isinf(act) & (act == ref)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        abs_err = np.where(finite, np.abs(act - ref), 0.0)
        mag = np.abs(ref)
        rel = np.where(abs_err == 0.0, 0.0, abs_err / mag)
        if tol.rule == "torch":
            ok = abs_err <= tol.atol + tol.rtol * mag
            need_atol = np.maximum(abs_err - tol.rtol * mag, 0.0)
            need_rtol = np.where(abs_err > tol.atol, (abs_err - tol.atol) / mag, 0.0)
        else:
            ok = ~((abs_err > tol.atol) & (rel > tol.rtol))
            need_atol = np.where(rel > tol.rtol, abs_err, 0.0)
            need_rtol = np.where(abs_err > tol.atol, rel, 0.0)
    passed = np.where(finite, ok, same_inf)
    results = []
    for index, name in enumerate(names):
        rows = np.flatnonzero(category == index)
        if rows.size == 0:
            continue
        fin = finite[rows]
        fails = ~passed[rows]
        bad_nonfinite = bool(np.any(~fin & ~same_inf[rows]))
        results.append(
            CategoryResult(
                name=name,
                rows=int(rows.size),
                elements=int(fin.size),
                failing=int(np.count_nonzero(fails)),
                failing_rows=int(np.count_nonzero(np.any(fails, axis=1))),
                nan=int(np.count_nonzero(np.isnan(act[rows]))),
                inf=int(np.count_nonzero(np.isinf(act[rows]))),
                max_abs_error=_max(abs_err[rows][fin]) if fin.any() else None,
                max_rel_error=_max(rel[rows][fin]) if fin.any() else None,
                min_atol=float("inf") if bad_nonfinite else _max(need_atol[rows][fin]),
                min_rtol=float("inf") if bad_nonfinite else _max(need_rtol[rows][fin]),
            )
        )
    return tuple(results)
