"""Accuracy of the q kernels (raw activations -> q = mean(x**2)) and decisions at exact ties."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.kernels import bf16_to_float32, mean_square_rows, mean_square_rows_bf16
from rmsnorm_eps.numerics import min_ratio, q_threshold


def exact_q(x: np.ndarray) -> np.ndarray:
    """Correctly rounded mean of squares: math.fsum of the exact float64 squares."""
    wide = x.astype(np.float64)
    return np.array([math.fsum((row * row).tolist()) for row in wide]) / x.shape[1]


@pytest.mark.parametrize("d", [1, 7, 576, 4096, 65536])
def test_float32_within_1e_12_of_exact(d: int) -> None:
    rng = np.random.default_rng(d)
    rows = max(2, (1 << 18) // d)
    scale = 10.0 ** rng.uniform(-15, 15, (rows, 1))
    x = (rng.standard_normal((rows, d)) * scale).astype(np.float32)
    q = mean_square_rows(x)
    ref = exact_q(x)
    rel = np.abs(q - ref) / ref
    # the requirement is 1e-6; the float64 path gives ~d * 2**-53 in the worst case
    assert rel.max() <= max(1e-13, d * 2.0**-53)


def test_float32_extremes_neither_overflow_nor_underflow() -> None:
    big = np.full((1, 8), 3.0e38, np.float32)  # float32 squares would be inf
    tiny = np.full((1, 8), 1.4e-45, np.float32)  # float32 squares would be 0
    assert mean_square_rows(big)[0] == pytest.approx(float(np.float32(3.0e38)) ** 2, rel=1e-15)
    assert mean_square_rows(tiny)[0] == float(np.float32(1.4e-45)) ** 2
    mixed = np.array([[np.nan, 1.0], [np.inf, 1.0], [0.0, -0.0]], np.float32)
    q = mean_square_rows(mixed)
    assert math.isnan(q[0]) and q[1] == math.inf and q[2] == 0.0


def test_float16_bit_path_is_exact() -> None:
    bits = np.arange(0, 1 << 16, dtype=np.uint16)
    values = bits.view(np.float16)
    finite = values[np.isfinite(values)]
    x = finite[: (finite.size // 64) * 64].reshape(-1, 64)
    q = mean_square_rows(x)
    ref = exact_q(x)
    assert np.max(np.abs(q - ref) / np.where(ref > 0, ref, 1.0)) < 1e-15
    # subnormals only (the smallest values)
    sub = bits[1:1024].view(np.float16)[: 16 * 63].reshape(16, -1)
    assert np.allclose(mean_square_rows(sub), exact_q(sub), rtol=1e-15, atol=0)
    special = np.array([[np.inf, 1], [np.nan, 1], [-2, 2], [0, -0.0]], np.float16)
    q = mean_square_rows(special)
    assert q[0] == math.inf and math.isnan(q[1]) and q[2] == 4.0 and q[3] == 0.0


def test_bfloat16_kernel_matches_float32_values() -> None:
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 1 << 16, size=(200, 96), dtype=np.uint16)
    f32 = bf16_to_float32(bits)
    q = mean_square_rows_bf16(bits)
    finite_rows = np.all(np.isfinite(f32), axis=1)
    assert np.allclose(q[finite_rows], exact_q(f32[finite_rows]), rtol=1e-14, atol=0)
    nan_rows = np.any(np.isnan(f32), axis=1)
    assert np.all(np.isnan(q[nan_rows]))
    # bf16 1.0 is 0x3f80; -inf is 0xff80
    assert bf16_to_float32(np.array([0x3F80, 0xFF80], np.uint16)).tolist() == [1.0, -math.inf]


def test_bfloat16_matches_ml_dtypes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.linspace(-300, 300, 777, dtype=np.float32).astype(ml_dtypes.bfloat16)
    assert np.array_equal(bf16_to_float32(x.view(np.uint16)), x.astype(np.float32))


def _eps_with_tie(q: float, ratio: float) -> float | None:
    """An eps for which the exact threshold q_threshold(eps, ratio) equals q, if one is near."""
    eps = q / ratio
    for _ in range(64):
        t = q_threshold(eps, ratio)
        if t == q:
            return eps
        eps = math.nextafter(eps, math.inf if t < q else 0.0)
    return None


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_ties_at_the_bound_pass_and_counts_match_float64(
    tmp_path: Path, dtype: type[np.floating]
) -> None:
    ratio = float(min_ratio(0.01))
    found = None
    for a in (1.5, 0.75, 3.0, 1.25, 0.5, 2.0, 1.125):
        eps = _eps_with_tie(a * a, ratio)
        if eps is not None:
            found = (a, eps)
            break
    assert found is not None
    a, eps = found
    below = float(np.nextafter(dtype(a), dtype(0)))
    above = float(np.nextafter(dtype(a), dtype(10)))
    rows = np.array([[a] * 16, [below] * 16, [above] * 16, [a] * 8 + [-a] * 8], dtype=dtype)
    x = np.concatenate([rows] * 5)
    path = tmp_path / "x.npy"
    np.save(path, x)
    q64 = np.mean(x.astype(np.float64) ** 2, axis=1)
    assert q64[0] == q_threshold(eps, ratio)  # an exact tie
    expected = int(np.count_nonzero(q64 / eps < ratio))
    assert expected == 5  # only the rows just below
    for threads in (1, 2):
        report = analyze_dump(path, eps, delta=0.01, raw=True, threads=threads, chunk_bytes=64)
        assert report.below_bound == expected
    qpath = tmp_path / "q.npy"
    np.save(qpath, q64)
    assert analyze_dump(qpath, eps, delta=0.01).below_bound == expected


def test_random_counts_identical_to_float64_reference(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3000, 256)) * 10 ** rng.uniform(-4, 0, (3000, 1))).astype(np.float32)
    path = tmp_path / "x.npy"
    np.save(path, x)
    q64 = exact_q(x)
    for delta in (0.001, 0.01, 0.2):
        r = analyze_dump(path, 1e-5, delta=delta, raw=True, chunk_bytes=100_000)
        assert r.below_bound == int(np.count_nonzero(q64 / 1e-5 < float(min_ratio(delta))))
