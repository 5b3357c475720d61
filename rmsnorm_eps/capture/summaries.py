"""Bounded-memory capture: one :class:`LayerAccumulator` (the analyzer's own summary) per stream.

Each hooked module keeps three streams: all tokens, the first token of each sequence
(position 0) and the other tokens. A stream's flat index is the rank of the value in that
stream (exactly the index the full dump would give it for the "all" stream). Because the
accumulator only keeps flat indices, :class:`TrackedSummary` also remembers, for the few
indices it still reports (the minimum and the worst k), the (batch, position, head) they came
from. Summaries of consecutive parts of the data merge exactly (:meth:`TrackedSummary.merge`)
and serialize to plain JSON-able dicts without pickling (:func:`summary_to_dict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rmsnorm_eps.summary import LayerAccumulator

__all__ = ["STREAMS", "TrackedSummary", "summary_from_dict", "summary_to_dict"]

#: The streams kept per module: every token, position 0 only, positions > 0.
STREAMS = ("all", "first", "other")


@dataclass
class TrackedSummary:
    """A :class:`LayerAccumulator` plus the origin (batch, position, head) of its kept indices."""

    acc: LayerAccumulator
    where: dict[int, tuple[int, int, int]] = field(default_factory=dict)

    def update(
        self, q: np.ndarray, batch: np.ndarray, position: np.ndarray, head: np.ndarray
    ) -> None:
        """Fold q values (1-D) that follow everything folded so far, with their origins."""
        start = self.acc.count
        self.acc.update(q, start)
        end = start + int(q.size)
        for i in self._kept():
            if start <= i < end and i not in self.where:
                j = i - start
                self.where[i] = (int(batch[j]), int(position[j]), int(head[j]))
        self._prune()

    def _kept(self) -> list[int]:
        kept = [int(i) for i in self.acc.worst_index.tolist()]
        kept += [int(i) for i in self.acc.nonfinite_index]
        if self.acc.min_index >= 0:
            kept.append(self.acc.min_index)
        return kept

    def _prune(self) -> None:
        keep = set(self._kept())
        for i in [i for i in self.where if i not in keep]:
            del self.where[i]

    def merge(self, other: TrackedSummary, batch_offset: int) -> None:
        """Fold ``other``, the summary of data that follow this one's; its batch indices are
        shifted by ``batch_offset`` (the sequences this one has seen)."""
        offset = self.acc.count
        self.acc.merge(other.acc, index_offset=offset)
        for i, (b, p, h) in other.where.items():
            self.where[i + offset] = (b + batch_offset, p, h)
        self._prune()


def _f(value: float) -> float | str:
    v = float(value)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _unf(value: float | str) -> float:
    return float(value)  # float("inf"), float("nan") parse the strings written by _f


def summary_to_dict(s: TrackedSummary) -> dict[str, Any]:
    """A JSON-able dict of the summary (non-finite floats as "nan"/"inf"/"-inf")."""
    a = s.acc
    return {
        "eps": a.eps,
        "min_ratio": a.min_ratio,
        "top_k": a.top_k,
        "count": a.count,
        "nan_count": a.nan_count,
        "inf_count": a.inf_count,
        "zero_count": a.zero_count,
        "below": a.below,
        "min_q": _f(a.min_q),
        "min_index": a.min_index,
        "max_q": _f(a.max_q),
        "worst_q": [_f(v) for v in a.worst_q.tolist()],
        "worst_index": [int(i) for i in a.worst_index.tolist()],
        "nonfinite_index": list(a.nonfinite_index),
        "nonfinite_value": [_f(v) for v in a.nonfinite_value],
        "decades": [[int(k), int(c)] for k, c in sorted(a.decades.items())],
        "where": [[i, *w] for i, w in sorted(s.where.items())],
    }


def summary_from_dict(d: dict[str, Any]) -> TrackedSummary:
    """Inverse of :func:`summary_to_dict`."""
    a = LayerAccumulator(float(d["eps"]), float(d["min_ratio"]), int(d["top_k"]))
    a.count = int(d["count"])
    a.nan_count = int(d["nan_count"])
    a.inf_count = int(d["inf_count"])
    a.zero_count = int(d["zero_count"])
    a.below = int(d["below"])
    a.min_q = _unf(d["min_q"])
    a.min_index = int(d["min_index"])
    a.max_q = _unf(d["max_q"])
    a.worst_q = np.array([_unf(v) for v in d["worst_q"]], dtype=np.float64)
    a.worst_index = np.array(d["worst_index"], dtype=np.int64)
    a.nonfinite_index = [int(i) for i in d["nonfinite_index"]]
    a.nonfinite_value = [_unf(v) for v in d["nonfinite_value"]]
    a.decades = {int(k): int(c) for k, c in d["decades"]}
    where = {int(r[0]): (int(r[1]), int(r[2]), int(r[3])) for r in d["where"]}
    return TrackedSummary(a, where)
