"""How far ``--exact-top K`` must measure before the rows it leaves estimated are known to
rank below the K it shows.

The screening estimate of a norm's KL has two errors: the draws' (its standard error ``se``,
from their spread) and the second-order approximation's (a larger change is underestimated
or overestimated by a factor). The exact rows show the second: ``ratio`` = max(1, the
largest exact KL / estimate among those of KL >= a tenth of the K-th). An estimated row is
*clearly below* the K-th largest exact KL when ``(estimate + SCREEN_Z * se) * ratio`` is
below it; the exact rows extend, largest estimate first, until every other row is clearly
below, or until ``limit`` exact rows (then the rows not cleared are marked: their ranking
may be wrong).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from rmsnorm_eps.sensitivity.result import SCREEN_Z, ScreenCheck

__all__ = ["extension"]


def extension(
    asked: int,
    exact: Mapping[str, float | None],
    estimates: Mapping[str, float],
    errors: Mapping[str, float],
    limit: int,
) -> tuple[list[str], ScreenCheck, set[str]]:
    """The rows to measure next (largest estimate first, within ``limit`` exact rows in all),
    the check as it stands, and the estimated rows not cleared (see the module docstring).
    ``exact``: the KL of each row measured so far (None or NaN: not a number, left out)."""
    finite = {n: v for n, v in exact.items() if v is not None and math.isfinite(v)}
    kls = sorted(finite.values(), reverse=True)
    kth = kls[asked - 1] if len(kls) >= asked else (kls[-1] if kls else None)
    # the estimate's error near the boundary: rows far below it (their KL at rounding
    # level) say nothing about it
    near = {n: v for n, v in finite.items() if kth is not None and v >= kth / 10}
    ratios = [v / estimates[n] for n, v in near.items() if estimates.get(n, 0.0) > 0]
    ratio = max([1.0, *ratios])
    rest = sorted((n for n in estimates if n not in exact), key=lambda n: -estimates[n])

    def upper(name: str) -> float:
        se = errors.get(name, math.inf)
        return (estimates[name] + SCREEN_Z * se) * ratio

    # a row whose bound is not a number is never cleared
    open_rows = [n for n in rest if kth is None or not upper(n) < kth]
    take = open_rows[: max(0, limit - len(exact))]
    left = set(open_rows) - set(take)
    check = ScreenCheck(
        asked=asked,
        exact=len(exact),
        kth_kl=kth,
        ratio=ratio,
        sure=not open_rows,
        limit=limit,
    )
    return take, check, left
