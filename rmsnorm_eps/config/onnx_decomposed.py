"""Decomposed normalizations matched by structure, for x of dimension d.

- ``q = ReduceMean(Pow(x, 2) | Mul(x, x))`` (RMS), ``q = ReduceMean(Pow(x - mean(x), 2))``
  (LayerNorm), or ``s = ReduceSumSquare(x) | ReduceSum(Pow(x, 2))`` (sum: eps is scaled by d);
- then ``Sqrt(Add(q, eps))`` (inside), ``Add(Sqrt(q), eps)`` (outside), ``Max(Sqrt(q), eps)``
  (clamp), ``Pow(q + eps, -0.5)`` (an rsqrt), or no eps at all (dropped: a finding);
- then ``Div(x, r)``, ``Mul(x, Reciprocal(r))`` or ``Mul(x, rsqrt)``, and a gain ``Mul(y, w)``,
  ``Mul(y, Add(w, 1))`` or none (an RMS pattern without a weight is reported as l2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rmsnorm_eps.config.onnx_nodes import (
    GraphNorm,
    _Const,
    _const,
    _from_weight,
    _gain_of,
    _Graph,
    _module_name,
    _op,
    _producer_op,
    _scale_name,
    _skip_cast_down,
    _skip_cast_up,
    folded_gain,
    judge_eps,
)


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
