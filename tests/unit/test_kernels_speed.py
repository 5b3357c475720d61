"""The faster kernels of issue 25: 16-bit rows widened in pairs (float16 and bfloat16, against
``math.fsum`` over the float64 values, subnormals and extremes included) and the refiner that
keeps its bounds across chunks (every decision and every reported q still exact)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rmsnorm_eps.engine import decisions_for
from rmsnorm_eps.kernels import (
    Refiner,
    mean_square_rows,
    mean_square_rows_bf16,
    mean_square_rows_fast,
)
from rmsnorm_eps.numerics import min_ratio


def fsum_q(values: np.ndarray) -> np.ndarray:
    """q of each row from the float64 values, summed exactly (``math.fsum``)."""
    wide = values.astype(np.float64)
    return np.array([math.fsum((r * r).tolist()) for r in wide]) / values.shape[1]


def _f16_rows(rng: np.random.Generator, d: int) -> np.ndarray:
    """float16 rows: ordinary, subnormal (down to 2**-24), the largest finite, zeros, mixed."""
    tiny = np.float16(2.0**-24)
    rows = [
        rng.standard_normal(d) * 10 ** rng.uniform(-3, 2),
        np.full(d, tiny),  # the smallest subnormal: squares 2**-48
        rng.integers(1, 1024, d) * 2.0**-24,  # every subnormal pattern range
        np.full(d, 65504.0) * rng.choice([-1, 1], d),  # the largest finite, both signs
        np.zeros(d),
        np.where(rng.random(d) < 0.5, 65504.0, 2.0**-24),  # extremes side by side
        rng.standard_normal(d) * 2.0**-14,  # around the smallest normal
    ]
    return np.array(rows).astype(np.float16)


def _bf16_bits(rng: np.random.Generator, d: int) -> np.ndarray:
    """bfloat16 bit patterns: ordinary, subnormal, near the float32 extremes, zeros, mixed."""
    f32 = [
        rng.standard_normal(d) * 10 ** rng.uniform(-3, 2),
        np.full(d, 2.0**-133),  # a bfloat16 subnormal (squares underflow in float32)
        np.full(d, 3.3e38),  # near the largest finite (squares overflow in float32)
        np.zeros(d),
        rng.standard_normal(d) * 1e-20,
        np.where(rng.random(d) < 0.5, 1e19, 1e-19),  # far apart in one row
    ]
    x = np.array(f32).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return np.left_shift(bits, 16, dtype=np.uint32).view(np.float32)


@pytest.mark.parametrize("d", [2, 64, 576, 4096])
def test_float16_pairs_within_the_bound_of_fsum_and_exact_path_exact(d: int) -> None:
    x = _f16_rows(np.random.default_rng(d), d)
    want = fsum_q(x)
    fast = mean_square_rows_fast(x)
    assert fast is not None
    q, rel = fast
    assert np.all(np.abs(q - want) <= rel * want)  # the proven bound (zeros: exactly 0)
    exact = mean_square_rows(x)  # the exact path: float64 sums of exact squares
    assert np.all(np.abs(exact - want) <= d * 2.0**-53 * want)


@pytest.mark.parametrize("d", [2, 64, 576, 4096])
def test_bfloat16_pairs_within_the_bound_of_fsum_and_exact_path_exact(d: int) -> None:
    bits = _bf16_bits(np.random.default_rng(d), d)
    want = fsum_q(_bf16_values(bits))
    fast = mean_square_rows_fast(bits, bf16=True)
    assert fast is not None
    q, rel = fast
    ok = np.isfinite(q) & (q >= 2.0**-100)  # the others are recomputed exactly (refine)
    assert not ok[1] and not ok[2]  # float32 underflow / overflow rows are flagged
    assert np.all(np.abs(q[ok] - want[ok]) <= rel * want[ok])
    exact = mean_square_rows_bf16(bits)
    assert np.all(np.abs(exact - want) <= d * 2.0**-53 * want)


def test_pairs_and_the_one_at_a_time_path_agree_on_odd_rows() -> None:
    rng = np.random.default_rng(7)
    even = _f16_rows(rng, 64)
    odd = even[:, :63].copy()  # odd d: the element-wise widening
    for x in (even, odd):
        fast = mean_square_rows_fast(x)
        assert fast is not None
        assert np.all(np.abs(fast[0] - fsum_q(x)) <= fast[1] * fsum_q(x))


def test_float16_inf_or_nan_anywhere_takes_the_exact_path() -> None:
    x = _f16_rows(np.random.default_rng(1), 64)
    for bad in (np.inf, -np.inf, np.nan):
        y = x.copy()
        y[0, 5] = bad
        assert mean_square_rows_fast(y) is None
    big = np.full((2, 64), 30000.0, np.float16)  # sums past 2**31, but finite: kept
    fast = mean_square_rows_fast(big)
    assert fast is not None and np.all(np.abs(fast[0] - fsum_q(big)) <= fast[1] * fsum_q(big))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("top", [0, 1, 5])
def test_refiner_over_chunks_is_exact_under_worst_case_errors(seed: int, top: int) -> None:
    """Fast values anywhere inside the error bound, fed in chunks (in order and reversed, so
    the smallest and largest come first or last): after refinement every count, the
    minimum, the maximum and the k smallest are exact, recomputing fewer rows than a new
    refiner per chunk (which must assume each chunk holds the extremes)."""
    rng = np.random.default_rng(seed)
    rel = 1e-4
    dec = decisions_for(1e-5, float(min_ratio(0.01)), top)
    t = dec.thresholds[(dec.thresholds > 1e-12) & (dec.thresholds < 1e2)]
    near = rng.choice(t, 100) * (1 + rng.uniform(-3, 3, 100) * rel)
    low = 1e-13 * (1 + rng.uniform(0, 3 * rel, 12))
    high = 1e3 * (1 + rng.uniform(0, 3 * rel, 12))
    exact = np.concatenate([10 ** rng.uniform(-12, 2, 3000), near, low, high, [0.0]])
    rng.shuffle(exact)
    fast = exact * (1 + rng.uniform(-1, 1, exact.size) * rel * 0.999)
    for order in (slice(None), slice(None, None, -1)):
        ex, fa = exact[order].copy(), fast[order].copy()
        refiner = Refiner(dec.thresholds, top)
        counts, alone = 0, 0
        for s in range(0, ex.size, 97):
            q = fa[s : s + 97]
            part = ex[s : s + 97]
            alone += Refiner(dec.thresholds, top).refine(q.copy(), rel, part.__getitem__)
            counts += refiner.refine(q, rel, part.__getitem__)
        for tt in dec.thresholds:
            assert np.count_nonzero(fa < tt) == np.count_nonzero(ex < tt)
        assert fa.min() == ex.min() and fa.max() == ex.max()
        k = max(1, top)
        assert np.array_equal(np.sort(fa)[:k], np.sort(ex)[:k])
        assert counts < alone  # what earlier chunks showed is used
