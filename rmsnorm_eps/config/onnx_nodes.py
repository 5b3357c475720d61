"""Lookups on one ONNX graph's protobuf, shared by the fused and the decomposed matchers:
:class:`GraphNorm` (one norm found), the per-graph index, constants behind a tensor name,
walking through Cast nodes, the gain of a scale tensor and the module a norm came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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
    producer: dict[str, Any] = field(default_factory=dict)
    consumers: dict[str, list[Any]] = field(default_factory=dict)
    initializers: dict[str, Any] = field(default_factory=dict)
    value_types: dict[str, int] = field(default_factory=dict)


def _index(graph: Any, label: str, outer: _Graph | None) -> _Graph:
    g = _Graph(label)
    if outer is not None:
        g.initializers.update(outer.initializers)
        g.producer.update(outer.producer)
        g.value_types.update(outer.value_types)
    is_function = not hasattr(graph, "initializer")  # a FunctionProto: names only
    for t in () if is_function else graph.initializer:
        g.initializers[t.name] = t
    infos = () if is_function else (*graph.input, *graph.value_info, *graph.output)
    for vi in infos:
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and tt.elem_type:
            g.value_types[vi.name] = tt.elem_type
    for node in graph.node:
        for out in node.output:
            if out:
                g.producer[out] = node
        for inp in node.input:
            if inp:
                g.consumers.setdefault(inp, []).append(node)
    return g


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


def _tensor_const(t: Any, where: str) -> _Const:
    onnx = _onnx()
    import numpy as np

    dtype = _DTYPES.get(t.data_type, f"type {t.data_type}")
    n = math.prod(int(d) for d in t.dims)
    if t.data_location == onnx.TensorProto.EXTERNAL:
        return _Const(None, dtype, f"{where} (external data, not read)", n)
    if n > MAX_EPS_ELEMENTS or n == 0:
        return _Const(None, dtype, where, n)
    try:
        arr = onnx.numpy_helper.to_array(t).astype(np.float64).ravel()
    except Exception:
        return _Const(None, dtype, f"{where} (unreadable)", n)
    if not np.array_equal(arr, np.full_like(arr, arr[0]), equal_nan=True):  # NaN is judged
        return _Const(None, dtype, f"{where} (elements differ)", n)
    return _Const(float(arr[0]), dtype, where, n)


def _const(g: _Graph, name: str, depth: int = 0) -> _Const | None:
    """The constant behind tensor ``name``: an initializer, a Constant node, or a Cast of one."""
    if name in g.initializers:
        return _tensor_const(g.initializers[name], f"initializer {name!r}")
    node = g.producer.get(name)
    if node is None or depth > 4:
        return None
    if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
        a = _attr(node, "value")
        if a is not None and a.HasField("t"):
            return _tensor_const(a.t, f"Constant node {node.name!r}")
        for key in ("value_float", "value_floats"):
            a = _attr(node, key)
            if a is not None:
                vals = [a.f] if key == "value_float" else list(a.floats)
                if vals and all(v == vals[0] for v in vals):
                    return _Const(float(vals[0]), "float32", f"Constant node {node.name!r}", 1)
        return None
    if node.op_type == "Cast" and node.input:
        inner = _const(g, node.input[0], depth + 1)
        to = _attr(node, "to")
        if inner is None or to is None:
            return None
        import numpy as np

        dtype = _DTYPES.get(int(to.i), f"type {to.i}")
        value = inner.value
        if value is not None and dtype in ("float16", "float32"):
            value = float(np.dtype(dtype).type(value))
        return _Const(value, dtype, f"behind a Cast to {dtype} of {inner.where}", inner.elements)
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
            if node.op_type == "Cast" and node.output:
                todo.append(node.output[0])
            else:
                out.append((node, cur))
    return out


def _skip_cast_up(g: _Graph, name: str) -> str:
    for _ in range(8):
        node = g.producer.get(name)
        if node is None or node.op_type != "Cast" or not node.input:
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


def _from_weight(module: str | None, name_from: str, scale: str | None) -> tuple[str | None, str]:
    """Without a module path from the nodes (onnxruntime's optimized copy drops the metadata):
    the module of the scale initializer ``model.layers.0.input_layernorm.weight``."""
    if module is None and scale is not None and scale.endswith(".weight") and len(scale) > 7:
        return scale[: -len(".weight")], "scale initializer name"
    return module, name_from


def _scale_name(g: _Graph, name: str) -> str | None:
    """The initializer holding w (for 1 + w: the w)."""
    src = _skip_cast_up(g, name)
    if src in g.initializers:
        return src
    node = g.producer.get(src)
    if node is not None and node.op_type == "Add":
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
    if node is not None and node.op_type == "Add" and len(node.input) == 2:
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
