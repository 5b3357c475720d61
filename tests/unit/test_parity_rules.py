"""rmsnorm_eps.parity.rules: the torch rule is |a - r| <= atol + rtol |r| (as
torch.testing.assert_close), judged per category."""

from __future__ import annotations

import numpy as np
import pytest

from rmsnorm_eps.parity.rules import compare, resolve_tolerance


def test_tolerances_default_and_given() -> None:
    t = resolve_tolerance("torch", "float32")
    assert (t.atol, t.rtol) == (1e-5, 1.3e-6)
    t = resolve_tolerance("torch", "float32", atol=0.5, rtol=0.25)
    assert (t.atol, t.rtol) == (0.5, 0.25)


def test_an_element_just_outside_the_tolerance_fails_only_its_category() -> None:
    tol = resolve_tolerance("torch", "float32")
    ref = np.ones((4, 3))
    act = ref.copy()
    limit = tol.atol + tol.rtol * 1.0
    act[0, 0] = 1.0 + limit * 0.999  # inside
    act[3, 2] = 1.0 + limit * 1.001  # outside
    category = np.array([0, 0, 1, 1])
    results = compare(ref, act, tol, category, ("a", "b"))
    by_name = {r.name: r for r in results}
    assert by_name["a"].passed and not by_name["b"].passed
    assert by_name["b"].max_abs_error == pytest.approx(limit * 1.001, rel=1e-9, abs=0)
