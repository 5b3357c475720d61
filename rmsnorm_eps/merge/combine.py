"""Combining shard summaries into the report of their concatenation (the merge algorithm).

``rmsnorm-eps ratio --save-summary s.json`` writes :func:`summary_document` of its report; the
summary holds, per layer, every figure of the report with unrounded numbers and
multi-dimensional indices (counts, minimum and maximum, the worst-k inputs, the nonfinite
examples, the decade histogram). :func:`merge_summaries` combines summaries of shards into the
:class:`~rmsnorm_eps.analysis.RatioReport` of their concatenation along axis 0 (the token axis of
a dump split by rank or by host): every count, minimum, histogram and worst-k list equals what
analysing the concatenated data gives, and each listed input carries its shard and its index
inside the shard.

A different bound at merge time (``--delta``/``--min-ratio`` unlike the shards'): the count below
the new bound ``R`` is exact only when a summary determines it, and is then derived per shard:

* the shard's worst-k list reaches ``q/eps >= R`` (or holds every finite value): the count is
  the number of listed values below ``R``;
* ``R`` is a decade edge ``10**k``, or the shard's decade holding ``R`` is empty: the count is
  the zeros plus the decades below.

Otherwise the merge is refused (exit 2) naming the layer and shard: rerun ``ratio`` on that
shard with the new bound. Nothing is ever estimated.

Layers are matched by name; when every summary has exactly one layer (one ``.npy`` file per
shard, named after the file) they are merged as one layer named after the first shard's.

A layer whose dump carries token positions (a ``<layer>::position`` companion, as ``capture``
writes) also holds ``first_token`` and ``other_tokens``: the same figures for position 0 and for
the other positions, their indices being indices of the whole layer. They merge like the layer
itself; the merged layer keeps the split when every shard has it. ``capture --summary-only``
writes this same format (one layer per norm module, shape ``(N,)``), so capture runs, and the
ranks of a distributed capture, merge exactly like shards of a dump.

``merge_reports`` (in-memory reports, e.g. gathered from the ranks of a distributed capture)
keeps its JSON round trip on purpose: each report goes through :func:`summary_document`, the
JSON encoder and :func:`summary_from_document`, exactly the path of a summary file, so a report
from another rank is validated as strictly as a file from another host (counts that add up,
indices within the shape) and in-memory and file merges cannot drift apart. The cost is a few
KB of JSON per layer.
"""

from __future__ import annotations

import json
import math
import os
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, TypeVar

from rmsnorm_eps.analysis import RatioReport, resolve_bound
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.layer_record import (
    MAX_INT,
    LayerResult,
    NonfiniteInput,
    WorstInput,
    accumulator_of,
    layer_result,
)
from rmsnorm_eps.merge.summary_format import (
    ShardSummary,
    load_summary,
    parse_summary_json,
    summary_document,
    summary_from_document,
)
from rmsnorm_eps.numerics import q_threshold
from rmsnorm_eps.safe_eps import apply_zero_rule
from rmsnorm_eps.summary import DECADE_MAX, DECADE_MIN, LayerAccumulator, decade_edge

__all__ = ["merge_reports", "merge_summaries"]

#: An input listed in a merged layer (a worst input or a nonfinite example).
_Listed = TypeVar("_Listed", WorstInput, NonfiniteInput)


def _below_for(layer: LayerResult, shard: ShardSummary, ratio: float) -> int | None:
    """Exact count of positive finite q with q/eps < ratio in one shard layer (zeros apart),
    or None if unknown."""
    if ratio == shard.min_ratio:
        return layer.below_bound
    t = q_threshold(layer.eps, ratio)
    positive = layer.count - layer.nonfinite - layer.zero_count
    if len(layer.worst) == positive or (layer.worst and layer.worst[-1].q >= t):
        return sum(1 for w in layer.worst if w.q < t)
    decades = dict(layer.decades)
    below_zero = 0  # zero vectors are counted apart
    k0 = math.floor(math.log10(ratio))  # the decade of ``ratio``, give or take one
    for k in range(max(DECADE_MIN, k0 - 2), min(DECADE_MAX, k0 + 2) + 1):
        lo = q_threshold(layer.eps, decade_edge(k))
        hi = q_threshold(layer.eps, decade_edge(k + 1)) if k < DECADE_MAX else math.inf
        if t == lo:
            return below_zero + sum(c for j, c in decades.items() if j < k)
        if lo < t < hi:
            if decades.get(k, 0) == 0:
                return below_zero + sum(c for j, c in decades.items() if j < k)
            return None
    return None


def _bound_of(
    shard: ShardSummary, delta: float | None, min_ratio: float | None
) -> tuple[float, float]:
    """``(delta, min_ratio)`` of the merged report: the first shard's, or the one given."""
    if delta is not None or min_ratio is not None:
        return resolve_bound(delta, min_ratio)
    return shard.delta, shard.min_ratio


def _check_top_k(shard: ShardSummary, top_k: int | None) -> None:
    if top_k is None:
        return
    if top_k < 0:
        raise InvalidParameterError(f"top must be >= 0, got {top_k}")
    if top_k > shard.top_k:
        raise InvalidParameterError(
            f"top {top_k} exceeds what the summaries kept ({shard.top_k} worst inputs per layer"
            f" in {shard.path})"
        )


class _Fold:
    """One merged layer, folded a shard at a time: the accumulators of the whole layer and of
    its position split, the shards' row offsets along axis 0, and what the shards must agree
    on (eps, dtype, raw dimension, every axis but the first)."""

    def __init__(self, name: str, first: ShardSummary, layer: LayerResult) -> None:
        self.name = name
        self.first_path = first.path
        self.eps = layer.eps
        self.dtype = layer.dtype
        self.raw_dim = layer.raw_dim
        self.quantity = layer.quantity
        self.zero_d = not layer.shape
        shape = (1,) if not layer.shape else layer.shape
        self.rest = shape[1:]
        self.stride = math.prod(self.rest)
        self.offsets: list[int] = []
        self.rows = 0
        self.parts: list[LayerAccumulator | None] = [None, None, None]  # whole, first, other
        self.split = True

    def add(self, s: ShardSummary, ly: LayerResult, ratio: float, k: int) -> None:
        self._agree(s, ly)
        shape = (1,) if not ly.shape else ly.shape
        if (self.rows + shape[0]) * self.stride > MAX_INT:
            raise InputFileError(
                s.path,
                f"the merged layer would hold more than {MAX_INT} values (int64)",
                key=self.name,
            )
        off = self.rows
        self.offsets.append(off)
        self.rows += shape[0]
        self.split = self.split and ly.first_token is not None and ly.other_tokens is not None
        pieces = (ly, ly.first_token, ly.other_tokens) if self.split else (ly,)
        for i, piece in enumerate(pieces):
            assert piece is not None
            acc = self._accumulator(s, piece, off, ratio, k)
            total = self.parts[i]
            if total is None:
                self.parts[i] = acc
            else:
                total.merge(acc)

    def _agree(self, s: ShardSummary, ly: LayerResult) -> None:
        if ly.eps != self.eps:
            raise InputFileError(
                s.path,
                f"eps {ly.eps!r} differs from {self.eps!r} in {self.first_path}",
                key=self.name,
            )
        if ly.quantity != self.quantity:
            raise InputFileError(
                s.path,
                f"quantity {ly.quantity} differs from {self.quantity} in {self.first_path} "
                "(q = mean(x^2) against a LayerNorm's v)",
                key=self.name,
            )
        if ly.raw_dim != self.raw_dim or ly.dtype != self.dtype:
            raise InputFileError(
                s.path,
                f"dtype/raw dimension ({ly.dtype}, {ly.raw_dim}) differ from "
                f"({self.dtype}, {self.raw_dim}) in {self.first_path}",
                key=self.name,
            )
        shape = (1,) if not ly.shape else ly.shape
        if shape[1:] != self.rest:
            raise InputFileError(
                s.path,
                f"layer {self.name!r} has q shape {list(shape)}; the shards must agree on "
                f"every axis but the first ({list(self.rest)})",
                key=self.name,
            )

    def _flat(self, index: tuple[int, ...], offset: int) -> int:
        """The C-order flat index over the merged shape of ``index`` in a shard at ``offset``
        rows (independent of the rows still to come)."""
        if not index:
            return offset
        flat = index[0] + offset
        for i, n in zip(index[1:], self.rest, strict=True):
            flat = flat * n + i
        return flat

    def _accumulator(
        self, s: ShardSummary, ly: LayerResult, off: int, ratio: float, k: int
    ) -> LayerAccumulator:
        below = _below_for(ly, s, ratio)
        if below is None:
            raise InvalidParameterError(
                f"cannot merge layer {self.name!r} of {s.path} at q/eps >= {ratio!r}: the "
                f"summary was made at q/eps >= {s.min_ratio!r} and neither its worst-{s.top_k} "
                "list nor its decade histogram determines the count below the new bound; rerun "
                "`rmsnorm-eps ratio --save-summary` on that shard with the new bound"
            )
        acc = accumulator_of(ly, ratio, k, lambda i: self._flat(i, off))
        acc.below = below
        if ly.min_q is not None:
            first_is_min = bool(ly.worst) and not ly.zero_count  # a zero minimum is not listed
            acc.min_index = self._flat(ly.worst[0].index, off) if first_is_min else off
        return acc

    def result(self, k: int) -> LayerResult:
        shape = (self.rows, *self.rest)
        whole, first, other = self.parts
        assert whole is not None
        result = self._result(self.name, whole, shape, k)
        if self.split and first is not None and other is not None:
            # the split survives only when every shard has it (a shard without positions has none)
            result = replace(
                result,
                first_token=self._result(f"{self.name} (first token)", first, shape, k),
                other_tokens=self._result(f"{self.name} (other tokens)", other, shape, k),
            )
        return result

    def _result(
        self, name: str, total: LayerAccumulator, shape: tuple[int, ...], k: int
    ) -> LayerResult:
        total.top_k = min(total.top_k, k)
        result = layer_result(
            total, name=name, shape=shape, order="C", dtype=self.dtype, raw_dim=self.raw_dim
        )
        offsets = self.offsets

        def located(item: _Listed) -> _Listed:
            pos = bisect_right(offsets, item.index[0]) - 1
            local = () if self.zero_d else (item.index[0] - offsets[pos], *item.index[1:])
            return replace(item, shard=pos, shard_index=local)

        return replace(
            result,
            worst=tuple(located(w) for w in result.worst[:k]),
            nonfinite_examples=tuple(located(n) for n in result.nonfinite_examples[:k]),
        )


def merge_summaries(
    paths: Iterable[str | os.PathLike[str]] | Iterable[ShardSummary],
    *,
    delta: float | None = None,
    min_ratio: float | None = None,
    top_k: int | None = None,
    zero_is_violation: bool = False,
) -> RatioReport:
    """Merge shard summaries into the report of their concatenation along axis 0.

    The bound defaults to the shards' own (they must then agree); with ``delta``/``min_ratio``
    the counts below the new bound are derived where a summary determines them exactly (see the
    module docstring), else :class:`InvalidParameterError` is raised. ``top_k`` defaults to the
    smallest ``top_k`` of the shards and cannot exceed it. Zero vectors are counted apart and
    are no violations, unless ``zero_is_violation``.

    The summaries are read and folded one at a time (memory: one summary and one accumulator
    per layer, whatever the number of shards); ``paths`` may be an iterator that makes each
    summary when it is asked for (the ranks of a distributed capture).
    """
    folds: dict[str, _Fold] = {}
    first: ShardSummary | None = None
    bound = (0.0, 0.0)
    k = 0
    single = False
    names: list[str] = []
    labels: list[str] = []
    sources: list[str] = []
    for p in paths:
        s = p if isinstance(p, ShardSummary) else load_summary(p)
        _check_top_k(s, top_k)
        if first is None:
            first = replace(s, layers=())  # its head only: its layers are folded, then released
            bound = _bound_of(s, delta, min_ratio)
            single = len(s.layers) == 1  # .npy shards: names are file stems
            names = sorted(ly.name for ly in s.layers)
            k = s.top_k if top_k is None else top_k
            # the first of a repeated name, as a search in order finds
            for ly in s.layers:
                folds.setdefault(ly.name, _Fold(ly.name, s, ly))
        else:
            _check_agrees(first, s, single, names, delta is None and min_ratio is None)
            k = min(k, s.top_k)
        # layer name -> the first layer of that name (a reversed dict keeps the first)
        by_name = {ly.name: ly for ly in reversed(s.layers)}
        for name, fold in folds.items():
            fold.add(s, s.layers[0] if single else by_name[name], bound[1], k)
        labels.append(str(s.path))
        sources.append(s.source)
        del s, by_name, p  # folded: not held while the next summary is read
    if first is None:
        raise InvalidParameterError("give at least one summary to merge")
    results = [fold.result(k) for fold in folds.values()]
    return RatioReport(
        source=" + ".join(labels),
        raw=first.raw,
        delta=bound[0],
        min_ratio=bound[1],
        top_k=k,
        layers=tuple(apply_zero_rule(ly, zero_is_violation) for ly in results),
        shards=tuple(sources),
        zero_is_violation=zero_is_violation,
    )


def _check_agrees(
    first: ShardSummary, s: ShardSummary, single: bool, names: list[str], same_bound: bool
) -> None:
    """A later shard against the first: raw, the bound (unless one is given), layer names."""
    if s.raw != first.raw:
        raise InputFileError(s.path, f"raw is {s.raw} but {first.path} has {first.raw}", key="raw")
    if same_bound and s.min_ratio != first.min_ratio:
        raise InvalidParameterError(
            "the summaries were made with different bounds "
            f"(q/eps >= {', '.join(repr(r) for r in sorted({first.min_ratio, s.min_ratio}))}); "
            "give --delta or --min-ratio for the merged report"
        )
    if single and len(s.layers) == 1:
        return
    other = sorted(ly.name for ly in s.layers)
    if other != names:
        raise InputFileError(s.path, f"layers {other} differ from {first.path}'s {names}")


def merge_reports(
    reports: list[RatioReport], labels: list[str] | None = None, **kw: Any
) -> RatioReport:
    """Merge in-memory reports (e.g. gathered from the ranks of a distributed job) exactly as
    :func:`merge_summaries` merges their summary files; ``labels`` name them (default
    ``part0``, ``part1``, ...)."""
    names = labels if labels is not None else [f"part{i}" for i in range(len(reports))]
    if len(names) != len(reports):
        raise InvalidParameterError("give one label per report")
    shards = [
        summary_from_document(
            parse_summary_json(json.dumps(summary_document(r), allow_nan=False)), n
        )
        for r, n in zip(reports, names, strict=True)
    ]
    return merge_summaries(shards, **kw)
