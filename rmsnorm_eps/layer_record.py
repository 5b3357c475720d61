"""One record of a layer's figures: the frozen :class:`LayerResult`, and one table
(:data:`FIELDS`) that writes it as the ``ratio`` JSON layer and as the mergeable summary
layer, and reads a summary layer back into it.

Each row of :data:`FIELDS` is one per-layer figure: its JSON key, how the ratio document
writes it, and for a mergeable figure (one a summary keeps) how a summary writes it, how it is
read back (a check that parses the value or raises :class:`~rmsnorm_eps.errors.InputFileError`
naming the file and the key path, ``layers[3].worst[0].index``) and which accumulator field it
comes from and goes back to. A derived figure (``violations``, ``min_ratio``, the safe eps ...)
has no check: the ratio document writes it, a summary leaves it out, and reading recomputes it.
The summary layer is thus the ratio layer without its derived figures, in the same order.

Reading checks the figures for consistency too (:func:`check_figures`, :func:`check_bound`):
counts that add up, a histogram covering every finite value once and agreeing with min_q and
max_q, a sorted worst list of exactly ``min(top_k, positive)`` positive values, and
``below_bound`` agreeing with min_pos_q, the worst list and the histogram at the bound. A layer
that breaks these was edited or corrupted; merging it would report wrong counts (a false PASS),
so it is refused.

Adding a per-layer figure: a field of :class:`~rmsnorm_eps.summary.LayerAccumulator` (fold and
merge), an attribute of :class:`LayerResult`, a row here, and its entry in
``data/ratio.schema.json`` (``merge.schema.json`` refers to it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rmsnorm_eps import numerics
from rmsnorm_eps.engine import unravel
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.jsonvalues import jnum
from rmsnorm_eps.numerics import q_threshold
from rmsnorm_eps.safe_eps import margin_decades, safe_eps_note
from rmsnorm_eps.safe_eps import safe_eps as compute_safe_eps
from rmsnorm_eps.summary import DECADE_MAX, DECADE_MIN, LayerAccumulator, Quantity, decade_edge

__all__ = [
    "FIELDS",
    "MAX_INT",
    "Check",
    "LayerResult",
    "NonfiniteInput",
    "Reader",
    "Table",
    "WorstInput",
    "accumulator_of",
    "boolean",
    "bounded",
    "check_bound",
    "check_figures",
    "integer",
    "layer_result",
    "number",
    "ratio_layer",
    "read_layer",
    "read_table",
    "shown",
    "string",
    "summary_layer",
]

#: Counts, sizes and indices must fit in int64 (numpy's index arithmetic).
MAX_INT = 2**63 - 1
_MAX_FLOAT = 1.7976931348623157e308  # the largest finite double


# --------------------------------------------------------------------------- the record


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
    """Per-layer figures. ``violations = below_bound + nonfinite`` (``+ zero_count`` when
    ``zeros_violate``, i.e. ``--zero-is-violation``).

    ``below_bound``: positive finite q below the bound; zero vectors (q = 0: output 0 under any
    eps) are ``zero_count``, never in ``worst``. ``safe_eps``: :mod:`rmsnorm_eps.safe_eps`.
    """

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
    min_q: float | None  # None when the layer has no finite q (0 with a zero vector)
    max_q: float | None
    min_ratio: float | None  # min_pos_q / eps: of the positive q (None: no positive finite q)
    min_attenuation: float | None  # A(min_ratio)
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
    min_pos_q: float | None = None  # None when the layer has no positive finite q
    safe_eps: float | None = None
    zeros_violate: bool = False  # --zero-is-violation: every zero vector is a violation

    @property
    def nonfinite(self) -> int:
        return self.nan_count + self.inf_count

    @property
    def violations(self) -> int:
        zeros = self.zero_count if self.zeros_violate else 0
        return self.below_bound + self.nonfinite + zeros

    @property
    def safe_eps_margin(self) -> float | None:
        """``log10(safe_eps / eps)`` in decades (negative: the configured eps fails)."""
        return margin_decades(self.safe_eps, self.eps)

    @property
    def safe_eps_note(self) -> str:
        """Why there is no safe eps (``""`` when there is one)."""
        return safe_eps_note(
            zeros_violate=self.zeros_violate,
            zero_count=self.zero_count,
            has_pos=self.min_pos_q is not None,
        )

    @property
    def violation_fraction(self) -> float:
        return self.violations / self.count if self.count else 0.0


def _result(
    eps: float,
    min_ratio_bound: float,
    worst: Sequence[tuple[tuple[int, ...], float]],
    nonfinite: Sequence[tuple[tuple[int, ...], float]],
    decades: Sequence[tuple[int, int]],
    **figures: Any,
) -> LayerResult:
    """The :class:`LayerResult` of read or folded figures: the worst inputs' r, A(r) and
    1 - A(r), the smallest ratio and its attenuation and the safe eps derived from them."""
    qs = [q for _, q in worst]
    min_pos = figures["min_pos_q"]
    # the smallest ratio of the positive inputs (a zero vector's output is 0 under any eps)
    min_r = min_pos / eps if min_pos is not None else None
    # One vectorized call for every ratio of the layer (the same float64 operations, element by
    # element, as one call per value: identical results; a dump of many tiny layers pays the
    # call overhead once per layer, not once per value).
    ratios = [q / eps for q in qs] + ([min_r] if min_r is not None else [])
    att = np.asarray(numerics.attenuation(np.array(ratios, np.float64))).tolist()
    loss = np.asarray(numerics.attenuation_loss(np.array(ratios[: len(qs)], np.float64))).tolist()
    return LayerResult(
        eps=eps,
        min_ratio=min_r,
        min_attenuation=att[-1] if min_r is not None else None,
        worst=tuple(
            WorstInput(index=i, q=q, ratio=r, attenuation=a, loss=lo)
            for (i, q), r, a, lo in zip(worst, ratios, att, loss, strict=False)
        ),
        nonfinite_examples=tuple(NonfiniteInput(i, v) for i, v in nonfinite),
        decades=tuple(sorted(decades)),
        safe_eps=compute_safe_eps(min_pos, min_ratio_bound),
        **figures,
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
    """Freeze an accumulator into a :class:`LayerResult` (indices unravelled over ``shape``;
    ``quantity`` is the accumulator's)."""
    figures = {f.attr: getattr(acc, f.acc) for f in FIELDS if f.acc}
    if acc.count == acc.nonfinite:  # no finite value: no minimum nor maximum
        figures["min_q"] = figures["max_q"] = None
    if not math.isfinite(acc.min_pos_q):
        figures["min_pos_q"] = None
    return _result(
        acc.eps,
        acc.min_ratio,
        [
            (unravel(i, shape, order), q)
            for i, q in zip(acc.worst_index.tolist(), acc.worst_q.tolist(), strict=True)
        ],
        [
            (unravel(i, shape, order), v)
            for i, v in zip(acc.nonfinite_index, acc.nonfinite_value, strict=True)
        ],
        list(acc.decades.items()),
        name=name,
        shape=shape,
        dtype=dtype,
        raw_dim=raw_dim,
        quantity=acc.quantity,
        **figures,
    )


def accumulator_of(
    layer: LayerResult, min_ratio: float, top_k: int, flat: Callable[[tuple[int, ...]], int]
) -> LayerAccumulator:
    """The accumulator a read layer came from, at ``min_ratio`` and ``top_k`` (``flat``: an
    index of the layer -> the flat index to keep). The count below ``min_ratio`` is the
    layer's; the caller sets it (and ``min_index``) when the bound differs."""
    acc = LayerAccumulator(layer.eps, min_ratio, top_k, layer.quantity)
    for f in FIELDS:
        value = getattr(layer, f.attr) if f.acc else None
        if value is not None:
            setattr(acc, f.acc, value)
    worst = layer.worst[:top_k]
    acc.worst_q = np.array([w.q for w in worst], np.float64)
    acc.worst_index = np.array([flat(w.index) for w in worst], np.int64)
    nonf = layer.nonfinite_examples[:top_k]
    acc.nonfinite_index = [flat(n.index) for n in nonf]
    acc.nonfinite_value = [n.value for n in nonf]
    acc.decades = dict(layer.decades)
    return acc


# --------------------------------------------------------------------------- structure checks


class Reader:
    """Errors naming the file and the key path; ``shape`` is the layer being read (indices)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.shape: tuple[int, ...] = ()
        #: the summary's bound (``min_ratio``, checked against ``delta``) and ``top_k``, read
        #: before the layers: their figures are checked against them
        self.min_ratio = 0.0
        self.top_k = 0
        #: the layer names read so far (each must be unique)
        self.names: set[str] = set()

    def fail(self, key: str, problem: str) -> InputFileError:
        return InputFileError(self.path, problem, key=key)

    def get(self, obj: Any, key: str, where: str) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            raise self.fail(f"{where}{key}", "missing")
        return obj[key]


#: ``check(reader, value, key path) -> parsed value`` (raises naming the key path).
Check = Callable[[Reader, Any, str], Any]
Table = tuple[tuple[str, Check], ...]


def shown(v: Any) -> str:
    """``repr(v)``, cut to 60 characters (a value may be a 400-digit integer or a long list)."""
    text = repr(v) if not _is_int(v) or abs(v) < 10**60 else f"an integer of {len(str(v))} digits"
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def integer(minimum: int = 0) -> Check:
    def check(r: Reader, v: Any, key: str) -> int:
        if not _is_int(v) or not minimum <= v <= MAX_INT:
            raise r.fail(key, f"expected an integer >= {minimum} (int64), got {shown(v)}")
        return int(v)

    return check


def number(r: Reader, v: Any, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not abs(v) <= _MAX_FLOAT:
        raise r.fail(key, f"expected a finite number, got {shown(v)}")
    return float(v)


def number_or_null(r: Reader, v: Any, key: str) -> float | None:
    return None if v is None else number(r, v, key)


def _number_or_nonfinite(r: Reader, v: Any, key: str) -> float:
    return float(v) if v in ("nan", "inf", "-inf") else number(r, v, key)


def bounded(check: Check, ok: Callable[[float], bool], expected: str) -> Check:
    def bounded(r: Reader, v: Any, key: str) -> Any:
        x = check(r, v, key)
        if not ok(x):
            raise r.fail(key, f"{expected}, got {shown(x)}")
        return x

    return bounded


def boolean(r: Reader, v: Any, key: str) -> bool:
    if not isinstance(v, bool):
        raise r.fail(key, f"expected true or false, got {shown(v)}")
    return v


def string(r: Reader, v: Any, key: str) -> str:
    if not isinstance(v, str):
        raise r.fail(key, f"expected a string, got {shown(v)}")
    return v


def _shape(r: Reader, v: Any, key: str) -> tuple[int, ...]:
    if (
        not isinstance(v, list)
        or len(v) > 32
        or not all(_is_int(n) and n >= 0 for n in v)
        or math.prod(v) > MAX_INT
    ):
        raise r.fail(key, f"expected a list of sizes (int64), got {shown(v)}")
    r.shape = tuple(v)
    return r.shape


def _raw_dim(r: Reader, v: Any, key: str) -> int | None:
    if v is not None and (not _is_int(v) or not 1 <= v <= MAX_INT):
        raise r.fail(key, f"expected an integer >= 1 or null, got {shown(v)}")
    return v


def _quantity(r: Reader, v: Any, key: str) -> Quantity:
    """``"q"`` (mean(x^2), RMSNorm) or ``"v"`` (the variance of a LayerNorm)."""
    if v not in ("q", "v"):
        raise r.fail(key, f'expected "q" or "v", got {shown(v)}')
    return "q" if v == "q" else "v"


def _index(r: Reader, v: Any, key: str) -> tuple[int, ...]:
    """An index into the current layer's shape: one integer ``0 <= i < n`` per axis."""
    shape = r.shape
    if (
        not isinstance(v, list)
        or len(v) != len(shape)
        or not all(_is_int(i) and 0 <= i < n for i, n in zip(v, shape, strict=True))
    ):
        raise r.fail(
            key,
            f"expected an index of {len(shape)} non-negative integers within shape "
            f"{list(shape)}, got {shown(v)}",
        )
    return tuple(v)


def _decade(r: Reader, v: Any, key: str) -> int:
    if not _is_int(v) or not DECADE_MIN <= v <= DECADE_MAX:
        raise r.fail(key, f"expected a decade {DECADE_MIN}..{DECADE_MAX}, got {shown(v)}")
    return int(v)


def _pair(first: str, first_check: Check, second: str, second_check: Check) -> Check:
    """An object ``{first: ..., second: ...}`` read as a tuple."""

    def check(r: Reader, v: Any, key: str) -> tuple[Any, Any]:
        a = first_check(r, r.get(v, first, f"{key}."), f"{key}.{first}")
        b = second_check(r, r.get(v, second, f"{key}."), f"{key}.{second}")
        return a, b

    return check


def _items(entry: Check) -> Check:
    """A list (already checked to be one) whose every entry passes ``entry``."""

    def check(r: Reader, v: Any, key: str) -> tuple[Any, ...]:
        return tuple(entry(r, e, f"{key}[{j}]") for j, e in enumerate(v))

    return check


def read_table(r: Reader, obj: Any, table: Table, where: str) -> dict[str, Any]:
    """Every row of ``table`` read from ``obj``, in table order."""
    return {key: check(r, r.get(obj, key, where), f"{where}{key}") for key, check in table}


def _name(r: Reader, v: Any, key: str) -> str:
    if not isinstance(v, str) or v in r.names:
        raise r.fail(key, f"expected a unique layer name, got {v!r}")
    r.names.add(v)
    return v


def _shard(shard: int | None, index: tuple[int, ...] | None) -> dict[str, Any]:
    """Merged reports only: which shard an input came from and its index there."""
    if shard is None:
        return {}
    return {"shard": shard, "shard_index": list(index or ())}


@dataclass(frozen=True)
class Field:
    """One per-layer figure (see the module docstring). ``check`` None: derived, ratio only.
    ``save``: the summary's spelling when it is not ``write``'s. ``acc``: the
    :class:`LayerAccumulator` field it is frozen from. ``head``: a property of the layer that
    its first_token / other_tokens parts inherit (a summary writes it once)."""

    key: str
    write: Callable[[LayerResult], Any]
    check: Check | None = None
    attr: str = ""
    save: Callable[[LayerResult], Any] | None = None
    acc: str = ""
    head: bool = False

    def __post_init__(self) -> None:
        if not self.attr:
            object.__setattr__(self, "attr", self.key)


def _worst(layer: LayerResult) -> list[dict[str, Any]]:
    return [
        {
            "index": list(w.index),
            "q": w.q,
            "ratio": w.ratio,
            "attenuation": w.attenuation,
            "loss": w.loss,
            **_shard(w.shard, w.shard_index),
        }
        for w in layer.worst
    ]


def _nonfinite(layer: LayerResult) -> list[dict[str, Any]]:
    return [
        {"index": list(n.index), "value": jnum(n.value), **_shard(n.shard, n.shard_index)}
        for n in layer.nonfinite_examples
    ]


_eps_check = bounded(number, lambda x: x > 0.0, "eps must be a finite number > 0")

#: Every per-layer figure, in the order the ratio document and the summary write them.
FIELDS: tuple[Field, ...] = (
    Field("name", lambda ly: ly.name, _name, head=True),
    Field("eps", lambda ly: ly.eps, _eps_check, head=True),
    Field("shape", lambda ly: list(ly.shape), _shape, head=True),
    Field("dtype", lambda ly: ly.dtype, string, head=True),
    Field("raw_dim", lambda ly: ly.raw_dim, _raw_dim, head=True),
    Field("quantity", lambda ly: ly.quantity, _quantity, head=True),
    Field("count", lambda ly: ly.count, integer(), acc="count"),
    Field("nonfinite", lambda ly: ly.nonfinite),
    Field("nan", lambda ly: ly.nan_count, integer(), "nan_count", acc="nan_count"),
    Field("inf", lambda ly: ly.inf_count, integer(), "inf_count", acc="inf_count"),
    Field("zero", lambda ly: ly.zero_count, integer(), "zero_count", acc="zero_count"),
    Field("below_bound", lambda ly: ly.below_bound, integer(), acc="below"),
    Field("violations", lambda ly: ly.violations),
    Field("violation_fraction", lambda ly: ly.violation_fraction),
    Field("min_q", lambda ly: jnum(ly.min_q), number_or_null, acc="min_q"),
    Field("min_pos_q", lambda ly: jnum(ly.min_pos_q), number_or_null, acc="min_pos_q"),
    Field("max_q", lambda ly: jnum(ly.max_q), number_or_null, acc="max_q"),
    Field("min_ratio", lambda ly: jnum(ly.min_ratio)),
    Field("min_attenuation", lambda ly: jnum(ly.min_attenuation)),
    Field(
        "worst",
        _worst,
        _items(_pair("index", _index, "q", number)),
        save=lambda ly: [{"index": list(w.index), "q": w.q} for w in ly.worst],
    ),
    Field(
        "nonfinite_examples",
        _nonfinite,
        _items(_pair("index", _index, "value", _number_or_nonfinite)),
        save=lambda ly: [
            {"index": list(n.index), "value": jnum(n.value)} for n in ly.nonfinite_examples
        ],
    ),
    Field(
        "decades",
        lambda ly: [{"decade": k, "count": c} for k, c in ly.decades],
        _items(_pair("decade", _decade, "count", integer())),
    ),
    Field("safe_eps", lambda ly: jnum(ly.safe_eps)),
    Field("safe_eps_margin_decades", lambda ly: jnum(ly.safe_eps_margin)),
    Field("safe_eps_note", lambda ly: ly.safe_eps_note),
)
_LISTS = ("worst", "nonfinite_examples", "decades")
#: What a summary reads back: the head of a layer, and the figures of a layer or of a part.
_HEAD = tuple((f.key, f.check) for f in FIELDS if f.check is not None and f.head)
_FIGURES = tuple((f.key, f.check) for f in FIELDS if f.check is not None and not f.head)


# --------------------------------------------------------------------------- writing


def ratio_layer(layer: LayerResult) -> dict[str, Any]:
    """The layer as the ``ratio`` (and ``merge``) JSON document writes it."""
    doc = {f.key: f.write(layer) for f in FIELDS}
    if layer.eps_source is not None:  # ratio --config: where this layer's eps came from
        doc["eps_source"] = layer.eps_source
    # Only for dumps with token positions: the same figures for position 0 and the rest.
    if layer.first_token is not None and layer.other_tokens is not None:
        doc["first_token"] = {f.key: f.write(layer.first_token) for f in FIELDS}
        doc["other_tokens"] = {f.key: f.write(layer.other_tokens) for f in FIELDS}
    return doc


def _saved(layer: LayerResult, head: bool) -> dict[str, Any]:
    return {
        f.key: (f.save or f.write)(layer)
        for f in FIELDS
        if f.check is not None and (head or not f.head)
    }


def summary_layer(layer: LayerResult) -> dict[str, Any]:
    """The layer as a summary keeps it: its mergeable figures, unrounded."""
    doc = _saved(layer, True)
    if layer.first_token is not None and layer.other_tokens is not None:
        # indices inside are indices of the whole layer's array, as in the report
        doc["first_token"] = _saved(layer.first_token, False)
        doc["other_tokens"] = _saved(layer.other_tokens, False)
    return doc


# --------------------------------------------------------------------------- reading


def _figures_of(r: Reader, obj: Any, where: str) -> dict[str, Any]:
    """The figures of ``obj`` (a layer or a part) by :class:`LayerResult` attribute."""
    if not all(isinstance(r.get(obj, key, where), list) for key in _LISTS):
        raise r.fail(f"{where}worst", "worst, nonfinite_examples and decades must be lists")
    attr = {f.key: f.attr for f in FIELDS}
    return {attr[key]: value for key, value in read_table(r, obj, _FIGURES, where).items()}


def _built(r: Reader, head: dict[str, Any], figures: dict[str, Any]) -> LayerResult:
    return _result(
        head["eps"],
        r.min_ratio,
        figures.pop("worst"),
        figures.pop("nonfinite_examples"),
        figures.pop("decades"),
        name=head["name"],
        shape=head["shape"],
        dtype=head["dtype"],
        raw_dim=head["raw_dim"],
        quantity=head["quantity"],
        **figures,
    )


def _split(
    r: Reader, ld: dict[str, Any], layer: LayerResult, head: dict[str, Any], w: str
) -> LayerResult:
    """The layer with its first_token / other_tokens parts, when the document has them."""
    has_split = [key in ld for key in ("first_token", "other_tokens")]
    if not any(has_split):
        return layer
    if not all(has_split):
        raise r.fail(f"{w}first_token", "first_token and other_tokens come together")
    first, other = (
        _built(
            r, {**head, "name": f"{layer.name} ({label})"}, _figures_of(r, ld[key], f"{w}{key}.")
        )
        for key, label in (("first_token", "first token"), ("other_tokens", "other tokens"))
    )
    if first.count + other.count != layer.count:
        raise r.fail(
            f"{w}first_token.count",
            f"first_token {first.count} + other_tokens {other.count} != count {layer.count}",
        )
    for part, key in ((first, "first_token"), (other, "other_tokens")):
        check_figures(r, part, f"{w}{key}.")
        check_bound(r, part, f"{w}{key}.")
    return replace(layer, first_token=first, other_tokens=other)


def read_layer(r: Reader, ld: Any, w: str) -> LayerResult:
    """One summary layer (key paths start with ``w``), read and checked: its structure, then
    its consistency (and its parts')."""
    head = read_table(r, ld, _HEAD, w)
    layer = _built(r, head, _figures_of(r, ld, w))
    if layer.count != math.prod(layer.shape):
        raise r.fail(f"{w}count", f"count {layer.count} does not match shape {list(layer.shape)}")
    check_figures(r, layer, w)
    check_bound(r, layer, w)
    return _split(r, ld, layer, head, w)


# --------------------------------------------------------------------------- consistency


def _check_counts(r: Reader, layer: LayerResult, w: str) -> int:
    """Counts that add up; returns the number of finite values."""
    nan, inf, zero = layer.nan_count, layer.inf_count, layer.zero_count
    finite = layer.count - nan - inf
    if finite < 0:
        raise r.fail(f"{w}count", f"count {layer.count} < nan {nan} + inf {inf} (nonfinite)")
    if zero + layer.below_bound > finite:
        raise r.fail(
            f"{w}below_bound",
            f"zero {zero} + below_bound {layer.below_bound} exceeds the {finite} finite values",
        )
    decades = [k for k, _ in layer.decades]
    if len(set(decades)) != len(decades):
        raise r.fail(f"{w}decades", "a decade is listed twice")
    histogram = zero + sum(c for _, c in layer.decades)
    if histogram != finite:
        raise r.fail(
            f"{w}decades",
            f"zero + decade counts = {histogram}, but count - nan - inf = {finite}",
        )
    if len(layer.nonfinite_examples) > nan + inf:
        raise r.fail(
            f"{w}nonfinite_examples",
            f"{len(layer.nonfinite_examples)} examples for {nan + inf} nonfinite values",
        )
    return finite


def check_figures(r: Reader, layer: LayerResult, w: str) -> None:
    """The figures of one layer (or part) must be those of one array: counts that add up, a
    histogram that covers every finite nonzero q once, minima and worst list consistent (the
    worst list holds positive q only; min_q is 0 exactly when there are zeros, else min_pos_q).
    """
    finite = _check_counts(r, layer, w)
    positive = finite - layer.zero_count
    if (layer.min_q is None) != (finite == 0) or (layer.max_q is None) != (finite == 0):
        raise r.fail(f"{w}min_q", "min_q and max_q are null exactly when no q is finite")
    if (layer.min_pos_q is None) != (positive == 0):
        raise r.fail(f"{w}min_pos_q", "min_pos_q is null exactly when no q is finite and > 0")
    qs = [x.q for x in layer.worst]
    if len(qs) > positive or any(q <= 0.0 for q in qs) or qs != sorted(qs):
        raise r.fail(
            f"{w}worst",
            f"expected at most {positive} q values > 0 in ascending order, got {qs!r}",
        )
    if layer.min_q is None or layer.max_q is None:
        return
    expected_min = 0.0 if layer.zero_count else layer.min_pos_q
    pos_ok = layer.min_pos_q is None or (
        0.0 < layer.min_pos_q <= layer.max_q and (not qs or qs[0] == layer.min_pos_q)
    )
    if layer.min_q != expected_min or not pos_ok:
        raise r.fail(
            f"{w}min_q",
            "expected min_q = 0 with zeros (else min_pos_q), 0 < min_pos_q <= max_q and "
            f"min_pos_q = the first worst q, got {layer.min_q!r}, {layer.min_pos_q!r}, "
            f"{layer.max_q!r}",
        )


def _decade_span(eps: float, k: int) -> tuple[float, float]:
    """The q range ``[lo, hi)`` of decade ``k`` (``floor(log10(q/eps)) == k``)."""
    lo = q_threshold(eps, decade_edge(k)) if k > DECADE_MIN else 0.0
    hi = q_threshold(eps, decade_edge(k + 1)) if k < DECADE_MAX else math.inf
    return lo, hi


def _check_lists(r: Reader, layer: LayerResult, w: str, finite: int) -> None:
    """The worst list holds exactly ``min(top_k, positive)`` inputs (zeros are not listed),
    the nonfinite examples at most ``top_k``."""
    positive = finite - layer.zero_count
    if len(layer.worst) != min(r.top_k, positive):
        raise r.fail(
            f"{w}worst",
            f"{len(layer.worst)} worst inputs listed; top_k {r.top_k} and {positive} finite "
            f"positive values give {min(r.top_k, positive)}",
        )
    if len(layer.nonfinite_examples) > r.top_k:
        raise r.fail(f"{w}nonfinite_examples", f"more than top_k {r.top_k} examples")


def _below_range(
    layer: LayerResult, finite: int, t: float, spans: dict[int, tuple[float, float]]
) -> tuple[int, int]:
    """The least and the most positive finite q below the threshold ``t`` that the worst list,
    min_pos_q and the decade histogram (zeros apart; a decade wholly below counts whole, one
    wholly above not at all) allow."""
    positive = finite - layer.zero_count
    listed = sum(1 for x in layer.worst if x.q < t)
    at_least, at_most = listed, listed if listed < len(layer.worst) else positive
    if layer.min_pos_q is not None:
        at_least = max(at_least, int(layer.min_pos_q < t))
        if layer.min_pos_q >= t:
            at_most = 0
    whole = sum(c for k, c in layer.decades if c and spans[k][1] <= t)
    partial = sum(c for k, c in layer.decades if c and spans[k][0] < t)
    return max(at_least, whole), min(at_most, partial)


def _check_extremes(
    r: Reader, layer: LayerResult, w: str, spans: dict[int, tuple[float, float]]
) -> None:
    """min_pos_q and max_q lie in the lowest and the highest nonempty decade."""
    if not spans or layer.min_pos_q is None or layer.max_q is None:
        return
    lo_k, hi_k = min(spans), max(spans)
    min_ok = spans[lo_k][0] <= layer.min_pos_q < spans[lo_k][1]
    max_ok = spans[hi_k][0] <= layer.max_q < spans[hi_k][1]
    if not (min_ok and max_ok):
        raise r.fail(f"{w}decades", "the decade histogram contradicts the layer's min_q or max_q")


def check_bound(r: Reader, layer: LayerResult, w: str) -> None:
    """``below_bound`` (positive finite q with ``q/eps < min_ratio``) against what else the
    figures say: the worst list (the smallest positive q, ascending, exactly
    ``min(top_k, positive)`` of them), min_pos_q, and the decade histogram (zeros apart; a
    decade wholly below the bound counts whole, one wholly above not at all); and the
    histogram against min_pos_q and max_q."""
    finite = layer.count - layer.nan_count - layer.inf_count
    _check_lists(r, layer, w, finite)
    t = q_threshold(layer.eps, r.min_ratio)
    spans = {k: _decade_span(layer.eps, k) for k, c in layer.decades if c}
    at_least, at_most = _below_range(layer, finite, t, spans)
    if not at_least <= layer.below_bound <= at_most:
        raise r.fail(
            f"{w}below_bound",
            f"below_bound {layer.below_bound} contradicts the layer's min_q, worst list and "
            f"histogram at q/eps < {r.min_ratio!r} (they give {at_least} to {at_most})",
        )
    _check_extremes(r, layer, w, spans)
