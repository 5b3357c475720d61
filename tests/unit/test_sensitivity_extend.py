"""sensitivity/extend.py: the exact rows extend past K until every estimated row is clearly
below the K-th exact KL (estimate + 3 standard errors, times the largest exact / estimate
ratio seen near the boundary), or are marked uncertain at the limit; hand-made numbers."""

from __future__ import annotations

import math

import pytest

from rmsnorm_eps.sensitivity.extend import extension
from rmsnorm_eps.sensitivity.result import SCREEN_Z


def test_a_row_clearly_below_needs_no_extension() -> None:
    est = {"a": 1.0, "b": 0.5, "c": 0.1}
    err = {"a": 0.01, "b": 0.01, "c": 0.01}
    take, check, left = extension(2, {"a": 1.0, "b": 0.5}, est, err, 4)
    # c: (0.1 + 3 * 0.01) * 1 = 0.13 < 0.5
    assert take == [] and check.sure and left == set() and check.kth_kl == 0.5
    assert check.ratio == 1.0 and (check.asked, check.exact, check.limit) == (2, 2, 4)


def test_the_missed_row_of_issue_35_is_measured() -> None:
    """The screen ranked layer 5 (true 2.18e-4) over layer 11 (estimated 1.99e-4, true
    3.19e-4): measuring the asked rows shows their estimates low by 1.25x, and 11's bound
    (1.99e-4 + 3 * 1e-5) * 1.25 = 2.86e-4 is above the K-th exact KL 2.18e-4: measure it."""
    est = {"l3": 8e-4, "l5": 2.1e-4, "l11": 1.99e-4, "l20": 1e-6}
    err = dict.fromkeys(est, 1e-5)
    exact = {"l3": 1e-3, "l5": 2.18e-4}
    take, check, left = extension(2, exact, est, err, 4)
    assert take == ["l11"] and not check.sure and left == set()
    assert check.ratio == pytest.approx(1e-3 / 8e-4)
    exact["l11"] = 3.19e-4
    take, check, left = extension(2, exact, est, err, 4)
    # now the 2nd exact KL is 3.19e-4; l20: (1e-6 + 3e-5) * 1.6 < 3.19e-4
    assert take == [] and check.sure and check.kth_kl == 3.19e-4 and check.exact == 3
    assert check.ratio == pytest.approx(3.19e-4 / 1.99e-4)


def test_at_the_limit_the_rest_is_marked_uncertain() -> None:
    est = {f"n{i}": 1.0 - i / 100 for i in range(6)}  # all alike: none is clearly below
    err = dict.fromkeys(est, 0.05)
    exact = {"n0": 1.0, "n1": 0.99}
    take, check, left = extension(2, exact, est, err, 4)
    assert take == ["n2", "n3"] and not check.sure
    assert left == {"n4", "n5"}
    exact.update(n2=0.98, n3=0.97)
    take, check, left = extension(2, exact, est, err, 4)
    assert take == [] and left == {"n4", "n5"} and not check.sure


def test_the_margin_uses_the_stated_z_and_a_nan_is_never_cleared() -> None:
    assert SCREEN_Z == 3.0
    kth = 0.5
    se = 0.1
    just_below = kth - SCREEN_Z * se - 1e-9
    take, check, _ = extension(1, {"a": kth}, {"a": kth, "b": just_below}, {"b": se}, 3)
    assert take == [] and check.sure
    take, _, _ = extension(1, {"a": kth}, {"a": kth, "b": just_below + 2e-9}, {"b": se}, 3)
    assert take == ["b"]
    take, _, _ = extension(1, {"a": kth}, {"a": kth, "b": math.nan}, {"b": se}, 3)
    assert take == ["b"]
    # a row without a standard error (one draw) is never cleared either
    take, _, _ = extension(1, {"a": kth}, {"a": kth, "b": 0.0}, {}, 3)
    assert take == ["b"]
