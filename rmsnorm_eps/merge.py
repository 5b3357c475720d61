"""Mergeable summaries: analyse each shard of a dump where it lives, combine the reports exactly.

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
"""

from __future__ import annotations

import json
import math
import os
from bisect import bisect_right
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rmsnorm_eps import __version__
from rmsnorm_eps.analysis import (
    LayerResult,
    NonfiniteInput,
    RatioReport,
    WorstInput,
    layer_result,
    resolve_bound,
)
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.numerics import q_threshold
from rmsnorm_eps.summary import DECADE_MAX, DECADE_MIN, LayerAccumulator, decade_edge

__all__ = [
    "SUMMARY_SCHEMA",
    "SUMMARY_VERSION",
    "ShardLayer",
    "ShardSummary",
    "load_summary",
    "merge_reports",
    "merge_summaries",
    "summary_document",
    "summary_from_document",
    "write_summary",
]

SUMMARY_SCHEMA = "rmsnorm-eps-summary"
SUMMARY_VERSION = 1
#: Summaries are small (a few KB per layer at the default --top 5): a larger file is refused
#: before it is read, so parsing it stays within a bounded amount of memory.
_MAX_SUMMARY_BYTES = 64 << 20
#: Counts, sizes and indices must fit in int64 (numpy's index arithmetic).
_MAX_INT = 2**63 - 1


def _jnum(value: float | None) -> float | str | None:
    if value is None:
        return None
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def summary_document(report: RatioReport) -> dict[str, Any]:
    """The versioned summary of a report (what ``--save-summary`` writes)."""
    return {
        "schema": SUMMARY_SCHEMA,
        "schema_version": SUMMARY_VERSION,
        "tool": "rmsnorm-eps",
        "version": __version__,
        "source": report.source,
        "raw": report.raw,
        "delta": report.delta,
        "min_ratio": report.min_ratio,
        "top_k": report.top_k,
        "tie_rule": "q/eps == min_ratio passes; violation when q/eps < min_ratio",
        "layers": [_layer_document(layer) for layer in report.layers],
    }


def _figures(layer: LayerResult) -> dict[str, Any]:
    """The mergeable figures of a layer (or of its first-token / other-token part)."""
    return {
        "count": layer.count,
        "nan": layer.nan_count,
        "inf": layer.inf_count,
        "zero": layer.zero_count,
        "below_bound": layer.below_bound,
        "min_q": layer.min_q,
        "max_q": layer.max_q,
        "worst": [{"index": list(w.index), "q": w.q} for w in layer.worst],
        "nonfinite_examples": [
            {"index": list(n.index), "value": _jnum(n.value)} for n in layer.nonfinite_examples
        ],
        "decades": [[k, c] for k, c in layer.decades],
    }


def _layer_document(layer: LayerResult) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": layer.name,
        "eps": layer.eps,
        "shape": list(layer.shape),
        "dtype": layer.dtype,
        "raw_dim": layer.raw_dim,
        **_figures(layer),
    }
    if layer.first_token is not None and layer.other_tokens is not None:
        # indices inside are indices of the whole layer's array, as in the report
        doc["first_token"] = _figures(layer.first_token)
        doc["other_tokens"] = _figures(layer.other_tokens)
    return doc


def write_summary(report: RatioReport, path: str | os.PathLike[str]) -> None:
    """Write :func:`summary_document` as JSON, atomically."""
    from rmsnorm_eps.atomic import atomic_write_text

    text = json.dumps(summary_document(report), indent=1, allow_nan=False) + "\n"
    atomic_write_text(Path(path), text)


@dataclass(frozen=True)
class ShardLayer:
    """One layer of a shard summary (indices as tuples over ``shape``)."""

    name: str
    eps: float
    shape: tuple[int, ...]
    dtype: str
    raw_dim: int | None
    count: int
    nan: int
    inf: int
    zero: int
    below_bound: int
    min_q: float | None
    max_q: float | None
    worst: tuple[tuple[tuple[int, ...], float], ...]
    nonfinite: tuple[tuple[tuple[int, ...], float], ...]
    decades: tuple[tuple[int, int], ...]
    # Optional position split (dumps with a ::position companion, capture summaries): the same
    # figures for position 0 and for the other positions; their indices index the whole layer.
    first_token: ShardLayer | None = None
    other_tokens: ShardLayer | None = None


@dataclass(frozen=True)
class ShardSummary:
    """A loaded summary file."""

    path: Path
    source: str
    raw: bool
    delta: float
    min_ratio: float
    top_k: int
    layers: tuple[ShardLayer, ...]


class _Reader:
    """Typed access to a parsed JSON document with errors naming the file and key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, problem: str) -> InputFileError:
        return InputFileError(self.path, problem, key=key)

    def get(self, obj: Any, key: str, where: str) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            raise self.fail(f"{where}{key}", "missing")
        return obj[key]

    def int_(self, obj: Any, key: str, where: str = "", minimum: int = 0) -> int:
        v = self.get(obj, key, where)
        if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= _MAX_INT:
            raise self.fail(f"{where}{key}", f"expected an integer >= {minimum} (int64), got {v!r}")
        return v

    def float_(self, obj: Any, key: str, where: str = "", allow_none: bool = False) -> Any:
        v = self.get(obj, key, where)
        return self.number(v, f"{where}{key}", allow_none)

    def number(self, v: Any, key: str, allow_none: bool = False, nonfinite: bool = False) -> Any:
        if v is None and allow_none:
            return None
        if nonfinite and v in ("nan", "inf", "-inf"):
            return float(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.fail(key, f"expected a finite number, got {v!r}")
        return float(v)

    def index(self, v: Any, key: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        """An index into ``shape``: one integer ``0 <= i < n`` per axis."""
        if (
            not isinstance(v, list)
            or len(v) != len(shape)
            or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n
                for i, n in zip(v, shape, strict=True)
            )
        ):
            raise self.fail(
                key,
                f"expected an index of {len(shape)} non-negative integers within shape "
                f"{list(shape)}, got {v!r}",
            )
        return tuple(v)


def load_summary(path: str | os.PathLike[str]) -> ShardSummary:
    """Read and validate a summary written by ``ratio --save-summary`` or
    ``capture --summary-only``."""
    p = Path(path)
    from rmsnorm_eps.dumps import check_regular_file

    size = check_regular_file(p)
    if size > _MAX_SUMMARY_BYTES:
        raise InputFileError(
            p, f"summary too large ({size} bytes; the limit is {_MAX_SUMMARY_BYTES >> 20} MiB)"
        )
    try:
        doc = json.loads(p.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise InputFileError(p, "not a JSON summary (nested too deeply)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputFileError(p, f"not a JSON summary ({exc})") from None
    return summary_from_document(doc, p)


def _no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (the summary writes them as strings): refuse them."""
    raise ValueError(f"{name} is not valid JSON")


def summary_from_document(doc: Any, path: str | os.PathLike[str]) -> ShardSummary:
    """Validate a parsed summary document; ``path`` names it in errors and in merged reports
    (a file, or a label such as ``rank1`` for summaries gathered in memory)."""
    p = Path(path)
    r = _Reader(p)
    if not isinstance(doc, dict) or doc.get("schema") != SUMMARY_SCHEMA:
        raise r.fail("schema", f"not an rmsnorm-eps summary (expected {SUMMARY_SCHEMA!r})")
    version = doc.get("schema_version")
    if version != SUMMARY_VERSION:
        raise r.fail(
            "schema_version",
            f"unsupported summary version {version!r} "
            f"(this rmsnorm-eps reads version {SUMMARY_VERSION})",
        )
    raw = r.get(doc, "raw", "")
    if not isinstance(raw, bool):
        raise r.fail("raw", f"expected true or false, got {raw!r}")
    source = r.get(doc, "source", "")
    if not isinstance(source, str):
        raise r.fail("source", f"expected a string, got {source!r}")
    layers_doc = r.get(doc, "layers", "")
    if not isinstance(layers_doc, list) or not layers_doc:
        raise r.fail("layers", "expected a non-empty list")
    layers = []
    seen: set[str] = set()
    for i, ld in enumerate(layers_doc):
        w = f"layers[{i}]."
        name = r.get(ld, "name", w)
        if not isinstance(name, str) or name in seen:
            raise r.fail(f"{w}name", f"expected a unique layer name, got {name!r}")
        seen.add(name)
        shape_v = r.get(ld, "shape", w)
        if (
            not isinstance(shape_v, list)
            or len(shape_v) > 32
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape_v)
            or math.prod(shape_v) > _MAX_INT
        ):
            raise r.fail(f"{w}shape", f"expected a list of sizes (int64), got {shape_v!r}")
        shape = tuple(shape_v)
        raw_dim = r.get(ld, "raw_dim", w)
        if raw_dim is not None and (
            isinstance(raw_dim, bool)
            or not isinstance(raw_dim, int)
            or not 1 <= raw_dim <= _MAX_INT
        ):
            raise r.fail(f"{w}raw_dim", f"expected an integer >= 1 or null, got {raw_dim!r}")
        dtype = r.get(ld, "dtype", w)
        if not isinstance(dtype, str):
            raise r.fail(f"{w}dtype", f"expected a string, got {dtype!r}")
        eps = r.float_(ld, "eps", w)
        if eps <= 0.0:
            raise r.fail(f"{w}eps", f"eps must be a finite number > 0, got {eps!r}")
        layer = ShardLayer(
            name=name,
            eps=eps,
            shape=shape,
            dtype=dtype,
            raw_dim=raw_dim,
            **_parse_figures(r, ld, w, shape),
        )
        if layer.count != math.prod(shape):
            raise r.fail(f"{w}count", f"count {layer.count} does not match shape {list(shape)}")
        _check_figures(r, layer, w)
        has_split = [key in ld for key in ("first_token", "other_tokens")]
        if any(has_split):
            if not all(has_split):
                raise r.fail(f"{w}first_token", "first_token and other_tokens come together")
            first, other = (
                replace(
                    layer,
                    name=f"{name} ({label})",
                    **_parse_figures(r, ld[key], w + key + ".", shape),
                )
                for key, label in (("first_token", "first token"), ("other_tokens", "other tokens"))
            )
            if first.count + other.count != layer.count:
                raise r.fail(
                    f"{w}first_token.count",
                    f"first_token {first.count} + other_tokens {other.count} != count "
                    f"{layer.count}",
                )
            for part, key in ((first, "first_token"), (other, "other_tokens")):
                _check_figures(r, part, f"{w}{key}.")
            layer = replace(layer, first_token=first, other_tokens=other)
        layers.append(layer)
    delta = r.float_(doc, "delta")
    if not 0.0 < delta < 1.0:
        raise r.fail("delta", f"expected a number in (0, 1), got {delta!r}")
    min_ratio = r.float_(doc, "min_ratio")
    if min_ratio <= 0.0:
        raise r.fail("min_ratio", f"expected a number > 0, got {min_ratio!r}")
    return ShardSummary(
        path=p,
        source=source,
        raw=raw,
        delta=delta,
        min_ratio=min_ratio,
        top_k=r.int_(doc, "top_k"),
        layers=tuple(layers),
    )


def _check_figures(r: _Reader, layer: ShardLayer, w: str) -> None:
    """The figures of one layer (or part) must be those of one array: counts that add up, a
    histogram that covers every finite nonzero q once, minimum and worst list consistent.
    A summary that breaks these was edited or corrupted; merging it would report wrong
    counts, so it is refused."""
    finite = layer.count - layer.nan - layer.inf
    if finite < 0:
        raise r.fail(
            f"{w}count", f"count {layer.count} < nan {layer.nan} + inf {layer.inf} (nonfinite)"
        )
    if layer.zero > finite or layer.below_bound > finite:
        raise r.fail(
            f"{w}below_bound",
            f"zero {layer.zero} or below_bound {layer.below_bound} exceeds the {finite} finite "
            "values",
        )
    decades = [k for k, _ in layer.decades]
    if len(set(decades)) != len(decades):
        raise r.fail(f"{w}decades", "a decade is listed twice")
    histogram = layer.zero + sum(c for _, c in layer.decades)
    if histogram != finite:
        raise r.fail(
            f"{w}decades",
            f"zero + decade counts = {histogram}, but count - nan - inf = {finite}",
        )
    if (layer.min_q is None) != (finite == 0) or (layer.max_q is None) != (finite == 0):
        raise r.fail(f"{w}min_q", "min_q and max_q are null exactly when no q is finite")
    qs = [q for _, q in layer.worst]
    if len(qs) > finite or any(q < 0.0 for q in qs) or qs != sorted(qs):
        raise r.fail(
            f"{w}worst", f"expected at most {finite} q values >= 0 in ascending order, got {qs!r}"
        )
    if (
        layer.min_q is not None
        and layer.max_q is not None
        and (not 0.0 <= layer.min_q <= layer.max_q or (qs and qs[0] != layer.min_q))
    ):
        raise r.fail(
            f"{w}min_q",
            f"expected 0 <= min_q <= max_q and min_q = the first worst q, got "
            f"{layer.min_q!r}, {layer.max_q!r}",
        )
    if len(layer.nonfinite) > layer.nan + layer.inf:
        raise r.fail(
            f"{w}nonfinite_examples",
            f"{len(layer.nonfinite)} examples for {layer.nan + layer.inf} nonfinite values",
        )


def _parse_figures(r: _Reader, ld: Any, w: str, shape: tuple[int, ...]) -> dict[str, Any]:
    """The figures of :func:`_figures`, validated (``w``: the key prefix for errors)."""
    worst_v = r.get(ld, "worst", w)
    nonf_v = r.get(ld, "nonfinite_examples", w)
    dec_v = r.get(ld, "decades", w)
    if not isinstance(worst_v, list) or not isinstance(nonf_v, list) or not isinstance(dec_v, list):
        raise r.fail(f"{w}worst", "worst, nonfinite_examples and decades must be lists")
    worst = tuple(
        (
            r.index(r.get(e, "index", f"{w}worst[{j}]."), f"{w}worst[{j}].index", shape),
            r.number(r.get(e, "q", f"{w}worst[{j}]."), f"{w}worst[{j}].q"),
        )
        for j, e in enumerate(worst_v)
    )
    nonfinite = tuple(
        (
            r.index(
                r.get(e, "index", f"{w}nonfinite_examples[{j}]."),
                f"{w}nonfinite_examples[{j}].index",
                shape,
            ),
            r.number(
                r.get(e, "value", f"{w}nonfinite_examples[{j}]."),
                f"{w}nonfinite_examples[{j}].value",
                nonfinite=True,
            ),
        )
        for j, e in enumerate(nonf_v)
    )
    decades = []
    for j, e in enumerate(dec_v):
        if (
            not isinstance(e, list)
            or len(e) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in e)
            or not DECADE_MIN <= e[0] <= DECADE_MAX
            or not 0 <= e[1] <= _MAX_INT
        ):
            raise r.fail(f"{w}decades[{j}]", f"expected [decade, count], got {e!r}")
        decades.append((e[0], e[1]))
    return {
        "count": r.int_(ld, "count", w),
        "nan": r.int_(ld, "nan", w),
        "inf": r.int_(ld, "inf", w),
        "zero": r.int_(ld, "zero", w),
        "below_bound": r.int_(ld, "below_bound", w),
        "min_q": r.float_(ld, "min_q", w, allow_none=True),
        "max_q": r.float_(ld, "max_q", w, allow_none=True),
        "worst": worst,
        "nonfinite": nonfinite,
        "decades": tuple(sorted(decades)),
    }


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
    for s in shards[1:]:
        if s.raw != first.raw:
            raise InputFileError(
                s.path, f"raw is {s.raw} but {first.path} has {first.raw}", key="raw"
            )
    if delta is None and min_ratio is None:
        ratios = {s.min_ratio for s in shards}
        if len(ratios) != 1:
            raise InvalidParameterError(
                "the summaries were made with different bounds "
                f"(q/eps >= {', '.join(repr(r) for r in sorted(ratios))}); give --delta or "
                "--min-ratio for the merged report"
            )
        d_value, ratio = first.delta, first.min_ratio
    else:
        d_value, ratio = resolve_bound(delta, min_ratio)
    shard_k = min(s.top_k for s in shards)
    if top_k is None:
        k = shard_k
    elif top_k < 0:
        raise InvalidParameterError(f"top must be >= 0, got {top_k}")
    elif top_k > shard_k:
        raise InvalidParameterError(
            f"top {top_k} exceeds what the summaries kept ({shard_k} worst inputs per layer)"
        )
    else:
        k = top_k
    names = [ly.name for ly in first.layers]
    single = all(len(s.layers) == 1 for s in shards)  # .npy shards: names are file stems
    if not single:
        for s in shards[1:]:
            other = [ly.name for ly in s.layers]
            if sorted(other) != sorted(names):
                raise InputFileError(
                    s.path, f"layers {sorted(other)} differ from {first.path}'s {sorted(names)}"
                )
    results: list[LayerResult] = []
    for name in names:
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
