"""Fused normalization ops (RMSNormalization, LayerNormalization, the com.microsoft
Simplified/Skip/Embed variants, LpNormalization p=2) and the ``epsilon`` their schema gives
when the attribute is absent (:func:`schema_default`, :data:`SCHEMA_DEFAULTS`).

The eps of a fused op is its ``epsilon`` attribute, a float32 (stored as ``float(np.float32(
a.f))``); the dtype it is added in is ``stash_type`` for the ONNX-domain ops.
"""

from __future__ import annotations

import functools
from typing import Any

from rmsnorm_eps.config.onnx_nodes import (
    _DTYPES,
    GraphNorm,
    _attr,
    _from_weight,
    _gain_of,
    _Graph,
    _module_name,
    _onnx,
    _scale_name,
    _skip_cast_up,
    folded_gain,
    judge_eps,
)

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
