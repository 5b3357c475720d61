"""Reader for exported ONNX graphs: every normalization in the graph and the eps it stores.

The model is read with ``onnx.load(..., load_external_data=False)`` (weights kept in external
files are never opened), after a size check (:data:`MAX_ONNX_BYTES`), and the graph is walked
with a node cap (:data:`MAX_NODES`, main graph, ``model.functions`` and every If/Loop/Scan
subgraph together). A file protobuf cannot parse is one :class:`InputFileError`.

A norm is found either as a fused op (its ``epsilon`` attribute, or the op schema's default
when the attribute is absent, said so) or as a decomposed pattern matched by structure, for x
of dimension d:

- ``q = ReduceMean(Pow(x, 2) | Mul(x, x))`` (RMS), ``q = ReduceMean(Pow(x - mean(x), 2))``
  (LayerNorm), or ``s = ReduceSumSquare(x) | ReduceSum(Pow(x, 2))`` (sum: eps is scaled by d);
- then ``Sqrt(Add(q, eps))`` (eps inside the sqrt), ``Add(Sqrt(q), eps)`` (outside),
  ``Max(Sqrt(q), eps)`` (a clamp), or ``Sqrt(q)`` with no eps at all (a finding: the eps was
  dropped, e.g. by torch's exporter for eps <= 1e-8);
- then ``Div(x, r)`` or ``Mul(x, Reciprocal(r))``, and a gain: ``Mul(y, w)`` (w), ``Mul(y,
  Add(w, 1))`` (1+w, Gemma), or none (no weight, or folded into the next op).

Cast nodes between the steps are walked through (the eps "behind a Cast" is reported with the
dtype it is cast to). The eps is kept as stored: its exact value, its dtype (the dtype the
addition runs in), and where it lives (attribute, initializer, Constant node, behind a Cast).

Each norm is named by the module it came from: the node metadata ``pkg.torch.onnx.name_scopes``
of torch's dynamo exporter (``[..., 'model.layers.0.input_layernorm', 'add_1']``), else a
legacy node name (``/model/layers.0/input_layernorm/Add`` -> ``model.layers.0.input_layernorm``),
else the node's own name. The result is a :class:`~rmsnorm_eps.config.model.NormConfig` with
one literal entry per norm, so ``config show``, ``config diff``, ``ratio --config`` and
``compare --config`` take an ONNX file like any other config.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
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

__all__ = [
    "FUSED_OPS",
    "MAX_NODES",
    "MAX_ONNX_BYTES",
    "SCHEMA_DEFAULTS",
    "GraphNorm",
    "escape_glob",
    "find_norms",
    "load_onnx_model",
    "read_onnx_config",
    "schema_default",
]

#: Largest .onnx file read (protobuf's own limit for one message is 2 GiB).
MAX_ONNX_BYTES = 2 << 30
#: Nodes walked in all (main graph, functions, subgraphs): a 70B decoder has ~20,000.
MAX_NODES = 1 << 20
#: Graphs nested deeper than this (If inside Loop inside ...) are refused.
MAX_DEPTH = 16
#: Elements of a tensor read to find an eps (a scalar or a small all-equal tensor).
MAX_EPS_ELEMENTS = 64

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
    (MS, "SkipSimplifiedLayerNormalization"): (
        1e-12,
        "onnxruntime docs/ContribOperators.md com.microsoft.SkipSimplifiedLayerNormalization",
    ),
    (MS, "SkipLayerNormalization"): (
        1e-12,
        "onnxruntime docs/ContribOperators.md com.microsoft.SkipLayerNormalization",
    ),
    (MS, "EmbedLayerNormalization"): (
        1e-12,
        "onnxruntime docs/ContribOperators.md com.microsoft.EmbedLayerNormalization",
    ),
}

_DTYPES = {
    1: "float32",
    10: "float16",
    11: "float64",
    16: "bfloat16",
    6: "int32",
    7: "int64",
}
_GLOB_SPECIAL = "*?["


def escape_glob(name: str) -> str:
    """``name`` as a glob that matches only itself: ``*``, ``?`` and ``[`` as ``[*]`` etc."""
    return "".join(f"[{c}]" if c in _GLOB_SPECIAL else c for c in name)


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise MissingExtraError("onnx", "onnx", "reading .onnx files") from None
    return onnx


def load_onnx_model(path: Path) -> Any:
    """The ModelProto of ``path``, external data not loaded; one InputFileError otherwise."""
    from rmsnorm_eps.sources.sniff import check_regular_file

    size = check_regular_file(path)
    if size == 0:
        raise InputFileError(path, "empty file")
    if size > MAX_ONNX_BYTES:
        raise InputFileError(path, f"{size} bytes: over the {MAX_ONNX_BYTES}-byte limit")
    onnx = _onnx()
    try:
        model = onnx.load(os.fspath(path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError, or anything the parser raises
        text = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise InputFileError(path, f"not a readable ONNX model ({text})") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise InputFileError(path, "not an ONNX model (no ir_version or no graph)")
    return model


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


class _Budget:
    def __init__(self, path: Path) -> None:
        self.nodes = 0
        self.path = path

    def take(self, n: int) -> None:
        self.nodes += n
        if self.nodes > MAX_NODES:
            raise InputFileError(
                self.path, f"over {MAX_NODES} nodes (graphs, functions, subgraphs)"
            )


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
    n = 1
    for d in t.dims:
        n *= int(d)
    if t.data_location == onnx.TensorProto.EXTERNAL:
        return _Const(None, dtype, f"{where} (external data, not read)", n)
    if n > MAX_EPS_ELEMENTS or n == 0:
        return _Const(None, dtype, where, n)
    try:
        arr = onnx.numpy_helper.to_array(t).astype(np.float64).ravel()
    except Exception:
        return _Const(None, dtype, f"{where} (unreadable)", n)
    if not np.all(arr == arr[0]):
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
    node = g.producer.get(_skip_cast_up(g, name))
    return node


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
            import numpy as np

            eps, dtype = float(np.float32(a.f)), "float32"
            where, default = f"attribute epsilon of {node.name!r}", False
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
    module, name_from = _module_name([node])
    scale = _scale_name(g, node.input[scale_index]) if 0 <= scale_index < len(node.input) else None
    module, name_from = _from_weight(module, name_from, scale)
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


def _stash_dtype(node: Any) -> tuple[str | None, str]:
    """The dtype a fused ONNX-domain op computes the mean and eps in: its ``stash_type``
    (schema default 1, float32); None for the com.microsoft ops (no such attribute)."""
    if node.op_type not in ("RMSNormalization", "LayerNormalization") or node.domain not in (
        "",
        "ai.onnx",
    ):
        return None, ""
    a = _attr(node, "stash_type")
    if a is None:
        return "float32", "stash_type absent: schema default 1 (float32)"
    return _DTYPES.get(int(a.i), f"type {a.i}"), f"attribute stash_type {a.i}"


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


def _bias_name(g: _Graph, node: Any, domain: str) -> str | None:
    index = {("", "LayerNormalization"): 2, (MS, "SkipLayerNormalization"): 3}.get(
        (domain, node.op_type)
    )
    if index is None or len(node.input) <= index:
        return None
    src = _skip_cast_up(g, node.input[index])
    return src if src in g.initializers else None


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


def _square_input(g: _Graph, node: Any) -> str | None:
    """x when ``node`` computes x*x (Pow(x, 2) or Mul(x, x)), else None."""
    if node is None:
        return None
    if node.op_type == "Pow" and len(node.input) == 2:
        c = _const(g, node.input[1])
        if c is not None and c.value == 2.0:
            return str(node.input[0])
    if node.op_type == "Mul" and len(node.input) == 2 and node.input[0] == node.input[1]:
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
    if node.op_type == "ReduceSumSquare" and node.input:
        return _Walk([node], node.input[0], "rms", "sum")
    if node.op_type not in ("ReduceMean", "ReduceSum") or not node.input:
        return None
    sq = _producer_op(g, node.input[0])
    x = _square_input(g, sq)
    if x is None:
        return None
    placement = "sum" if node.op_type == "ReduceSum" else "inside"
    norm = "rms"
    centred = _producer_op(g, x)
    if centred is not None and centred.op_type == "Sub" and len(centred.input) == 2:
        mean = _producer_op(g, centred.input[1])
        if mean is not None and mean.op_type == "ReduceMean":
            norm = "layer"
            x = centred.input[0]
    return _Walk([node, sq], x, norm, placement)


def _follow(g: _Graph, walk: _Walk, q: str) -> str | None:
    """From q (the reduction's output) to the output of the normalization (x / r)."""
    root: str | None = None
    for node, _ in _skip_cast_down(g, q):
        if node.op_type == "Add" and len(node.input) == 2:
            c = _const(g, node.input[1]) or _const(g, node.input[0])
            if c is None:
                continue
            walk.eps, walk.eps_node = c, node
            walk.nodes.append(node)
            for nxt, _ in _skip_cast_down(g, node.output[0]):
                if nxt.op_type == "Sqrt":
                    walk.nodes.append(nxt)
                    root = nxt.output[0]
                    break
                if _is_rsqrt(g, nxt):  # Pow(q + eps, -0.5): an rsqrt, then Mul(x, .)
                    walk.nodes.append(nxt)
                    return _times(g, walk, nxt.output[0])
            break
        if _is_rsqrt(g, node):  # Pow(q, -0.5): no eps at all
            walk.nodes.append(node)
            walk.dropped = True
            return _times(g, walk, node.output[0])
        if node.op_type == "Sqrt":
            walk.nodes.append(node)
            root = node.output[0]
            after = _skip_cast_down(g, root)
            for nxt, _ in after:
                if nxt.op_type in ("Add", "Max") and len(nxt.input) == 2:
                    c = _const(g, nxt.input[1]) or _const(g, nxt.input[0])
                    if c is not None:
                        walk.eps, walk.eps_node = c, nxt
                        walk.placement = "outside" if nxt.op_type == "Add" else "clamp"
                        walk.nodes.append(nxt)
                        return _divide(g, walk, nxt.output[0])
            walk.dropped = True
            return _divide(g, walk, root)
    if root is None:
        return None
    return _divide(g, walk, root)


def _is_rsqrt(g: _Graph, node: Any) -> bool:
    """``node`` is Pow(t, -0.5)."""
    if node.op_type != "Pow" or len(node.input) != 2:
        return False
    c = _const(g, node.input[1])
    return c is not None and c.value == -0.5


def _times(g: _Graph, walk: _Walk, r: str) -> str | None:
    """The output of Mul(x, r) (r = 1/sqrt(...))."""
    for node, _ in _skip_cast_down(g, r):
        if node.op_type == "Mul":
            walk.nodes.append(node)
            return str(node.output[0])
    return None


def _divide(g: _Graph, walk: _Walk, r: str) -> str | None:
    """The output of x / r (Div, or Mul by Reciprocal)."""
    for node, _ in _skip_cast_down(g, r):
        if node.op_type == "Div" and len(node.input) == 2:
            walk.nodes.append(node)
            return str(node.output[0])
        if node.op_type == "Reciprocal":
            walk.nodes.append(node)
            for nxt, _ in _skip_cast_down(g, node.output[0]):
                if nxt.op_type == "Mul":
                    walk.nodes.append(nxt)
                    return str(nxt.output[0])
    return None


def _decomposed(g: _Graph, node: Any) -> GraphNorm | None:
    walk = _reduction(g, node)
    if walk is None or not node.output:
        return None
    y = _follow(g, walk, node.output[0])
    if y is None:
        return None
    gain, gain_where, dim = "none", "no multiply by a weight after the normalization", None
    scale: str | None = None
    out = y
    for nxt, via in _skip_cast_down(g, y):
        if nxt.op_type == "Mul" and len(nxt.input) == 2:
            other = nxt.input[1] if nxt.input[0] == via else nxt.input[0]
            src = _skip_cast_up(g, other)
            p = g.producer.get(src)
            if src in g.initializers or p is None or (p is not None and p.op_type == "Add"):
                gain, gain_where, dim = _gain_of(g, other)
                scale = _scale_name(g, other)
                walk.nodes.append(nxt)
                out = str(nxt.output[0])
                break
    if walk.norm == "rms" and gain == "none":  # x * rsqrt(mean(x^2) + eps), no weight
        walk.norm = "l2"
    module, name_from = _from_weight(*_module_name(walk.nodes), scale)
    eps = walk.eps
    if walk.dropped:
        value, dtype, where = None, None, "eps dropped: the pattern adds no eps before the divide"
    elif eps is None or eps.value is None:
        value, dtype = None, eps.dtype if eps else None
        where = f"eps not readable: {eps.where}" if eps else "no eps found"
    else:
        value, dtype, where = eps.value, eps.dtype, f"{eps.where}, input of {walk.eps_node.name!r}"
    chain = "/".join(n.op_type for n in walk.nodes)
    return GraphNorm(
        name=module or node.name or node.output[0],
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


def _walk_graph(
    graph: Any,
    label: str,
    outer: _Graph | None,
    opset: dict[str, int],
    budget: _Budget,
    depth: int,
) -> Iterator[GraphNorm]:
    if depth > MAX_DEPTH:
        raise InputFileError(budget.path, f"subgraphs nested deeper than {MAX_DEPTH}")
    budget.take(len(graph.node))
    g = _index(graph, label, outer)
    for node in graph.node:
        found = _fused(g, node, opset) or _decomposed(g, node)
        if found is not None:
            yield found
        for a in node.attribute:
            subs = [a.g] if a.HasField("g") else list(a.graphs)
            for i, sub in enumerate(subs):
                sub_label = f"{label}/{node.op_type} {node.name!r}.{a.name}" + (
                    f"[{i}]" if len(subs) > 1 else ""
                )
                yield from _walk_graph(sub, sub_label, g, opset, budget, depth + 1)


def find_norms(model: Any, path: Path) -> tuple[GraphNorm, ...]:
    """Every normalization of ``model``: main graph, its subgraphs, then each function."""
    opset = {
        ("" if o.domain in ("", "ai.onnx") else o.domain): int(o.version)
        for o in model.opset_import
    }
    budget = _Budget(path)
    norms = list(_walk_graph(model.graph, "graph", None, opset, budget, 0))
    for fn in model.functions:
        budget.take(len(fn.node))
        fopset = dict(opset)
        fopset.update({o.domain: int(o.version) for o in fn.opset_import})
        label = f"function {fn.domain}.{fn.name}"
        for norm in _walk_graph(fn, label, None, fopset, budget, 1):
            norms.append(norm if norm.name_from != "node name" else _prefixed(norm, label))
    return tuple(_unique(norms))


def _prefixed(norm: GraphNorm, label: str) -> GraphNorm:
    from dataclasses import replace

    return replace(norm, name=f"{label}/{norm.name}")


def _unique(norms: list[GraphNorm]) -> Iterator[GraphNorm]:
    from dataclasses import replace

    seen: dict[str, int] = {}
    for norm in norms:
        n = seen.get(norm.name, 0)
        seen[norm.name] = n + 1
        yield norm if n == 0 else replace(norm, name=f"{norm.name}#{n + 1}")


def _settings(norm: GraphNorm, path: str) -> tuple[tuple[str, Resolved], ...]:
    """The NormConfig overrides of one graph norm."""
    from rmsnorm_eps.config.gguf_reader import short_float32

    def at(key: str, note: str = "") -> Provenance:
        return Provenance("file", path, key=key, note=note)

    key = f"{norm.graph}: {norm.op}"
    if norm.eps is None:
        eps = missing(f"{norm.eps_where} ({key})")
    elif norm.eps_default:
        eps = Resolved(norm.eps, Provenance("framework", norm.eps_where, note=key))
    else:
        short = short_float32(norm.eps) if norm.eps_dtype == "float32" else None
        if norm.eps_dtype == "float16":
            import numpy as np

            short = str(np.float16(norm.eps))
        rounded = (
            f"eps rounded to {norm.eps_dtype}"
            if norm.eps_dtype in ("float16", "bfloat16") or "Cast to float16" in norm.eps_where
            else ""
        )
        eps = Resolved(
            norm.eps,
            at(f"{key}: {norm.eps_where}", rounded),
            stored=norm.eps_dtype if short is not None else None,
            short=short,
        )
    out: list[tuple[str, Resolved]] = [
        ("eps", eps),
        ("placement", Resolved(norm.placement, at(key))),
        ("gain", Resolved(norm.gain, at(key, norm.gain_where))),
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


def read_onnx_config(path: Path) -> NormConfig:
    """The norms of an .onnx file as a NormConfig: one literal entry per norm (its module
    path, glob characters escaped); the defaults are all missing (an ONNX graph has no
    model-wide setting), and notes list the findings (eps absent, schema default used, one
    norm's eps unlike its siblings')."""
    model = load_onnx_model(path)
    norms = find_norms(model, path)
    spath = str(path)
    entries = tuple(ConfigEntry(escape_glob(n.name), _settings(n, spath)) for n in norms)
    producer = " ".join(x for x in (model.producer_name, model.producer_version) if x)
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in list(model.opset_import)[:8])
    notes = [f"{len(norms)} normalization(s) found; opsets {opsets}", *_sibling_notes(norms)]
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
