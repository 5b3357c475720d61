"""The ratio analysis: which inputs of a dump fall below a q/eps bound, per layer.

``analyze_dump`` (the library of the ``ratio`` command) streams every array of a dump through
a :class:`LayerAccumulator` and returns a frozen :class:`RatioReport`. The streaming engine is
:mod:`rmsnorm_eps.engine`, the gate :mod:`rmsnorm_eps.gate` (``evaluate_gate`` is
importable from here too); each layer is read by the per-layer driver
:func:`rmsnorm_eps.dumps.read_layers`. Nothing here prints or exits.

Why one module: the frozen result types (:class:`LayerResult`, :class:`RatioReport`), the
accumulator-to-result step and :func:`analyze_dump` are the ratio command's one contract;
split, each part would import the others.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from rmsnorm_eps import numerics
from rmsnorm_eps.dumps import (
    DumpReading,
    ReadingFields,
    layer_settings,
    open_layers,
    read_layers,
    source_label,
)
from rmsnorm_eps.engine import (
    PositionSplit,
    Quantity,
    ReportTotals,
    SequentialReader,
    decisions_for,
    fold_chunks,
    iter_q_chunks,
)
from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.gate import evaluate_gate
from rmsnorm_eps.layer_record import LayerResult, layer_result
from rmsnorm_eps.safe_eps import apply_zero_rule
from rmsnorm_eps.sources.intent import InputWarning
from rmsnorm_eps.sources.interface import ArraySource, Opened, Unreadable
from rmsnorm_eps.sources.raw import default_threads
from rmsnorm_eps.summary import LayerAccumulator

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from rmsnorm_eps.config.model import NormConfig

__all__ = [
    "RatioReport",
    "RatioSettings",
    "analyze_dump",
    "evaluate_gate",
    "ratio_position_split",
    "resolve_bound",
]


@dataclass(frozen=True)
class RatioReport(ReportTotals):
    """The result of :func:`analyze_dump` (aggregates: :class:`rmsnorm_eps.engine.ReportTotals`)."""

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
    # Members of the dump's container (1 for a .npy file) and how many of them were analysed
    # (layers and their companions); the others are in ``skipped``. 0 when not known (merged).
    members_total: int = 0
    members_analysed: int = 0
    # Layers whose shape suggests a different question (sources.intent; the CLI prints them).
    warnings: tuple[InputWarning, ...] = ()

    zero_is_violation: bool = False  # --zero-is-violation (each layer's zeros_violate)

    @property
    def below_bound(self) -> int:
        return sum(layer.below_bound for layer in self.layers)


def resolve_bound(delta: float | None, min_ratio: float | None) -> tuple[float, float]:
    """Return ``(delta, min_ratio)`` from exactly one of them (default: delta = 0.01)."""
    if delta is not None and min_ratio is not None:
        raise InvalidParameterError("give either delta or min_ratio, not both")
    if min_ratio is not None:
        r = numerics.validate_ratio(min_ratio, "min-ratio")
        if r == 0.0 or math.isinf(r):
            raise InvalidParameterError(f"min-ratio must be finite and > 0, got {min_ratio!r}")
        return float(numerics.attenuation_loss(r)), r
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


def ratio_position_split(
    eps: float, ratio: float, top_k: int, quantity: Quantity = "q"
) -> PositionSplit[LayerAccumulator]:
    """A :class:`PositionSplit` of :class:`LayerAccumulator` (the ``ratio`` figures)."""
    return PositionSplit(
        lambda: LayerAccumulator(eps, ratio, top_k, quantity), _kept_indices, _remap_accumulator
    )


def _layer_eps(eps: float | Mapping[str, float] | Callable[[str], float], name: str) -> float:
    if isinstance(eps, Mapping):
        value = eps[name]
    elif callable(eps):
        value = eps(name)
    else:
        value = eps
    return numerics.validate_eps(value)


def _eps_from_config(
    config: NormConfig,
    sources: list[ArraySource],
    eps: float | Mapping[str, float] | Callable[[str], float] | None,
    eps_sources: Mapping[str, str] | None,
    allow_unmatched: bool = False,
    skipped: tuple[str, ...] = (),
) -> tuple[dict[str, float], Mapping[str, str]]:
    """eps per layer from ``config`` (``eps``, a number, is the fallback for unmatched layers)."""
    from rmsnorm_eps.config import eps_for_layers

    if eps is not None and not isinstance(eps, (int, float)):
        raise InvalidParameterError("with a config, eps is one fallback value (or None)")
    fallback = None if eps is None else float(eps)
    assigned = eps_for_layers(
        config,
        [src.name for src in sources],
        fallback=fallback,
        allow_unmatched=allow_unmatched,
        skipped=skipped,
    )
    return assigned.eps, {**assigned.provenance, **(eps_sources or {})}


@dataclass(frozen=True)
class RatioSettings:
    """What ``ratio`` takes from a layer's name, resolved once before any layer is read: its
    eps, what its figures are of (q, or v for a LayerNorm) and where its eps came from."""

    eps: float
    quantity: Quantity
    eps_source: str | None = None


def _ratio_settings(
    opened: Opened,
    how: DumpReading,
    eps: float | Mapping[str, float] | Callable[[str], float] | None,
    eps_sources: Mapping[str, str] | None,
) -> dict[str, RatioSettings]:
    """Every layer's :class:`RatioSettings`, from ``eps`` (or the config's patterns matched
    against the names, ``eps`` the fallback) and the norm kinds (config entry, else ``norm``)."""
    sources = opened.sources
    layer_eps, provenance = eps, eps_sources
    if how.config is not None:
        skipped = tuple(u.name for u in opened.unreadable)
        layer_eps, provenance = _eps_from_config(
            how.config, sources, eps, eps_sources, how.allow_unmatched, skipped
        )
    if layer_eps is None:
        raise InvalidParameterError("give eps (or a config)")
    quantities = layer_settings(opened, how)
    where = provenance or {}
    return {
        src.name: RatioSettings(
            _layer_eps(layer_eps, src.name), quantities[src.name], where.get(src.name)
        )
        for src in sources
    }


def analyze_dump(
    path: str | os.PathLike[str] | Opened,
    eps: float | Mapping[str, float] | Callable[[str], float] | None,
    *,
    delta: float | None = None,
    min_ratio: float | None = None,
    eps_sources: Mapping[str, str] | None = None,
    reading: DumpReading | None = None,
    zero_is_violation: bool = False,
    **fields: Unpack[ReadingFields],
) -> RatioReport:
    """Analyse every layer of a dump against ``A >= 1 - delta`` (or ``q/eps >= min_ratio``).

    How the dump is read is ``reading`` (a :class:`~rmsnorm_eps.dumps.DumpReading`, passed
    whole; its fields say what ``raw``, ``threads``, ``dtype``, ``fast``, ``skip_unreadable``,
    ``config`` and ``norm`` do), with any of its fields given as keywords on top
    (``raw=True``, ``top_k=3``, ...). The result does not depend on ``threads`` or ``fast``.

    ``eps`` is one value for all layers, a mapping layer name -> eps, or a callable. With a
    ``config`` each layer's eps comes from the config's patterns matched against the dump's
    layer names (``eps``, a number or None, is the fallback for layers the config gives none)
    and each layer's ``eps_source`` says where it came from; ``eps_sources`` (layer name ->
    where its eps came from) is copied into it too. Violations: ``q/eps < min_ratio`` (ties
    pass) plus every NaN or +inf q; a negative q raises :class:`InputFileError`. A zero
    vector (q = 0 exactly) is counted in ``zero_count`` and is not a violation, unless
    ``zero_is_violation``. A layer that cannot be read raises, unless ``skip_unreadable``: then
    it is listed in ``RatioReport.skipped`` with the problem (``members_total`` /
    ``members_analysed`` account for every member). A LayerNorm layer (``norm`` ``"layer"``,
    or its config entry's ``norm``) has the figures of its variance
    ``v = mean((x - mean x)**2)`` instead of q (``quantity`` ``"v"``); eps acts on v exactly
    as on q: ``A = sqrt(v/(v+eps))``.
    """
    how = replace(reading or DumpReading(), **fields)
    n_threads = default_threads() if how.threads is None else how.threads
    d_value, ratio = resolve_bound(delta, min_ratio)
    opened = open_layers(path, how)
    settings = _ratio_settings(opened, how, eps, eps_sources)
    steps = _Steps(ratio, how, n_threads)
    read = read_layers(opened, how, settings, lambda src, s: _analyze_layer(src, s, steps))
    return RatioReport(
        source=source_label(path),
        raw=how.raw,
        delta=d_value,
        min_ratio=ratio,
        top_k=how.top_k,
        layers=tuple(apply_zero_rule(ly, zero_is_violation) for ly in read.layers),
        skipped=read.skipped,
        members_total=read.members_total,
        members_analysed=read.members_analysed,
        warnings=read.warnings,
        zero_is_violation=zero_is_violation,
    )


@dataclass(frozen=True)
class _Steps:
    """What every layer of one :func:`analyze_dump` run shares."""

    ratio: float
    reading: DumpReading
    threads: int


def _analyze_layer(src: ArraySource, settings: RatioSettings, steps: _Steps) -> LayerResult:
    """One layer of :func:`analyze_dump`."""
    how, ratio, top_k = steps.reading, steps.ratio, steps.reading.top_k
    raw, layer_eps, quantity = how.raw, settings.eps, settings.quantity
    decisions = decisions_for(layer_eps, ratio, top_k) if raw and how.fast else None
    q_shape, order, dim, chunks = iter_q_chunks(
        src, raw, how.chunk_bytes, steps.threads, decisions, quantity
    )
    acc = LayerAccumulator(layer_eps, ratio, top_k, quantity)
    pos_src = None if raw else src.companion("position")
    split = ratio_position_split(acc.eps, ratio, top_k, quantity) if pos_src is not None else None
    positions = SequentialReader(pos_src) if pos_src is not None else None
    fold_chunks(src, chunks, acc, split, positions, q_shape, order, quantity)

    def freeze(a: LayerAccumulator, name: str, raw_dim: int | None) -> LayerResult:
        return layer_result(
            a,
            name=name,
            shape=q_shape,
            order=order,
            dtype=src.dtype_name,
            raw_dim=raw_dim,
        )

    result = freeze(acc, src.name, dim)
    if split is not None:
        first, other = (
            freeze(a, f"{src.name} ({label})", None)
            for a, label in zip(split.results(), ("first token", "other tokens"), strict=True)
        )
        result = replace(result, first_token=first, other_tokens=other)
    if settings.eps_source is not None:
        result = replace(result, eps_source=settings.eps_source)
    return result
