"""Mean squares of raw activations, q = mean(x**2) over the last axis, without loss (and
LayerNorm's variance v = mean((x - mean x)**2): :func:`variance_rows`).

Every supported input dtype is widened *exactly* to float64 before squaring: the square of a
float16, bfloat16 or float32 value is exact in float64 and cannot overflow or underflow there,
so the only error is the float64 summation, below ``d * 2**-53`` relative (1e-11 at
d = 65536; in practice far less). q is therefore the float64 value, not an approximation of it,
and every decision taken on it (bound, decades, worst-k, ties) is the float64 decision.

Speed comes from doing the widening in blocks of rows that fit in the L2 cache
(:data:`BLOCK_ELEMS` float64 values), so the float64 copy never touches main memory, and from
``np.vecdot`` (BLAS) for the sum of squares. Measured here: about 19 GB/s of float32 input per
core, against about 75 GB/s for a float32-accumulating ``np.vecdot``; the difference is hidden
behind reading the file, which is the real limit (see benchmarks/README.md).

float16 is widened through its bit pattern (``(h & 0x7fff) << 13`` is a float32 equal to
``|h| * 2**-112``, exactly, subnormals included) because numpy's own float16 conversion is
about half as fast; the power of two is put back on q exactly. Blocks holding float16 inf/NaN
take numpy's conversion instead. bfloat16 (stored as uint16 bit patterns) is widened by
``bits << 16``, which is the float32 of the same value, inf and NaN included.

float64 inputs are summed directly and the rare rows whose result is not trustworthy
(overflowed to inf, or so small that squares may have underflowed) are recomputed with the row
scaled by its max |x|. A q that exceeds the float64 range (|x| near 1e300) is inf, and one below
the smallest subnormal is 0, as rounding the exact value gives.

Why one module: every kernel here computes the same float64 q (or v) by a different route
(dtype widening, float32 fast path, long rows in pieces); their exactness argument is one
argument, and the tests compare them with each other.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable

import numpy as np

from rmsnorm_eps.kernel_choice import sixteen_bit_sums

__all__ = [
    "BLOCK_ELEMS",
    "RAW_ROW_MAX",
    "Refiner",
    "RowMoments",
    "RowSquares",
    "fast_error_bound",
    "mean_square_rows",
    "mean_square_rows_bf16",
    "mean_square_rows_fast",
    "variance_rows",
]

# Below this, float64 squares of the row's elements may have underflowed (2**-1022 / 2**-52).
_F64_SMALL = 1e-290

#: float64 elements widened at a time (512 KiB: fits the L2 cache with room for the input).
BLOCK_ELEMS = 1 << 16

_F16_SCALE = 2.0**224  # ((h & 0x7fff) << 13 as float32) == |h| * 2**-112, squared: 2**-224
_F16_EXP_ALL_ONES = 0x7C00  # float16 inf / NaN


def _rows_per_block(d: int) -> int:
    return max(1, BLOCK_ELEMS // max(1, d))


def _f64_rows(x: np.ndarray, q: np.ndarray) -> None:
    """float64 input: direct sum, rescaled recomputation of suspicious rows."""
    d = x.shape[1]
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


def mean_square_rows(x: np.ndarray) -> np.ndarray:
    """Return ``q[i] = mean(x[i, :]**2)`` in float64 for a 2-D float16/32/64 array ``x``.

    float16/float32 rows are widened exactly to float64 block by block (see the module
    docstring); the result equals ``np.mean(x.astype(np.float64)**2, axis=1)`` up to the order of
    the float64 summation. NaN in a row gives NaN; inf gives inf.
    """
    n, d = x.shape
    q = np.empty(n, np.float64)
    if x.dtype == np.float64:
        _f64_rows(x, q)
        return q
    if x.dtype == np.float16:
        return _f16_rows(x, q)
    if x.dtype != np.float32:
        raise TypeError(f"mean_square_rows: unsupported dtype {x.dtype}")
    with np.errstate(invalid="ignore"):  # signalling NaNs stay NaN, quietly
        _by_blocks(x, q, False, _sum_squares)
    q /= d
    return q


def _by_blocks(
    x: np.ndarray, out: np.ndarray, bf16: bool, fold: Callable[[np.ndarray, np.ndarray], None]
) -> None:
    """``fold(w, out[s:e])`` for each block of rows ``x[s:e]``, widened exactly into the
    float64 ``w`` (:func:`_widen`) in blocks that fit the L2 cache."""
    n, d = x.shape
    step = _rows_per_block(d)
    wide = np.empty((min(step, n), d), np.float64)
    for s in range(0, n, step):
        e = min(n, s + step)
        w = wide[: e - s]
        _widen(x[s:e], bf16, w)
        fold(w, out[s:e])


def _sum_squares(w: np.ndarray, out: np.ndarray) -> None:
    np.vecdot(w, w, out=out)


def _f16_rows(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    n, d = x.shape
    bits = x.view(np.uint16)
    step = _rows_per_block(d)
    m = min(step, n)
    u32 = np.empty((m, d), np.uint32)
    wide = np.empty((m, d), np.float64)
    with np.errstate(invalid="ignore"):  # signalling NaNs stay NaN, quietly
        for s in range(0, n, step):
            e = min(n, s + step)
            b = bits[s:e]
            w = wide[: e - s]
            u = u32[: e - s]
            np.bitwise_and(b, 0x7FFF, out=u, dtype=np.uint32)
            if int(u.max()) >= _F16_EXP_ALL_ONES:  # inf or NaN somewhere: numpy's conversion
                np.copyto(w, x[s:e])
                np.vecdot(w, w, out=q[s:e])
                continue
            np.left_shift(u, 13, out=u)
            np.copyto(w, u.view(np.float32))
            np.vecdot(w, w, out=q[s:e])
            q[s:e] *= _F16_SCALE
        q /= d
    return q


def mean_square_rows_bf16(bits: np.ndarray) -> np.ndarray:
    """``q[i] = mean(x[i, :]**2)`` for bfloat16 values given as a 2-D uint16 array of bit patterns.

    ``bits << 16`` reinterpreted as float32 is the exact value (inf and NaN included), widened
    to float64 as in :func:`mean_square_rows`.
    """
    n, d = bits.shape
    q = np.empty(n, np.float64)
    if d % 2 == 0 and bits.flags.c_contiguous and n:
        return _bf16_pairs_exact(bits, q)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns stay NaN, quietly
        _by_blocks(bits, q, True, _sum_squares)
    q /= d
    return q


def _bf16_pairs_exact(bits: np.ndarray, q: np.ndarray) -> np.ndarray:
    """:func:`mean_square_rows_bf16` for rows of even length: the rows read as uint32 words of
    two elements, ``w << 16`` and ``w & 0xffff0000`` (each the exact float32 of one element),
    widened to float64 half a row at a time, in L2-sized blocks; no uint16 -> uint32 cast."""
    n, d = bits.shape
    half = d // 2
    words = bits.view(np.uint32)
    step = _rows_per_block(half)
    m = min(step, n)
    u32 = np.empty((m, half), np.uint32)
    wide = np.empty((m, half), np.float64)
    part = np.empty(n, np.float64)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns stay NaN, quietly
        for s in range(0, n, step):
            e = min(n, s + step)
            u, w, src = u32[: e - s], wide[: e - s], words[s:e]
            np.left_shift(src, 16, out=u)
            np.copyto(w, u.view(np.float32))
            np.vecdot(w, w, out=q[s:e])
            np.bitwise_and(src, 0xFFFF0000, out=u)
            np.copyto(w, u.view(np.float32))
            np.vecdot(w, w, out=part[s:e])
        q += part
    q /= d
    return q


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) to their exact float32 values (a new array)."""
    return np.left_shift(bits, 16, dtype=np.uint32).view(np.float32)


# --------------------------------------------------------------------------- fast path

_U = 2.0**-24  # unit roundoff of float32
#: Rows whose float32 sum of squares is below this may have lost squares to underflow.
_F32_SMALL = 2.0**-100
_F16_TO_F32 = np.float32(2.0**112)  # ((h & 0x7fff) << 13 as float32) * 2**112 == |h|


def fast_error_bound(d: int) -> float | None:
    """Relative error bound of :func:`mean_square_rows_fast` for rows of length ``d``.

    Any float32 evaluation of a sum of ``d`` products of non-negative terms, in any order, with
    or without FMA, is within ``gamma_d = d u / (1 - d u)`` (u = 2**-24) of the exact sum
    (Higham, Accuracy and Stability of Numerical Algorithms, 3.1); squares lost to underflow
    in rows whose result is at least 2**-100 add at most 2**-50 relative. ``None`` when the
    bound would be useless (d u >= 0.01): those rows use the exact path.
    """
    du = d * _U
    if du >= 0.01:
        return None
    return du / (1.0 - du) + 2.0**-40


def mean_square_rows_fast(x: np.ndarray, bf16: bool = False) -> tuple[np.ndarray, float] | None:
    """``(q_fast, rel)``: q from a float32 ``np.vecdot`` and its relative error bound.

    For float32, float16 (converted exactly to float32) and bfloat16 bit patterns (``bf16``).
    ``|q_fast - q| <= rel * q`` for every row whose ``q_fast`` is finite and >= 2**-100; other
    rows (overflow, underflow, NaN) must be recomputed exactly. Returns ``None`` where the fast
    path does not apply (float64, float16 holding inf/NaN, rows too long for a useful bound).

    16-bit rows of even length (the usual case) are widened two elements at a time
    (:func:`_pair_sums`), in blocks that stay in the L2 cache, without a uint16 -> uint32 cast;
    or, where :mod:`rmsnorm_eps.kernel_choice` selects them (``ratio --kernel``), by the
    compiled kernels of the ``[fast]`` extra (:mod:`rmsnorm_eps.kernels_numba`: same bound;
    float16 rows holding inf/NaN then give inf/NaN sums, which the refiner recomputes).
    """
    n, d = x.shape
    rel = fast_error_bound(d)
    if rel is None or x.dtype == np.float64:
        return None
    compiled = sixteen_bit_sums(bf16) if bf16 or x.dtype == np.float16 else None
    if compiled is not None and x.flags.c_contiguous:
        compiled_sums = compiled(x.view(np.uint16), bf16)
        compiled_sums /= d
        return compiled_sums, rel
    if (bf16 or x.dtype == np.float16) and d % 2 == 0 and x.flags.c_contiguous:
        sums = _pair_sums(x.view(np.uint16), bf16)
        if sums is None:
            return None
        sums /= d
        return sums, rel
    if bf16:
        f32 = np.left_shift(x, 16, dtype=np.uint32).view(np.float32)
    elif x.dtype == np.float16:
        u = np.bitwise_and(x.view(np.uint16), 0x7FFF, dtype=np.uint32)
        if n and int(u.max()) >= _F16_EXP_ALL_ONES:
            return None
        np.left_shift(u, 13, out=u)
        f32 = u.view(np.float32)
        f32 *= _F16_TO_F32
    elif x.dtype == np.float32:
        f32 = x
    else:
        return None
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        q = np.vecdot(f32, f32).astype(np.float64)
    q /= d
    return q, rel


#: A float16 row whose float32 sum of squares reaches this may hold inf or NaN (widened by
#: :func:`_pair_sums` to finite values >= 2**16, squares >= 2**32): its elements are checked.
_F16_SUSPECT_SUM = 2.0**31
_F16_HALF = 0x7FFF << 13  # a float16's |bits| moved to a float32's exponent and mantissa


def _pair_sums(bits: np.ndarray, bf16: bool) -> np.ndarray | None:
    """Float32 sums of squares of 16-bit rows of even length, returned in float64 (not yet
    divided by d); ``None`` when a float16 row holds inf or NaN.

    The rows are read as uint32 words, each holding two elements. For bfloat16 the two are
    ``w << 16`` and ``w & 0xffff0000`` reinterpreted as float32: the exact values (inf, NaN
    included). For float16 they are ``(w & 0x7fff) << 13`` and ``(w >> 3) & (0x7fff << 13)``,
    float32s equal to ``|h| * 2**-112`` exactly (subnormals included), times 2**112 (exact: a
    power of two, and |h| in [2**-24, 65504] stays a normal float32). Each half's sum of d/2
    squares is a float32 sum of non-negative terms, so the two sums added in float64 are
    within :func:`fast_error_bound` ``(d)`` of the exact sum. float16 inf/NaN become finite
    values >= 2**16 here, so a row reaching 2**31 is checked bit by bit (rare on real data:
    its elements would be in the hundreds) and any inf/NaN sends the chunk to the exact path.
    """
    n, d = bits.shape
    half = d // 2
    words = bits.view(np.uint32)
    step = max(1, BLOCK_ELEMS // max(1, half))
    m = min(step, n)
    tmp = np.empty((m, half), np.uint32)
    lo = np.empty(n, np.float32)
    hi = np.empty(n, np.float32)
    wide = None if bf16 else np.empty((m, half), np.float32)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for s in range(0, n, step):
            e = min(n, s + step)
            w, src = tmp[: e - s], words[s:e]
            f = w.view(np.float32)
            if wide is None:
                np.left_shift(src, 16, out=w)
                np.vecdot(f, f, out=lo[s:e])
                np.bitwise_and(src, 0xFFFF0000, out=w)
                np.vecdot(f, f, out=hi[s:e])
                continue
            g = wide[: e - s]
            np.bitwise_and(src, 0x7FFF, out=w)
            np.left_shift(w, 13, out=w)
            np.multiply(f, _F16_TO_F32, out=g)
            np.vecdot(g, g, out=lo[s:e])
            np.right_shift(src, 3, out=w)
            np.bitwise_and(w, _F16_HALF, out=w)
            np.multiply(f, _F16_TO_F32, out=g)
            np.vecdot(g, g, out=hi[s:e])
    sums = lo.astype(np.float64)
    sums += hi
    if not bf16:
        suspect = np.flatnonzero(~(sums < _F16_SUSPECT_SUM))
        if suspect.size and np.any(
            (bits[suspect] & np.uint16(_F16_EXP_ALL_ONES)) == _F16_EXP_ALL_ONES
        ):
            return None
    return sums


class Refiner:
    """Replaces, chunk by chunk, every fast q of one array that could change a decision or be
    reported by its exact value.

    Recomputed are the rows whose uncertainty interval ``[q/(1+rel), q/(1-rel)]`` straddles one
    of the sorted ``thresholds`` (the bound and the decade edges: so every count equals the
    float64 one), the rows whose fast value is not finite or below 2**-100 (zeros included),
    and the rows that could be among the ``top_k`` smallest positive q (zero vectors are
    counted apart, never listed) or be the largest (so every reported q is exact). For the
    last two a refiner keeps, over all the rows it has seen, the ``top_k`` smallest upper
    bounds and the largest lower bound: a row whose lower bound exceeds the k-th smallest upper
    bound seen (its own chunk's rows included) has at least ``top_k`` rows of smaller exact q,
    so it is not among the smallest; one whose upper bound is below the largest lower bound is
    not the largest. Any set of rows seen gives bounds that are safe, so chunks may be refined
    in any order, on several threads (the shared bounds are updated under a lock).
    """

    def __init__(self, thresholds: np.ndarray, top_k: int) -> None:
        self.thresholds = thresholds
        self.top_k = max(1, top_k)  # at least the minimum, which is reported
        self._smallest = np.empty(0, np.float64)  # the top_k smallest upper bounds so far
        self._kth = np.inf  # their largest, once there are top_k of them
        self._largest = -np.inf  # the largest lower bound so far
        self._lock = threading.Lock()
        self._edges = [float(t) for t in thresholds]  # for bisect on a chunk's two extremes

    def refine(self, q: np.ndarray, rel: float, exact: Callable[[np.ndarray], np.ndarray]) -> int:
        """Replace, in place, every fast ``q`` that could change a decision or be reported by
        its exact value (``exact(rows)``); returns the number recomputed."""
        plain = self._plain_chunk(q, rel)
        if plain is None:
            return 0
        with np.errstate(invalid="ignore", over="ignore"):
            lo = q / (1.0 + rel)
            hi = q / (1.0 - rel)
            if plain:  # all finite, none small, no threshold straddled: the extremes only
                kth, top = self._seen(hi, lo)
                mark = lo <= kth
                mark |= hi >= top
            else:
                mark = np.searchsorted(self.thresholds, lo, side="right") != np.searchsorted(
                    self.thresholds, hi, side="right"
                )
                mark |= ~(q >= _F32_SMALL) | np.isinf(q)
                # zero vectors are never listed among the worst: the bounds are over q > 0
                finite = np.isfinite(q) & (q > 0.0)
                if finite.any():
                    kth, top = self._seen(hi[finite], lo[finite])
                    mark |= lo <= kth
                    mark |= hi >= top
        rows = np.flatnonzero(mark)
        if rows.size:
            q[rows] = exact(rows)
        return int(rows.size)

    def _seen(self, his: np.ndarray, los: np.ndarray) -> tuple[float, float]:
        """Fold finite rows' bounds into the ones kept; returns (k-th smallest upper bound,
        largest lower bound) over every row seen, these included."""
        k = self.top_k
        with self._lock:
            pool = np.concatenate((self._smallest, his))
            if pool.size > k:
                pool = np.partition(pool, k - 1)[:k]
            self._smallest = pool
            self._largest = max(self._largest, float(los.max()))
            self._kth = float(pool.max()) if pool.size >= k else np.inf
            return self._kth, self._largest

    def _plain_chunk(self, q: np.ndarray, rel: float) -> bool | None:
        """What the chunk's extremes alone say (two reductions): ``None`` when no row needs
        its exact value (every q finite and >= 2**-100, no threshold between the smallest
        lower bound and the largest upper bound, every lower bound above the k-th smallest
        upper bound seen and every upper bound below the largest lower bound seen: then
        neither bound changes either); ``True`` when only the smallest/largest tests remain
        to be made row by row; ``False`` when every test must be. The bounds of the rows are
        monotone in q, so the extremes' bounds are the extremes of the bounds."""
        if not q.size:
            return None
        low, high = float(q.min()), float(q.max())  # NaN when a row is NaN: not decided here
        if not (low >= _F32_SMALL and high < np.inf):
            return False
        lo, hi = low / (1.0 + rel), high / (1.0 - rel)
        if bisect.bisect_right(self._edges, lo) != bisect.bisect_right(self._edges, hi):
            return False
        with self._lock:
            if lo > self._kth and hi < self._largest:
                return None
        return True


# --------------------------------------------------------------------------- LayerNorm variance


def _widen(x: np.ndarray, bf16: bool, out: np.ndarray) -> None:
    """Copy a block of float16/float32/float64 values (or bfloat16 bit patterns) into the
    float64 array ``out``, exactly."""
    if bf16:
        np.copyto(out, bf16_to_float32(x))
    else:
        np.copyto(out, x)


def _variance_block(w: np.ndarray, out: np.ndarray) -> None:
    """Corrected two-pass variance of the float64 rows ``w`` (overwritten with deviations).

    ``mu = sum(x) / d``, ``e = x - mu``, ``v = (sum(e**2) - (sum e)**2 / d) / d``: the second
    term removes, to first order, the rounding error of mu (Chan, Golub and LeVeque,
    "Algorithms for computing the sample variance", 1983); v is clamped at 0 (NaN stays NaN).
    """
    d = w.shape[1]
    mu = np.sum(w, axis=1) / d
    np.subtract(w, mu[:, None], out=w)
    s1 = np.sum(w, axis=1)
    np.vecdot(w, w, out=out)
    out -= s1 * s1 / d
    out /= d
    np.maximum(out, 0.0, out=out)


def _rescaled_variance(rows: np.ndarray) -> np.ndarray:
    """Variance of float64 rows whose squared deviations may overflow or underflow: the rows
    are centred, divided by their largest |deviation| m, and v is multiplied back by m**2."""
    d = rows.shape[1]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        # mean without overflow: scale by the max |x| first
        a = np.max(np.abs(rows), axis=1, keepdims=True)
        a = np.where(a > 0, a, 1.0)
        mu = np.sum(rows / a, axis=1, keepdims=True) / d * a
        e = rows - mu
        m = np.max(np.abs(e), axis=1, keepdims=True)
        m = np.where(m > 0, m, 1.0)
        s = e / m
        s1 = np.sum(s, axis=1)
        v = (np.einsum("ij,ij->i", s, s) - s1 * s1 / d) / d
        v = np.maximum(v, 0.0) * (m[:, 0] * m[:, 0])
    return np.asarray(v, np.float64)


def variance_rows(x: np.ndarray, bf16: bool = False) -> np.ndarray:
    """Return ``v[i] = mean((x[i, :] - mean(x[i, :]))**2)`` in float64 (LayerNorm's variance).

    ``x`` is a 2-D float16/float32/float64 array, or uint16 bfloat16 bit patterns with
    ``bf16``. Every value is widened exactly to float64 block by block, then the corrected
    two-pass formula of :func:`_variance_block` is applied: the mean is removed before
    squaring, so a large common offset (|mean| >> std) costs no accuracy (a one-pass
    ``mean(x**2) - mean(x)**2`` would cancel catastrophically). The error is a few units of
    float64 roundoff times ``d`` relative to v. float64 rows whose result may have overflowed
    or underflowed (v not finite, or v < 1e-290) among rows of finite values are recomputed with the
    deviations scaled by their largest magnitude. A row holding NaN gives NaN; a row holding
    inf gives NaN as well (its deviation inf - inf is undefined); both are counted as
    nonfinite by the reports. A constant row gives exactly 0 when its mean is exact (always for
    float16/bfloat16/float32 inputs with d < 2**29).
    """
    n = x.shape[0]
    v = np.empty(n, np.float64)
    if not bf16 and x.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"variance_rows: unsupported dtype {x.dtype}")
    with np.errstate(invalid="ignore", over="ignore"):
        _by_blocks(x, v, bf16, _variance_block)
    if x.dtype == np.float64 and not bf16:
        with np.errstate(invalid="ignore"):
            suspect = np.flatnonzero(~(v >= _F64_SMALL) | np.isinf(v))
        if suspect.size:
            rows = x[suspect]
            finite_rows = np.all(np.isfinite(rows), axis=1)
            v[suspect[finite_rows]] = _rescaled_variance(rows[finite_rows])
    return v


#: Longest row (``d``, elements) that ``--raw`` reads: rows longer than a chunk are read in
#: pieces (memory independent of ``d``), so this only bounds the float64 summation error
#: (below ``d * 2**-53`` relative: 2e-6 here).
RAW_ROW_MAX = 1 << 34


class RowSquares:
    """Per-row running ``sum(x**2)`` (and count of values) fed by pieces of rows, in float64:
    what ``--raw`` accumulates when a row does not fit in one chunk (a long row in C order, or
    every row of a Fortran-ordered file, whose elements come column by column).

    ``scaled`` (float64 inputs): the sum is kept as ``scale**2 * ssq`` with ``scale`` the
    largest |x| so far (rescaled when it grows, as LAPACK's ``dnrm2`` does), so squares never
    overflow or underflow. Narrower inputs are summed directly: their squares are exact in
    float64. NaN gives NaN, inf gives inf (NaN wins), as :func:`mean_square_rows` gives.
    """

    def __init__(self, n: int, scaled: bool) -> None:
        self.scaled = scaled
        self.ssq = np.zeros(n, np.float64)
        self.scale = np.zeros(n, np.float64) if scaled else None
        self.nan = np.zeros(n, bool)
        self.inf = np.zeros(n, bool)

    def add(self, rows: slice | np.ndarray, w: np.ndarray) -> None:
        """Add the float64 values ``w`` (one per row of ``rows``: a column of the block)."""
        finite = np.isfinite(w)
        if not finite.all():
            self.nan[rows] |= np.isnan(w)
            self.inf[rows] |= np.isinf(w)
            w = np.where(finite, w, 0.0)
        if self.scale is None:
            self.ssq[rows] += w * w
            return
        a = np.abs(w)
        old = self.scale[rows]
        m = np.maximum(old, a)
        safe = np.where(m > 0, m, 1.0)
        self.ssq[rows] = self.ssq[rows] * (old / safe) ** 2 + (a / safe) ** 2
        self.scale[rows] = m

    def add_piece(self, row: int, w: np.ndarray) -> None:
        """Add a piece of one row (float64 values ``w``)."""
        finite = np.isfinite(w)
        if not finite.all():
            self.nan[row] |= bool(np.isnan(w).any())
            self.inf[row] |= bool(np.isinf(w).any())
            w = w[finite]
        if self.scale is None:
            self.ssq[row] += float(np.dot(w, w))
            return
        m_piece = float(np.max(np.abs(w))) if w.size else 0.0
        old = float(self.scale[row])
        m = max(old, m_piece)
        if m == 0.0:
            return
        s = w / m
        self.ssq[row] = float(self.ssq[row]) * (old / m) ** 2 + float(np.dot(s, s))
        self.scale[row] = m

    def finish(self, d: int) -> np.ndarray:
        """``q = sum(x**2) / d`` of every row."""
        with np.errstate(over="ignore", invalid="ignore"):
            if self.scale is None:
                q = self.ssq / d
            else:
                sc = self.scale
                q = (self.ssq / d) * sc * sc
                small = sc < 1e-140  # scale**2 underflows: divide first
                if small.any():
                    q[small] = self.ssq[small] * sc[small] / d * sc[small]
        q = np.array(q, np.float64)
        q[self.inf] = np.inf
        q[self.nan] = np.nan
        return q


class RowMoments:
    """Per-row running mean and ``M2 = sum((x - mean)**2)`` (Welford's update, merged with
    Chan et al.'s formula for pieces), fed by pieces of rows: LayerNorm's variance
    ``v = M2 / d`` of rows that do not fit in one chunk, without a second pass."""

    def __init__(self, n: int) -> None:
        self.count = np.zeros(n, np.float64)
        self.mean = np.zeros(n, np.float64)
        self.m2 = np.zeros(n, np.float64)

    def add(self, rows: slice | np.ndarray, w: np.ndarray) -> None:
        """Add one value per row of ``rows`` (float64 ``w``)."""
        with np.errstate(over="ignore", invalid="ignore"):
            self.count[rows] += 1.0
            delta = w - self.mean[rows]
            self.mean[rows] += delta / self.count[rows]
            self.m2[rows] += delta * (w - self.mean[rows])

    def add_piece(self, row: int, w: np.ndarray) -> None:
        """Add a piece of one row (float64 values ``w``)."""
        n_b = float(w.size)
        if not n_b:
            return
        with np.errstate(over="ignore", invalid="ignore"):
            mean_b = float(np.sum(w)) / n_b
            e = w - mean_b
            s1 = float(np.sum(e))
            m2_b = max(float(np.dot(e, e)) - s1 * s1 / n_b, 0.0)
            n_a = float(self.count[row])
            n = n_a + n_b
            delta = mean_b - float(self.mean[row])
            self.mean[row] = float(self.mean[row]) + delta * n_b / n
            self.m2[row] = float(self.m2[row]) + m2_b + delta * delta * n_a * n_b / n
            self.count[row] = n

    def finish(self, d: int) -> np.ndarray:
        """``v = M2 / d`` of every row (clamped at 0)."""
        with np.errstate(invalid="ignore"):
            return np.maximum(self.m2 / d, 0.0)
