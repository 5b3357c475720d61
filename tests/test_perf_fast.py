"""The float32 fast path for raw activations: accurate, and reports identical to exact float64."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.engine import decisions_for
from rmsnorm_eps.kernels import Refiner, fast_error_bound, mean_square_rows, mean_square_rows_fast
from rmsnorm_eps.numerics import min_ratio, q_threshold
from rmsnorm_eps.reports.document import document


def exact_q(x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.float64)
    return np.array([math.fsum((row * row).tolist()) for row in wide]) / x.shape[1]


@pytest.mark.parametrize("d", [1, 64, 576, 4096, 65536])
def test_fast_q_within_1e_6_and_its_bound(d: int) -> None:
    rng = np.random.default_rng(d)
    rows = max(4, (1 << 18) // d)
    x = (rng.standard_normal((rows, d)) * 10 ** rng.uniform(-10, 10, (rows, 1))).astype(np.float32)
    fast = mean_square_rows_fast(x)
    assert fast is not None
    q, rel = fast
    err = np.abs(q - exact_q(x)) / exact_q(x)
    assert err.max() < 1e-6  # the requirement (typical: ~1e-7)
    assert err.max() <= rel  # the proven bound used to decide what to recompute
    assert rel == pytest.approx(d * 2.0**-24, rel=1e-2, abs=1e-11)


def test_fast_path_does_not_apply_where_it_cannot_be_bounded() -> None:
    assert fast_error_bound(200_000) is None
    assert mean_square_rows_fast(np.ones((2, 200_000), np.float32)) is None
    assert mean_square_rows_fast(np.ones((2, 8))) is None  # float64: exact path
    assert mean_square_rows_fast(np.array([[np.inf, 1.0]], np.float16)) is None


def test_refine_recomputes_few_rows_on_ordinary_data() -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4096, 512)) * 10 ** rng.uniform(-4, 0, (4096, 1))).astype(np.float32)
    fast = mean_square_rows_fast(x)
    assert fast is not None
    q, rel = fast
    dec = decisions_for(1e-5, float(min_ratio(0.01)), 5)
    n = Refiner(dec.thresholds, 5).refine(q, rel, lambda rows: mean_square_rows(x[rows]))
    assert 5 <= n < 0.05 * x.shape[0]


def _near_thresholds(eps: float, d: int, rows: int, seed: int) -> np.ndarray:
    """Rows whose q sits within a few float32 ulps of the bound or of a decade edge."""
    rng = np.random.default_rng(seed)
    targets = [q_threshold(eps, float(min_ratio(0.01)))] + [eps * 10.0**k for k in (-2, 0, 1, 3)]
    out = []
    for i in range(rows):
        t = targets[i % len(targets)]
        a = np.float32(math.sqrt(t))
        row = np.full(d, a, np.float32)
        row = row * np.float32(1 + rng.integers(-8, 9) * 2.0**-23)
        out.append(row)
    return np.array(out, np.float32)


def _same(a: object, b: object) -> bool:
    return document(a) == document(b)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("top", [0, 1, 5])
def test_fast_and_exact_reports_are_identical(tmp_path: Path, dtype: str, top: int) -> None:
    rng = np.random.default_rng(top)
    d = 96
    x = (rng.standard_normal((700, d)) * 10 ** rng.uniform(-5, 1, (700, 1))).astype(np.float32)
    x = np.concatenate([x, _near_thresholds(1e-5, d, 300, top)])
    x[3, 1] = np.nan
    x[9, 4] = np.inf
    x[11] = 0.0
    x[13] = 1e-30  # float32 squares underflow
    x[17, 0] = 3e38  # float32 squares overflow
    rng.shuffle(x)
    path = tmp_path / "x.npy"
    extra: dict[str, str] = {}
    if dtype == "float16":
        with np.errstate(over="ignore"):  # 3e38 becomes inf in float16
            np.save(path, x.astype(np.float16))
    elif dtype == "bfloat16":
        np.save(path, (x.view(np.uint32) >> 16).astype(np.uint16))
        extra = {"dtype": "bfloat16"}
    else:
        np.save(path, x)
    for delta in (0.01, 0.3):
        exact = analyze_dump(path, 1e-5, delta=delta, raw=True, top_k=top, fast=False, **extra)
        for threads in (1, 2):
            got = analyze_dump(
                path,
                1e-5,
                delta=delta,
                raw=True,
                top_k=top,
                threads=threads,
                chunk_bytes=5000,
                **extra,
            )
            assert _same(got, exact)


def test_fast_path_ties_exactly_at_the_bound(tmp_path: Path) -> None:
    eps = 0.25
    ratio = 4.0  # q_threshold(0.25, 4) == 1.0: rows of ones tie
    assert q_threshold(eps, ratio) == 1.0
    one_below = np.float32(np.nextafter(np.float32(1), np.float32(0)))
    x = np.array([[1.0] * 64, [one_below] * 64, [-1.0, 1.0] * 32] * 10, np.float32)
    np.save(tmp_path / "t.npy", x)
    report = analyze_dump(tmp_path / "t.npy", eps, min_ratio=ratio, raw=True)
    assert report.below_bound == 10
    exact = analyze_dump(tmp_path / "t.npy", eps, min_ratio=ratio, raw=True, fast=False)
    assert _same(report, exact)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("top", [0, 1, 5])
def test_refine_makes_every_decision_exact_under_worst_case_errors(seed: int, top: int) -> None:
    """Fast values anywhere inside the proven error bound, pushed across thresholds on purpose:
    after refinement every count, the minimum, the maximum and the k smallest are exact."""
    rng = np.random.default_rng(seed)
    rel = 1e-4
    dec = decisions_for(1e-5, float(min_ratio(0.01)), top)
    t = dec.thresholds[(dec.thresholds > 1e-12) & (dec.thresholds < 1e2)]
    near = rng.choice(t, 200) * (1 + rng.uniform(-3, 3, 200) * rel)
    # clusters within the error bound of each other at the bottom and the top: fast values
    # may reorder them
    low = 1e-13 * (1 + rng.uniform(0, 3 * rel, 12))
    high = 1e3 * (1 + rng.uniform(0, 3 * rel, 12))
    exact = np.concatenate([10 ** rng.uniform(-12, 2, 500), near, t[:20], low, high, [0.0]])
    rng.shuffle(exact)
    # worst case: every value moved by up to rel, values near a threshold to its other side
    fast = exact * (1 + rng.uniform(-1, 1, exact.size) * rel * 0.999)
    for i, v in enumerate(exact):
        j = np.searchsorted(t, v)
        for tt in t[max(0, j - 1) : j + 1]:
            if abs(v - tt) <= 0.05 * rel * tt:
                fast[i] = tt * (1 - 0.9 * rel) if v >= tt else tt * (1 + 0.9 * rel)
    assert np.all(np.abs(fast - exact) <= rel * exact * 1.01)
    q = fast.copy()
    Refiner(dec.thresholds, top).refine(q, rel, lambda rows: exact[rows])
    for tt in dec.thresholds:
        assert np.count_nonzero(q < tt) == np.count_nonzero(exact < tt)
    assert q.min() == exact.min() and q.max() == exact.max()
    k = max(1, top)
    assert np.array_equal(np.sort(q)[:k], np.sort(exact)[:k])
    # the worst list holds positive q only (zero vectors apart): those are exact too
    assert np.array_equal(np.sort(q[q > 0])[:k], np.sort(exact[exact > 0])[:k])
