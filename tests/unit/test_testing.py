"""testing.py: ``assert_eps_safe`` passes silently on safe inputs and otherwise fails with a
message naming each violating layer, its counts, min q/eps, min A and the worst input's index
(values computed here by hand from q and eps)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rmsnorm_eps.testing import assert_eps_safe


def test_safe_inputs_pass() -> None:
    assert_eps_safe(np.full(10, 1e-3), eps=1e-5)  # q/eps = 100 >= 49.25
    assert_eps_safe({"a": np.full(4, 1.0), "b": np.full(4, 1e-3)}, eps={"a": 1e-6, "b": 1e-5})


def test_message_names_layers_counts_and_worst() -> None:
    q = np.array([[1e-3, 2e-4], [1e-3, 1e-3]])  # q/eps: 100, 20 (below 49.25), 100, 100
    bad = np.array([1e-3, np.nan, 1e-3])
    with pytest.raises(AssertionError) as info:
        assert_eps_safe({"ok": np.full(3, 1.0), "layers.0": q, "layers.1": bad}, eps=1e-5)
    lines = str(info.value).splitlines()
    assert lines[0] == (
        "eps attenuates 2 input(s) beyond the bound (A >= 0.99, q/eps >= 49.25125628): "
        "2 violation(s), none allowed"
    )
    assert len(lines) == 3 and not any("ok" in line.split(":")[0] for line in lines[1:])
    ratio = 2e-4 / 1e-5
    a_min = math.sqrt(ratio / (ratio + 1.0))
    assert lines[1] == (
        f"  layers.0: 1 of 4 (below bound 1, nonfinite 0); min q/eps {ratio:.6g}, "
        f"min A {a_min:.6g}, worst at [0, 1]"
    )
    assert lines[2].startswith("  layers.1: 1 of 3 (below bound 0, nonfinite 1); min q/eps 100,")


def test_keywords_reach_the_check() -> None:
    q = np.array([1e-3, 2e-4])
    assert_eps_safe(q, eps=1e-5, max_violations=1)  # one allowed
    assert_eps_safe(q, eps=1e-5, min_ratio=10.0)  # a looser bound
    # delta 0.1: A >= 0.9, q/eps >= 0.81 / 0.19 (A**2 / (1 - A**2))
    with pytest.raises(AssertionError) as info:
        assert_eps_safe(np.array([1e-7]), eps=1e-5, delta=0.1)
    bound = 0.81 / 0.19
    assert (
        str(info.value)
        .splitlines()[0]
        .startswith(
            f"eps attenuates 1 input(s) beyond the bound (A >= 0.9, q/eps >= {bound:.10g}): "
        )
    )
    x = np.full((2, 8), 1e-2)  # raw activations: q = 1e-4, q/eps = 10
    with pytest.raises(AssertionError, match="min q/eps 10,"):
        assert_eps_safe({"l": x}, eps=1e-5, raw=True)
