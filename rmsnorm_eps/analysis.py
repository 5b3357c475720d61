"""The ratio analysis: which inputs of a dump fall below a q/eps bound, per layer.

``analyze_dump`` (the library of the ``ratio`` command) streams every array of a dump through
a :class:`LayerAccumulator` and returns a frozen :class:`RatioReport`. The streaming engine is
:mod:`rmsnorm_eps.engine`, the gate :mod:`rmsnorm_eps.gate` (``evaluate_gate``, ``GateResult``,
``PositionSplit``, ``iter_q_chunks``, ... are re-exported here for older imports). Nothing here
prints or exits.

Why ~520 lines in one module: the result types, their compact codec (:class:`LayerCodec`, how
a :class:`~rmsnorm_eps.layer_store.LayerStore` keeps them) and the driver that fills them are
the ratio command's library, read together; the shared data path is in
:mod:`rmsnorm_eps.engine`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rmsnorm_eps import numerics
from rmsnorm_eps.dumps import consume_layers
from rmsnorm_eps.engine import (
    DEFAULT_CHUNK_BYTES,
    Decisions,
    PositionSplit,
    Quantity,
    ReportTotals,
    SequentialReader,
    decisions_for,
    fold_chunks,
    iter_q_chunks,
    layer_quantities,
    unravel,
)
from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.gate import GateResult, GateSubject, evaluate_gate
from rmsnorm_eps.layer_store import LayerStore, LayerStoreBuilder, ints
from rmsnorm_eps.sources.interface import MAX_LAYERS, ArraySource, Unreadable, open_sources
from rmsnorm_eps.sources.raw import default_threads
from rmsnorm_eps.summary import LayerAccumulator

if TYPE_CHECKING:
    from rmsnorm_eps.config.model import NormConfig

__all__ = [
    "Decisions",
    "GateResult",
    "GateSubject",
    "LayerResult",
    "PositionSplit",
    "RatioReport",
    "WorstInput",
    "analyze_dump",
    "decisions_for",
    "evaluate_gate",
    "fold_chunks",
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
    # What the figures are of: "q" = mean(x^2) (RMSNorm), "v" = mean((x - mean x)^2)
    # (LayerNorm: its norm is `layer` in the config, or --norm layer). Every field named q
    # (min_q, worst q, ...) then holds v, and ratio is v/eps.
    quantity: Quantity = "q"

    @property
    def nonfinite(self) -> int:
        return self.nan_count + self.inf_count

    @property
    def violations(self) -> int:
        return self.below_bound + self.nonfinite

    @property
    def violation_fraction(self) -> float:
        return self.violations / self.count if self.count else 0.0


def _opt_float(x: float | None) -> float | None:
    return None if x is None else float(x)


def _opt_ints(x: tuple[int, ...] | None) -> tuple[int, ...] | None:
    return None if x is None else ints(x)


class LayerCodec:
    """:class:`LayerResult` <-> a tuple of primitives, for :class:`LayerStore` (every number
    is made a plain ``int``/``float`` first: marshal would write a numpy scalar as bytes)."""

    sums: tuple[str, ...] = ("below_bound",)
    maxima: tuple[str, ...] = ()

    def encode(self, x: LayerResult) -> tuple[Any, ...]:
        return (
            str(x.name),
            float(x.eps),
            ints(x.shape),
            str(x.dtype),
            None if x.raw_dim is None else int(x.raw_dim),
            int(x.count),
            int(x.nan_count),
            int(x.inf_count),
            int(x.zero_count),
            int(x.below_bound),
            _opt_float(x.min_q),
            _opt_float(x.max_q),
            _opt_float(x.min_ratio),
            _opt_float(x.min_attenuation),
            tuple(
                (
                    ints(w.index),
                    float(w.q),
                    float(w.ratio),
                    float(w.attenuation),
                    float(w.loss),
                    None if w.shard is None else int(w.shard),
                    _opt_ints(w.shard_index),
                )
                for w in x.worst
            ),
            tuple(
                (
                    ints(n.index),
                    float(n.value),
                    None if n.shard is None else int(n.shard),
                    _opt_ints(n.shard_index),
                )
                for n in x.nonfinite_examples
            ),
            tuple((int(k), int(c)) for k, c in x.decades),
            None if x.first_token is None else self.encode(x.first_token),
            None if x.other_tokens is None else self.encode(x.other_tokens),
            None if x.eps_source is None else str(x.eps_source),
            str(x.quantity),
        )

    def decode(self, d: tuple[Any, ...]) -> LayerResult:
        args = [
            *d[:14],
            tuple(WorstInput(*w) for w in d[14]),
            tuple(NonfiniteInput(*n) for n in d[15]),
            d[16],
            None if d[17] is None else self.decode(d[17]),
            None if d[18] is None else self.decode(d[18]),
            d[19],
            d[20],
        ]
        return LayerResult(*args)


#: The codec of every :class:`RatioReport`'s layers.
LAYER_CODEC = LayerCodec()


@dataclass(frozen=True)
class RatioReport(ReportTotals):
    """The result of :func:`analyze_dump` (aggregates: :class:`rmsnorm_eps.engine.ReportTotals`).

    ``layers`` is a :class:`~rmsnorm_eps.layer_store.LayerStore` (any sequence of
    :class:`LayerResult` given is stored as one): a compact sequence that decodes each layer on
    access, with its totals folded once.
    """

    command: ClassVar[str] = "ratio"  # names its reporter (rmsnorm_eps.reports)

    source: str
    raw: bool
    delta: float
    min_ratio: float
    top_k: int
    layers: Sequence[LayerResult]
    shards: tuple[str, ...] = ()  # merged reports: the sources of the shards, in order
    # Layers that could not be read, with why (only with skip_unreadable; else that fails).
    skipped: tuple[Unreadable, ...] = ()
    # Members of the dump's container (1 for a .npy file) and how many of them were analysed
    # (layers and their companions); the others are in ``skipped``. 0 when not known (merged).
    members_total: int = 0
    members_analysed: int = 0

    def __post_init__(self) -> None:
        layers = self.layers
        if not (isinstance(layers, LayerStore) and isinstance(layers.codec, LayerCodec)):
            object.__setattr__(self, "layers", LayerStore.of(layers, LAYER_CODEC))

    @property
    def below_bound(self) -> int:
        """Sum of the layers' ``below_bound`` (folded once when the store was built)."""
        return self._total("below_bound")


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
    qs = acc.worst_q.tolist()
    has_finite = acc.count > acc.nonfinite
    min_r = acc.min_q / eps if has_finite else None
    # One vectorized call for every ratio of the layer (the same float64 operations, element by
    # element, as one call per value: identical results; a dump of many tiny layers pays the
    # call overhead once per layer, not once per value).
    ratios = [q / eps for q in qs] + ([min_r] if min_r is not None else [])
    att = np.asarray(numerics.attenuation(np.array(ratios, np.float64))).tolist()
    loss = np.asarray(numerics.attenuation_loss(np.array(ratios[: len(qs)], np.float64))).tolist()
    worst = [
        WorstInput(index=unravel(flat, shape, order), q=q, ratio=r, attenuation=a, loss=lo)
        for q, flat, r, a, lo in zip(qs, acc.worst_index.tolist(), ratios, att, loss, strict=False)
    ]
    nonfinite = tuple(
        NonfiniteInput(unravel(i, shape, order), v)
        for i, v in zip(acc.nonfinite_index, acc.nonfinite_value, strict=True)
    )
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
        min_attenuation=att[-1] if min_r is not None else None,
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


def _check_options(top_k: int, chunk_bytes: int, threads: int | None) -> None:
    if top_k < 0:
        raise InvalidParameterError(f"top must be >= 0, got {top_k}")
    if chunk_bytes <= 0:
        raise InvalidParameterError("chunk_bytes must be > 0")
    if threads is not None and threads < 1:
        raise InvalidParameterError(f"threads must be >= 1, got {threads}")


def _eps_from_config(
    config: NormConfig,
    sources: list[ArraySource],
    eps: float | Mapping[str, float] | Callable[[str], float] | None,
    eps_sources: Mapping[str, str] | None,
) -> tuple[dict[str, float], Mapping[str, str]]:
    """eps per layer from ``config`` (``eps``, a number, is the fallback for unmatched layers)."""
    from rmsnorm_eps.config import eps_for_layers

    if eps is not None and not isinstance(eps, (int, float)):
        raise InvalidParameterError("with a config, eps is one fallback value (or None)")
    fallback = None if eps is None else float(eps)
    assigned = eps_for_layers(config, [src.name for src in sources], fallback=fallback)
    return assigned.eps, {**assigned.provenance, **(eps_sources or {})}


def analyze_dump(
    path: str | os.PathLike[str],
    eps: float | Mapping[str, float] | Callable[[str], float] | None,
    *,
    delta: float | None = None,
    min_ratio: float | None = None,
    raw: bool = False,
    top_k: int = 5,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    threads: int | None = None,
    dtype: str | None = None,
    column: str | None = None,
    fast: bool = True,
    eps_sources: Mapping[str, str] | None = None,
    skip_unreadable: bool = False,
    config: NormConfig | None = None,
    norm: str = "rms",
    max_layers: int = MAX_LAYERS,
) -> RatioReport:
    """Analyse every layer of a dump against ``A >= 1 - delta``.

    ``eps`` is one value for all layers, a mapping layer name -> eps, or a callable. With
    ``config`` (a :func:`~rmsnorm_eps.config.load_config` result) each layer's eps comes from
    the config's patterns matched against the dump's layer names (``eps``, a number or None, is
    the fallback for layers the config gives none) and each layer's ``eps_source`` says where
    it came from. With ``raw`` the arrays hold activations ``x`` of shape ``(..., d)`` and
    ``q = mean(x**2)`` over the last axis is computed here. Violations: ``q/eps < min_ratio``
    (ties pass) plus every NaN or +inf q. A negative q raises :class:`InputFileError`.
    ``threads`` (default :func:`~rmsnorm_eps.sources.raw.default_threads`) read and compute
    chunks in parallel; the result does not depend on it. ``dtype="bfloat16"`` reads uint16/V2
    arrays as bfloat16 bit patterns. ``fast`` (raw mode) computes q with float32 sums and
    recomputes exactly every q that decides or shows anything; ``fast=False`` computes every q
    exactly. Reports are identical. ``eps_sources`` (layer name -> where its eps came from) is
    copied into each layer's ``eps_source``.

    A layer (container member) that cannot be read, or holds invalid data, raises, unless
    ``skip_unreadable``: then it is left out and listed in ``RatioReport.skipped`` with the
    problem. ``members_total`` / ``members_analysed`` account for every member.

    ``norm`` (``"rms"`` or ``"layer"``) is the kind of every layer, unless the config's entry
    for a layer says its ``norm``: a LayerNorm layer (``layer``) has the figures of its
    variance ``v = mean((x - mean x)**2)`` instead of q (with ``raw``, computed from the
    activations with the mean removed, in float64; otherwise the stored values are v), and
    its ``quantity`` is ``"v"``. eps acts on v exactly as on q: ``A = sqrt(v/(v+eps))``.
    """
    _check_options(top_k, chunk_bytes, threads)
    n_threads = default_threads() if threads is None else threads
    d_value, ratio = resolve_bound(delta, min_ratio)
    sources, skipped, total = open_sources(
        path, dtype, lenient=skip_unreadable, column=column, max_layers=max_layers
    )
    if config is not None:
        eps, eps_sources = _eps_from_config(config, sources, eps, eps_sources)
    if eps is None:
        raise InvalidParameterError("give eps (or a config)")
    layer_eps = eps
    eps_by_layer = {src.name: _layer_eps(layer_eps, src.name) for src in sources}
    quantities = layer_quantities([src.name for src in sources], norm, config)
    layers: LayerStoreBuilder[LayerResult] = LayerStoreBuilder(LAYER_CODEC)
    analysed = 0
    for src, result in consume_layers(
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
            quantities[src.name],
        ),
        skipped,
        skip_unreadable,
    ):
        layers.append(result)
        analysed += src.members
    return RatioReport(
        source=str(Path(path)),
        raw=raw,
        delta=d_value,
        min_ratio=ratio,
        top_k=top_k,
        layers=layers.build(),
        skipped=tuple(skipped),
        members_total=total,
        members_analysed=analysed,
    )


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
    quantity: Quantity = "q",
) -> LayerResult:
    """One layer of :func:`analyze_dump`."""
    decisions = decisions_for(layer_eps, ratio, top_k) if raw and fast else None
    q_shape, order, dim, chunks = iter_q_chunks(
        src, raw, chunk_bytes, n_threads, decisions, quantity
    )
    acc = LayerAccumulator(layer_eps, ratio, top_k)
    pos_src = None if raw else src.companion("position")
    split = ratio_position_split(acc.eps, ratio, top_k) if pos_src is not None else None
    positions = SequentialReader(pos_src) if pos_src is not None else None
    fold_chunks(src, chunks, acc, split, positions, q_shape, order, quantity)
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
        result = replace(
            result,
            first_token=replace(first, quantity=quantity),
            other_tokens=replace(other, quantity=quantity),
        )
    if quantity != "q":
        result = replace(result, quantity=quantity)
    if eps_sources is not None:
        result = replace(result, eps_source=eps_sources.get(src.name))
    return result
