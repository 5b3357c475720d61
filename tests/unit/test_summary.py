"""summary.py: :class:`LayerAccumulator` against numpy over the same data.

The reference here divides every value in float64 (``r = float64(q) / eps``) and sorts, the
plain computation the accumulator's threshold comparisons must equal bit for bit: counts,
minima with their first index, the worst-k list ordered by ``(q, index)``, the first nonfinite
examples, and the histogram of decades ``10**k <= r < 10**(k+1)``; chunked folding and merging
in any order give the one-pass result; the tie rule and the refusals."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.summary import (
    DECADE_MAX,
    DECADE_MIN,
    LayerAccumulator,
    NegativeValue,
    decade_edge,
)


def _reference(q: np.ndarray, eps: float, min_ratio: float, top_k: int) -> dict[str, Any]:
    """Every figure of the accumulator, by dividing every value and sorting."""
    q64 = q.astype(np.float64)
    nan = np.isnan(q64)
    inf = np.isposinf(q64)
    finite = ~(nan | inf)
    idx = np.arange(q64.size)
    pos = finite & (q64 > 0)
    r = q64[pos] / eps
    decades: dict[int, int] = {}
    for ri in r.tolist():
        if math.isinf(ri):  # the quotient overflowed: the top bin
            decades[DECADE_MAX] = decades.get(DECADE_MAX, 0) + 1
            continue
        k = min(DECADE_MAX, max(DECADE_MIN, math.floor(math.log10(ri))))
        while k > DECADE_MIN and ri < float(f"1e{k}"):
            k -= 1
        while k < DECADE_MAX and ri >= float(f"1e{k + 1}"):
            k += 1
        decades[k] = decades.get(k, 0) + 1
    order = np.lexsort((idx[pos], q64[pos]))[:top_k]
    fin = q64[finite]
    return {
        "count": q64.size,
        "nan_count": int(nan.sum()),
        "inf_count": int(inf.sum()),
        "zero_count": int((q64 == 0).sum()),
        "below": int((r < min_ratio).sum()),
        "min_q": float(fin.min()),
        "min_index": int(idx[finite][np.argmin(fin)]),
        "max_q": float(fin.max()),
        "min_pos_q": float(q64[pos].min()),
        "worst_q": q64[pos][order].tolist(),
        "worst_index": idx[pos][order].tolist(),
        "nonfinite_index": idx[~finite][:top_k].tolist(),
        "decades": decades,
    }


def _figures(acc: LayerAccumulator) -> dict[str, Any]:
    return {
        "count": acc.count,
        "nan_count": acc.nan_count,
        "inf_count": acc.inf_count,
        "zero_count": acc.zero_count,
        "below": acc.below,
        "min_q": acc.min_q,
        "min_index": acc.min_index,
        "max_q": acc.max_q,
        "min_pos_q": acc.min_pos_q,
        "worst_q": acc.worst_q.tolist(),
        "worst_index": acc.worst_index.tolist(),
        "nonfinite_index": list(acc.nonfinite_index),
        "decades": dict(acc.decades),
    }


def _data(dtype: type, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q: np.ndarray = (10.0 ** rng.uniform(-9, 3, n)).astype(dtype)
    q[rng.choice(n, 9, replace=False)] = 0.0
    q[rng.choice(n, 4, replace=False)] = np.nan
    q[rng.choice(n, 3, replace=False)] = np.inf
    q[n // 2] = q[n // 3]  # a tie, for the (q, index) order
    return q


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("chunk", [7, 1000, 6000])  # small-chunk histogram and the per-decade one
def test_chunked_folding_equals_numpy(dtype: type, chunk: int) -> None:
    q = _data(dtype, 6000, seed=3)
    eps, min_ratio = 1e-6, 49.2512562814
    acc = LayerAccumulator(eps=eps, min_ratio=min_ratio, top_k=6)
    for start in range(0, q.size, chunk):
        acc.update(q[start : start + chunk], start)
    assert _figures(acc) == _reference(q, eps, min_ratio, 6)
    assert acc.violations == acc.below + 7 and acc.nonfinite == 7


def test_merging_in_any_order_equals_one_pass() -> None:
    q = _data(np.float32, 3000, seed=8)
    eps, min_ratio = 3e-5, 10.0
    whole = LayerAccumulator(eps=eps, min_ratio=min_ratio, top_k=4)
    whole.update(q, 0)
    cuts = [0, 700, 1900, 3000]
    parts = []
    for a, b in itertools.pairwise(cuts):
        part = LayerAccumulator(eps=eps, min_ratio=min_ratio, top_k=4)
        part.update(q[a:b], 0)  # indices local to the part, shifted by the merge
        parts.append((a, part))
    for order in ([0, 1, 2], [2, 0, 1]):
        merged = LayerAccumulator(eps=eps, min_ratio=min_ratio, top_k=4)
        for i in order:
            offset, part = parts[i]
            merged.merge(part, index_offset=offset)
        assert _figures(merged) == _figures(whole) == _reference(q, eps, min_ratio, 4)


def test_merge_cuts_to_the_smaller_top_k_and_refuses_other_bounds() -> None:
    q = np.array([5.0, 4.0, 3.0, 2.0, 1.0], np.float64)
    a = LayerAccumulator(eps=1.0, min_ratio=2.0, top_k=5)
    a.update(q[:3], 0)
    b = LayerAccumulator(eps=1.0, min_ratio=2.0, top_k=2)
    b.update(q[3:], 0)
    a.merge(b, index_offset=3)
    assert a.top_k == 2 and a.worst_q.tolist() == [1.0, 2.0] and a.worst_index.tolist() == [4, 3]
    with pytest.raises(ValueError, match="different eps or min_ratio"):
        a.merge(LayerAccumulator(eps=2.0, min_ratio=2.0))
    with pytest.raises(ValueError, match="different eps or min_ratio"):
        a.merge(LayerAccumulator(eps=1.0, min_ratio=3.0))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_an_input_exactly_at_the_bound_passes_one_float_below_fails(dtype: type) -> None:
    # eps = 0.5, min_ratio = 4: the bound is q = 2 exactly (r = 4); one float below, r < 4
    t = dtype(2.0)
    below = np.nextafter(t, dtype(0.0))
    acc = LayerAccumulator(eps=0.5, min_ratio=4.0)
    acc.update(np.array([t, below, np.nextafter(t, dtype(np.inf))], dtype), 0)
    assert acc.below == 1
    assert acc.worst_index.tolist() == [1, 0, 2]
    assert acc.decades == {0: 3}  # r = 4 and just around it: all in 1 <= r < 10


def test_decade_edges_are_the_float_literals() -> None:
    acc = LayerAccumulator(eps=1.0, min_ratio=1.0)
    edges = [decade_edge(k) for k in (-3, 0, 5)]
    assert edges == [1e-3, 1.0, 1e5]
    # each edge belongs to its own decade, the float below it to the decade under it
    values = [x for e in edges for x in (e, math.nextafter(e, 0.0))]
    acc.update(np.array(values, np.float64), 0)
    assert acc.decades == {-3: 1, -4: 1, 0: 1, -1: 1, 5: 1, 4: 1}


def test_zeros_are_apart_and_a_layer_of_zeros_has_no_positive_minimum() -> None:
    acc = LayerAccumulator(eps=1e-6, min_ratio=49.0, top_k=3)
    acc.update(np.zeros(5, np.float32), 0)
    assert (acc.zero_count, acc.below, acc.violations, acc.decades) == (5, 0, 0, {})
    assert acc.min_q == 0.0 and acc.min_index == 0 and math.isinf(acc.min_pos_q)
    assert acc.worst_q.size == 0
    acc.update(np.array([0.0, 1e-9], np.float32), 5)
    assert acc.worst_index.tolist() == [6] and acc.below == 1
    assert acc.min_pos_q == float(np.float32(1e-9))


def test_a_negative_q_is_refused_with_its_flat_index() -> None:
    acc = LayerAccumulator(eps=1e-6, min_ratio=49.0)
    with pytest.raises(NegativeValue) as info:
        acc.update(np.array([1.0, np.nan, -2.5, -1.0], np.float32), 100)
    assert (info.value.index, info.value.value) == (102, -2.5)
    assert "flat index 102" in str(info.value)


def test_nonfinite_examples_keep_the_first_top_k_and_top_k_zero_keeps_none() -> None:
    q = np.array([np.inf, 1.0, np.nan, np.nan, np.inf, 2.0], np.float64)
    acc = LayerAccumulator(eps=1.0, min_ratio=1.5, top_k=2)
    acc.update(q, 10)
    assert acc.nonfinite_index == [10, 12] and acc.nonfinite_value[0] == math.inf
    assert math.isnan(acc.nonfinite_value[1])
    assert (acc.nan_count, acc.inf_count, acc.below, acc.violations) == (2, 2, 1, 5)
    assert acc.max_q == 2.0  # +inf is a violation, not the maximum
    none = LayerAccumulator(eps=1.0, min_ratio=1.5, top_k=0)
    none.update(q, 0)
    assert none.worst_q.size == 0 and none.nonfinite_index == [] and none.violations == 5


def test_float32_data_near_its_maximum_with_a_tiny_eps() -> None:
    # r = q / eps overflows float32 but not float64: decades from the float64 quotient
    q = np.array([3.0e38, 1.0e-30], np.float32)
    acc = LayerAccumulator(eps=1e-30, min_ratio=49.0)
    acc.update(q, 0)
    assert _figures(acc) == _reference(q, 1e-30, 49.0, 5)
    assert acc.decades == {68: 1, 0: 1} and acc.below == 1


def test_a_quotient_beyond_float64_falls_in_the_top_bin() -> None:
    # 1e300 / 1e-10 overflows to inf: the top bin
    q = np.array([1e300, 5e-324, 1.0], np.float64)
    acc = LayerAccumulator(eps=1e-10, min_ratio=49.0)
    with np.errstate(over="ignore"):
        ref = _reference(q, 1e-10, 49.0, 5)
    acc.update(q, 0)
    assert _figures(acc) == ref
    assert acc.decades == {DECADE_MAX: 1, -314: 1, 10: 1}


def test_an_underflowing_quotient_has_one_decade_whatever_its_chunk_holds() -> None:
    q = np.array([5e-324, 1.0], np.float64)  # r = 5e-324 / 10 = 0.0 in float64; r = 0.1
    whole = LayerAccumulator(eps=10.0, min_ratio=49.0)
    whole.update(q, 0)
    merged = LayerAccumulator(eps=10.0, min_ratio=49.0)
    for i in range(2):
        part = LayerAccumulator(eps=10.0, min_ratio=49.0)
        part.update(q[i : i + 1], 0)
        merged.merge(part, index_offset=i)
    assert merged.decades == whole.decades == {-324: 1, -1: 1}
    big = LayerAccumulator(eps=10.0, min_ratio=49.0)  # the per-decade pass of large chunks
    big.update(np.concatenate([np.zeros(5000), q, np.full(5000, 5e-324)]), 0)
    assert big.decades == {-324: 5001, -1: 1} and big.zero_count == 5000
