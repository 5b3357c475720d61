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
from dataclasses import replace
from typing import Any

import numpy as np

from rmsnorm_eps.analysis import (
    LayerResult,
    NonfiniteInput,
    RatioReport,
    WorstInput,
    layer_result,
    resolve_bound,
)
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.merge.summary_format import (
    ShardLayer,
    ShardSummary,
    load_summary,
    summary_document,
    summary_from_document,
)
from rmsnorm_eps.numerics import q_threshold
from rmsnorm_eps.summary import DECADE_MAX, DECADE_MIN, LayerAccumulator, decade_edge

__all__ = ["merge_reports", "merge_summaries"]


def _below_for(layer: ShardLayer, shard: ShardSummary, ratio: float) -> int | None:
    """Exact count of finite q with q/eps < ratio in one shard layer, or None if unknown."""
    if ratio == shard.min_ratio:
        return layer.below_bound
    t = q_threshold(layer.eps, ratio)
    finite = layer.count - layer.nan - layer.inf
    if len(layer.worst) == finite or (layer.worst and layer.worst[-1][1] >= t):
        return sum(1 for _, q in layer.worst if q < t)
    decades = dict(layer.decades)
    below_zero = layer.zero  # ratio > 0: every zero is below
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


def _concat_shape(
    name: str, shards: list[ShardSummary], layers: list[ShardLayer]
) -> tuple[tuple[int, ...], list[int]]:
    """Shape of the concatenation along axis 0 and each shard's row offset."""
    shapes = [(1,) if not ly.shape else ly.shape for ly in layers]
    rest = shapes[0][1:]
    for s, shape in zip(shards, shapes, strict=True):
        if shape[1:] != rest:
            raise InputFileError(
                s.path,
                f"layer {name!r} has q shape {list(shape)}; the shards must agree on "
                f"every axis but the first ({list(rest)})",
                key=name,
            )
    offsets = []
    total = 0
    for shape in shapes:
        offsets.append(total)
        total += shape[0]
    return (total, *rest), offsets


def _merge_bound(
    shards: list[ShardSummary], delta: float | None, min_ratio: float | None
) -> tuple[float, float]:
    """``(delta, min_ratio)`` of the merged report: the shards' common bound, or the one given."""
    if delta is not None or min_ratio is not None:
        return resolve_bound(delta, min_ratio)
    ratios = {s.min_ratio for s in shards}
    if len(ratios) != 1:
        raise InvalidParameterError(
            "the summaries were made with different bounds "
            f"(q/eps >= {', '.join(repr(r) for r in sorted(ratios))}); give --delta or "
            "--min-ratio for the merged report"
        )
    return shards[0].delta, shards[0].min_ratio


def _merge_top_k(shards: list[ShardSummary], top_k: int | None) -> int:
    """The merged report's top_k: at most what every shard kept (default: that)."""
    shard_k = min(s.top_k for s in shards)
    if top_k is None:
        return shard_k
    if top_k < 0:
        raise InvalidParameterError(f"top must be >= 0, got {top_k}")
    if top_k > shard_k:
        raise InvalidParameterError(
            f"top {top_k} exceeds what the summaries kept ({shard_k} worst inputs per layer)"
        )
    return top_k


def _check_raw_agrees(shards: list[ShardSummary]) -> None:
    first = shards[0]
    for s in shards[1:]:
        if s.raw != first.raw:
            raise InputFileError(
                s.path, f"raw is {s.raw} but {first.path} has {first.raw}", key="raw"
            )


def _check_names_agree(shards: list[ShardSummary]) -> None:
    first = shards[0]
    names = sorted(ly.name for ly in first.layers)
    for s in shards[1:]:
        other = sorted(ly.name for ly in s.layers)
        if other != names:
            raise InputFileError(s.path, f"layers {other} differ from {first.path}'s {names}")


def merge_summaries(
    paths: list[str | os.PathLike[str]] | list[ShardSummary],
    *,
    delta: float | None = None,
    min_ratio: float | None = None,
    top_k: int | None = None,
) -> RatioReport:
    """Merge shard summaries into the report of their concatenation along axis 0.

    The bound defaults to the shards' own (they must then agree); with ``delta``/``min_ratio``
    the counts below the new bound are derived where a summary determines them exactly (see the
    module docstring), else :class:`InvalidParameterError` is raised. ``top_k`` defaults to the
    smallest ``top_k`` of the shards and cannot exceed it.
    """
    shards = [p if isinstance(p, ShardSummary) else load_summary(p) for p in paths]
    if not shards:
        raise InvalidParameterError("give at least one summary to merge")
    first = shards[0]
    _check_raw_agrees(shards)
    d_value, ratio = _merge_bound(shards, delta, min_ratio)
    k = _merge_top_k(shards, top_k)
    single = all(len(s.layers) == 1 for s in shards)  # .npy shards: names are file stems
    if not single:
        _check_names_agree(shards)
    results: list[LayerResult] = []
    for name in [ly.name for ly in first.layers]:
        layers = [
            s.layers[0] if single else next(ly for ly in s.layers if ly.name == name)
            for s in shards
        ]
        results.append(_merge_layer(name, shards, layers, ratio, k))
    return RatioReport(
        source=" + ".join(str(s.path) for s in shards),
        raw=first.raw,
        delta=d_value,
        min_ratio=ratio,
        top_k=k,
        layers=tuple(results),
        shards=tuple(s.source for s in shards),
    )


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
        summary_from_document(json.loads(json.dumps(summary_document(r), allow_nan=False)), n)
        for r, n in zip(reports, names, strict=True)
    ]
    return merge_summaries(shards, **kw)


def _merge_layer(
    name: str, shards: list[ShardSummary], layers: list[ShardLayer], ratio: float, k: int
) -> LayerResult:
    eps = layers[0].eps
    for s, ly in zip(shards, layers, strict=True):
        if ly.eps != eps:
            raise InputFileError(
                s.path,
                f"eps {ly.eps!r} differs from {layers[0].eps!r} in {shards[0].path}",
                key=name,
            )
        if ly.raw_dim != layers[0].raw_dim or ly.dtype != layers[0].dtype:
            raise InputFileError(
                s.path,
                f"dtype/raw dimension ({ly.dtype}, {ly.raw_dim}) differ from "
                f"({layers[0].dtype}, {layers[0].raw_dim}) in {shards[0].path}",
                key=name,
            )
    shape, offsets = _concat_shape(name, shards, layers)
    result = _merge_parts(name, shards, layers, ratio, k, shape, offsets)
    firsts = [ly.first_token for ly in layers if ly.first_token is not None]
    others = [ly.other_tokens for ly in layers if ly.other_tokens is not None]
    if len(firsts) == len(others) == len(layers):
        # the split survives only when every shard has it (a shard without positions has none)
        first, other = (
            _merge_parts(f"{name} ({label})", shards, parts, ratio, k, shape, offsets)
            for parts, label in ((firsts, "first token"), (others, "other tokens"))
        )
        result = replace(result, first_token=first, other_tokens=other)
    return result


def _merge_parts(
    name: str,
    shards: list[ShardSummary],
    layers: list[ShardLayer],
    ratio: float,
    k: int,
    shape: tuple[int, ...],
    offsets: list[int],
) -> LayerResult:
    """Merge one set of figures (a whole layer, or its first-token or other-token part)."""
    eps = layers[0].eps

    def flat(index: tuple[int, ...], offset: int) -> int:
        idx = (index[0] + offset, *index[1:]) if index else (offset,)
        return int(np.ravel_multi_index(idx, shape))

    total: LayerAccumulator | None = None
    for s, ly, off in zip(shards, layers, offsets, strict=True):
        below = _below_for(ly, s, ratio)
        if below is None:
            raise InvalidParameterError(
                f"cannot merge layer {name!r} of {s.path} at q/eps >= {ratio!r}: the summary "
                f"was made at q/eps >= {s.min_ratio!r} and neither its worst-{s.top_k} list nor "
                "its decade histogram determines the count below the new bound; rerun "
                "`rmsnorm-eps ratio --save-summary` on that shard with the new bound"
            )
        acc = LayerAccumulator(eps, ratio, k)
        acc.count = ly.count
        acc.nan_count = ly.nan
        acc.inf_count = ly.inf
        acc.zero_count = ly.zero
        acc.below = below
        if ly.min_q is not None:
            acc.min_q = ly.min_q
            acc.min_index = flat(ly.worst[0][0], off) if ly.worst else off
        if ly.max_q is not None:
            acc.max_q = ly.max_q
        worst = ly.worst[:k]
        acc.worst_q = np.array([q for _, q in worst], np.float64)
        acc.worst_index = np.array([flat(i, off) for i, _ in worst], np.int64)
        nonf = ly.nonfinite[:k]
        acc.nonfinite_index = [flat(i, off) for i, _ in nonf]
        acc.nonfinite_value = [v for _, v in nonf]
        acc.decades = dict(ly.decades)
        if total is None:
            total = acc
        else:
            total.merge(acc)
    assert total is not None
    result = layer_result(
        total,
        name=name,
        shape=shape,
        order="C",
        dtype=layers[0].dtype,
        raw_dim=layers[0].raw_dim,
    )
    q_shape_0d = not layers[0].shape

    def locate(index: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        pos = bisect_right(offsets, index[0]) - 1
        local = () if q_shape_0d else (index[0] - offsets[pos], *index[1:])
        return pos, local

    worst_out: list[WorstInput] = []
    for w in result.worst:
        pos, local = locate(w.index)
        worst_out.append(replace(w, shard=pos, shard_index=local))
    nonf_out: list[NonfiniteInput] = []
    for n in result.nonfinite_examples:
        pos, local = locate(n.index)
        nonf_out.append(replace(n, shard=pos, shard_index=local))
    return replace(result, worst=tuple(worst_out), nonfinite_examples=tuple(nonf_out))
