"""The ratio analysis: which inputs of a dump fall below a q/eps bound, per layer.

``analyze_dump`` streams every array of a dump through a :class:`LayerAccumulator` and returns
a frozen :class:`RatioReport`; ``evaluate_gate`` turns a report and an allowed budget into the
pass/fail decision the CLI maps to an exit code. Nothing here prints or exits.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from rmsnorm_eps import numerics
from rmsnorm_eps.dumps import (
    DEFAULT_CHUNK_BYTES,
    ArraySource,
    Unreadable,
    default_threads,
    map_layers,
    open_layers,
)
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.kernels import (
    bf16_to_float32,
    mean_square_rows,
    mean_square_rows_bf16,
    mean_square_rows_fast,
    refine_rows,
)
from rmsnorm_eps.summary import DECADE_MAX, DECADE_MIN, LayerAccumulator, NegativeValue, decade_edge

__all__ = [
    "GateResult",
    "GateSubject",
    "LayerResult",
    "PositionSplit",
    "RatioReport",
    "WorstInput",
    "analyze_dump",
    "evaluate_gate",
    "iter_q_chunks",
    "layer_result",
    "ratio_position_split",
    "resolve_bound",
]


@dataclass(frozen=True)
class WorstInput:
    """One input: its index in the dump's q array, q, r = q/eps, A(r) and 1 - A(r).

    In a merged report (``rmsnorm-eps merge``) ``index`` is the index in the concatenation of
    the shards along axis 0, ``shard`` the shard's position among the merged summaries and
    ``shard_index`` the index inside that shard.
    """

    index: tuple[int, ...]
    q: float
    ratio: float
    attenuation: float
    loss: float
    shard: int | None = None
    shard_index: tuple[int, ...] | None = None


@dataclass(frozen=True)
class NonfiniteInput:
    """A NaN or +inf q value (always a violation); ``shard*`` as in :class:`WorstInput`."""

    index: tuple[int, ...]
    value: float
    shard: int | None = None
    shard_index: tuple[int, ...] | None = None


@dataclass(frozen=True)
class LayerResult:
    """Per-layer figures. ``violations = below_bound + nonfinite``."""

    name: str
    eps: float
    shape: tuple[int, ...]  # shape of the q array (raw: the activations' shape minus the last axis)
    dtype: str  # stored dtype
    raw_dim: int | None  # d when q was computed from raw activations
    count: int
    nan_count: int
    inf_count: int
    zero_count: int
    below_bound: int
    min_q: float | None  # None when the layer has no finite q
    max_q: float | None
    min_ratio: float | None
    min_attenuation: float | None
    worst: tuple[WorstInput, ...]
    nonfinite_examples: tuple[NonfiniteInput, ...]
    decades: tuple[tuple[int, int], ...]  # (k, count): 10**k <= q/eps < 10**(k+1)
    # When the dump carries token positions (a "<layer>::position" companion): the same figures
    # for the first token of each sequence (position 0) and for the other tokens. Their worst
    # and nonfinite indices are indices of the whole layer's array.
    first_token: LayerResult | None = None
    other_tokens: LayerResult | None = None
    # Where eps came from (ratio --config: config file, key and matching patterns), or None.
    eps_source: str | None = None

    @property
    def nonfinite(self) -> int:
        return self.nan_count + self.inf_count

    @property
    def violations(self) -> int:
        return self.below_bound + self.nonfinite

    @property
    def violation_fraction(self) -> float:
        return self.violations / self.count if self.count else 0.0


@dataclass(frozen=True)
class RatioReport:
    """The result of :func:`analyze_dump`."""

    command: ClassVar[str] = "ratio"  # names its reporter (rmsnorm_eps.reports)

    source: str
    raw: bool
    delta: float
    min_ratio: float
    top_k: int
    layers: tuple[LayerResult, ...]
    shards: tuple[str, ...] = ()  # merged reports: the sources of the shards, in order
    # Layers that could not be read, with why (only with skip_unreadable; else that fails).
    skipped: tuple[Unreadable, ...] = ()

    @property
    def count(self) -> int:
        return sum(layer.count for layer in self.layers)

    @property
    def violations(self) -> int:
        return sum(layer.violations for layer in self.layers)

    @property
    def below_bound(self) -> int:
        return sum(layer.below_bound for layer in self.layers)

    @property
    def nonfinite(self) -> int:
        return sum(layer.nonfinite for layer in self.layers)

    @property
    def violation_fraction(self) -> float:
        return self.violations / self.count if self.count else 0.0

    @property
    def layers_affected(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers if layer.violations)


@dataclass(frozen=True)
class GateResult:
    """CI decision: ``passed`` is False when violations exceed the allowed budget."""

    passed: bool
    violations: int
    fraction: float
    max_violations: int | None
    max_fraction: float | None
    reason: str


def resolve_bound(delta: float | None, min_ratio: float | None) -> tuple[float, float]:
    """Return ``(delta, min_ratio)`` from exactly one of them (default: delta = 0.01)."""
    if delta is not None and min_ratio is not None:
        raise InvalidParameterError("give either delta or min_ratio, not both")
    if min_ratio is not None:
        r = numerics.validate_ratio(min_ratio, "min-ratio")
        if r == 0.0 or math.isinf(r):
            raise InvalidParameterError(f"min-ratio must be finite and > 0, got {min_ratio!r}")
        return float(numerics.delta_for_ratio(r)), r
    d = numerics.validate_delta(0.01 if delta is None else delta)
    return d, float(numerics.min_ratio(d))


def _unravel(flat: int, shape: tuple[int, ...], order: str) -> tuple[int, ...]:
    if not shape:
        return ()
    return tuple(int(i) for i in np.unravel_index(flat, shape, order=order))  # type: ignore[call-overload]


@dataclass(frozen=True)
class Decisions:
    """What a q value decides: the sorted q thresholds (bound and decade edges) and top_k.

    Given to :func:`iter_q_chunks`, it lets raw float32/float16/bfloat16 activations take the
    float32 fast path: every q that could fall on the other side of a threshold, be among the
    ``top_k`` smallest or be the largest of its chunk is recomputed exactly, so reports are
    identical to the exact float64 path (see :func:`rmsnorm_eps.kernels.refine_rows`).
    """

    thresholds: np.ndarray
    top_k: int


def decisions_for(eps: float, min_ratio: float, top_k: int) -> Decisions:
    """The thresholds :class:`LayerAccumulator` compares q with, for this eps and bound."""
    ts = {numerics.q_threshold(eps, min_ratio)}
    ts.update(numerics.q_threshold(eps, decade_edge(k)) for k in range(DECADE_MIN, DECADE_MAX + 1))
    return Decisions(np.array(sorted(ts), np.float64), top_k)


def iter_q_chunks(
    source: ArraySource,
    raw: bool,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    threads: int = 1,
    decisions: Decisions | None = None,
) -> tuple[tuple[int, ...], str, int | None, Iterator[tuple[int, np.ndarray]]]:
    """Return ``(q_shape, index_order, d, chunks)`` for a source.

    ``chunks`` yields ``(start, q)``: ``q`` is a 1-D array of q values whose first element has
    flat index ``start`` in ``index_order`` ('C' or 'F') over ``q_shape``. In raw mode q is
    computed from activations of shape ``(..., d)``; otherwise the stored values are q
    (bfloat16 q values come as their exact float32). ``q`` is valid until the next iteration.
    With ``threads > 1`` reading and the q kernel run on that many worker threads, a few chunks
    ahead (see :meth:`ArraySource.iter_mapped`); the chunks still arrive in order. With
    ``decisions``, raw activations take the float32 fast path with exact refinement (the q
    values that decide nothing are then within ``d * 2**-24`` relative, typically 1e-7).
    """
    shape = source.shape
    order = "F" if source.header.fortran_order else "C"
    itemsize = source.dtype.itemsize
    bf16 = source.stored_as == "bfloat16"
    if source.header.size == 0:
        raise InputFileError(source.path, f"empty array (shape {shape})", key=source.key)
    if not raw:
        per = max(1, chunk_bytes // itemsize)

        def as_q(start: int, values: np.ndarray) -> np.ndarray:
            return bf16_to_float32(values) if bf16 else values

        return shape, order, None, source.iter_mapped(per, as_q, threads)
    if len(shape) == 0:
        raise InputFileError(
            source.path,
            "--raw needs activations of shape (..., d), got a 0-d array",
            key=source.key,
        )
    d = shape[-1]
    q_shape = shape[:-1]
    if order == "F" and len(shape) > 1:
        return q_shape, "F", d, _fortran_raw_q(source, chunk_bytes)
    rows = max(1, chunk_bytes // (d * itemsize))

    def exact_rows(x: np.ndarray) -> np.ndarray:
        return mean_square_rows_bf16(x) if bf16 else mean_square_rows(x)

    def q_rows(start: int, values: np.ndarray) -> np.ndarray:
        x = values.reshape(-1, d)
        fast = None if decisions is None else mean_square_rows_fast(x, bf16)
        if fast is None:
            return exact_rows(x)
        q, rel = fast
        assert decisions is not None
        refine_rows(q, rel, lambda rows: exact_rows(x[rows]), decisions.thresholds, decisions.top_k)
        return q

    chunks = source.iter_mapped(rows * d, q_rows, threads)
    return q_shape, "C", d, ((start // d, q) for start, q in chunks)


def _fortran_raw_q(source: ArraySource, chunk_bytes: int) -> Iterator[tuple[int, np.ndarray]]:
    """Raw activations stored in Fortran order: element (i, j) sits at i + N*j, so the file is
    d blocks of N values. Squares are accumulated in float64 per row (memory: N float64),
    after a first pass for the row maxima when the data are float64 (overflow safety)."""
    d = source.shape[-1]
    n = source.header.size // d
    per = max(1, chunk_bytes // source.dtype.itemsize)
    scale = np.ones(n, np.float64)
    if source.dtype == np.float64:
        m = np.zeros(n, np.float64)
        for start, values in source.iter_elements(per):
            rows = (start + np.arange(values.size)) % n
            np.maximum.at(m, rows, np.abs(values))
        scale = np.where((m > 0) & np.isfinite(m), m, 1.0)
    acc = np.zeros(n, np.float64)
    for start, values in source.iter_elements(per):
        rows = (start + np.arange(values.size)) % n
        if source.stored_as == "bfloat16":
            values = bf16_to_float32(values)
        v = values.astype(np.float64) / scale[rows]
        with np.errstate(over="ignore"):  # a row holding inf has scale 1: its q is inf (counted)
            np.add.at(acc, rows, v * v)
    with np.errstate(over="ignore"):
        q = acc / d * scale * scale
    yield 0, q


class _Folding(Protocol):
    """What :class:`PositionSplit` needs from an accumulator."""

    count: int

    def update(self, values: np.ndarray, start: int) -> None: ...


F = TypeVar("F", bound=_Folding)


class PositionSplit(Generic[F]):
    """Position 0 and positions > 0 of one layer, each folded into its own accumulator.

    Each accumulator sees only its subset, so its flat indices count within that subset; the
    layer index of every value it still keeps (``kept(acc)``: the worst, the minimum, the
    nonfinite examples) is remembered as it is folded, and :meth:`results` returns copies with
    those indices put back (``remap(acc, subset_index -> layer_index)``). Memory stays bounded
    by what the accumulators keep. Used by ``ratio`` (:class:`LayerAccumulator`), ``compare``
    and ``capture --summary-only``.
    """

    def __init__(
        self,
        make: Callable[[], F],
        kept: Callable[[F], set[int]],
        remap: Callable[[F, Mapping[int, int]], F],
    ) -> None:
        self.first = make()
        self.other = make()
        self._kept = kept
        self._remap = remap
        self._maps: tuple[dict[int, int], dict[int, int]] = ({}, {})

    def update(self, values: np.ndarray, start: int, is_first: np.ndarray) -> None:
        """Fold a chunk whose first value has layer index ``start``; ``is_first`` marks the
        values at position 0."""
        for acc, where, sel in (
            (self.first, self._maps[0], is_first),
            (self.other, self._maps[1], ~is_first),
        ):
            idx = np.flatnonzero(sel)
            sub_start = acc.count
            acc.update(values[idx], sub_start)
            kept = self._kept(acc)
            for i in kept:
                if i >= sub_start and i not in where:
                    where[i] = start + int(idx[i - sub_start])
            for i in [i for i in where if i not in kept]:
                del where[i]

    def results(self) -> tuple[F, F]:
        """Copies of the (first, other) accumulators with layer indices."""
        return self._remap(self.first, self._maps[0]), self._remap(self.other, self._maps[1])


def _kept_indices(acc: LayerAccumulator) -> set[int]:
    return {int(i) for i in acc.worst_index} | set(acc.nonfinite_index) | {acc.min_index}


def _remap_accumulator(acc: LayerAccumulator, where: Mapping[int, int]) -> LayerAccumulator:
    return replace(
        acc,
        worst_q=acc.worst_q.copy(),
        worst_index=np.array([where[int(i)] for i in acc.worst_index], np.int64),
        nonfinite_index=[where[i] for i in acc.nonfinite_index],
        nonfinite_value=list(acc.nonfinite_value),
        min_index=where.get(acc.min_index, -1),
        decades=dict(acc.decades),
    )


def ratio_position_split(eps: float, ratio: float, top_k: int) -> PositionSplit[LayerAccumulator]:
    """A :class:`PositionSplit` of :class:`LayerAccumulator` (the ``ratio`` figures)."""
    return PositionSplit(
        lambda: LayerAccumulator(eps, ratio, top_k), _kept_indices, _remap_accumulator
    )


class _SequentialReader:
    """Hands out consecutive slices of an integer companion array, in file order."""

    def __init__(self, src: ArraySource) -> None:
        self._src = src
        self._it = src.iter_elements(max(1, DEFAULT_CHUNK_BYTES // src.dtype.itemsize))
        self._buf = np.empty(0, np.int64)
        self._next = 0  # flat index of self._buf[0]

    def read(self, start: int, n: int) -> np.ndarray:
        if start != self._next:  # q chunks must arrive in order
            raise RuntimeError(f"position reader at {self._next}, asked for {start}")
        parts = [self._buf]
        have = self._buf.size
        while have < n:
            _, chunk = next(self._it)
            parts.append(chunk.astype(np.int64))
            have += chunk.size
        data = np.concatenate(parts) if len(parts) > 1 else self._buf
        self._buf = data[n:]
        self._next += n
        return data[:n]


def layer_result(
    acc: LayerAccumulator,
    *,
    name: str,
    shape: tuple[int, ...],
    order: str,
    dtype: str,
    raw_dim: int | None,
) -> LayerResult:
    """Freeze an accumulator into a :class:`LayerResult` (indices unravelled over ``shape``)."""
    eps = acc.eps
    worst = []
    for q, flat in zip(acc.worst_q.tolist(), acc.worst_index.tolist(), strict=True):
        r = q / eps
        worst.append(
            WorstInput(
                index=_unravel(flat, shape, order),
                q=q,
                ratio=r,
                attenuation=float(numerics.attenuation(r)),
                loss=float(numerics.attenuation_loss(r)),
            )
        )
    nonfinite = tuple(
        NonfiniteInput(_unravel(i, shape, order), v)
        for i, v in zip(acc.nonfinite_index, acc.nonfinite_value, strict=True)
    )
    has_finite = acc.count > acc.nonfinite
    min_r = acc.min_q / eps if has_finite else None
    return LayerResult(
        name=name,
        eps=eps,
        shape=shape,
        dtype=dtype,
        raw_dim=raw_dim,
        count=acc.count,
        nan_count=acc.nan_count,
        inf_count=acc.inf_count,
        zero_count=acc.zero_count,
        below_bound=acc.below,
        min_q=acc.min_q if has_finite else None,
        max_q=acc.max_q if has_finite else None,
        min_ratio=min_r,
        min_attenuation=float(numerics.attenuation(min_r)) if min_r is not None else None,
        worst=tuple(worst),
        nonfinite_examples=nonfinite,
        decades=tuple(sorted(acc.decades.items())),
    )


def _layer_eps(eps: float | Mapping[str, float] | Callable[[str], float], name: str) -> float:
    if isinstance(eps, Mapping):
        value = eps[name]
    elif callable(eps):
        value = eps(name)
    else:
        value = eps
    return numerics.validate_eps(value)


def analyze_dump(
    path: str | os.PathLike[str],
    eps: float | Mapping[str, float] | Callable[[str], float],
    *,
    delta: float | None = None,
    min_ratio: float | None = None,
    raw: bool = False,
    top_k: int = 5,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    threads: int | None = None,
    dtype: str | None = None,
    fast: bool = True,
    eps_sources: Mapping[str, str] | None = None,
    skip_unreadable: bool = False,
) -> RatioReport:
    """Analyse every layer of a ``.npy``/``.npz`` dump against ``A >= 1 - delta``.

    ``eps`` is one value for all layers, a mapping layer name -> eps, or a callable. With
    ``raw`` the arrays hold activations ``x`` of shape ``(..., d)`` and ``q = mean(x**2)`` over
    the last axis is computed here. Violations: ``q/eps < min_ratio`` (ties pass) plus every
    NaN or +inf q. A negative q raises :class:`InputFileError`. ``threads`` (default
    :func:`~rmsnorm_eps.dumps.default_threads`) read and compute chunks in parallel; the result
    does not depend on it. ``dtype="bfloat16"`` reads uint16/V2 arrays as bfloat16 bit patterns.
    ``fast`` (raw mode) computes q with float32 sums and recomputes exactly every q that
    decides or shows anything; ``fast=False`` computes every q exactly. Reports are identical.
    ``eps_sources`` (layer name -> where its eps came from) is copied into each layer's
    ``eps_source``.

    A layer that cannot be read (or holds invalid data) raises, unless ``skip_unreadable``:
    then it is left out and listed in ``RatioReport.skipped`` with the problem.
    """
    if top_k < 0:
        raise InvalidParameterError(f"top must be >= 0, got {top_k}")
    if chunk_bytes <= 0:
        raise InvalidParameterError("chunk_bytes must be > 0")
    if threads is not None and threads < 1:
        raise InvalidParameterError(f"threads must be >= 1, got {threads}")
    n_threads = default_threads() if threads is None else threads
    d_value, ratio = resolve_bound(delta, min_ratio)
    sources, skipped = open_layers(path, dtype, skip_unreadable)
    eps_by_layer = {src.name: _layer_eps(eps, src.name) for src in sources}
    layers = map_layers(
        sources,
        lambda src: _analyze_layer(
            src,
            eps_by_layer[src.name],
            ratio,
            raw,
            top_k,
            chunk_bytes,
            n_threads,
            fast,
            eps_sources,
        ),
        skipped,
        skip_unreadable,
    )
    return RatioReport(
        source=str(Path(path)),
        raw=raw,
        delta=d_value,
        min_ratio=ratio,
        top_k=top_k,
        layers=tuple(layers),
        skipped=tuple(skipped),
    )


def fold_chunks(
    src: ArraySource,
    chunks: Iterator[tuple[int, np.ndarray]],
    acc: Any,
    split: PositionSplit[Any] | None,
    positions: _SequentialReader | None,
    q_shape: tuple[int, ...],
    order: str,
) -> None:
    """Feed every q chunk to ``acc`` (and to the first-token split when the dump has
    positions). A negative q (:class:`NegativeValue`, raised by either accumulator) becomes an
    :class:`InputFileError` naming the file, key and multi-dimensional index."""
    try:
        for start, q in chunks:
            acc.update(q, start)
            if split is not None and positions is not None:
                split.update(q, start, positions.read(start, q.size) == 0)
    except NegativeValue as exc:
        where = _unravel(exc.index, q_shape, order)
        raise InputFileError(
            src.path,
            f"negative q {exc.value!r} at index {list(where)} (q is a mean of squares)",
            key=src.key,
        ) from None


def _analyze_layer(
    src: ArraySource,
    layer_eps: float,
    ratio: float,
    raw: bool,
    top_k: int,
    chunk_bytes: int,
    n_threads: int,
    fast: bool,
    eps_sources: Mapping[str, str] | None,
) -> LayerResult:
    """One layer of :func:`analyze_dump`."""
    decisions = decisions_for(layer_eps, ratio, top_k) if raw and fast else None
    q_shape, order, dim, chunks = iter_q_chunks(src, raw, chunk_bytes, n_threads, decisions)
    acc = LayerAccumulator(layer_eps, ratio, top_k)
    pos_src = None if raw else src.companion("position")
    split = ratio_position_split(acc.eps, ratio, top_k) if pos_src is not None else None
    positions = _SequentialReader(pos_src) if pos_src is not None else None
    fold_chunks(src, chunks, acc, split, positions, q_shape, order)
    result = layer_result(
        acc,
        name=src.name,
        shape=q_shape,
        order=order,
        dtype=src.dtype_name,
        raw_dim=dim,
    )
    if split is not None:
        first, other = (
            layer_result(
                a,
                name=f"{src.name} ({label})",
                shape=q_shape,
                order=order,
                dtype=result.dtype,
                raw_dim=None,
            )
            for a, label in zip(split.results(), ("first token", "other tokens"), strict=True)
        )
        result = replace(result, first_token=first, other_tokens=other)
    if eps_sources is not None:
        result = replace(result, eps_source=eps_sources.get(src.name))
    return result


class GateSubject(Protocol):
    """What :func:`evaluate_gate` needs from a report: its violation count and fraction."""

    @property
    def violations(self) -> int: ...

    @property
    def violation_fraction(self) -> float: ...


def evaluate_gate(
    report: GateSubject,
    max_violations: int | None = None,
    max_fraction: float | None = None,
) -> GateResult:
    """Pass when violations (below bound + nonfinite) fit every budget given (default: none).

    ``report`` is any object with ``violations`` and ``violation_fraction`` (a
    :class:`RatioReport`, a compare report, ...).

    Budgets compare unrounded values: ``violations <= max_violations`` and
    ``violations / count <= max_fraction``.
    """
    if max_violations is not None and max_violations < 0:
        raise InvalidParameterError(f"max-violations must be >= 0, got {max_violations}")
    if max_fraction is not None and not (0.0 <= max_fraction <= 1.0):
        raise InvalidParameterError(f"max-fraction must be in [0, 1], got {max_fraction}")
    v = report.violations
    frac = report.violation_fraction
    if max_violations is None and max_fraction is None:
        passed = v == 0
        reason = "no violations" if passed else f"{v} violation(s), none allowed"
    else:
        ok_n = max_violations is None or v <= max_violations
        ok_f = max_fraction is None or frac <= max_fraction
        passed = ok_n and ok_f
        parts = []
        if max_violations is not None:
            parts.append(f"{v} <= {max_violations}" if ok_n else f"{v} > {max_violations}")
        if max_fraction is not None:
            parts.append(
                f"fraction {frac:.6g} <= {max_fraction:g}"
                if ok_f
                else f"fraction {frac:.6g} > {max_fraction:g}"
            )
        reason = ("within budget: " if passed else "over budget: ") + ", ".join(parts)
    return GateResult(passed, v, frac, max_violations, max_fraction, reason)
