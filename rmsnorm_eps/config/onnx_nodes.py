"""Lookups on one ONNX graph's protobuf, shared by the fused and the decomposed matchers:
:class:`GraphNorm` (one norm found), the per-graph index, constants behind a tensor name,
walking through Cast nodes, the gain of a scale tensor and the module a norm came from.
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmsnorm_eps.errors import MissingExtraError

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


def _bfloat16(value: float) -> float:
    """``value`` rounded to the nearest bfloat16 (ties to even), as a float64."""
    import numpy as np

    bits = np.array([value], np.float32).view(np.uint32)
    if np.isnan(value):
        return float(value)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return float((rounded << np.uint32(16)).astype(np.uint32).view(np.float32)[0])


def round_to(value: float, dtype: str | None) -> float:
    """``value`` as the dtype ``dtype`` holds it: float16, float32, bfloat16 rounding; an
    integer dtype truncates (a Cast to int64 of 1e-5 is 0); float64 and unknown unchanged."""
    import numpy as np

    if dtype in ("float16", "float32"):
        with np.errstate(over="ignore"):
            return float(np.dtype(dtype).type(value))
    if dtype == "bfloat16":
        return _bfloat16(value)
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


def folded_gain(
    g: _Graph, nodes: list[Any], gain: tuple[str, str], scale: str | None
) -> tuple[str, str]:
    """(gain, where): a ``w`` read from an initializer the exporter folded (not a parameter
    ``*.weight``) is ``1+w`` when the nodes' class is one whose gain is 1 + w: torch's dynamo
    exporter folds Gemma's ``1 + w`` into one initializer (``add_1``)."""
    if gain[0] != "w" or scale is None or scale.endswith(".weight"):
        return gain
    if scale not in g.initializers or scale in g.graph_inputs:
        return gain
    cls = next((c for c in _classes(nodes) if c in _one_plus_w_classes()), None)
    if cls is None:
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
