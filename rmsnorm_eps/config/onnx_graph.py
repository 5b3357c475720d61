"""Reader for exported ONNX graphs: every normalization in the graph and the eps it stores.

The model is parsed from bytes read by :mod:`~rmsnorm_eps.config.onnx_wire` (positioned reads,
never a mapping; weights kept in external files are never opened), after a size check
(:data:`MAX_ONNX_BYTES`), and the graph is walked with a node cap (:data:`MAX_NODES`, main
graph, ``model.functions`` and every If/Loop/Scan subgraph together). A file protobuf
cannot parse is one :class:`InputFileError`.

A norm is found either as a fused op (its ``epsilon`` attribute, or the op schema's default
when the attribute is absent, said so: the fused section below) or as a
decomposed pattern matched by structure (the decomposed section below), where an
eps dropped altogether (torch's exporter does so for eps <= 1e-8) is a finding.

Cast nodes between the steps are walked through (the eps "behind a Cast" is reported with the
dtype it is cast to). The eps is kept as stored: its exact value, its dtype (the dtype the
addition runs in), and where it lives (attribute, initializer, Constant node, behind a Cast).

Each norm is named by the module it came from: the node metadata ``pkg.torch.onnx.name_scopes``
of torch's dynamo exporter (``[..., 'model.layers.0.input_layernorm', 'add_1']``), else a
legacy node name (``/model/layers.0/input_layernorm/Add`` -> ``model.layers.0.input_layernorm``),
else the node's own name. The result is a :class:`~rmsnorm_eps.config.model.NormConfig` with
one literal entry per norm, so ``config show``, ``config diff``, ``ratio --config`` and
``compare --config`` take an ONNX file like any other config.

Why one module: the index and constant lookups, the two matchers, the settings of what they
find and the graph walk share one private vocabulary (the per-graph index, constants behind a
name, Casts walked through); split by size, they had imported some thirty private names from
one another. It reads top down in that order. The wire-format node count that runs before the
parse is :mod:`~rmsnorm_eps.config.onnx_wire`.
"""

from __future__ import annotations

import functools
import math
from collections import ChainMap
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

from rmsnorm_eps.config.fields import shorten
from rmsnorm_eps.config.model import (
    ConfigEntry,
    NormConfig,
    NormSettings,
    Provenance,
    Resolved,
    missing,
)
from rmsnorm_eps.errors import InputFileError, MissingExtraError

# ================================================================================================
# The graph index, constants and lookups shared by both matchers
# ================================================================================================

# Lookups on one ONNX graph's protobuf, shared by the fused and the decomposed matchers:
# :class:`GraphNorm` (one norm found), the per-graph index, constants behind a tensor name,
# walking through Cast nodes, the gain of a scale tensor and the module a norm came from.

#: Elements of a tensor read to find an eps (a scalar or a small all-equal tensor).
MAX_EPS_ELEMENTS = 64

_DTYPES = {
    1: "float32",
    10: "float16",
    11: "float64",
    16: "bfloat16",
    6: "int32",
    7: "int64",
}


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise MissingExtraError("onnx", "onnx", "reading .onnx files") from None
    return onnx


@dataclass(frozen=True)
class GraphNorm:
    """One normalization found in a graph.

    ``eps`` is the stored value (float64 of the stored float), None when the pattern has no eps
    (``eps_where`` says why); ``eps_dtype`` the dtype it is stored in (the addition's dtype).
    """

    name: str
    norm: str
    op: str
    eps: float | None
    eps_dtype: str | None
    eps_where: str
    eps_default: bool
    placement: str
    gain: str
    gain_where: str
    dim: int | None
    nodes: tuple[str, ...]
    graph: str
    name_from: str
    #: The tensors the norm reads (x, then a Skip op's skip) and writes, for parity --onnx.
    inputs: tuple[str, ...] = ()
    output: str = ""
    #: The scale initializer (w, or the w of 1 + w) and a LayerNorm's bias initializer.
    scale: str | None = None
    bias: str | None = None
    #: The dtype the eps addition runs in and where that was read (a fused op's stash_type).
    add_dtype: str | None = None
    add_dtype_from: str = ""


@dataclass
class _Graph:
    """Lookups of one graph: producers, consumers, constants (outer scopes included)."""

    label: str
    producer: Mapping[str, Any] = field(default_factory=dict)
    consumers: Any = None  # _Readers: name -> the nodes reading it
    own: Any = None  # _NodeIndex of this graph's own nodes
    initializers: MutableMapping[str, Any] = field(default_factory=dict)
    value_types: MutableMapping[str, int] = field(default_factory=dict)
    #: The model's folder (external data of small constants is read from there).
    base: Path | None = None
    #: The names of the graph's inputs (outer scopes included): a weight may be one.
    graph_inputs: MutableMapping[str, bool] = field(default_factory=dict)


def _index(graph: Any, label: str, outer: _Graph | None, base: Path | None = None) -> _Graph:
    """The lookups of ``graph``; a subgraph's chain onto its outer graph's (never copied: a
    graph of many subgraphs costs each one its own names only)."""
    g = _Graph(label, base=base if outer is None else outer.base)
    if outer is not None:
        g.initializers = ChainMap({}, outer.initializers)
        g.value_types = ChainMap({}, outer.value_types)
        g.graph_inputs = ChainMap({}, outer.graph_inputs)
    is_function = not hasattr(graph, "initializer")  # a FunctionProto: names only
    for t in () if is_function else graph.initializer:
        g.initializers[t.name] = t
    for name in graph.input if is_function else (vi.name for vi in graph.input):
        g.graph_inputs[name] = True
    infos = () if is_function else (*graph.input, *graph.value_info, *graph.output)
    for vi in infos:
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and tt.elem_type:
            g.value_types[vi.name] = tt.elem_type
    own = _NodeIndex(graph.node)
    for i, node in enumerate(graph.node):
        for out in node.output:
            if out:
                own.at[out] = i
        for inp in node.input:
            if inp:
                own.readers.setdefault(inp, []).append(i)
    g.own = own
    if outer is None:
        g.producer = own
    else:
        g.producer = ChainMap(own, outer.producer)  # type: ignore[arg-type]
    g.consumers = own.readers_view()
    return g


class _NodeIndex(Mapping[str, Any]):
    """name -> the node producing it, kept as node positions: the node objects are made when
    looked up, so that indexing a graph of 2^18 nodes does not keep a wrapper per node."""

    def __init__(self, nodes: Any) -> None:
        self.nodes = nodes
        self.at: dict[str, int] = {}
        self.readers: dict[str, list[int]] = {}

    def __getitem__(self, name: str) -> Any:
        return self.nodes[self.at[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.at)

    def __len__(self) -> int:
        return len(self.at)

    def readers_view(self) -> _Readers:
        return _Readers(self)


class _Readers:
    """name -> the nodes reading it (see :class:`_NodeIndex`)."""

    def __init__(self, index: _NodeIndex) -> None:
        self.index = index

    def get(self, name: str, default: list[Any]) -> list[Any]:
        found = self.index.readers.get(name)
        return default if found is None else [self.index.nodes[i] for i in found]

    def __getitem__(self, name: str) -> list[Any]:
        return [self.index.nodes[i] for i in self.index.readers[name]]

    def __contains__(self, name: object) -> bool:
        return name in self.index.readers


def judge_eps(value: float | None, where: str) -> tuple[float | None, str]:
    """``(value, where)`` of an eps the graph stores, judged: NaN, an infinity, a negative
    value or 0 is no usable eps (value None, ``where`` saying which, with the value), never
    read as a number; None (not read) stays None."""
    if value is None:
        return None, where
    if math.isnan(value):
        return None, f"eps is nan (not a number): {where}"
    if math.isinf(value):
        return None, f"eps is {value!r} (not finite): {where}"
    if value == 0.0:
        return None, f"eps is 0: {where}"
    if value < 0.0:
        return None, f"eps is negative ({value!r}): {where}"
    return value, where


def _attr(node: Any, name: str) -> Any:
    for a in node.attribute:
        if a.name == name:
            return a
    return None


@dataclass(frozen=True)
class _Const:
    value: float | None  # None: not all equal, or not read
    dtype: str | None
    where: str
    elements: int


def _tensor_const(t: Any, where: str, base: Path | None = None) -> _Const:
    onnx = _onnx()
    import numpy as np

    dtype = _DTYPES.get(t.data_type, f"type {t.data_type}")
    n = math.prod(int(d) for d in t.dims)
    if n > MAX_EPS_ELEMENTS or n == 0:
        return _Const(None, dtype, where, n)
    if t.data_location == onnx.TensorProto.EXTERNAL:
        loaded = _external_tensor(t, base)
        if isinstance(loaded, str):
            return _Const(None, dtype, f"{where} (external data, {loaded})", n)
        t, where = loaded, f"{where} (external data)"
    try:
        arr = onnx.numpy_helper.to_array(t).astype(np.float64).ravel()
    except Exception:
        return _Const(None, dtype, f"{where} (unreadable)", n)
    if not np.array_equal(arr, np.full_like(arr, arr[0]), equal_nan=True):  # NaN is judged
        return _Const(None, dtype, f"{where} (elements differ)", n)
    return _Const(float(arr[0]), dtype, where, n)


#: Bytes read from an external data file for one small constant (an eps, a 1 of 1 + w).
MAX_EXTERNAL_BYTES = 8 * MAX_EPS_ELEMENTS


def _external_tensor(t: Any, base: Path | None) -> Any:
    """A copy of the small external tensor ``t`` with its bytes read in (at most
    :data:`MAX_EXTERNAL_BYTES`, from a regular file inside the model's folder), or a string
    saying why not. Only tensors of at most :data:`MAX_EPS_ELEMENTS` elements get here."""
    import os
    import stat

    onnx = _onnx()
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    if base is None or not location:
        return "no location"
    target = (base / location).resolve()
    if os.path.isabs(location) or base.resolve() not in target.parents:
        return f"location {location!r} outside the model's folder, not read"
    try:
        offset, length = int(info.get("offset", "0")), int(info.get("length", "-1"))
    except ValueError:
        return "offset or length not a number"
    if offset < 0 or not 0 < length <= MAX_EXTERNAL_BYTES:
        return f"length {length} not read (at most {MAX_EXTERNAL_BYTES} bytes)"
    try:
        with open(target, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return "not a regular file"
            f.seek(offset)
            raw = f.read(length)
    except OSError as exc:
        return f"cannot read: {exc.strerror or type(exc).__name__}"
    if len(raw) != length:
        return "file shorter than offset + length"
    copy = onnx.TensorProto()
    copy.CopyFrom(t)
    del copy.external_data[:]
    copy.data_location = onnx.TensorProto.DEFAULT
    copy.raw_data = raw
    return copy


def _op(node: Any) -> str:
    """The op a node computes, by (domain, op type): ``Add`` for ONNX's own domain (``""`` or
    ``ai.onnx``), ``domain.Op`` for any other, so that an ``Add`` of an unknown domain is never
    read as ONNX's Add."""
    domain = node.domain
    return str(node.op_type) if domain in ("", "ai.onnx") else f"{domain}.{node.op_type}"


#: Element-wise ops folded over constants. Every constant read is one value repeated, so the
#: result is the op on those values (in the inputs' dtype), whatever the shapes broadcast to.
_FOLD_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min")
_FOLD_UNARY = ("Sqrt", "Neg", "Reciprocal", "Abs", "Identity")
#: Ops that only move or repeat the elements of their first input.
_FOLD_SHAPE = ("Reshape", "Squeeze", "Unsqueeze", "Expand", "Flatten")
#: Nested lookups behind one tensor (Cast, folded ops): a constant cone deeper is not read.
MAX_CONST_DEPTH = 8


def round_to(value: float, dtype: str | None) -> float:
    """``value`` as the dtype ``dtype`` holds it: float16, float32 and bfloat16 round to
    nearest, ties to even (:func:`rmsnorm_eps.dtypes.round_to`); an integer dtype truncates (a
    Cast to int64 of 1e-5 is 0); float64 and unknown unchanged."""
    if dtype in ("float16", "float32", "bfloat16"):
        from rmsnorm_eps import dtypes

        return float(dtypes.round_to(value, dtype)[()])
    if dtype in ("int32", "int64") and math.isfinite(value):
        return float(math.trunc(value))
    return value


def _fold(op: str, values: list[float], dtype: str | None) -> float:
    """``op`` on one value per input, computed in float64 and rounded to ``dtype``."""
    import numpy as np

    unary = {"Sqrt": np.sqrt, "Neg": np.negative, "Reciprocal": np.reciprocal, "Abs": np.abs}
    binary = {
        "Add": np.add,
        "Sub": np.subtract,
        "Mul": np.multiply,
        "Div": np.divide,
        "Pow": np.power,
        "Max": np.maximum,
        "Min": np.minimum,
    }
    with np.errstate(all="ignore"):
        if op in binary:
            out = binary[op](np.float64(values[0]), np.float64(values[1]))
        elif op in unary:
            out = unary[op](np.float64(values[0]))
        else:
            out = np.float64(values[0])
    return round_to(float(out), dtype)


def _const(g: _Graph, name: str, depth: int = 0) -> _Const | None:
    """The constant behind tensor ``name``: an initializer, a Constant node, a Cast of one
    (rounded to the dtype cast to), or an element-wise op on constants, folded."""
    if name in g.initializers:
        return _tensor_const(g.initializers[name], f"initializer {name!r}", g.base)
    node = g.producer.get(name)
    if node is None or depth > MAX_CONST_DEPTH:
        return None
    op = _op(node)
    if op == "Constant":
        return _constant_node(node, g.base)
    if op == "Cast" and node.input:
        return _cast_const(g, node, depth)
    if op in _FOLD_SHAPE and node.input:
        return _const(g, node.input[0], depth + 1)
    return _folded_const(g, node, op, depth)


def _cast_const(g: _Graph, node: Any, depth: int) -> _Const | None:
    """The constant a Cast of a constant gives, rounded to the dtype cast to."""
    inner = _const(g, node.input[0], depth + 1)
    to = _attr(node, "to")
    if inner is None or to is None:
        return None
    dtype = _DTYPES.get(int(to.i), f"type {to.i}")
    value = None if inner.value is None else round_to(inner.value, dtype)
    return _Const(value, dtype, f"behind a Cast to {dtype} of {inner.where}", inner.elements)


def _folded_const(g: _Graph, node: Any, op: str, depth: int) -> _Const | None:
    """An element-wise op on constants, folded (:func:`_fold`), or None."""
    arity = 2 if op in _FOLD_BINARY else 1 if op in _FOLD_UNARY else 0
    if arity == 0 or len(node.input) != arity:
        return None
    inputs = [_const(g, x, depth + 1) for x in node.input]
    consts = [c for c in inputs if c is not None]
    if len(consts) != arity:
        return None
    where = f"{op} {node.name!r} folded over {' and '.join(c.where for c in consts)}"
    elements = max(c.elements for c in consts)
    values = [c.value for c in consts if c.value is not None]
    if len(values) != arity:
        return _Const(None, consts[0].dtype, where, elements)
    return _Const(_fold(op, values, consts[0].dtype), consts[0].dtype, where, elements)


def _constant_node(node: Any, base: Path | None) -> _Const | None:
    a = _attr(node, "value")
    if a is not None and a.HasField("t"):
        return _tensor_const(a.t, f"Constant node {node.name!r}", base)
    for key in ("value_float", "value_floats"):
        a = _attr(node, key)
        if a is not None:
            vals = [a.f] if key == "value_float" else list(a.floats)
            if vals and all(v == vals[0] or (v != v and vals[0] != vals[0]) for v in vals):
                return _Const(float(vals[0]), "float32", f"Constant node {node.name!r}", 1)
    return None


def _skip_cast_down(g: _Graph, name: str) -> list[tuple[Any, str]]:
    """Consumers of ``name``, looking through Cast nodes: (node, the input name it reads)."""
    out: list[tuple[Any, str]] = []
    todo = [name]
    seen = 0
    while todo and seen < 16:
        cur = todo.pop()
        seen += 1
        for node in g.consumers.get(cur, []):
            if _op(node) == "Cast" and node.output:
                todo.append(node.output[0])
            else:
                out.append((node, cur))
    return out


def _skip_cast_up(g: _Graph, name: str) -> str:
    for _ in range(8):
        node = g.producer.get(name)
        if node is None or _op(node) != "Cast" or not node.input:
            return name
        name = node.input[0]
    return name


def _producer_op(g: _Graph, name: str) -> Any:
    return g.producer.get(_skip_cast_up(g, name))


def _module_name(nodes: list[Any]) -> tuple[str | None, str]:
    """The module path of a pattern's nodes and where it was read."""
    import ast

    for node in nodes:
        for p in node.metadata_props:
            if p.key == "pkg.torch.onnx.name_scopes" and len(p.value) < 65536:
                try:
                    scopes = ast.literal_eval(p.value)
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    continue
                if (
                    isinstance(scopes, list)
                    and len(scopes) >= 2
                    and isinstance(scopes[-2], str)
                    and scopes[-2]
                ):
                    return scopes[-2], "pkg.torch.onnx.name_scopes"
    for node in nodes:
        if node.name.startswith("/") and node.name.count("/") >= 2:
            # /model/layers.0/input_layernorm/Add; onnxruntime's fusions append
            # /<Name>Fusion/ to the name of the node they replace
            parts = [x for x in node.name.split("/") if x]
            while parts and parts[-1].endswith("Fusion"):
                parts.pop()
            parts = parts[:-1]
            if parts:
                return ".".join(parts), "legacy node name"
    return None, "node name"


def _from_weight(
    g: _Graph, module: str | None, name_from: str, scale: str | None
) -> tuple[str | None, str]:
    """Without a module path from the nodes (onnxruntime's optimized copy drops the metadata):
    the module of the scale initializer ``model.layers.0.input_layernorm.weight``, when that
    initializer is read by this norm alone (onnxruntime keeps one of several equal initializers,
    all-ones weights for instance: its name is then the first module's, not this one's)."""
    if module is not None or scale is None or not scale.endswith(".weight") or len(scale) <= 7:
        return module, name_from
    if len(g.consumers.get(scale, [])) != 1:
        return None, name_from
    return scale[: -len(".weight")], "scale initializer name"


def _one_plus_w_classes() -> frozenset[str]:
    """The transformers norm classes whose gain is 1 + w (the family table's)."""
    from rmsnorm_eps.config.hf_families import HF_FAMILIES

    return frozenset(f.impl.split()[0] for f in HF_FAMILIES.values() if f.gain == "1+w")


def _classes(nodes: list[Any]) -> list[str]:
    """The classes of torch's dynamo metadata ``pkg.torch.onnx.class_hierarchy`` of the nodes
    (``['__main__.M', 'transformers...GemmaRMSNorm', 'aten.mul.Tensor']``), short names."""
    import ast

    found: list[str] = []
    for node in nodes:
        for p in node.metadata_props:
            if p.key != "pkg.torch.onnx.class_hierarchy" or len(p.value) > 65536:
                continue
            try:
                names = ast.literal_eval(p.value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(names, list):
                found += [n.rsplit(".", 1)[-1] for n in names if isinstance(n, str)]
    return found


#: The gain of a norm whose scale the exporter folded without saying from what (w or 1 + w).
GAIN_UNKNOWN = "unknown (folded)"


def folded_gain(
    g: _Graph, nodes: list[Any], gain: tuple[str, str], scale: str | None
) -> tuple[str, str]:
    """(gain, where): a ``w`` read from an initializer the exporter folded (not a parameter
    ``*.weight``) is ``1+w`` when the nodes' class is one whose gain is 1 + w: torch's dynamo
    exporter folds Gemma's ``1 + w`` into one initializer (``add_1``).

    Without such a class, an initializer TorchScript named ``onnx::...`` (its name for a value
    it computed at export, e.g. ``onnx::Mul_17`` = 1 + w of GemmaRMSNorm, or a Cast of w) holds
    g itself, but whether the module multiplies by w or by 1 + w cannot be read from the graph:
    the gain is :data:`GAIN_UNKNOWN`, never ``w`` by default."""
    if gain[0] != "w" or scale is None or scale.endswith(".weight"):
        return gain
    if scale not in g.initializers or scale in g.graph_inputs:
        return gain
    cls = next((c for c in _classes(nodes) if c in _one_plus_w_classes()), None)
    if cls is None:
        if scale.startswith("onnx::"):
            return GAIN_UNKNOWN, (
                f"scale {scale!r} folded by the exporter (no parameter name, no class "
                "metadata): w or 1 + w (e.g. Gemma's) cannot be told from the graph"
            )
        return gain
    return "1+w", f"1 + w folded by the exporter into {scale!r} ({cls} multiplies by 1 + w)"


def _scale_name(g: _Graph, name: str) -> str | None:
    """The initializer holding w (for 1 + w: the w)."""
    src = _skip_cast_up(g, name)
    if src in g.initializers:
        return src
    node = g.producer.get(src)
    if node is not None and _op(node) == "Add":
        for inp in node.input:
            inner = _skip_cast_up(g, inp)
            if inner in g.initializers:
                c = _const(g, inner)
                if c is None or c.elements != 1:
                    return inner
    return None


def _gain_of(g: _Graph, name: str) -> tuple[str, str, int | None]:
    """('w' | '1+w', where, dim) of a scale tensor: an initializer/input, or Add(w, 1)."""
    src = _skip_cast_up(g, name)
    node = g.producer.get(src)
    if node is not None and _op(node) == "Add" and len(node.input) == 2:
        for i in (0, 1):
            c = _const(g, node.input[i])
            if c is not None and c.value == 1.0 and c.elements == 1:
                other = node.input[1 - i]
                return "1+w", f"1 + {other!r}", _dim(g, other)
    return "w", f"scale {src!r}", _dim(g, src)


def _dim(g: _Graph, name: str) -> int | None:
    t = g.initializers.get(_skip_cast_up(g, name))
    if t is not None and len(t.dims) == 1:
        return int(t.dims[0])
    return None


# ================================================================================================
# The NormConfig settings of the norms found
# ================================================================================================

# The :class:`~rmsnorm_eps.config.model.NormConfig` settings of the norms an ONNX graph holds:
# one entry's overrides per :class:`GraphNorm` (eps with its
# stored dtype and where it lives, placement, gain, norm, reduction dtype, d), and the findings
# (eps absent, schema default used, one norm's eps unlike that of most of its kind).


def _settings(norm: GraphNorm, path: str) -> tuple[tuple[str, Resolved], ...]:
    """The NormConfig overrides of one graph norm."""
    import numpy as np

    def at(key: str, note: str = "") -> Provenance:
        return Provenance("file", path, key=key, note=note)

    key = f"{norm.graph}: {norm.op}"
    if norm.eps is None:
        eps = missing(f"{norm.eps_where} ({key})")
    elif norm.eps_default:
        eps = Resolved(norm.eps, Provenance("framework", norm.eps_where, note=key))
    else:
        # the shortest decimal that reads back as the same stored float (as GGUF's float32)
        half_or_single = norm.eps_dtype in ("float16", "float32")
        short = str(np.dtype(norm.eps_dtype).type(norm.eps)) if half_or_single else None
        # the narrowest dtype eps went through: a Cast to float16 then up to float32 rounded
        # it to float16's precision, whatever dtype it is added in
        through = next(
            (
                t
                for t in ("float16", "bfloat16")
                if t == norm.eps_dtype or f"Cast to {t}" in norm.eps_where
            ),
            None,
        )
        rounded = f"eps rounded to {through}" if through is not None else ""
        eps = Resolved(
            norm.eps,
            at(f"{key}: {norm.eps_where}", rounded),
            stored=norm.eps_dtype if short is not None else None,
            short=short,
        )
    out: list[tuple[str, Resolved]] = [
        ("eps", eps),
        ("placement", Resolved(norm.placement, at(key))),
        (
            "gain",
            missing(f"{norm.gain_where} ({key})")
            if norm.gain == GAIN_UNKNOWN
            else Resolved(norm.gain, at(key, norm.gain_where)),
        ),
        ("norm", Resolved(norm.norm, at(key, f"name from {norm.name_from}"))),
    ]
    if norm.add_dtype in ("float16", "bfloat16", "float32", "float64"):
        out.append(("reduction_dtype", Resolved(norm.add_dtype, at(key, norm.add_dtype_from))))
    if norm.dim is not None:
        out.append(("dim", Resolved(norm.dim, at(key, "length of the scale"))))
    return tuple(out)


def _sibling_notes(norms: tuple[GraphNorm, ...]) -> list[str]:
    """Norms whose eps differs from that of most norms of the same kind (one unlike its
    siblings), and norms without eps."""
    from collections import Counter

    notes = []
    for norm in norms:
        if norm.eps is None or norm.eps_default:
            notes.append(f"FINDING {shorten(norm.name, 120)}: {norm.eps_where}")
        if norm.gain == GAIN_UNKNOWN:
            notes.append(f"{shorten(norm.name, 120)}: gain not known: {norm.gain_where}")
    by_kind: dict[str, Counter[float]] = {}
    for norm in norms:
        if norm.eps is not None:
            by_kind.setdefault(norm.norm, Counter())[norm.eps] += 1
    for kind, counts in by_kind.items():
        if len(counts) < 2:
            continue
        common, n = counts.most_common(1)[0]
        for norm in norms:
            if norm.norm == kind and norm.eps is not None and norm.eps != common:
                notes.append(
                    f"FINDING {shorten(norm.name, 120)}: eps {norm.eps!r} unlike its {n} "
                    f"{kind} sibling(s) with eps {common!r}"
                )
    return notes


# ================================================================================================
# Decomposed norms, matched by structure
# ================================================================================================

# Decomposed normalizations matched by structure, for x of dimension d.
#
# - ``q = ReduceMean(Pow(x, 2) | Mul(x, x))`` (RMS), ``q = ReduceMean(Pow(x - mean(x), 2))``
#   (LayerNorm), or ``s = ReduceSumSquare(x) | ReduceSum(Pow(x, 2))`` (sum: eps is scaled by d);
# - then ``Sqrt(Add(q, eps))`` (inside), ``Add(Sqrt(q), eps)`` (outside), ``Max(Sqrt(q), eps)``
#   (clamp), ``Pow(q + eps, -0.5)`` (an rsqrt), or no eps at all (dropped: a finding);
# - then ``Div(x, r)``, ``Mul(x, Reciprocal(r))`` or ``Mul(x, rsqrt)``, and a gain ``Mul(y, w)``,
#   ``Mul(y, Add(w, 1))`` or none (an RMS pattern without a weight is reported as l2).


def _square_input(g: _Graph, node: Any) -> str | None:
    """x when ``node`` computes x*x (Pow(x, 2) or Mul(x, x)), else None."""
    if node is None:
        return None
    if _op(node) == "Pow" and len(node.input) == 2:
        c = _const(g, node.input[1])
        if c is not None and c.value == 2.0:
            return str(node.input[0])
    if _op(node) == "Mul" and len(node.input) == 2 and node.input[0] == node.input[1]:
        return str(node.input[0])
    return None


@dataclass
class _Walk:
    nodes: list[Any]
    x: str
    norm: str
    placement: str
    eps: _Const | None = None
    eps_node: Any = None
    dropped: bool = False


def _reduction(g: _Graph, node: Any) -> _Walk | None:
    """The start of a decomposed norm at a reduction node, or None."""
    if _op(node) == "ReduceSumSquare" and node.input:
        return _Walk([node], node.input[0], "rms", "sum")
    if _op(node) not in ("ReduceMean", "ReduceSum") or not node.input:
        return None
    sq = _producer_op(g, node.input[0])
    x = _square_input(g, sq)
    if x is None:
        return None
    placement = "sum" if _op(node) == "ReduceSum" else "inside"
    norm = "rms"
    centred = _producer_op(g, x)
    if centred is not None and _op(centred) == "Sub" and len(centred.input) == 2:
        mean = _producer_op(g, centred.input[1])
        if mean is not None and _op(mean) == "ReduceMean":
            norm = "layer"
            x = centred.input[0]
    return _Walk([node, sq], x, norm, placement)


def _branches(g: _Graph, walk: _Walk, q: str) -> list[tuple[_Walk, str]]:
    """Each way from q (the reduction's output) to the output of a normalization (x / r), with
    its own walk: one reduction feeding several eps additions is several norms."""
    found = []
    for node, _ in _skip_cast_down(g, q):
        branch = replace(walk, nodes=list(walk.nodes))
        y = _follow(g, branch, node)
        if y is not None:
            found.append((branch, y))
    return found


def _follow(g: _Graph, walk: _Walk, node: Any) -> str | None:
    """From ``node`` (a consumer of q) to the output of the normalization, or None."""
    if _op(node) == "Add" and len(node.input) == 2:
        c = _const(g, node.input[1]) or _const(g, node.input[0])
        if c is None:
            return None
        walk.eps, walk.eps_node = c, node
        walk.nodes.append(node)
        for nxt, _ in _skip_cast_down(g, node.output[0]):
            if _op(nxt) == "Sqrt":
                walk.nodes.append(nxt)
                return _divide(g, walk, nxt.output[0])
            if _is_rsqrt(g, nxt):  # Pow(q + eps, -0.5): an rsqrt, then Mul(x, .)
                walk.nodes.append(nxt)
                return _times(g, walk, nxt.output[0])
        return None
    if _is_rsqrt(g, node):  # Pow(q, -0.5): no eps at all
        walk.nodes.append(node)
        walk.dropped = True
        return _times(g, walk, node.output[0])
    if _op(node) != "Sqrt":
        return None
    walk.nodes.append(node)
    root = node.output[0]
    for nxt, _ in _skip_cast_down(g, root):
        if _op(nxt) in ("Add", "Max") and len(nxt.input) == 2:
            c = _const(g, nxt.input[1]) or _const(g, nxt.input[0])
            if c is not None:
                walk.eps, walk.eps_node = c, nxt
                walk.placement = "outside" if _op(nxt) == "Add" else "clamp"
                walk.nodes.append(nxt)
                return _divide(g, walk, nxt.output[0])
    walk.dropped = True
    return _divide(g, walk, root)


def _is_rsqrt(g: _Graph, node: Any) -> bool:
    """``node`` is Pow(t, -0.5)."""
    if _op(node) != "Pow" or len(node.input) != 2:
        return False
    c = _const(g, node.input[1])
    return c is not None and c.value == -0.5


def _times(g: _Graph, walk: _Walk, r: str) -> str | None:
    """The output of Mul(x, r) (r = 1/sqrt(...))."""
    for node, _ in _skip_cast_down(g, r):
        if _op(node) == "Mul":
            walk.nodes.append(node)
            return str(node.output[0])
    return None


def _divide(g: _Graph, walk: _Walk, r: str) -> str | None:
    """The output of x / r: ``Div(x, r)``, or ``Mul(x, 1 / r)`` with ``Reciprocal(r)`` or
    ``Div(1, r)`` (torch's TorchScript exporter writes the latter)."""
    for node, via in _skip_cast_down(g, r):
        if _op(node) == "Div" and len(node.input) == 2 and node.input[1] == via:
            walk.nodes.append(node)
            one = _const(g, node.input[0])
            if one is not None and one.value == 1.0 and one.elements == 1:
                return _times(g, walk, node.output[0])
            return str(node.output[0])
        if _op(node) == "Reciprocal":
            walk.nodes.append(node)
            return _times(g, walk, node.output[0])
    return None


def _weight(g: _Graph, walk: _Walk, y: str) -> tuple[str, str, int | None, str | None, str]:
    """The gain after the normalization y: (gain, where, dim, scale initializer, output).

    ``Mul(y, w)`` with w a weight (:func:`_is_weight`; never x itself) is the gain (its Mul is
    added to ``walk.nodes``); otherwise ``"none"`` and the output stays y.
    """
    for nxt, via in _skip_cast_down(g, y):
        if _op(nxt) == "Mul" and len(nxt.input) == 2:
            other = nxt.input[1] if nxt.input[0] == via else nxt.input[0]
            if _skip_cast_up(g, other) != _skip_cast_up(g, walk.x) and _is_weight(g, other):
                gain, gain_where, dim = _gain_of(g, other)
                walk.nodes.append(nxt)
                return gain, gain_where, dim, _scale_name(g, other), str(nxt.output[0])
    return "none", "no multiply by a weight after the normalization", None, None, y


def _is_weight(g: _Graph, name: str, depth: int = 0) -> bool:
    """``name`` holds a weight: an initializer, a graph input, a Constant node (through Casts),
    or ``Add(w, 1)`` of one. An activation (another node's output, e.g. a residual Add) is
    not a weight."""
    src = _skip_cast_up(g, name)
    if src in g.initializers:
        return True
    p = g.producer.get(src)
    if p is None:
        return src in g.graph_inputs
    if _op(p) == "Constant":
        return True
    if _op(p) != "Add" or len(p.input) != 2 or depth > 0:
        return False
    for i in (0, 1):
        c = _const(g, p.input[i])
        if c is not None and c.value == 1.0 and c.elements == 1:
            return _is_weight(g, p.input[1 - i], depth + 1)
    return False


def _eps_of(walk: _Walk) -> tuple[float | None, str | None, str]:
    """(value, dtype, where) of the eps the pattern adds; value None when dropped or unread."""
    eps = walk.eps
    if walk.dropped:
        return (
            None,
            None,
            (
                "eps is 0: the pattern adds no eps before the divide (an exporter leaves out an "
                "eps of 0; torch's also leaves out an eps <= 1e-8)"
            ),
        )
    if eps is None:
        return None, None, "no eps found"
    if eps.value is None:
        return None, eps.dtype, f"eps not readable: {eps.where}"
    value, where = judge_eps(eps.value, f"{eps.where}, input of {walk.eps_node.name!r}")
    return value, eps.dtype, where


def _decomposed(g: _Graph, node: Any) -> GraphNorm | None:
    """The first norm whose reduction is ``node``, or None (see :func:`decomposed_norms`)."""
    found = decomposed_norms(g, node)
    return found[0] if found else None


def decomposed_norms(g: _Graph, node: Any) -> list[GraphNorm]:
    """The norms whose reduction is ``node`` (see the module docstring): one per way from
    the reduction to a normalized output."""
    walk = _reduction(g, node)
    if walk is None or not node.output:
        return []
    return [_norm_of(g, node, w, y) for w, y in _branches(g, walk, node.output[0])]


def _norm_of(g: _Graph, node: Any, walk: _Walk, y: str) -> GraphNorm:
    gain, gain_where, dim, scale, out = _weight(g, walk, y)
    gain, gain_where = folded_gain(g, walk.nodes, (gain, gain_where), scale)
    if walk.norm == "rms" and gain == "none":  # x * rsqrt(mean(x^2) + eps), no weight
        walk.norm = "l2"
    # the last nodes first: a reduction shared by several norms is named by the first of them
    module, name_from = _from_weight(g, *_module_name(walk.nodes[::-1]), scale)
    value, dtype, where = _eps_of(walk)
    chain = "/".join(_op(n) for n in walk.nodes)
    return GraphNorm(
        name=module or walk.nodes[-1].name or node.name or node.output[0],
        norm=walk.norm,
        op=f"decomposed {chain}",
        eps=value,
        eps_dtype=dtype,
        eps_where=where,
        eps_default=False,
        placement=walk.placement,
        gain=gain,
        gain_where=gain_where,
        dim=dim,
        nodes=tuple(n.name for n in walk.nodes),
        graph=g.label,
        name_from=name_from,
        add_dtype=dtype,
        add_dtype_from="dtype of the eps added",
        inputs=(walk.x,),
        output=out,
        scale=scale,
    )


# ================================================================================================
# Fused norm ops and their schema defaults
# ================================================================================================

# Fused normalization ops (RMSNormalization, LayerNormalization, the com.microsoft
# Simplified/Skip/Embed variants, LpNormalization p=2) and the ``epsilon`` their schema gives
# when the attribute is absent (:func:`schema_default`, :data:`SCHEMA_DEFAULTS`).
#
# The eps of a fused op is its ``epsilon`` attribute, a float32 (stored as ``float(np.float32(
# a.f))``); the dtype it is added in is ``stash_type`` for the ONNX-domain ops.

MS = "com.microsoft"

#: (domain, op type) -> (norm, index of the scale input, placement). The domain "" is ONNX's.
FUSED_OPS: dict[tuple[str, str], tuple[str, int, str]] = {
    ("", "RMSNormalization"): ("rms", 1, "inside"),
    ("", "LayerNormalization"): ("layer", 1, "inside"),
    ("", "SimplifiedLayerNormalization"): ("rms", 1, "inside"),
    (MS, "SimplifiedLayerNormalization"): ("rms", 1, "inside"),
    (MS, "SkipSimplifiedLayerNormalization"): ("rms", 2, "inside"),
    (MS, "SkipLayerNormalization"): ("layer", 2, "inside"),
    (MS, "EmbedLayerNormalization"): ("layer", 6, "inside"),
    ("", "LpNormalization"): ("l2", -1, "clamp"),
}

#: The ``epsilon`` default of each fused op when the attribute is absent, as the schemas
#: registered by onnxruntime 1.32 give them (read at run time when onnxruntime or onnx can
#: tell, this table otherwise). Public sources: ONNX Operators.md (RMSNormalization-23,
#: LayerNormalization-17) and onnxruntime docs/ContribOperators.md (com.microsoft ops).
SCHEMA_DEFAULTS: dict[tuple[str, str], tuple[float, str]] = {
    ("", "RMSNormalization"): (1e-5, "ONNX Operators.md RMSNormalization-23 epsilon default"),
    ("", "LayerNormalization"): (1e-5, "ONNX Operators.md LayerNormalization-17 epsilon default"),
    ("", "SimplifiedLayerNormalization"): (
        1e-5,
        "onnxruntime SimplifiedLayerNormalization (onnx domain, contrib) epsilon default",
    ),
    (MS, "SimplifiedLayerNormalization"): (
        1e-5,
        "onnxruntime SimplifiedLayerNormalization epsilon default",
    ),
    **{
        (MS, op): (1e-12, f"onnxruntime docs/ContribOperators.md com.microsoft.{op}")
        for op in (
            "SkipSimplifiedLayerNormalization",
            "SkipLayerNormalization",
            "EmbedLayerNormalization",
        )
    },
}


@functools.lru_cache(maxsize=64)
def schema_default(domain: str, op: str, opset: int | None = None) -> tuple[float, str] | None:
    """The schema's ``epsilon`` default of a fused op and where it was read.

    From onnxruntime's registered schemas when onnxruntime is installed, else from
    ``onnx.defs`` for ONNX-domain ops, else :data:`SCHEMA_DEFAULTS` (with its public source).
    """
    key = (domain if domain != "ai.onnx" else "", op)
    try:
        from onnxruntime.capi import _pybind_state as ort_state

        onnx = _onnx()
        best: tuple[int, float] | None = None
        for s in ort_state.get_all_operator_schema():
            if s.name != op or s.domain != key[0]:
                continue
            attr = s.attributes.get("epsilon")
            raw = getattr(attr, "_default_value", None) if attr is not None else None
            if not raw or (opset is not None and s.since_version > opset):
                continue
            value = float(onnx.AttributeProto.FromString(raw).f)
            if best is None or s.since_version > best[0]:
                best = (s.since_version, value)
        if best is not None:
            return best[1], f"onnxruntime schema {key[0] or 'ai.onnx'}.{op}-{best[0]}"
    except Exception:  # onnxruntime missing or its schema API changed: fall back
        pass
    if key[0] == "":
        try:
            onnx = _onnx()
            s = onnx.defs.get_schema(op, opset or onnx.defs.onnx_opset_version(), "")
            attr = s.attributes.get("epsilon")
            if attr is not None and attr.default_value.HasField("f"):
                return float(attr.default_value.f), f"onnx.defs schema {op}-{s.since_version}"
        except Exception:
            pass
    return SCHEMA_DEFAULTS.get(key)


def _fused(g: _Graph, node: Any, opset: dict[str, int]) -> GraphNorm | None:
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    spec = FUSED_OPS.get((domain, node.op_type))
    if spec is None:
        return None
    norm, scale_index, placement = spec
    op = f"{domain + '.' if domain else ''}{node.op_type}"
    if node.op_type == "LpNormalization":
        p = _attr(node, "p")
        if p is not None and p.i != 2:
            return None
        eps, dtype, where, default = None, None, "LpNormalization has no epsilon", False
    else:
        a = _attr(node, "epsilon")
        if a is not None:
            eps, dtype, where = _epsilon_attribute(node, a)
            default = False
        else:
            found = schema_default(domain, node.op_type, opset.get(domain))
            default = True
            if found is None:
                eps, dtype, where = None, None, "no epsilon attribute and no known schema default"
            else:
                eps, dtype = found[0], "float32"
                where = f"no epsilon attribute: schema default ({found[1]})"
    gain, gain_where = "none", "no scale input"
    dim = None
    if 0 <= scale_index < len(node.input) and node.input[scale_index]:
        gain, gain_where, dim = _gain_of(g, node.input[scale_index])
    add_dtype, add_from = _stash_dtype(node)
    scale = _scale_name(g, node.input[scale_index]) if 0 <= scale_index < len(node.input) else None
    gain, gain_where = folded_gain(g, [node], (gain, gain_where), scale)
    module, name_from = _from_weight(g, *_module_name([node]), scale)
    return GraphNorm(
        name=module or node.name or (node.output[0] if node.output else op),
        norm=norm,
        op=f"fused {op}",
        eps=eps,
        eps_dtype=dtype,
        eps_where=where,
        eps_default=default,
        placement=placement,
        gain=gain,
        gain_where=gain_where,
        dim=dim,
        nodes=(node.name,),
        graph=g.label,
        name_from=name_from,
        add_dtype=add_dtype,
        add_dtype_from=add_from,
        inputs=tuple(node.input[:2]) if "Skip" in node.op_type else tuple(node.input[:1]),
        output=node.output[0] if node.output else "",
        scale=scale,
        bias=_bias_name(g, node, domain),
    )


def _epsilon_attribute(node: Any, a: Any) -> tuple[float | None, str | None, str]:
    """(eps, dtype, where) of a fused op's ``epsilon`` attribute: a FLOAT attribute's value
    judged by :func:`judge_eps`; any other attribute type (STRING, TENSOR, INT, FLOATS...) is
    no eps (None, and where names the type), never read as 0.0."""
    import numpy as np

    onnx = _onnx()
    where = f"attribute epsilon of {node.name!r}"
    if a.type != onnx.AttributeProto.FLOAT:
        names = dict(onnx.AttributeProto.AttributeType.items())
        kind = next((k for k, v in names.items() if v == a.type), str(a.type))
        return None, None, f"{where} has type {kind}, not FLOAT"
    eps, where = judge_eps(float(np.float32(a.f)), where)
    return eps, "float32", where


def _stash_dtype(node: Any) -> tuple[str | None, str]:
    """The dtype a fused ONNX-domain op computes the mean and eps in: its ``stash_type``
    (schema default 1, float32); None for the com.microsoft ops (no such attribute)."""
    onnx_domain = node.domain in ("", "ai.onnx")
    if not onnx_domain or node.op_type not in ("RMSNormalization", "LayerNormalization"):
        return None, ""
    a = _attr(node, "stash_type")
    if a is None:
        return "float32", "stash_type absent: schema default 1 (float32)"
    return _DTYPES.get(int(a.i), f"type {a.i}"), f"attribute stash_type {a.i}"


def _bias_name(g: _Graph, node: Any, domain: str) -> str | None:
    index = {("", "LayerNormalization"): 2, (MS, "SkipLayerNormalization"): 3}.get(
        (domain, node.op_type)
    )
    if index is None or len(node.input) <= index:
        return None
    src = _skip_cast_up(g, node.input[index])
    return src if src in g.initializers else None


# ================================================================================================
# Reading a model file, walking the graph, the config
# ================================================================================================

__all__ = [
    "MAX_NODES",
    "MAX_ONNX_BYTES",
    "escape_glob",
    "external_data_files",
    "find_norms",
    "load_onnx_model",
    "onnx_findings",
    "read_onnx_config",
    "read_onnx_config_and_files",
    "scan_graph",
]

#: Largest .onnx file read (protobuf's own limit for one message is 2 GiB).
MAX_ONNX_BYTES = 2 << 30

#: Nodes walked in all (main graph, functions, subgraphs): a 70B decoder has ~20,000. Counted
#: on the wire format before the parse (:func:`~rmsnorm_eps.config.onnx_wire.count_nodes`) and
#: again while walking; a graph of 2^18 small nodes peaked at 235 MiB (measured).
MAX_NODES = 1 << 18

#: ``config show/diff`` parse the main graph's initializers longer than this without their
#: values: they read dims and constants of at most :data:`MAX_EPS_ELEMENTS` elements only, and
#: a large weight (an embedding table) is never held (parity onnx reads the model whole).
CONFIG_STRIP_BYTES = 1 << 16

#: Graphs nested deeper than this (If inside Loop inside ...) are refused.
MAX_DEPTH = 16

_GLOB_SPECIAL = "*?["


def escape_glob(name: str) -> str:
    """``name`` as a glob that matches only itself: ``*``, ``?`` and ``[`` as ``[*]`` etc."""
    return "".join(f"[{c}]" if c in _GLOB_SPECIAL else c for c in name)


def load_onnx_model(path: Path, strip_over: int | None = None) -> Any:
    """The ModelProto of ``path``, external data not loaded; one InputFileError otherwise.
    ``strip_over``: main-graph initializers longer than that many bytes are parsed without
    their values (:func:`~rmsnorm_eps.config.onnx_wire.read_model_bytes`), for the readers
    that need dims and small constants only (:data:`CONFIG_STRIP_BYTES`)."""
    from rmsnorm_eps.sources.sniff import check_regular_file

    size = check_regular_file(path)
    if size == 0:
        raise InputFileError(path, "empty file")
    if size > MAX_ONNX_BYTES:
        raise InputFileError(path, f"{size} bytes: over the {MAX_ONNX_BYTES}-byte limit")
    onnx = _onnx()
    from rmsnorm_eps.config.onnx_wire import FileChangedError, read_model_bytes

    try:
        read = read_model_bytes(path, MAX_NODES, MAX_DEPTH, strip_over)
    except FileChangedError as exc:
        raise InputFileError(
            path,
            f"file changed while being read: {exc} (was it rewritten or truncated by another "
            "process?)",
        ) from None
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    if read.data is None:
        raise InputFileError(path, f"over {MAX_NODES} nodes (graphs, functions, subgraphs)")
    try:
        model = onnx.ModelProto.FromString(read.data)
    except Exception as exc:  # protobuf DecodeError, or anything the parser raises
        text = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise InputFileError(path, f"not a readable ONNX model ({text})") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise InputFileError(path, "not an ONNX model (no ir_version or no graph)")
    return model


#: Domains whose ops are read (ONNX's own, onnxruntime's contrib ops, ONNX-ML); the model's
#: own function domains are added per model. A node of any other domain is not read as an op
#: this reader knows, and the domain is a finding.
KNOWN_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


@dataclass(frozen=True)
class GraphScan:
    """What :func:`scan_graph` found: the live norms (each name unique: a second norm of the
    same module is ``name#2``), the dead ones (no graph output depends on them), the names that
    more than one live norm had, and the unknown domains (domain -> (nodes, a node's name))."""

    norms: tuple[GraphNorm, ...]
    dead: tuple[GraphNorm, ...]
    shared_names: dict[str, tuple[str, ...]]
    unknown_domains: dict[str, tuple[int, str]]


@dataclass
class _Scan:
    path: Path
    known: frozenset[str]
    nodes: int = 0
    live: list[GraphNorm] = dc_field(default_factory=list)
    dead: list[GraphNorm] = dc_field(default_factory=list)
    unknown: dict[str, tuple[int, str]] = dc_field(default_factory=dict)

    def take(self, n: int) -> None:
        self.nodes += n
        if self.nodes > MAX_NODES:
            raise InputFileError(
                self.path, f"over {MAX_NODES} nodes (graphs, functions, subgraphs)"
            )

    def domain_of(self, node: Any) -> None:
        if node.domain not in self.known:
            n, first = self.unknown.get(node.domain, (0, f"{node.op_type} {node.name!r}"))
            self.unknown[node.domain] = (n + 1, first)


def _subgraphs(node: Any) -> Iterator[tuple[str, Any]]:
    for a in node.attribute:
        subs = [a.g] if a.HasField("g") else list(a.graphs)
        for i, sub in enumerate(subs):
            yield a.name + (f"[{i}]" if len(subs) > 1 else ""), sub


def _names_read_inside(node: Any, depth: int = 0) -> Iterator[str]:
    """Every name the subgraphs of ``node`` read (outer-scope values among them)."""
    if depth > MAX_DEPTH:
        return
    for _, sub in _subgraphs(node):
        for inner in sub.node:
            yield from (x for x in inner.input if x)
            yield from _names_read_inside(inner, depth + 1)


def _live_nodes(graph: Any, own: Any) -> set[int]:
    """The positions of the nodes of ``graph`` a graph output depends on: walked backwards
    from the outputs (``own``: the graph's node index), through the names read inside a
    node's subgraphs. A node of an outer graph is not in the set (its own walk decides)."""
    todo = [o if isinstance(o, str) else o.name for o in graph.output]
    live: set[int] = set()
    while todo:
        i = own.at.get(todo.pop())
        if i is None or i in live:
            continue
        live.add(i)
        node = graph.node[i]
        todo.extend(x for x in node.input if x)
        todo.extend(_names_read_inside(node))
    return live


def _walk_graph(
    graph: Any,
    label: str,
    outer: _Graph | None,
    opset: dict[str, int],
    scan: _Scan,
    depth: int,
    alive: bool = True,
) -> None:
    if depth > MAX_DEPTH:
        raise InputFileError(scan.path, f"subgraphs nested deeper than {MAX_DEPTH}")
    scan.take(len(graph.node))
    g = _index(graph, label, outer, scan.path.parent)
    live = _live_nodes(graph, g.own) if alive else set()
    for i, node in enumerate(graph.node):
        scan.domain_of(node)
        fused = _fused(g, node, opset)
        for norm in [fused] if fused is not None else decomposed_norms(g, node):
            (scan.live if g.own.at.get(norm.output) in live else scan.dead).append(norm)
        node_alive = i in live
        for name, sub in _subgraphs(node):
            sub_label = f"{label}/{node.op_type} {node.name!r}.{name}"
            _walk_graph(sub, sub_label, g, opset, scan, depth + 1, node_alive)


def scan_graph(model: Any, path: Path) -> GraphScan:
    """Every normalization of ``model``: main graph, its subgraphs, then each function; those
    no graph output depends on are kept apart (``dead``), each live one named uniquely."""
    opset = {
        ("" if o.domain in ("", "ai.onnx") else o.domain): int(o.version)
        for o in model.opset_import
    }
    known = KNOWN_DOMAINS | {fn.domain for fn in model.functions}
    scan = _Scan(path, frozenset(known))
    _walk_graph(model.graph, "graph", None, opset, scan, 0)
    for fn in model.functions:
        fopset = dict(opset)
        fopset.update({o.domain: int(o.version) for o in fn.opset_import})
        label = f"function {fn.domain}.{fn.name}"
        first = len(scan.live)
        _walk_graph(fn, label, None, fopset, scan, 1)
        scan.live[first:] = [
            replace(n, name=f"{label}/{n.name}") if n.name_from == "node name" else n
            for n in scan.live[first:]
        ]
    norms, shared = _unique(scan.live)
    return GraphScan(norms, tuple(scan.dead), shared, dict(scan.unknown))


def find_norms(model: Any, path: Path) -> tuple[GraphNorm, ...]:
    """The live normalizations of ``model`` (see :func:`scan_graph`), each name unique."""
    return scan_graph(model, path).norms


def _unique(norms: list[GraphNorm]) -> tuple[tuple[GraphNorm, ...], dict[str, tuple[str, ...]]]:
    """The norms with the second, third ... of one name renamed ``name#2``, ``name#3``, and
    each shared name with the names given to its norms."""
    seen: dict[str, list[str]] = {}
    out = []
    for norm in norms:
        names = seen.setdefault(norm.name, [])
        new = norm.name if not names else f"{norm.name}#{len(names) + 1}"
        names.append(new)
        out.append(norm if new == norm.name else replace(norm, name=new))
    return tuple(out), {k: tuple(v) for k, v in seen.items() if len(v) > 1}


def _tensors(graph: Any, depth: int = 0) -> Iterator[Any]:
    """Every TensorProto of ``graph``: initializers, sparse initializers, Constant-node and
    other tensor attributes, in subgraphs too (the node cap was checked by :func:`find_norms`)."""
    if depth > MAX_DEPTH:
        return
    yield from getattr(graph, "initializer", ())
    for sparse in getattr(graph, "sparse_initializer", ()):
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("sparse_tensor"):
                yield from (a.sparse_tensor.values, a.sparse_tensor.indices)
            for sub in [a.g] if a.HasField("g") else list(a.graphs):
                yield from _tensors(sub, depth + 1)


def external_data_files(model: Any, path: Path) -> tuple[Path, ...]:
    """The external data files ``model`` (read from ``path``) names, resolved against the
    model's folder, each once, in first-use order; none of them is opened. An output written
    by a command reading the model must never be one of them."""
    onnx = _onnx()
    found: dict[str, Path] = {}
    graphs = [model.graph, *model.functions]
    for t in (t for g in graphs for t in _tensors(g)):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        for entry in t.external_data:
            if entry.key == "location" and entry.value not in found:
                found[entry.value] = path.parent / entry.value
    return tuple(found.values())


def read_onnx_config_and_files(path: Path) -> tuple[NormConfig, tuple[Path, ...]]:
    """:func:`read_onnx_config` of ``path`` and its :func:`external_data_files` (one parse)."""
    model = load_onnx_model(path, CONFIG_STRIP_BYTES)
    return _config(model, path), external_data_files(model, path)


def read_onnx_config(path: Path) -> NormConfig:
    """The norms of an .onnx file as a NormConfig: one literal entry per norm (its module
    path, glob characters escaped); the defaults are all missing (an ONNX graph has no
    model-wide setting), and notes list the findings (eps absent, schema default used, one
    norm's eps unlike its siblings')."""
    return _config(load_onnx_model(path, CONFIG_STRIP_BYTES), path)


def _shared_name_settings(
    settings: dict[str, dict[str, Resolved]], shared: dict[str, tuple[str, ...]], path: str
) -> None:
    """For a name several norms have: each setting they disagree on becomes a conflict in the
    entry of that name, so ``ratio --config`` refuses the layer rather than take one of them
    (the others keep their own ``name#2`` entries)."""
    for name, names in shared.items():
        first = settings[name]
        for key in list(first):
            values = [settings[n][key].value if key in settings[n] else None for n in names]
            same = all(v == values[0] for v in values)  # stored values, exactly
            if not same:
                shown = ", ".join(f"{n}: {v!r}" for n, v in zip(names, values, strict=True))
                note = f"{len(names)} norms are named {name} and disagree on {key} ({shown})"
                first[key] = Resolved(None, Provenance("conflict", path, note=note))


def _scan_notes(scan: GraphScan) -> list[str]:
    """The findings of a scan besides the eps ones: dead norms, shared names, unknown domains."""
    notes = []
    for norm in scan.dead:
        notes.append(
            f"FINDING {shorten(norm.name, 120)}: ignored, no graph output depends on it "
            f"(output {shorten(norm.output, 80)!r} of {norm.graph}: {norm.op})"
        )
    for name, names in scan.shared_names.items():
        notes.append(
            f"FINDING {len(names)} norms are named {shorten(name, 120)} (kept as "
            f"{', '.join(shorten(n, 120) for n in names)}): the graph does not tell them apart"
        )
    for domain, (n, first) in sorted(scan.unknown_domains.items()):
        notes.append(
            f"FINDING {n} node(s) of unknown domain {shorten(domain, 80)!r} (first: "
            f"{shorten(first, 120)}) not read: a norm computed by them is not found"
        )
    return notes


def _config(model: Any, path: Path) -> NormConfig:
    scan = scan_graph(model, path)
    norms = scan.norms
    spath = str(path)
    settings = {n.name: dict(_settings(n, spath)) for n in norms}
    _shared_name_settings(settings, scan.shared_names, spath)
    entries = tuple(
        ConfigEntry(escape_glob(n.name), tuple(settings[n.name].items())) for n in norms
    )
    producer = " ".join(x for x in (model.producer_name, model.producer_version) if x)
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in list(model.opset_import)[:8])
    notes = [
        f"{len(norms)} normalization(s) found; opsets {opsets}",
        *_sibling_notes(norms),
        *_scan_notes(scan),
    ]
    if not norms:
        notes.append("FINDING no normalization found in the graph")
    return NormConfig(
        path=spath,
        kind="onnx",
        model=model.graph.name or None,
        defaults=NormSettings(),
        entries=entries,
        notes=tuple(notes),
        source=f"ONNX graph (producer {producer or '-'})",
    )


def onnx_findings(config: NormConfig) -> tuple[str, ...]:
    """The notes of an ONNX config that are findings (``FINDING ...``)."""
    return tuple(n for n in config.notes if n.startswith("FINDING "))
