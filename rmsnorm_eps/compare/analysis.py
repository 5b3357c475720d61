"""Compare two eps settings on every input of a dump, per layer, streamed in bounded memory.

For every q (stored, or ``mean(x**2)`` of raw activations) the factor ``y_to / y_from`` and the
change ``factor - 1`` come from :func:`rmsnorm_eps.compare.factor.factor`. Per layer the
accumulator keeps counts, the largest ``|change|`` with the worst inputs, and a breakdown by
decade of ``r = q / eps_from``.

Decision rules:

* An input **moves** when ``|change| > tolerance`` (computed in float64, unrounded). **Tie
  rule:** ``|change| == tolerance`` does not move (passes).
* Violations = moved + non-finite q (NaN, +inf: never dropped) + non-finite factors (a
  denominator that overflowed or vanished, e.g. eps rounded to 0 in float16 at q = 0).
* ``q == 0`` (x == 0, a zero vector): both outputs are 0, factor 1, unless a denominator is 0
  (then NaN: eps itself vanished in that dtype, a nonfinite factor). Zero vectors are counted
  apart (``zero_count``) and are not violations, unless ``zero_is_violation``
  (``--zero-is-violation``): then each one is.
* The safe eps of a layer (:mod:`rmsnorm_eps.safe_eps`) is the largest ``--to`` eps at which
  its smallest positive finite q, scaled as the ``--to`` side sees it (``scale**2 q``), meets
  the ratio bound of ``delta = tolerance`` (``q/eps >= min_ratio(tolerance)``, ties pass);
  ``within_safe_eps`` says whether the ``--to`` eps is at most that. It is the ``ratio`` view
  of the target; moved inputs remain the factor test above.
* A negative q raises :class:`~rmsnorm_eps.errors.InputFileError`.

A layer whose dump carries token positions (a ``<layer>::position`` companion, as ``capture``
writes; not with ``raw``) also gets the same figures for the first token of each sequence
(position 0) and for the other tokens, split exactly as ``ratio`` splits them
(:class:`rmsnorm_eps.engine.PositionSplit`).

Why ~570 lines in one module: the result types, the accumulator that fills them and the driver
are the compare command's library, read together; the shared data path is in
:mod:`rmsnorm_eps.engine`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from copy import deepcopy
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from rmsnorm_eps.compare.factor import factor as compute_factor
from rmsnorm_eps.compare.spec import (
    EpsSpec,
    LayerSpecs,
    is_config_spec,
    parse_spec,
    specs_from_config,
)
from rmsnorm_eps.dumps import (
    DumpReading,
    ReadingFields,
    layer_settings,
    open_layers,
    read_layers,
)
from rmsnorm_eps.engine import (
    PositionSplit,
    Quantity,
    ReportTotals,
    SequentialReader,
    fold_chunks,
    iter_q_chunks,
    unravel,
)
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.numerics import validate_eps
from rmsnorm_eps.safe_eps import apply_zero_rule, margin_decades, safe_eps_note
from rmsnorm_eps.safe_eps import safe_eps as compute_safe_eps
from rmsnorm_eps.sources.intent import InputWarning
from rmsnorm_eps.sources.interface import ArraySource, Unreadable
from rmsnorm_eps.summary import DECADE_MAX, DECADE_MIN, NegativeValue, decade_edge

if TYPE_CHECKING:
    from typing_extensions import Unpack


__all__ = [
    "CompareAccumulator",
    "CompareLayer",
    "CompareReport",
    "DecadeRow",
    "MovedInput",
    "compare_dump",
]


@dataclass(frozen=True)
class MovedInput:
    """One input: index in the q array, q, r = q/eps_from, factor y_to/y_from, change = factor-1."""

    index: tuple[int, ...]
    q: float
    ratio: float
    factor: float
    change: float


@dataclass(frozen=True)
class DecadeRow:
    """Inputs with ``10**k <= q/eps_from < 10**(k+1)``: how many, how many moved, max |change|."""

    decade: int
    count: int
    moved: int
    max_abs_change: float


@dataclass(frozen=True)
class CompareLayer:
    """Per-layer figures. ``violations = moved + nonfinite_q + nonfinite_factor``."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    raw_dim: int | None
    count: int
    nan_count: int
    inf_count: int
    zero_count: int
    nonfinite_factor: int
    moved: int
    max_abs_change: float | None  # None when no input has a finite factor
    min_factor: float | None
    max_factor: float | None
    worst: tuple[MovedInput, ...]
    nonfinite_examples: tuple[MovedInput, ...]  # nonfinite q or factor (q, factor may be NaN)
    decades: tuple[DecadeRow, ...]
    spec_from: EpsSpec  # this layer's settings (differ per layer with --from config)
    spec_to: EpsSpec
    # Dumps with token positions: the same figures for position 0 and for the other positions
    # (their worst and nonfinite indices are indices of the whole layer's array).
    first_token: CompareLayer | None = None
    other_tokens: CompareLayer | None = None
    # "q" = mean(x^2), or "v" = mean((x - mean x)^2) for a LayerNorm layer (its figures, q and
    # r = q/eps_from, are then of v): see rmsnorm_eps.engine.layer_quantities.
    quantity: Quantity = "q"
    min_pos_q: float | None = None  # the smallest positive finite q (None: there is none)
    safe_eps: float | None = None  # the largest --to eps meeting the ratio bound (module doc)
    zeros_violate: bool = False  # --zero-is-violation

    @property
    def nonfinite_q(self) -> int:
        return self.nan_count + self.inf_count

    @property
    def safe_eps_margin(self) -> float | None:
        """``log10(safe_eps / R(eps_to))`` in decades, of the ``--to`` eps as its dtype stores
        it (negative: the target eps fails); None when that is 0 (no finite margin)."""
        stored = self.spec_to.stored_eps
        return None if stored == 0.0 else margin_decades(self.safe_eps, stored)

    @property
    def safe_eps_note(self) -> str:
        return safe_eps_note(
            zeros_violate=self.zeros_violate,
            zero_count=self.zero_count,
            has_pos=self.min_pos_q is not None,
        )

    @property
    def within_safe_eps(self) -> bool | None:
        """Whether the ``--to`` eps is at most the safe eps (None: the bound is undefined,
        tolerance outside (0, 1)). A layer without a positive finite q is within at any eps,
        one whose zero vectors are violations at none."""
        if self.safe_eps is not None:
            return self.spec_to.stored_eps <= self.safe_eps
        note = self.safe_eps_note
        return None if not note else note.startswith("any")

    @property
    def nonfinite(self) -> int:
        """Nonfinite q values plus nonfinite factors."""
        return self.nonfinite_q + self.nonfinite_factor

    @property
    def violations(self) -> int:
        zeros = self.zero_count if self.zeros_violate else 0
        return self.moved + self.nonfinite_q + self.nonfinite_factor + zeros

    @property
    def violation_fraction(self) -> float:
        return self.violations / self.count if self.count else 0.0


@dataclass(frozen=True)
class CompareReport(ReportTotals):
    """The result of :func:`compare_dump` (aggregates: :class:`rmsnorm_eps.engine.ReportTotals`;
    ``nonfinite`` counts nonfinite q values and nonfinite factors)."""

    command: ClassVar[str] = "compare"  # names its reporter (rmsnorm_eps.reports)

    source: str
    raw: bool
    spec_from: EpsSpec | LayerSpecs
    spec_to: EpsSpec | LayerSpecs
    tolerance: float
    scale: float
    top_k: int
    layers: tuple[CompareLayer, ...]
    # Layers that could not be read, with why (only with skip_unreadable; else that fails).
    skipped: tuple[Unreadable, ...] = ()
    # Members of the dump's container and how many were analysed (see RatioReport).
    members_total: int = 0
    members_analysed: int = 0
    # Layers whose shape suggests a different question (sources.intent; the CLI prints them).
    warnings: tuple[InputWarning, ...] = ()
    zero_is_violation: bool = False  # --zero-is-violation

    @property
    def moved(self) -> int:
        return sum(layer.moved for layer in self.layers)

    @property
    def bound_ratio(self) -> float | None:
        """The ratio bound of the safe eps: ``min_ratio(tolerance)`` (None outside (0, 1))."""
        return _bound_ratio(self.tolerance)

    @property
    def within_safe_eps(self) -> bool | None:
        """Every layer's ``--to`` eps within its safe eps (None when the bound is undefined)."""
        values = [layer.within_safe_eps for layer in self.layers]
        if any(v is None for v in values):
            return None
        return all(values)

    @property
    def max_abs_change(self) -> float | None:
        values = [x.max_abs_change for x in self.layers if x.max_abs_change is not None]
        return max(values) if values else None


def _bound_ratio(tolerance: float) -> float | None:
    from rmsnorm_eps.numerics import min_ratio

    return float(min_ratio(tolerance)) if 0.0 < tolerance < 1.0 else None


#: Decade edges 1e{k} (float64 literals, as the ratio analysis uses) for k = DECADE_MIN-1 ..
#: DECADE_MAX+2.
_EDGES = np.array([decade_edge(k) for k in range(DECADE_MIN - 1, DECADE_MAX + 3)], np.float64)


def _decade_of(r: np.ndarray) -> np.ndarray:
    """``k`` with ``1e{k} <= r < 1e{k+1}`` (edges as float64 literals), for finite ``r > 0``.

    ``floor(log10(r))`` can be off by one next to an edge; the exact comparison corrects it.
    """
    k = np.clip(np.floor(np.log10(r)).astype(np.int64), DECADE_MIN, DECADE_MAX)
    lo = _EDGES[k - DECADE_MIN + 1]
    hi = _EDGES[k - DECADE_MIN + 2]
    out: np.ndarray = k - (r < lo) + (r >= hi)
    return out


@dataclass
class CompareAccumulator:
    """Mutable per-layer accumulator; see the module docstring for the rules."""

    spec_from: EpsSpec
    spec_to: EpsSpec
    tolerance: float
    scale: float = 1.0
    top_k: int = 5
    count: int = 0
    nan_count: int = 0
    inf_count: int = 0
    zero_count: int = 0
    nonfinite_factor: int = 0
    moved: int = 0
    min_pos_q: float = math.inf
    max_abs_change: float = -math.inf
    min_factor: float = math.inf
    max_factor: float = -math.inf
    worst_abs: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    worst_index: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    worst_q: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    worst_factor: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    bad: list[tuple[int, float, float]] = field(default_factory=list)  # (index, q, factor)
    decades: dict[int, list[float]] = field(default_factory=dict)  # k -> [count, moved, max]

    def update(self, values: np.ndarray, start: int) -> None:
        """Fold a 1-D chunk of q values whose first element has flat index ``start``."""
        q = np.asarray(values, dtype=np.float64)
        n = int(q.size)
        if n == 0:
            return
        self.count += n
        neg = np.flatnonzero(q < 0)
        if neg.size:
            i = int(neg[0])
            raise NegativeValue(start + i, float(q[i]))
        nan = np.isnan(q)
        inf = np.isinf(q)
        self.nan_count += int(np.count_nonzero(nan))
        self.inf_count += int(np.count_nonzero(inf))
        fin_pos = np.flatnonzero(~(nan | inf))
        for i in np.flatnonzero(nan | inf)[: max(0, self.top_k - len(self.bad))]:
            self.bad.append((start + int(i), float(q[i]), math.nan))
        if fin_pos.size == 0:
            return
        v = q[fin_pos]
        positive = v[v > 0.0]
        if positive.size:
            self.min_pos_q = min(self.min_pos_q, float(positive.min()))
        f = compute_factor(v, self.spec_from, self.spec_to, self.scale)
        ok = np.isfinite(f)
        # A zero vector is one (output 0 under any eps) only where both outputs are 0: with an
        # eps stored as 0 (1e-8 in float16) its output is 0/0 = NaN, a nonfinite factor,
        # counted there and not also as a zero vector that is "not counted".
        self.zero_count += int(np.count_nonzero((v == 0.0) & ok))
        bad_f = np.flatnonzero(~ok)
        self.nonfinite_factor += int(bad_f.size)
        for i in bad_f[: max(0, self.top_k - len(self.bad))]:
            self.bad.append((start + int(fin_pos[i]), float(v[i]), float(f[i])))
        keep = np.flatnonzero(ok)
        if keep.size == 0:
            return
        fv = f[keep]
        qv = v[keep]
        absch = np.abs(fv - 1.0)
        moved_mask = absch > self.tolerance
        self.moved += int(np.count_nonzero(moved_mask))
        self.max_abs_change = max(self.max_abs_change, float(absch.max()))
        self.min_factor = min(self.min_factor, float(fv.min()))
        self.max_factor = max(self.max_factor, float(fv.max()))
        self._fold_decades(qv, absch, moved_mask)
        self._fold_worst(absch, fin_pos[keep].astype(np.int64) + start, qv, fv)

    def _fold_decades(self, q: np.ndarray, absch: np.ndarray, moved: np.ndarray) -> None:
        pos = q > 0
        if not np.any(pos):
            return
        with np.errstate(over="ignore", under="ignore"):
            r = q[pos] / self.spec_from.eps
        finite_r = np.isfinite(r) & (r > 0)
        k = np.full(r.shape, 0, np.int64)
        if np.any(finite_r):
            k[finite_r] = _decade_of(r[finite_r])
        k[~finite_r & (r > 0)] = DECADE_MAX  # q/eps overflowed (huge q, subnormal eps)
        k[r == 0] = DECADE_MIN  # q/eps underflowed (subnormal q, huge eps)
        a = absch[pos]
        m = moved[pos]
        keys, inv = np.unique(k, return_inverse=True)
        counts = np.bincount(inv)
        moved_c = np.bincount(inv, weights=m.astype(np.float64))
        mx = np.full(keys.size, -np.inf)
        np.maximum.at(mx, inv, a)
        for j, key in enumerate(keys.tolist()):
            row = self.decades.setdefault(int(key), [0, 0, -math.inf])
            row[0] += int(counts[j])
            row[1] += int(moved_c[j])
            row[2] = max(row[2], float(mx[j]))

    def _fold_worst(
        self, absch: np.ndarray, index: np.ndarray, q: np.ndarray, f: np.ndarray
    ) -> None:
        k = self.top_k
        if k <= 0:
            return
        if absch.size > k:
            kth = np.partition(absch, absch.size - k)[absch.size - k]
            cand = np.flatnonzero(absch >= kth)
        else:
            cand = np.arange(absch.size)
        a = np.concatenate([self.worst_abs, absch[cand]])
        idx = np.concatenate([self.worst_index, index[cand]])
        qq = np.concatenate([self.worst_q, q[cand]])
        ff = np.concatenate([self.worst_factor, f[cand]])
        order = np.lexsort((idx, -a))[:k]  # largest |change| first, then smaller index
        self.worst_abs, self.worst_index = a[order], idx[order]
        self.worst_q, self.worst_factor = qq[order], ff[order]

    def result(
        self, *, name: str, shape: tuple[int, ...], order: str, dtype: str, raw_dim: int | None
    ) -> CompareLayer:
        """Freeze into a :class:`CompareLayer` (flat indices unravelled over ``shape``)."""
        eps = self.spec_from.eps

        def moved_input(flat: int, q: float, f: float) -> MovedInput:
            return MovedInput(unravel(flat, shape, order), q, q / eps, f, f - 1.0)

        has = self.max_abs_change != -math.inf
        min_pos = self.min_pos_q if math.isfinite(self.min_pos_q) else None
        bound = _bound_ratio(self.tolerance)
        safe = None
        if min_pos is not None and bound is not None:
            safe = compute_safe_eps(self.scale * self.scale * min_pos, bound)
        return CompareLayer(
            name=name,
            shape=shape,
            dtype=dtype,
            raw_dim=raw_dim,
            count=self.count,
            nan_count=self.nan_count,
            inf_count=self.inf_count,
            zero_count=self.zero_count,
            nonfinite_factor=self.nonfinite_factor,
            moved=self.moved,
            max_abs_change=self.max_abs_change if has else None,
            min_factor=self.min_factor if has else None,
            max_factor=self.max_factor if has else None,
            worst=tuple(
                moved_input(int(i), float(q), float(f))
                for i, q, f in zip(self.worst_index, self.worst_q, self.worst_factor, strict=True)
            ),
            nonfinite_examples=tuple(moved_input(i, q, f) for i, q, f in self.bad),
            decades=tuple(
                DecadeRow(k, int(c), int(m), float(x))
                for k, (c, m, x) in sorted(self.decades.items())
            ),
            spec_from=self.spec_from,
            spec_to=self.spec_to,
            min_pos_q=min_pos,
            safe_eps=safe,
        )


def _kept(acc: CompareAccumulator) -> set[int]:
    return {int(i) for i in acc.worst_index} | {i for i, _, _ in acc.bad}


def _remap(acc: CompareAccumulator, where: Mapping[int, int]) -> CompareAccumulator:
    return replace(
        acc,
        worst_abs=acc.worst_abs.copy(),
        worst_index=np.array([where[int(i)] for i in acc.worst_index], np.int64),
        worst_q=acc.worst_q.copy(),
        worst_factor=acc.worst_factor.copy(),
        bad=[(where[i], q, f) for i, q, f in acc.bad],
        decades=deepcopy(acc.decades),
    )


def _side(
    spec: EpsSpec | LayerSpecs | str,
    option: str,
    how: DumpReading,
    sources: list[ArraySource],
    skipped: tuple[str, ...] = (),
) -> EpsSpec | LayerSpecs:
    """One side of the comparison: a resolved spec, a SPEC text, or ``"config"`` (per-layer
    settings from ``how.config`` for the dump's layers; a YAML pattern that matches none of
    them is an error unless ``how.allow_unmatched``; the unreadable layers ``skipped`` count as
    matched)."""
    config = how.config
    if not isinstance(spec, str):
        return spec
    if not is_config_spec(spec):
        return parse_spec(spec, option)
    if config is None:
        raise InvalidParameterError(f"{option} config needs a model config")
    return specs_from_config(
        config,
        [src.name for src in sources],
        option,
        allow_unmatched=how.allow_unmatched,
        skipped=skipped,
    )


def compare_dump(
    path: str | os.PathLike[str],
    spec_from: EpsSpec | LayerSpecs | str,
    spec_to: EpsSpec | LayerSpecs | str,
    *,
    tolerance: float = 0.01,
    scale: float = 1.0,
    reading: DumpReading | None = None,
    zero_is_violation: bool = False,
    **fields: Unpack[ReadingFields],
) -> CompareReport:
    """Compare ``spec_from`` with ``spec_to`` on every input of a dump, read as ``reading``
    (a :class:`~rmsnorm_eps.dumps.DumpReading`; its fields may be given as keywords on top).

    ``factor = y_to / y_from = scale * den_from(q) / den_to(scale**2 q)``; an input moves when
    ``|factor - 1| > tolerance`` (ties pass). With ``raw`` the arrays hold activations of shape
    ``(..., d)`` and ``q = mean(x**2)`` over the last axis is computed in float64.
    A side is an :class:`EpsSpec`, a SPEC text, or a :class:`LayerSpecs` (each layer its own
    setting); the text ``"config"`` resolves a side per layer from ``config`` (a
    :func:`~rmsnorm_eps.config.load_config` result) for the layers of the dump, read once.
    A layer (container member) that cannot be read raises, unless ``skip_unreadable``: then it
    is listed in ``CompareReport.skipped`` (before the config is matched: an unreadable member
    needs no settings). ``members_total`` / ``members_analysed`` account for every member.
    ``dtype="bfloat16"`` reads uint16 (or V2) arrays as bfloat16 bit patterns, as in
    :func:`rmsnorm_eps.analysis.analyze_dump`. ``norm`` (``"rms"`` or ``"layer"``) is the kind
    of the layers whose config entry (if any) gives no ``norm``: a LayerNorm layer is compared
    on its variance ``v = mean((x - mean x)**2)`` (raw: computed here) in place of q.
    Zero vectors (q = 0) are counted apart and are no violations unless ``zero_is_violation``.
    """
    tol = float(tolerance)
    if not (math.isfinite(tol) and tol >= 0.0):
        raise InvalidParameterError(f"tolerance must be finite and >= 0, got {tolerance!r}")
    c = validate_eps(scale, "scale")
    how = replace(reading or DumpReading(), **fields)
    opened = open_layers(path, how)
    skipped = tuple(u.name for u in opened.unreadable)
    a = _side(spec_from, "--from", how, opened.sources, skipped)
    b = _side(spec_to, "--to", how, opened.sources, skipped)
    quantities = layer_settings(opened, how)
    # each layer's settings, resolved from its name before any layer is read
    settings = {
        src.name: (a.for_layer(src.name), b.for_layer(src.name), quantities[src.name])
        for src in opened.sources
    }
    read = read_layers(
        opened,
        how,
        settings,
        lambda src, s: _compare_layer(src, (s[0], s[1]), tol, c, how, s[2]),
    )
    return CompareReport(
        source=str(Path(path)),
        raw=how.raw,
        spec_from=a,
        spec_to=b,
        tolerance=tol,
        scale=c,
        top_k=how.top_k,
        layers=tuple(apply_zero_rule(ly, zero_is_violation) for ly in read.layers),
        skipped=read.skipped,
        members_total=read.members_total,
        members_analysed=read.members_analysed,
        warnings=read.warnings,
        zero_is_violation=zero_is_violation,
    )


def _compare_layer(
    src: ArraySource,
    specs: tuple[EpsSpec, EpsSpec],
    tol: float,
    c: float,
    how: DumpReading,
    quantity: Quantity = "q",
) -> CompareLayer:
    """One layer of :func:`compare_dump`."""
    spec_from, spec_to = specs
    raw, top_k = how.raw, how.top_k
    q_shape, order, dim, chunks = iter_q_chunks(src, raw, how.chunk_bytes, quantity=quantity)
    for side, spec in (("--from", spec_from), ("--to", spec_to)):
        if dim is not None and spec.dim is not None and spec.dim != dim:
            raise InputFileError(
                src.path,
                f"{side} {spec.text!r} says dim={spec.dim} but the activations have d = {dim}",
                key=src.key,
            )
    acc = CompareAccumulator(spec_from, spec_to, tol, c, top_k)
    pos_src = None if raw else src.companion("position")
    split = positions = None
    if pos_src is not None:
        make = partial(CompareAccumulator, spec_from, spec_to, tol, c, top_k)
        split = PositionSplit(make, _kept, _remap)
        positions = SequentialReader(pos_src)
    fold_chunks(src, chunks, acc, split, positions, q_shape, order, quantity)
    dtype = str(src.dtype.newbyteorder("="))
    layer = acc.result(name=src.name, shape=q_shape, order=order, dtype=dtype, raw_dim=dim)
    if split is not None:
        first, other = (
            a.result(
                name=f"{src.name} ({label})",
                shape=q_shape,
                order=order,
                dtype=dtype,
                raw_dim=None,
            )
            for a, label in zip(split.results(), ("first token", "other tokens"), strict=True)
        )
        layer = replace(layer, first_token=first, other_tokens=other)
    if quantity != "q":
        layer = replace(
            layer,
            quantity=quantity,
            first_token=layer.first_token and replace(layer.first_token, quantity=quantity),
            other_tokens=layer.other_tokens and replace(layer.other_tokens, quantity=quantity),
        )
    return layer
