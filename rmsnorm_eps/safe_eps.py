"""The safe eps: the largest eps at which a layer's finite positive inputs all meet the bound.

A layer passes the bound ``q/eps >= min_ratio`` (computed in float64, ties pass) at eps exactly
when its smallest positive finite q, ``m``, does (the ratio falls as eps grows). So

    safe_eps = max{eps > 0 : fl(m / eps) >= min_ratio}  ~=  m / min_ratio

computed here exactly: ``m / min_ratio`` rounded, then stepped one float64 at a time (with
:func:`math.nextafter`) until the tool's own comparison (:func:`rmsnorm_eps.numerics.q_threshold`,
the test every accumulator runs) passes at ``safe_eps`` and fails at the next float64 above.

Zero vectors (q = 0: output 0 under any eps) and nonfinite q are excluded (a NaN/+inf q is a
violation at every eps: no eps fixes it, so it does not bound the safe eps). With
``--zero-is-violation`` a zero vector is a violation at every eps, so a layer that has one has
no safe eps (:func:`safe_eps_note` says why). The margin in decades is
``log10(safe_eps / eps)``: negative when the configured eps already fails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

from rmsnorm_eps.numerics import q_threshold

__all__ = [
    "apply_zero_rule",
    "margin_decades",
    "model_safe_eps",
    "passes_at",
    "safe_eps",
    "safe_eps_note",
]

#: A frozen per-layer result with ``zero_count``, ``safe_eps``, ``zeros_violate`` and its
#: position split (``LayerResult`` of ratio/merge, ``CompareLayer`` of compare).
L = TypeVar("L")

#: More steps than rounding can ever need (``m / min_ratio`` is within a few ulps).
_MAX_STEPS = 64


def passes_at(min_pos_q: float, eps: float, min_ratio: float) -> bool:
    """The tool's own test: ``min_pos_q >= q_threshold(eps, min_ratio)`` (``fl(q/eps) >= R``)."""
    return min_pos_q >= q_threshold(eps, min_ratio)


def safe_eps(min_pos_q: float | None, min_ratio: float) -> float | None:
    """The largest float64 eps > 0 with ``passes_at(min_pos_q, eps, min_ratio)``.

    None when there is no positive finite q (``min_pos_q`` None: any eps passes) or when even
    the smallest positive eps fails (``min_pos_q / min_ratio`` below the subnormal range).
    """
    if min_pos_q is None or not (min_pos_q > 0.0 and math.isfinite(min_pos_q)):
        return None
    if not (min_ratio > 0.0 and math.isfinite(min_ratio)):
        return None
    e = min_pos_q / min_ratio
    if math.isinf(e):
        e = math.nextafter(math.inf, 0.0)
    if e == 0.0:
        e = math.nextafter(0.0, 1.0)
    for _ in range(_MAX_STEPS):  # down until it passes
        if passes_at(min_pos_q, e, min_ratio):
            break
        e = math.nextafter(e, 0.0)
        if e == 0.0:
            return None
    else:  # pragma: no cover - rounding is within a few ulps
        return None
    for _ in range(_MAX_STEPS):  # up while the next float64 still passes
        up = math.nextafter(e, math.inf)
        if math.isinf(up) or not passes_at(min_pos_q, up, min_ratio):
            break
        e = up
    return e


def margin_decades(safe: float | None, eps: float) -> float | None:
    """``log10(safe / eps)``: decades between the configured eps and the safe eps (negative:
    the configured eps already fails); None without a safe eps."""
    if safe is None:
        return None
    return math.log10(safe) - math.log10(eps)


def safe_eps_note(*, zeros_violate: bool, zero_count: int, has_pos: bool) -> str:
    """Why a layer has no safe eps ("" when it has one)."""
    if zeros_violate and zero_count:
        return "none: zero vectors are violations at any eps (--zero-is-violation)"
    if not has_pos:
        return "any: no positive finite q"
    return ""


def model_safe_eps(layers: Sequence[Any]) -> tuple[float | None, float | None, str]:
    """``(safe eps, margin, note)`` of a model: the minimum over layers of the safe eps and of
    the margin; a layer with no safe eps because of its zero vectors (``--zero-is-violation``)
    leaves the model none; layers without a positive finite q do not bound it."""
    blocked = [ly for ly in layers if ly.safe_eps is None and ly.safe_eps_note.startswith("none")]
    if blocked:
        return None, None, blocked[0].safe_eps_note
    bounded = [ly for ly in layers if ly.safe_eps is not None]
    if not bounded:
        return None, None, "any: no positive finite q"
    margins = [ly.safe_eps_margin for ly in bounded]
    margin = min((m for m in margins if m is not None), default=None)  # None: an eps stored as 0
    return min(ly.safe_eps for ly in bounded), margin, ""


def apply_zero_rule(layer: L, zero_is_violation: bool) -> L:
    """The layer (and its position split) under ``--zero-is-violation``: zero vectors become
    violations and a layer with one has no safe eps. Without the flag: the layer as it is."""
    if not zero_is_violation:
        return layer
    item: Any = layer
    first, other = item.first_token, item.other_tokens
    out: L = replace(
        item,
        zeros_violate=True,
        safe_eps=None if item.zero_count else item.safe_eps,
        first_token=None if first is None else apply_zero_rule(first, True),
        other_tokens=None if other is None else apply_zero_rule(other, True),
    )
    return out
