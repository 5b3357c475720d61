"""Mean squares of raw activations, q = mean(x**2) over the last axis, without loss.

float16 and float32 inputs are widened to float64 before squaring: the square of a float32 is
exact in float64 and cannot overflow or underflow there, so the only error is the float64
summation (pairwise in numpy), far below 1e-12 relative. float64 inputs are summed directly
and the rare rows whose result is not trustworthy (overflowed to inf, or so small that squares
may have underflowed) are recomputed with the row scaled by its max |x|. A q that exceeds the
float64 range (|x| near 1e300) is inf, and one below the smallest subnormal is 0, as rounding
the exact value gives.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mean_square_rows"]

# Below this, float64 squares of the row's elements may have underflowed (2**-1022 / 2**-52).
_F64_SMALL = 1e-290


def mean_square_rows(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Return ``q[i] = mean(x[i, :]**2)`` in float64 for a 2-D float16/32/64 array ``x``.

    NaN in a row gives NaN; inf gives inf. ``out`` (float64, length ``x.shape[0]``) is reused
    when given.
    """
    n, d = x.shape
    q = np.empty(n, np.float64) if out is None else out[:n]
    if x.dtype == np.float64:
        np.einsum("ij,ij->i", x, x, out=q)
        q /= d
        with np.errstate(invalid="ignore"):
            suspect = np.flatnonzero(~(q >= _F64_SMALL) | np.isinf(q))
        if suspect.size:
            rows = x[suspect]
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                m = np.max(np.abs(rows), axis=1, keepdims=True)
                scaled = np.where(m > 0, rows / np.where(m > 0, m, 1.0), 0.0)
                q_s = np.mean(scaled * scaled, axis=1) * (m[:, 0] * m[:, 0])
            # rows holding NaN or inf keep the plain result (NaN or inf)
            finite_rows = np.all(np.isfinite(rows), axis=1)
            q[suspect[finite_rows]] = q_s[finite_rows]
        return q
    wide = x.astype(np.float64)
    np.einsum("ij,ij->i", wide, wide, out=q)
    q /= d
    return q
