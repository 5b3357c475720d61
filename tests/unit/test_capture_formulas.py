"""capture/formulas.py: the least-squares eps solver and the formula matcher that classify a
norm from its probe output.

Probe outputs are made here from the formulas written out in numpy (float64), with a known eps;
``solve`` must recover that eps and ``match`` the norm, gain, bias, group and gate; outputs that
no formula makes must give None.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rmsnorm_eps.capture.formulas import GATES, Fit, match, solve

RNG = np.random.default_rng(11)
X = RNG.standard_normal((6, 8)) * np.array([[1e-3], [1e-2], [0.1], [1.0], [3.0], [10.0]])
W = RNG.uniform(0.5, 1.5, 8)
B = RNG.uniform(-0.2, 0.2, 8)


def _rms_out(x: np.ndarray, eps: float, g: np.ndarray) -> np.ndarray:
    return g * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def test_gates_match_math() -> None:
    for v in (-2.5, -0.3, 0.0, 0.7, 3.0):
        g = np.array([v])
        assert GATES["silu"](g)[0] == pytest.approx(v / (1 + math.exp(-v)), rel=1e-14)
        assert GATES["sigmoid"](g)[0] == pytest.approx(1 / (1 + math.exp(-v)), rel=1e-14)
        assert GATES["gelu"](g)[0] == pytest.approx(
            0.5 * v * (1 + math.erf(v / math.sqrt(2))), rel=1e-14, abs=1e-300
        )
        assert GATES["relu"](g)[0] == max(v, 0.0)
        assert GATES["tanh"](g)[0] == pytest.approx(math.tanh(v), rel=1e-14)
        # tanh-approximate gelu is within 1e-3 of the exact one
        assert abs(GATES["gelu_tanh"](g)[0] - GATES["gelu"](g)[0]) < 1e-3


def test_solve_recovers_eps_add_rule() -> None:
    eps = 1e-4
    q = np.mean(X * X, axis=-1)
    y = _rms_out(X, eps, W)
    got = solve(y, W * X, q, np.zeros(1))
    assert got is not None and got == pytest.approx(eps, rel=1e-6)


def test_solve_zero_eps_and_clamp_rule() -> None:
    q = np.mean(X * X, axis=-1)
    y0 = X / np.sqrt(q)[:, None]
    assert solve(y0, X, q, np.zeros(1)) == pytest.approx(0.0, abs=1e-12)
    eps = 1e-5  # above the smallest q (~1e-6): the clamp acts on that row
    assert q.min() < eps / 2
    yc = X / np.sqrt(np.maximum(q, eps))[:, None]
    got = solve(yc, X, q, np.zeros(1), rule="clamp")
    assert got is not None and got == pytest.approx(eps, rel=1e-6)
    # a clamp never seen acting (every q above eps) is not claimed
    ya = X[2:] / np.sqrt(np.maximum(q[2:], 1e-9))[:, None]
    assert solve(ya, X[2:], q[2:], np.zeros(1), rule="clamp") is None


def test_solve_refuses_outputs_no_formula_makes() -> None:
    q = np.mean(X * X, axis=-1)
    y = _rms_out(X, 1e-4, W)
    assert solve(y[:, ::-1].copy(), W * X, q, np.zeros(1)) is None  # not proportional
    assert solve(-y, W * X, q, np.zeros(1)) is None  # negative scale
    bad = y.copy()
    bad[0, 0] = np.nan
    assert solve(bad, W * X, q, np.zeros(1)) is None
    assert solve(y[:2], W * X[:2], q[:2], np.zeros(1)) is None  # fewer than three rows
    # a scale that no eps >= 0 gives (s larger than 1/sqrt(q)) is refused
    assert solve(2.0 * y, W * X, q, np.zeros(1)) is None


def test_match_rms_gain_conventions() -> None:
    eps = 1e-5
    fit = match(X, X, _rms_out(X, eps, W), W, None, False, [8])
    assert fit is not None and (fit.norm, fit.gain, fit.bias, fit.group) == (
        "rms",
        "w",
        False,
        None,
    )
    assert fit.eps == pytest.approx(eps, rel=1e-5) and fit.rule == "add"
    fit = match(X, X, _rms_out(X, eps, 1.0 + W), W, None, False, [8])
    assert fit is not None and fit.gain == "1+w"
    fit = match(X, X, _rms_out(X, eps, np.ones(8)), None, None, False, [8])
    assert fit is not None and fit.gain == "none"


def test_match_layer_with_bias_l2_groups_and_input_scale() -> None:
    eps = 1e-5
    xc = X - X.mean(axis=-1, keepdims=True)
    y = W * xc / np.sqrt(np.mean(xc * xc, axis=-1, keepdims=True) + eps) + B
    fit = match(X, X, y, W, B, False, [8])
    assert fit is not None and (fit.norm, fit.gain, fit.bias) == ("layer", "w", True)
    assert fit.eps == pytest.approx(eps, rel=1e-4)
    y2 = X / np.sqrt(np.sum(X * X, axis=-1, keepdims=True) + eps)
    fit = match(X, X, y2, None, None, False, [8])
    assert fit is not None and fit.norm == "l2" and fit.eps == pytest.approx(eps, rel=1e-5)
    xg = X.reshape(6, 2, 4)
    yg = (xg / np.sqrt(np.mean(xg * xg, axis=-1, keepdims=True) + eps)).reshape(6, 8)
    assert match(X, X, yg, None, None, False, [8]) is None  # not one q per row
    fit = match(X, X, yg, None, None, False, [8, 4])
    assert fit is not None and (fit.norm, fit.group) == ("rms", 4)
    a = W * X
    ys = a / np.sqrt(np.mean(a * a, axis=-1, keepdims=True) + eps)
    fit = match(X, X, ys, W, None, False, [8])
    assert fit is not None and (fit.norm, fit.gain, fit.input_scale) == ("rms", "none", "w")


@pytest.mark.parametrize("before", [True, False])
def test_match_gated(before: bool) -> None:
    eps = 1e-6
    g = RNG.standard_normal(X.shape)
    sg = GATES["sigmoid"](g)
    a = X * sg if before else X
    q = np.mean(a * a, axis=-1, keepdims=True)
    y = W * a / np.sqrt(q + eps) * (1.0 if before else sg)
    fit = match(X, g, y, W, None, True, [])
    assert fit is not None
    assert (fit.norm, fit.gain, fit.before, fit.gate_fn) == ("gated-rms", "w", before, "sigmoid")
    assert fit.eps == pytest.approx(eps, rel=1e-4)


def test_fit_same_rule() -> None:
    a = Fit("rms", "w", False, None, None, 1e-6)
    assert a.same_rule(Fit("rms", "1+w", False, None, None, 1e-6 * (1 + 1e-5)))
    assert not a.same_rule(Fit("rms", "w", False, None, None, 2e-6))
    assert not a.same_rule(Fit("rms", "w", False, None, None, 1e-6, rule="clamp"))
    assert not a.same_rule(Fit("layer", "w", False, None, None, 1e-6))
    assert not a.same_rule(Fit("rms", "w", False, 4, None, 1e-6))
