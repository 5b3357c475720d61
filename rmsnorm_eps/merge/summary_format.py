"""The summary file format (``ratio --save-summary``, ``capture --summary-only``): writing it,
and reading it back with a table-driven structural validator.

A summary is a versioned JSON document holding, per layer, every mergeable figure of a ratio
report with unrounded numbers and multi-dimensional indices (see :func:`summary_document`).
Reading validates it in two steps:

* **structure** (:data:`TOP_FIELDS`, :data:`LAYER_FIELDS`, :data:`FIGURE_FIELDS`,
  :data:`TAIL_FIELDS`): each row is ``(key, check)``; a check takes the value and returns it
  parsed, or raises :class:`~rmsnorm_eps.errors.InputFileError` naming the file and the key path
  (``layers[3].worst[0].index``). Adding a field is adding a row;
* **consistency** (:func:`check_figures`): counts that add up, a histogram covering every finite
  value once and agreeing with min_q and max_q, a sorted worst list of exactly ``min(top_k,
  positive)`` positive values, and ``below_bound`` agreeing with min_pos_q, the worst list and the
  histogram at the bound; ``min_ratio`` must be the one ``delta`` gives (recomputed, not trusted).
  A summary that breaks these was edited or corrupted; merging it would report wrong counts (a
  false PASS), so it is refused. Duplicate JSON keys are refused (a reader taking the last one and
  a reader taking the first would merge different figures).

Memory: a file over :data:`MAX_SUMMARY_BYTES` (4 MiB) is refused before it is read. The parsed
JSON costs up to about 35 bytes per byte of text on hostile inputs (small containers such as
``[{"a":[]},...]``, measured), so 4 MiB keeps a whole run under about 160 MiB peak RSS (159 MiB
measured); a real summary holds a few KB per layer at the default ``--top 5`` (a 160-layer
capture summary with positions: about 0.4 MB).

Version 3 (this one): each layer says what its figures are of, ``"quantity": "q"`` (mean(x^2))
or ``"v"`` (a LayerNorm's variance); version 2 did not, so ``merge`` reported a LayerNorm's v as
q, and a version 2 file is refused with one line saying to write it again. Since version 2, zero
vectors (q = 0 exactly) are counted in ``zero`` only: ``below_bound`` counts the positive finite
q below the bound, ``worst`` lists the smallest positive q, and ``min_pos_q`` is the smallest
positive finite q (``min_q`` stays the true minimum). Version 1 counted zeros in
``below_bound`` and listed them in ``worst``; its worst list cannot be turned into a later
version's (the positive inputs it crowded out are lost), so it is refused the same way.

Why one module of ~660 lines: the writer and the validator describe the same format and must
change together (a field added to :func:`summary_document` is a row added to a table here).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmsnorm_eps._version import __version__
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.jsonvalues import jnum
from rmsnorm_eps.numerics import q_threshold
from rmsnorm_eps.summary import DECADE_MAX, DECADE_MIN, Quantity, decade_edge

if TYPE_CHECKING:
    from rmsnorm_eps.analysis import LayerResult, RatioReport

__all__ = [
    "MAX_INT",
    "MAX_SUMMARY_BYTES",
    "SUMMARY_SCHEMA",
    "SUMMARY_VERSION",
    "ShardLayer",
    "ShardSummary",
    "check_bound",
    "check_figures",
    "load_summary",
    "parse_summary_json",
    "summary_document",
    "summary_from_document",
    "write_summary",
]

SUMMARY_SCHEMA = "rmsnorm-eps-summary"
SUMMARY_VERSION = 3
#: Larger summary files are refused before they are read (see the module docstring).
MAX_SUMMARY_BYTES = 4 << 20
#: Counts, sizes and indices must fit in int64 (numpy's index arithmetic).
MAX_INT = 2**63 - 1
_MAX_FLOAT = 1.7976931348623157e308  # the largest finite double


# --------------------------------------------------------------------------- writing


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
        "zero_rule": "q == 0 is counted in zero, not in below_bound nor in worst",
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
        "min_pos_q": layer.min_pos_q,
        "max_q": layer.max_q,
        "worst": [{"index": list(w.index), "q": w.q} for w in layer.worst],
        "nonfinite_examples": [
            {"index": list(n.index), "value": jnum(n.value)} for n in layer.nonfinite_examples
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
        "quantity": layer.quantity,
        **_figures(layer),
    }
    if layer.first_token is not None and layer.other_tokens is not None:
        # indices inside are indices of the whole layer's array, as in the report
        doc["first_token"] = _figures(layer.first_token)
        doc["other_tokens"] = _figures(layer.other_tokens)
    return doc


def write_summary(report: RatioReport, path: str | os.PathLike[str]) -> None:
    """Write :func:`summary_document` as JSON, atomically. Names are hostile: the JSON is
    ASCII (controls and surrogates as ``\\uXXXX``) and :func:`rmsnorm_eps.escape.json_text`
    writes a ``#`` before a ``#`` as ``\\u0023``, so a runner ``cat``-ing the file reads no
    workflow command; it parses back to the exact names."""
    from rmsnorm_eps.atomic import atomic_write_text
    from rmsnorm_eps.escape import json_text

    text = json_text(json.dumps(summary_document(report), indent=1, allow_nan=False)) + "\n"
    atomic_write_text(Path(path), text)


# --------------------------------------------------------------------------- the loaded form


@dataclass(frozen=True)
class ShardLayer:
    """One layer of a shard summary (indices as tuples over ``shape``)."""

    name: str
    eps: float
    shape: tuple[int, ...]
    dtype: str
    raw_dim: int | None
    quantity: Quantity
    count: int
    nan: int
    inf: int
    zero: int
    below_bound: int
    min_q: float | None
    min_pos_q: float | None
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


# --------------------------------------------------------------------------- structure checks


class _Reader:
    """Errors naming the file and the key path; ``shape`` is the layer being read (indices)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.shape: tuple[int, ...] = ()
        #: the summary's bound (``min_ratio``, checked against ``delta``) and ``top_k``, read
        #: before the layers: their figures are checked against them
        self.min_ratio = 0.0
        self.top_k = 0

    def fail(self, key: str, problem: str) -> InputFileError:
        return InputFileError(self.path, problem, key=key)

    def get(self, obj: Any, key: str, where: str) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            raise self.fail(f"{where}{key}", "missing")
        return obj[key]


#: ``check(reader, value, key path) -> parsed value`` (raises naming the key path).
Check = Callable[[_Reader, Any, str], Any]
Table = tuple[tuple[str, Check], ...]


def _shown(v: Any) -> str:
    """``repr(v)``, cut to 60 characters (a value may be a 400-digit integer or a long list)."""
    text = repr(v) if not _is_int(v) or abs(v) < 10**60 else f"an integer of {len(str(v))} digits"
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(minimum: int = 0) -> Check:
    def check(r: _Reader, v: Any, key: str) -> int:
        if not _is_int(v) or not minimum <= v <= MAX_INT:
            raise r.fail(key, f"expected an integer >= {minimum} (int64), got {_shown(v)}")
        return int(v)

    return check


def _number(r: _Reader, v: Any, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not abs(v) <= _MAX_FLOAT:
        raise r.fail(key, f"expected a finite number, got {_shown(v)}")
    return float(v)


def _number_or_null(r: _Reader, v: Any, key: str) -> float | None:
    return None if v is None else _number(r, v, key)


def _number_or_nonfinite(r: _Reader, v: Any, key: str) -> float:
    return float(v) if v in ("nan", "inf", "-inf") else _number(r, v, key)


def _bounded(check: Check, ok: Callable[[float], bool], expected: str) -> Check:
    def bounded(r: _Reader, v: Any, key: str) -> Any:
        x = check(r, v, key)
        if not ok(x):
            raise r.fail(key, f"{expected}, got {_shown(x)}")
        return x

    return bounded


def _bool(r: _Reader, v: Any, key: str) -> bool:
    if not isinstance(v, bool):
        raise r.fail(key, f"expected true or false, got {_shown(v)}")
    return v


def _string(r: _Reader, v: Any, key: str) -> str:
    if not isinstance(v, str):
        raise r.fail(key, f"expected a string, got {_shown(v)}")
    return v


def _shape(r: _Reader, v: Any, key: str) -> tuple[int, ...]:
    if (
        not isinstance(v, list)
        or len(v) > 32
        or not all(_is_int(n) and n >= 0 for n in v)
        or math.prod(v) > MAX_INT
    ):
        raise r.fail(key, f"expected a list of sizes (int64), got {_shown(v)}")
    r.shape = tuple(v)
    return r.shape


def _raw_dim(r: _Reader, v: Any, key: str) -> int | None:
    if v is not None and (not _is_int(v) or not 1 <= v <= MAX_INT):
        raise r.fail(key, f"expected an integer >= 1 or null, got {_shown(v)}")
    return v


def _quantity(r: _Reader, v: Any, key: str) -> Quantity:
    """``"q"`` (mean(x^2), RMSNorm) or ``"v"`` (the variance of a LayerNorm)."""
    if v not in ("q", "v"):
        raise r.fail(key, f'expected "q" or "v", got {_shown(v)}')
    return "q" if v == "q" else "v"


def _index(r: _Reader, v: Any, key: str) -> tuple[int, ...]:
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
            f"{list(shape)}, got {_shown(v)}",
        )
    return tuple(v)


def _decade(r: _Reader, v: Any, key: str) -> tuple[int, int]:
    if (
        not isinstance(v, list)
        or len(v) != 2
        or not all(_is_int(x) for x in v)
        or not DECADE_MIN <= v[0] <= DECADE_MAX
        or not 0 <= v[1] <= MAX_INT
    ):
        raise r.fail(key, f"expected [decade, count], got {_shown(v)}")
    return v[0], v[1]


def _pair(first: str, first_check: Check, second: str, second_check: Check) -> Check:
    """An object ``{first: ..., second: ...}`` read as a tuple."""

    def check(r: _Reader, v: Any, key: str) -> tuple[Any, Any]:
        a = first_check(r, r.get(v, first, f"{key}."), f"{key}.{first}")
        b = second_check(r, r.get(v, second, f"{key}."), f"{key}.{second}")
        return a, b

    return check


def _items(entry: Check) -> Check:
    """A list (already checked to be one) whose every entry passes ``entry``."""

    def check(r: _Reader, v: Any, key: str) -> tuple[Any, ...]:
        return tuple(entry(r, e, f"{key}[{j}]") for j, e in enumerate(v))

    return check


def _read(r: _Reader, obj: Any, table: Table, where: str) -> dict[str, Any]:
    """Every row of ``table`` read from ``obj``, in table order."""
    return {key: check(r, r.get(obj, key, where), f"{where}{key}") for key, check in table}


_positive = _bounded(_number, lambda x: x > 0.0, "expected a number > 0")

#: The document's head (after ``schema`` and ``schema_version``).
TOP_FIELDS: Table = (("raw", _bool), ("source", _string))
#: Per layer, before its figures.
LAYER_FIELDS: Table = (
    ("shape", _shape),
    ("raw_dim", _raw_dim),
    ("dtype", _string),
    ("eps", _bounded(_number, lambda x: x > 0.0, "eps must be a finite number > 0")),
    ("quantity", _quantity),
)
#: The figures of a layer, or of its first_token / other_tokens part (keys as written; the
#: three lists are checked to be lists first).
FIGURE_FIELDS: Table = (
    ("worst", _items(_pair("index", _index, "q", _number))),
    ("nonfinite_examples", _items(_pair("index", _index, "value", _number_or_nonfinite))),
    ("decades", _items(_decade)),
    ("count", _int()),
    ("nan", _int()),
    ("inf", _int()),
    ("zero", _int()),
    ("below_bound", _int()),
    ("min_q", _number_or_null),
    ("min_pos_q", _number_or_null),
    ("max_q", _number_or_null),
)
#: The document's tail (after the layers).
TAIL_FIELDS: Table = (
    ("delta", _bounded(_number, lambda x: 0.0 < x < 1.0, "expected a number in (0, 1)")),
    ("min_ratio", _positive),
    ("top_k", _int()),
)
_LISTS = ("worst", "nonfinite_examples", "decades")


def _figures_of(r: _Reader, obj: Any, where: str) -> dict[str, Any]:
    """:data:`FIGURE_FIELDS` of ``obj`` as :class:`ShardLayer` keyword arguments."""
    if not all(isinstance(r.get(obj, key, where), list) for key in _LISTS):
        raise r.fail(f"{where}worst", "worst, nonfinite_examples and decades must be lists")
    f = _read(r, obj, FIGURE_FIELDS, where)
    f["nonfinite"] = f.pop("nonfinite_examples")
    f["decades"] = tuple(sorted(f["decades"]))
    return f


# --------------------------------------------------------------------------- consistency


def _check_counts(r: _Reader, layer: ShardLayer, w: str) -> int:
    """Counts that add up; returns the number of finite values."""
    finite = layer.count - layer.nan - layer.inf
    if finite < 0:
        raise r.fail(
            f"{w}count", f"count {layer.count} < nan {layer.nan} + inf {layer.inf} (nonfinite)"
        )
    if layer.zero + layer.below_bound > finite:
        raise r.fail(
            f"{w}below_bound",
            f"zero {layer.zero} + below_bound {layer.below_bound} exceeds the {finite} finite "
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
    if len(layer.nonfinite) > layer.nan + layer.inf:
        raise r.fail(
            f"{w}nonfinite_examples",
            f"{len(layer.nonfinite)} examples for {layer.nan + layer.inf} nonfinite values",
        )
    return finite


def check_figures(r: _Reader, layer: ShardLayer, w: str) -> None:
    """The figures of one layer (or part) must be those of one array: counts that add up, a
    histogram that covers every finite nonzero q once, minima and worst list consistent (the
    worst list holds positive q only; min_q is 0 exactly when there are zeros, else min_pos_q).
    """
    finite = _check_counts(r, layer, w)
    positive = finite - layer.zero
    if (layer.min_q is None) != (finite == 0) or (layer.max_q is None) != (finite == 0):
        raise r.fail(f"{w}min_q", "min_q and max_q are null exactly when no q is finite")
    if (layer.min_pos_q is None) != (positive == 0):
        raise r.fail(f"{w}min_pos_q", "min_pos_q is null exactly when no q is finite and > 0")
    qs = [q for _, q in layer.worst]
    if len(qs) > positive or any(q <= 0.0 for q in qs) or qs != sorted(qs):
        raise r.fail(
            f"{w}worst",
            f"expected at most {positive} q values > 0 in ascending order, got {qs!r}",
        )
    if layer.min_q is None or layer.max_q is None:
        return
    expected_min = 0.0 if layer.zero else layer.min_pos_q
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


def _check_lists(r: _Reader, layer: ShardLayer, w: str, finite: int) -> None:
    """The worst list holds exactly ``min(top_k, positive)`` inputs (zeros are not listed),
    the nonfinite examples at most ``top_k``."""
    positive = finite - layer.zero
    if len(layer.worst) != min(r.top_k, positive):
        raise r.fail(
            f"{w}worst",
            f"{len(layer.worst)} worst inputs listed; top_k {r.top_k} and {positive} finite "
            f"positive values give {min(r.top_k, positive)}",
        )
    if len(layer.nonfinite) > r.top_k:
        raise r.fail(f"{w}nonfinite_examples", f"more than top_k {r.top_k} examples")


def _below_range(
    layer: ShardLayer, finite: int, t: float, spans: dict[int, tuple[float, float]]
) -> tuple[int, int]:
    """The least and the most positive finite q below the threshold ``t`` that the worst list,
    min_pos_q and the decade histogram (zeros apart; a decade wholly below counts whole, one
    wholly above not at all) allow."""
    positive = finite - layer.zero
    listed = sum(1 for _, q in layer.worst if q < t)
    at_least, at_most = listed, listed if listed < len(layer.worst) else positive
    if layer.min_pos_q is not None:
        at_least = max(at_least, int(layer.min_pos_q < t))
        if layer.min_pos_q >= t:
            at_most = 0
    whole = sum(c for k, c in layer.decades if c and spans[k][1] <= t)
    partial = sum(c for k, c in layer.decades if c and spans[k][0] < t)
    return max(at_least, whole), min(at_most, partial)


def _check_extremes(
    r: _Reader, layer: ShardLayer, w: str, spans: dict[int, tuple[float, float]]
) -> None:
    """min_pos_q and max_q lie in the lowest and the highest nonempty decade."""
    if not spans or layer.min_pos_q is None or layer.max_q is None:
        return
    lo_k, hi_k = min(spans), max(spans)
    min_ok = spans[lo_k][0] <= layer.min_pos_q < spans[lo_k][1]
    max_ok = spans[hi_k][0] <= layer.max_q < spans[hi_k][1]
    if not (min_ok and max_ok):
        raise r.fail(f"{w}decades", "the decade histogram contradicts the layer's min_q or max_q")


def check_bound(r: _Reader, layer: ShardLayer, w: str) -> None:
    """``below_bound`` (positive finite q with ``q/eps < min_ratio``) against what else the
    figures say: the worst list (the smallest positive q, ascending, exactly
    ``min(top_k, positive)`` of them), min_pos_q, and the decade histogram (zeros apart; a
    decade wholly below the bound counts whole, one wholly above not at all); and the
    histogram against min_pos_q and max_q."""
    finite = layer.count - layer.nan - layer.inf
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


# --------------------------------------------------------------------------- reading


def _split(r: _Reader, ld: dict[str, Any], layer: ShardLayer, w: str) -> ShardLayer:
    """The layer with its first_token / other_tokens parts, when the document has them."""
    has_split = [key in ld for key in ("first_token", "other_tokens")]
    if not any(has_split):
        return layer
    if not all(has_split):
        raise r.fail(f"{w}first_token", "first_token and other_tokens come together")
    first, other = (
        replace(layer, name=f"{layer.name} ({label})", **_figures_of(r, ld[key], f"{w}{key}."))
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


def _layer(r: _Reader, ld: Any, w: str, seen: set[str]) -> ShardLayer:
    name = r.get(ld, "name", w)
    if not isinstance(name, str) or name in seen:
        raise r.fail(f"{w}name", f"expected a unique layer name, got {name!r}")
    seen.add(name)
    head = _read(r, ld, LAYER_FIELDS, w)
    layer = ShardLayer(name=name, **head, **_figures_of(r, ld, w))
    if layer.count != math.prod(layer.shape):
        raise r.fail(f"{w}count", f"count {layer.count} does not match shape {list(layer.shape)}")
    check_figures(r, layer, w)
    check_bound(r, layer, w)
    return _split(r, ld, layer, w)


def _check_schema(r: _Reader, doc: Any) -> None:
    if not isinstance(doc, dict) or doc.get("schema") != SUMMARY_SCHEMA:
        raise r.fail("schema", f"not an rmsnorm-eps summary (expected {SUMMARY_SCHEMA!r})")
    version = doc.get("schema_version")
    if version == 2:
        raise r.fail(
            "schema_version",
            "summary version 2 does not say whether a layer holds q or a LayerNorm's v (merge "
            "reported v as q); write it again with this rmsnorm-eps (it reads version "
            f"{SUMMARY_VERSION})",
        )
    if version == 1:
        raise r.fail(
            "schema_version",
            "summary version 1 counts q = 0 as below the bound and lists zeros as the worst "
            f"inputs; write it again with this rmsnorm-eps (it reads version {SUMMARY_VERSION})",
        )
    if version != SUMMARY_VERSION:
        raise r.fail(
            "schema_version",
            f"unsupported summary version {version!r} "
            f"(this rmsnorm-eps reads version {SUMMARY_VERSION})",
        )


def summary_from_document(doc: Any, path: str | os.PathLike[str]) -> ShardSummary:
    """Validate a parsed summary document; ``path`` names it in errors and in merged reports
    (a file, or a label such as ``rank1`` for summaries gathered in memory)."""
    p = Path(path)
    r = _Reader(p)
    _check_schema(r, doc)
    head = _read(r, doc, TOP_FIELDS, "")
    layers_doc = r.get(doc, "layers", "")
    if not isinstance(layers_doc, list) or not layers_doc:
        raise r.fail("layers", "expected a non-empty list")
    tail = _read(r, doc, TAIL_FIELDS, "")
    _check_bound_agrees(r, tail["delta"], tail["min_ratio"])
    r.min_ratio, r.top_k = tail["min_ratio"], tail["top_k"]
    seen: set[str] = set()
    layers = tuple(_layer(r, ld, f"layers[{i}].", seen) for i, ld in enumerate(layers_doc))
    return ShardSummary(path=p, **head, **tail, layers=layers)


def _check_bound_agrees(r: _Reader, delta: float, ratio: float) -> None:
    """``min_ratio`` must be the ratio ``delta`` gives, or the one ``delta`` was computed from
    (``--min-ratio``): a summary claiming a bound its ``delta`` contradicts is refused."""
    from rmsnorm_eps import numerics

    if (
        float(numerics.min_ratio(delta)) != ratio
        and float(numerics.attenuation_loss(ratio)) != delta
    ):
        raise r.fail(
            "min_ratio",
            f"min_ratio {ratio!r} contradicts delta {delta!r} (which gives "
            f"{float(numerics.min_ratio(delta))!r})",
        )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: a JSON object whose keys repeat is refused."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {_shown(key)}")
    return out


def parse_summary_json(text: str | bytes) -> Any:
    """The JSON of a summary: NaN/Infinity constants and duplicate keys refused (ValueError)."""
    return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)


def _no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (the summary writes them as strings): refuse them."""
    raise ValueError(f"{name} is not valid JSON")


def load_summary(path: str | os.PathLike[str]) -> ShardSummary:
    """Read and validate a summary written by ``ratio --save-summary`` or
    ``capture --summary-only`` (at most :data:`MAX_SUMMARY_BYTES`)."""
    from rmsnorm_eps.sources.sniff import check_regular_file

    p = Path(path)
    size = check_regular_file(p)
    if size > MAX_SUMMARY_BYTES:
        raise InputFileError(
            p,
            f"summary too large ({size} bytes; the limit is {MAX_SUMMARY_BYTES >> 20} MiB, "
            "about a thousand layers at --top 5)",
        )
    try:
        with open(p, "rb") as fh:
            data = fh.read(MAX_SUMMARY_BYTES + 1)
        if len(data) > MAX_SUMMARY_BYTES:  # grew since it was measured
            raise InputFileError(p, f"summary too large (over {MAX_SUMMARY_BYTES >> 20} MiB)")
        doc = parse_summary_json(data.decode("utf-8"))
    except RecursionError:
        raise InputFileError(p, "not a JSON summary (nested too deeply)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputFileError(p, f"not a JSON summary ({exc})") from None
    del data
    return summary_from_document(doc, p)
