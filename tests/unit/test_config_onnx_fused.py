"""onnx_graph, fused part: fused norm ops read from nodes built here with onnx.helper.

The eps of an ``epsilon`` attribute is the float32 it is stored as (numpy's rounding); without
it, the schema default (read from onnxruntime/onnx and equal to the table of public values);
the scale input's gain and d, the stash_type, the bias, the Skip ops' inputs, LpNormalization
p=2 only, and ops that are not norms."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rmsnorm_eps.config.onnx_graph import (  # noqa: E402
    FUSED_OPS,
    MS,
    SCHEMA_DEFAULTS,
    _fused,
    _index,
    schema_default,
)

D = 6


def _read(node: Any, opset: int = 23, extra_nodes: tuple[Any, ...] = ()) -> Any:
    inits = [
        numpy_helper.from_array(np.full(D, 0.5, np.float32), "enc.ln.weight"),
        numpy_helper.from_array(np.zeros(D, np.float32), "enc.ln.bias"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])
    graph = helper.make_graph([*extra_nodes, node], "g", [x], [], inits)
    return _fused(_index(graph, "graph", None), node, {"": opset, MS: 1})


def test_an_epsilon_attribute_is_its_float32_value() -> None:
    node = helper.make_node(
        "RMSNormalization", ["x", "enc.ln.weight"], ["y"], name="n", epsilon=1e-6
    )
    norm = _read(node)
    assert norm.eps == float(np.float32(1e-6)) and norm.eps != 1e-6
    assert (norm.eps_dtype, norm.eps_default) == ("float32", False)
    assert norm.eps_where == "attribute epsilon of 'n'"
    assert (norm.norm, norm.placement, norm.op) == ("rms", "inside", "fused RMSNormalization")
    assert (norm.gain, norm.dim, norm.scale) == ("w", D, "enc.ln.weight")
    # no module from metadata or a legacy name: the scale initializer names it
    assert (norm.name, norm.name_from) == ("enc.ln", "scale initializer name")
    assert (norm.add_dtype, norm.add_dtype_from) == (
        "float32",
        "stash_type absent: schema default 1 (float32)",
    )
    assert norm.inputs == ("x",) and norm.output == "y" and norm.bias is None


def test_layernorm_stash_type_and_bias() -> None:
    node = helper.make_node(
        "LayerNormalization",
        ["x", "enc.ln.weight", "enc.ln.bias"],
        ["y"],
        name="/enc/ln/LayerNormalization",
        epsilon=1e-12,
        stash_type=TensorProto.DOUBLE,
    )
    norm = _read(node, opset=17)
    assert norm.norm == "layer" and norm.bias == "enc.ln.bias"
    assert (norm.name, norm.name_from) == ("enc.ln", "legacy node name")
    assert (norm.add_dtype, norm.add_dtype_from) == ("float64", "attribute stash_type 11")
    assert norm.eps == float(np.float32(1e-12))


def test_skip_ops_read_x_and_skip_and_the_scale_at_index_2() -> None:
    node = helper.make_node(
        "SkipSimplifiedLayerNormalization",
        ["x", "skip", "enc.ln.weight"],
        ["y"],
        name="s",
        domain=MS,
        epsilon=1e-5,
    )
    norm = _read(node)
    assert norm.op == "fused com.microsoft.SkipSimplifiedLayerNormalization"
    assert norm.inputs == ("x", "skip") and norm.dim == D and norm.gain == "w"
    assert norm.add_dtype is None  # com.microsoft ops have no stash_type


def test_a_one_plus_w_scale_is_gemma_gain() -> None:
    one = helper.make_node(
        "Constant", [], ["one"], name="c", value=numpy_helper.from_array(np.float32(1.0), "o")
    )
    plus = helper.make_node("Add", ["enc.ln.weight", "one"], ["g"], name="plus")
    node = helper.make_node("RMSNormalization", ["x", "g"], ["y"], name="n", epsilon=1e-6)
    norm = _read(node, extra_nodes=(one, plus))
    assert (norm.gain, norm.dim, norm.scale) == ("1+w", D, "enc.ln.weight")


@pytest.mark.parametrize(("domain", "op"), sorted(SCHEMA_DEFAULTS))
def test_the_schema_default_is_the_public_value(domain: str, op: str) -> None:
    found = schema_default(domain, op, None)
    assert found is not None
    assert found[0] == pytest.approx(SCHEMA_DEFAULTS[(domain, op)][0], rel=1e-6)


def test_a_missing_epsilon_takes_the_schema_default_and_says_so() -> None:
    node = helper.make_node("SkipLayerNormalization", ["x", "s", "enc.ln.weight"], ["y"], domain=MS)
    norm = _read(node)
    assert norm.eps_default is True and norm.eps_dtype == "float32"
    assert norm.eps == pytest.approx(1e-12, rel=1e-6)
    assert norm.eps_where.startswith("no epsilon attribute: schema default (")
    assert schema_default("ai.onnx", "RMSNormalization") == schema_default("", "RMSNormalization")
    assert schema_default("", "Relu") is None


def test_lp_normalization_p2_is_an_l2_norm_without_eps_and_p1_is_not_a_norm() -> None:
    p2 = _read(helper.make_node("LpNormalization", ["x"], ["y"], name="lp", p=2))
    assert (p2.norm, p2.eps, p2.placement) == ("l2", None, "clamp")
    assert p2.eps_where == "LpNormalization has no epsilon" and p2.gain == "none"
    assert p2.scale is None and p2.name == "lp"
    assert _read(helper.make_node("LpNormalization", ["x"], ["y"], p=1)) is None
    assert _read(helper.make_node("Relu", ["x"], ["y"])) is None
    # a fused name in an unknown domain is not one of FUSED_OPS
    assert ("other", "RMSNormalization") not in FUSED_OPS
    assert _read(helper.make_node("RMSNormalization", ["x"], ["y"], domain="other")) is None
