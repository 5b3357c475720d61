"""numerics.layernorm_reference: the float64 LayerNorm the parity and capture docs refer to."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.numerics import layernorm_reference


def _naive(x: np.ndarray, eps: float, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Textbook float64 LayerNorm (fine for moderate values)."""
    mu = x.mean(-1, keepdims=True)
    v = ((x - mu) ** 2).mean(-1, keepdims=True)
    return g * (x - mu) / np.sqrt(v + eps) + b


def test_matches_textbook_formula_on_ordinary_rows() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 16)) * 3 + 1.5
    g, b = rng.uniform(0.5, 1.5, 16), rng.uniform(-0.5, 0.5, 16)
    np.testing.assert_allclose(layernorm_reference(x, 1e-5, g, b), _naive(x, 1e-5, g, b), 1e-13)


def test_constant_and_zero_vectors_give_the_bias() -> None:
    b = np.linspace(-1, 1, 8)
    for c in (0.0, 1.0, -0.375, 7.5, 1e300):
        y = layernorm_reference(np.full(8, c), 1e-6, None, b)
        assert np.array_equal(y, b), c  # v = 0 exactly, whatever eps
    assert np.array_equal(layernorm_reference(np.full((2, 4), 3.0), 1e-6), np.zeros((2, 4)))


def test_v_near_eps_and_extreme_scales() -> None:
    # x = mu + a * [1, -1, 1, -1]: v = a**2 exactly; y = +-a / sqrt(a**2 + eps)
    eps = 1e-6
    for a, mu in ((1e-3, 5.0), (3e-4, -2.0), (1e-150, 3e-150), (1e150, 1e150)):
        x = mu + a * np.array([1.0, -1.0, 1.0, -1.0])
        d = x - np.mean(x)  # the rounded centred values the reference sees
        v = float(np.mean(d * d))
        want = d / math.sqrt(v + eps) if v + eps > 0 else d
        got = layernorm_reference(x, eps)
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)


def test_bad_input() -> None:
    with pytest.raises(InvalidParameterError, match="finite"):
        layernorm_reference([1.0, math.nan], 1e-5)
    with pytest.raises(InvalidParameterError, match="non-empty"):
        layernorm_reference(np.empty((2, 0)), 1e-5)
    with pytest.raises(InvalidParameterError):
        layernorm_reference([1.0, 2.0], -1.0)
