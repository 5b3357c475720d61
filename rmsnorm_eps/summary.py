"""Streaming, mergeable per-layer summary of q values against a q/eps bound.

:class:`LayerAccumulator` folds chunks of q values (float32 or float64) into counts, minima,
the worst-k inputs, a histogram of ``floor(log10(q/eps))`` and the nonfinite values; two
accumulators over disjoint parts of the data merge into the accumulator of the whole.

Decision rules (the same everywhere in the tool):

* ``r = q / eps`` is computed in float64 (``q`` widened exactly from its stored dtype).
* An input violates the bound when ``r < min_ratio``. **Tie rule:** an input exactly at the
  bound (``r == min_ratio``) passes, since ``A(min_ratio) = 1 - delta`` meets ``A >= 1 - delta``.
* NaN and +inf q values are never dropped: each is counted as nonfinite and as a violation.
* ``q == 0`` exactly (a zero vector, e.g. a padding row) is counted apart (``zero_count``): its
  output is 0 under any eps, so it is not below the bound (``below`` counts ``0 < q < t``) and
  is not in the worst-k list; ``min_q`` stays the true minimum (0 then) and ``min_pos_q`` is
  the smallest positive finite q. Whether zeros count as violations is the caller's rule
  (``--zero-is-violation``), not the accumulator's.
* A negative q (NaN excluded) is not a mean of squares: it is an input error.

Comparisons use exact thresholds (:func:`rmsnorm_eps.numerics.q_threshold`), so the result is
bit-for-bit what dividing every value would give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from rmsnorm_eps.numerics import q_threshold

__all__ = ["DECADE_MAX", "DECADE_MIN", "LayerAccumulator", "NegativeValue", "Quantity"]

#: What a norm divides by: ``q = mean(x**2)`` (RMSNorm and its gated and L2 relatives) or
#: ``v = mean((x - mean x)**2)`` (LayerNorm). eps acts on v exactly as on q.
Quantity = Literal["q", "v"]

DECADE_MIN = -330
DECADE_MAX = 308
#: The lowest decade a positive q is counted in: the edges 1e-330 .. 1e-324 all read as 0.0 in
#: float64, so the decades below -323 cannot be told apart; a positive q whose r = q/eps is
#: below 1e-323 (q/eps may underflow to 0 there) counts in decade -324, whatever its chunk.
_LOWEST = -324


class NegativeValue(Exception):
    """Raised by :meth:`LayerAccumulator.update` for a q < 0; carries its flat index."""

    def __init__(self, index: int, value: float) -> None:
        super().__init__(f"negative q {value!r} at flat index {index}")
        self.index = index
        self.value = value


def _threshold_for_dtype(t64: float, dtype: np.dtype[Any]) -> np.floating[Any]:
    """Smallest value ``t`` of ``dtype`` with ``float64(t) >= t64``.

    For values ``v`` of that dtype, ``v < t`` then holds exactly when ``float64(v) < t64``,
    so comparisons run in the data's own dtype without widening a copy.
    """
    if dtype == np.float64:
        return np.float64(t64)
    if t64 > float(np.finfo(dtype).max):  # no finite value reaches it (cast would warn)
        return dtype.type(np.inf)
    t = dtype.type(t64)
    if float(t) < t64:
        t = np.nextafter(t, dtype.type(np.inf))
    return t


#: Thresholds shared by every accumulator: (eps, ratio, dtype) -> threshold in that dtype. A
#: dump of many tiny layers with one eps computes each decade edge once, not once per layer.
#: Cleared when it grows past :data:`_CACHE_LIMIT` (a config may give every layer its own eps).
_THRESHOLDS: dict[tuple[float, float, str], Any] = {}
_CACHE_LIMIT = 1 << 16
#: Chunks up to this size fold their decade histogram with one ``searchsorted`` (one numpy call
#: per chunk); larger ones with one comparison pass per decade (faster per element).
_SMALL_CHUNK = 4096


def _decade_of(r: float) -> int:
    """Approximate ``floor(log10(r))`` clamped to the histogram's range (exactness comes from
    the threshold comparisons that follow)."""
    if not r > 0.0:
        return DECADE_MIN
    if math.isinf(r):
        return DECADE_MAX
    return min(DECADE_MAX, max(DECADE_MIN, math.floor(math.log10(r))))


def decade_edge(k: int) -> float:
    """Lower edge ``10**k`` (as the float64 literal ``1ek``) of decade bin ``k``."""
    return float(f"1e{k}")


@dataclass
class LayerAccumulator:
    """Mutable accumulator for one layer; see the module docstring for the rules.

    ``quantity`` says what the folded values are (q, or v for a LayerNorm): the figures are
    the same, and every result frozen from the accumulator carries it."""

    eps: float
    min_ratio: float
    top_k: int = 5
    quantity: Quantity = "q"
    count: int = 0
    nan_count: int = 0
    inf_count: int = 0
    zero_count: int = 0
    below: int = 0
    min_q: float = math.inf
    min_index: int = -1
    min_pos_q: float = math.inf
    max_q: float = -math.inf
    worst_q: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    worst_index: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    nonfinite_index: list[int] = field(default_factory=list)
    nonfinite_value: list[float] = field(default_factory=list)
    decades: dict[int, int] = field(default_factory=dict)

    # ----------------------------------------------------------------- thresholds
    def _t(self, ratio: float, dtype: np.dtype[Any]) -> Any:
        key = (self.eps, ratio, dtype.str)
        t = _THRESHOLDS.get(key)
        if t is None:
            t = _threshold_for_dtype(q_threshold(self.eps, ratio), dtype)
            if len(_THRESHOLDS) >= _CACHE_LIMIT:
                _THRESHOLDS.clear()
            _THRESHOLDS[key] = t
        return t

    # ----------------------------------------------------------------- folding
    def update(self, values: np.ndarray, start: int) -> None:
        """Fold a 1-D chunk of q values whose first element has flat index ``start``."""
        n = int(values.size)
        if n == 0:
            return
        if values.dtype == np.float16:
            values = values.astype(np.float32)
        self.count += n
        mn = values.min()
        mx = values.max()
        if np.isnan(mn) or np.isnan(mx) or np.isinf(mx) or mn < 0:
            self._update_slow(values, start)
            return
        self._update_finite(values, start, None, mn, mx)

    def _update_slow(self, values: np.ndarray, start: int) -> None:
        nan_mask = np.isnan(values)
        neg = np.flatnonzero(values < 0)
        if neg.size:
            i = int(neg[0])
            raise NegativeValue(start + i, float(values[i]))
        bad = nan_mask | np.isposinf(values)
        bad_idx = np.flatnonzero(bad)
        n_nan = int(np.count_nonzero(nan_mask))
        self.nan_count += n_nan
        self.inf_count += int(bad_idx.size) - n_nan
        room = self.top_k - len(self.nonfinite_index)
        for i in bad_idx[: max(0, room)]:
            self.nonfinite_index.append(start + int(i))
            self.nonfinite_value.append(float(values[i]))
        good_idx = np.flatnonzero(~bad)
        if good_idx.size == 0:
            return
        finite = values[good_idx]
        self._update_finite(finite, start, good_idx, finite.min(), finite.max())

    def _update_finite(
        self,
        v: np.ndarray,
        start: int,
        index_map: np.ndarray | None,
        mn: Any,
        mx: Any,
    ) -> None:
        """Fold finite, non-negative values ``v``; ``index_map[i]``: v[i]'s offset in the chunk."""
        dtype = v.dtype

        def flat(i: np.ndarray) -> np.ndarray:
            pos = i if index_map is None else index_map[i]
            return pos.astype(np.int64) + start

        # minimum (first occurrence on ties) and maximum
        mn_f = float(mn)
        if mn_f < self.min_q:
            self.min_q = mn_f
            self.min_index = int(flat(np.array([int(np.argmin(v))]))[0])
        self.max_q = max(self.max_q, float(mx))
        zeros = int(np.count_nonzero(v == 0)) if mn_f == 0.0 else 0
        self.zero_count += zeros
        # below the bound: 0 < q < t (r < min_ratio; every zero is below t > 0, counted apart)
        self.below += int(np.count_nonzero(v < self._t(self.min_ratio, dtype))) - zeros
        # decade histogram of r = q/eps, zeros kept apart
        self._fold_decades(v, zeros, mn_f, float(mx), dtype)
        if zeros == v.size:
            return
        # the positive values only: zeros must not fill the worst list of a padded dump
        if zeros:
            pos = np.flatnonzero(v > 0)
            v = v[pos]

            def flat_pos(i: np.ndarray) -> np.ndarray:
                return flat(pos[i])

            self.min_pos_q = min(self.min_pos_q, float(v.min()))
            self._fold_worst(v, flat_pos)
            return
        self.min_pos_q = min(self.min_pos_q, mn_f)
        # worst k: smallest positive q, ties broken by the smaller flat index
        self._fold_worst(v, flat)

    def _fold_decades(
        self, v: np.ndarray, zeros: int, mn: float, mx: float, dtype: np.dtype[Any]
    ) -> None:
        n = int(v.size)
        if zeros == n:
            return
        pos_min = mn if mn > 0 else float(v[v > 0].min())
        lo = max(_LOWEST, _decade_of(pos_min / self.eps) - 1)
        hi = max(lo, min(DECADE_MAX, _decade_of(mx / self.eps) + 1))
        if n <= _SMALL_CHUNK:
            self._fold_decades_small(v, zeros, lo, hi, dtype)
            return
        below = {lo: int(np.count_nonzero(v < self._edge(lo, dtype)))}
        while below[lo] > zeros and lo > _LOWEST:  # widen until the range is exact
            lo -= 1
            below[lo] = int(np.count_nonzero(v < self._edge(lo, dtype)))
        for k in range(lo + 1, hi + 1):
            below[k] = int(np.count_nonzero(v < self._edge(k, dtype)))
        # values with r >= 10**(hi+1) (only possible at the clamp) join the top decade
        below[hi + 1] = n
        for k in range(lo, hi + 1):
            c = below[k + 1] - below[k]
            if c:
                self.decades[k] = self.decades.get(k, 0) + c

    def _fold_decades_small(
        self, v: np.ndarray, zeros: int, lo: int, hi: int, dtype: np.dtype[Any]
    ) -> None:
        """:meth:`_fold_decades` for a small chunk, in one pass: with the decade edges
        ``t_lo <= ... <= t_hi`` (non-decreasing in the data's dtype), ``j = #{k: t_k <= v}``
        puts ``v`` in decade ``lo + j - 1`` (``j = 0``: below ``t_lo``, only zeros once the
        range is exact; ``v >= t_hi`` joins decade ``hi``), the same comparisons ``v < t_k``
        as the pass per decade."""
        while True:
            edges = self._edges(lo, hi, dtype)
            j = np.searchsorted(edges, v, side="right")
            counts = np.bincount(j, minlength=hi - lo + 2)
            if counts[0] <= zeros or lo <= _LOWEST:  # widen until the range is exact
                break
            lo -= 1
        for i in np.flatnonzero(counts[1:]).tolist():
            k = lo + i
            self.decades[k] = self.decades.get(k, 0) + int(counts[i + 1])

    def _edge(self, k: int, dtype: np.dtype[Any]) -> Any:
        """The smallest q (in ``dtype``) of decade ``k``; for decade :data:`_LOWEST`, whose
        edge reads as 0.0, the smallest positive value (zeros are counted apart)."""
        t = self._t(decade_edge(k), dtype)
        if k <= _LOWEST and not t > 0:
            return np.nextafter(dtype.type(0), dtype.type(1))
        return t

    def _edges(self, lo: int, hi: int, dtype: np.dtype[Any]) -> np.ndarray:
        """The decade edges ``t_lo .. t_hi`` in ``dtype`` (cached like the thresholds)."""
        key = (self.eps, float(lo), f"{hi}{dtype.str}")
        edges = _THRESHOLDS.get(key)
        if edges is None:
            edges = np.array([self._edge(k, dtype) for k in range(lo, hi + 1)], dtype)
            if len(_THRESHOLDS) >= _CACHE_LIMIT:
                _THRESHOLDS.clear()
            _THRESHOLDS[key] = edges
        return edges

    def _fold_worst(self, v: np.ndarray, flat: Any) -> None:
        k = self.top_k
        if k <= 0:
            return
        full = self.worst_q.size >= k
        if full:
            cutoff = v.dtype.type(self.worst_q[-1]) if v.dtype != np.float64 else self.worst_q[-1]
            # candidates strictly below the current k-th worst (equal q: earlier index wins,
            # and every index here is later than the kept ones)
            cand = np.flatnonzero(v < cutoff)
            if float(cutoff) != float(self.worst_q[-1]):  # cutoff rounded up in float32
                cand = cand[v[cand].astype(np.float64) < self.worst_q[-1]]
        elif v.size > k:
            kth = np.partition(v, k - 1)[k - 1]
            less = np.flatnonzero(v < kth)
            eq = np.flatnonzero(v == kth)[: k - less.size]
            cand = np.concatenate([less, eq])
        else:
            cand = np.arange(v.size)
        if cand.size == 0:
            return
        q = np.concatenate([self.worst_q, v[cand].astype(np.float64)])
        idx = np.concatenate([self.worst_index, flat(cand)])
        order = np.lexsort((idx, q))[:k]
        self.worst_q = q[order]
        self.worst_index = idx[order]

    # ----------------------------------------------------------------- merging
    def merge(self, other: LayerAccumulator, index_offset: int = 0) -> None:
        """Fold ``other``, whose flat indices are shifted by ``index_offset``.

        The result does not depend on the order of merging: ties of the minimum go to the
        smaller flat index, the nonfinite examples kept are those with the smallest indices and
        the worst-k list is ordered by ``(q, index)``, exactly as one pass over all the data in
        index order gives. The top-k lists are cut to the smaller ``top_k`` of the two.
        """
        if other.eps != self.eps or other.min_ratio != self.min_ratio:
            raise ValueError("cannot merge summaries with different eps or min_ratio")
        if other.quantity != self.quantity:
            raise ValueError("cannot merge a summary of q with one of v (LayerNorm)")
        self.top_k = min(self.top_k, other.top_k)
        self.count += other.count
        self.nan_count += other.nan_count
        self.inf_count += other.inf_count
        self.zero_count += other.zero_count
        self.below += other.below
        o_min_index = other.min_index + index_offset
        if other.min_q < self.min_q or (
            other.min_q == self.min_q and other.count and o_min_index < self.min_index
        ):
            self.min_q = other.min_q
            self.min_index = o_min_index
        self.max_q = max(self.max_q, other.max_q)
        self.min_pos_q = min(self.min_pos_q, other.min_pos_q)
        for k, c in other.decades.items():
            self.decades[k] = self.decades.get(k, 0) + c
        mine = zip(self.nonfinite_index, self.nonfinite_value, strict=True)
        theirs = zip(other.nonfinite_index, other.nonfinite_value, strict=True)
        pairs = sorted([*mine, *((i + index_offset, v) for i, v in theirs)], key=lambda p: p[0])
        pairs = pairs[: max(0, self.top_k)]
        self.nonfinite_index = [i for i, _ in pairs]
        self.nonfinite_value = [v for _, v in pairs]
        q = np.concatenate([self.worst_q, other.worst_q])
        idx = np.concatenate([self.worst_index, other.worst_index + index_offset])
        order = np.lexsort((idx, q))[: self.top_k]
        self.worst_q = q[order]
        self.worst_index = idx[order]

    @property
    def nonfinite(self) -> int:
        return self.nan_count + self.inf_count

    @property
    def violations(self) -> int:
        """Positive inputs below the bound plus nonfinite inputs (zeros are not counted)."""
        return self.below + self.nonfinite
