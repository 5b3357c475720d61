"""The ``bound`` figures: the q/eps needed for a tolerated attenuation loss, and A at a ratio."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rmsnorm_eps import scalar  # numpy-free: bound must start fast (see scalar.py)

__all__ = ["SEED_RATIOS", "BoundResult", "RatioFigures", "bound_for_delta", "figures_for_ratios"]

#: The five ratios of the reference document's table.
SEED_RATIOS = (0.01, 0.1, 1.0, 10.0, 100.0)


@dataclass(frozen=True)
class BoundResult:
    """``min_ratio = (1-delta)**2 / (delta (2-delta))``; with eps, ``min_q = eps * min_ratio``
    and ``min_rms = sqrt(min_q)`` (the smallest input RMS that keeps A >= 1 - delta)."""

    command: ClassVar[str] = "bound"  # names its reporter (rmsnorm_eps.reports)

    delta: float
    min_ratio: float
    eps: float | None
    min_q: float | None
    min_rms: float | None


@dataclass(frozen=True)
class RatioFigures:
    """``A = sqrt(r/(r+1))`` and ``loss = 1 - A`` at ``r = q/eps`` (with q when eps is known)."""

    command: ClassVar[str] = "bound"  # names its reporter (rmsnorm_eps.reports)

    ratio: float
    attenuation: float
    loss: float
    eps: float | None
    q: float | None


def bound_for_delta(delta: float, eps: float | None = None) -> BoundResult:
    """The bound for one delta, and the q / RMS it implies when eps is given."""
    d = scalar.validate_delta(delta)
    r = scalar.min_ratio(d)
    if eps is None:
        return BoundResult(d, r, None, None, None)
    e = scalar.validate_eps(eps)
    q = r * e
    return BoundResult(d, r, e, q, math.sqrt(q))


def figures_for_ratios(
    ratios: Sequence[float], eps: float | None = None
) -> tuple[RatioFigures, ...]:
    """A and 1 - A for each ratio (q = r * eps when eps is given)."""
    e = None if eps is None else scalar.validate_eps(eps)
    out = []
    for value in ratios:
        r = scalar.validate_ratio(value, "ratio")
        out.append(
            RatioFigures(
                ratio=r,
                attenuation=scalar.attenuation(r),
                loss=scalar.attenuation_loss(r),
                eps=e,
                q=None if e is None else r * e,
            )
        )
    return tuple(out)
