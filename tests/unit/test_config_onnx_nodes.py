"""onnx_graph, nodes part: the graph index and lookups, on graphs built here with onnx.helper.

Constants behind a tensor name (initializer, Constant node, Cast of one: the value rounded to
the cast's dtype, checked with numpy), all-equal and size rules, walking Casts up and down,
the gain of a scale (``w`` or ``1 + w`` and d) and the module a norm is named after."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rmsnorm_eps.config.onnx_graph import (  # noqa: E402
    MAX_EPS_ELEMENTS,
    _const,
    _dim,
    _from_weight,
    _gain_of,
    _index,
    _module_name,
    _scale_name,
    _skip_cast_down,
    _skip_cast_up,
    _tensor_const,
)


def _graph(nodes: list[Any], inits: list[Any], name: str = "g") -> Any:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    return helper.make_graph(nodes, name, [x], [y], inits)


def _arr(name: str, values: Any, dtype: Any = np.float32) -> Any:
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def test_the_index_holds_producers_consumers_initializers_and_types() -> None:
    nodes = [
        helper.make_node("Cast", ["x"], ["xc"], name="c", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["xc", "w"], ["y"], name="m"),
        helper.make_node("Add", ["xc", "xc"], ["z"], name="a"),
    ]
    g = _index(_graph(nodes, [_arr("w", [1.0] * 4)]), "graph", None)
    assert g.label == "graph"
    assert g.producer["xc"].name == "c" and g.producer["y"].name == "m"
    assert [n.name for n in g.consumers["xc"]] == ["m", "a", "a"]
    assert set(g.initializers) == {"w"}
    assert g.value_types == {"x": TensorProto.FLOAT16, "y": TensorProto.FLOAT}
    # an inner graph sees the outer scope's names, and adds its own
    inner = helper.make_graph(
        [helper.make_node("Neg", ["w"], ["o"], name="n")], "body", [], [], [_arr("v", 2.0)]
    )
    sub = _index(inner, "graph/If", g)
    assert set(sub.initializers) == {"w", "v"} and sub.producer["xc"].name == "c"
    assert sub.producer["o"].name == "n" and "xc" not in sub.consumers


def test_a_function_is_indexed_by_its_nodes_only() -> None:
    fn = helper.make_function(
        "local", "F", ["a"], ["b"], [helper.make_node("Sqrt", ["a"], ["b"], name="s")], []
    )
    g = _index(fn, "function local.F", None)
    assert g.producer["b"].name == "s" and g.initializers == {} and g.value_types == {}


@pytest.mark.parametrize(
    ("dtype", "onnx_dtype"),
    [(np.float32, "float32"), (np.float16, "float16"), (np.float64, "float64")],
)
def test_a_scalar_initializer_is_its_stored_value(dtype: Any, onnx_dtype: str) -> None:
    c = _tensor_const(_arr("eps", 1e-6, dtype), "initializer 'eps'")
    assert c.value == float(dtype(1e-6)) and c.dtype == onnx_dtype and c.elements == 1
    assert c.where == "initializer 'eps'"


def test_tensor_constants_all_equal_small_and_inline() -> None:
    same = _tensor_const(_arr("e", [3e-5] * 8), "w")
    assert same.value == float(np.float32(3e-5)) and same.elements == 8
    differ = _tensor_const(_arr("e", [1.0, 2.0]), "w")
    assert differ.value is None and differ.where == "w (elements differ)"
    big = _tensor_const(_arr("e", [1.0] * (MAX_EPS_ELEMENTS + 1)), "w")
    assert big.value is None and big.elements == MAX_EPS_ELEMENTS + 1
    at_cap = _tensor_const(_arr("e", [1.0] * MAX_EPS_ELEMENTS), "w")
    assert at_cap.value == 1.0
    empty = _tensor_const(_arr("e", np.zeros(0)), "w")
    assert empty.value is None and empty.elements == 0
    ext = _arr("e", 1e-6)
    ext.data_location = TensorProto.EXTERNAL
    assert _tensor_const(ext, "w").where == "w (external data, no location)"
    ints = _tensor_const(_arr("k", 2, np.int64), "w")
    assert ints.dtype == "int64" and ints.value == 2.0


def test_const_behind_constant_nodes_and_casts() -> None:
    nodes = [
        helper.make_node("Constant", [], ["t"], name="ct", value=_arr("v", 1e-7, np.float64)),
        helper.make_node("Constant", [], ["f"], name="cf", value_float=0.25),
        helper.make_node("Constant", [], ["fs"], name="cfs", value_floats=[0.5, 0.5]),
        helper.make_node("Constant", [], ["fd"], name="cfd", value_floats=[0.5, 0.7]),
        helper.make_node("Cast", ["t"], ["t16"], name="to16", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["t16"], ["t32"], name="to32", to=TensorProto.FLOAT),
        helper.make_node("Relu", ["t"], ["r"], name="relu"),
    ]
    g = _index(_graph(nodes, [_arr("i", 2.0)]), "graph", None)
    t = _const(g, "t")
    assert t is not None and (t.value, t.dtype) == (1e-7, "float64")
    assert t.where == "Constant node 'ct'"
    f = _const(g, "f")
    assert f is not None and (f.value, f.dtype, f.elements) == (0.25, "float32", 1)
    fs = _const(g, "fs")
    assert fs is not None and fs.value == 0.5
    assert _const(g, "fd") is None  # value_floats not all equal
    t16 = _const(g, "t16")
    assert t16 is not None and t16.dtype == "float16"
    assert t16.value == float(np.float16(1e-7)) and t16.value != 1e-7
    assert t16.where == "behind a Cast to float16 of Constant node 'ct'"
    t32 = _const(g, "t32")  # the float16 rounding survives the cast back up
    assert t32 is not None and t32.value == float(np.float32(np.float16(1e-7)))
    assert t32.dtype == "float32" and "behind a Cast to float16" in t32.where
    assert _const(g, "r") is None and _const(g, "x") is None
    i = _const(g, "i")
    assert i is not None and i.where == "initializer 'i'"


def test_casts_are_walked_up_and_down() -> None:
    nodes = [
        helper.make_node("Cast", ["x"], ["a"], name="c1", to=TensorProto.FLOAT),
        helper.make_node("Cast", ["a"], ["b"], name="c2", to=TensorProto.FLOAT16),
        helper.make_node("Sqrt", ["b"], ["s"], name="sqrt"),
        helper.make_node("Neg", ["a"], ["n"], name="neg"),
    ]
    g = _index(_graph(nodes, []), "graph", None)
    assert _skip_cast_up(g, "b") == "x" and _skip_cast_up(g, "s") == "s"
    found = sorted((node.name, via) for node, via in _skip_cast_down(g, "x"))
    assert found == [("neg", "a"), ("sqrt", "b")]


def test_gain_w_and_one_plus_w_with_their_length() -> None:
    nodes = [
        helper.make_node("Constant", [], ["one"], name="c1", value=_arr("o", 1.0)),
        helper.make_node("Add", ["m.weight", "one"], ["g"], name="plus"),
        helper.make_node("Cast", ["g"], ["g16"], name="cast", to=TensorProto.FLOAT16),
        helper.make_node("Constant", [], ["two"], name="c2", value=_arr("t", 2.0)),
        helper.make_node("Add", ["m.weight", "two"], ["h"], name="plus2"),
    ]
    g = _index(_graph(nodes, [_arr("m.weight", [0.1] * 6)]), "graph", None)
    assert _gain_of(g, "m.weight") == ("w", "scale 'm.weight'", 6)
    assert _gain_of(g, "g16") == ("1+w", "1 + 'm.weight'", 6)
    assert _gain_of(g, "h")[0] == "w"  # w + 2 is not 1 + w
    assert _gain_of(g, "x") == ("w", "scale 'x'", None)
    assert _scale_name(g, "m.weight") == "m.weight"
    assert _scale_name(g, "g16") == "m.weight"
    assert _scale_name(g, "x") is None
    assert _dim(g, "g16") is None and _dim(g, "m.weight") == 6


def _meta(node: Any, value: str) -> Any:
    p = node.metadata_props.add()
    p.key, p.value = "pkg.torch.onnx.name_scopes", value
    return node


def test_module_name_from_scopes_then_legacy_names_then_none() -> None:
    scoped = _meta(
        helper.make_node("Add", ["a", "b"], ["c"], name="add_1"),
        "['', 'model.layers.0.input_layernorm', 'add_1']",
    )
    assert _module_name([scoped]) == (
        "model.layers.0.input_layernorm",
        "pkg.torch.onnx.name_scopes",
    )
    legacy = helper.make_node("Add", ["a", "b"], ["c"], name="/model/layers.1/norm/Add")
    assert _module_name([legacy]) == ("model.layers.1.norm", "legacy node name")
    # onnxruntime's fusion appends /<Name>Fusion/ to the replaced node's name
    fused = helper.make_node("X", ["a"], ["c"], name="/model/norm/Add/SimplifiedLayerNormFusion/")
    assert _module_name([fused]) == ("model.norm", "legacy node name")
    bad = _meta(helper.make_node("Add", ["a"], ["c"], name="plain"), "not python [")
    short = _meta(helper.make_node("Add", ["a"], ["c"], name="p2"), "['only']")
    assert _module_name([bad, short]) == (None, "node name")
    # the first node with scopes wins over a legacy name of another
    assert _module_name([legacy, scoped])[1] == "pkg.torch.onnx.name_scopes"


def test_from_weight_names_a_norm_by_its_scale_only_without_a_module() -> None:
    def graph(readers: int) -> Any:
        nodes = [
            helper.make_node("Mul", ["x", "model.norm.weight"], [f"y{i}"]) for i in range(readers)
        ]
        return _index(helper.make_graph(nodes, "g", [], []), "graph", None)

    g = graph(1)
    assert _from_weight(g, None, "node name", "model.norm.weight") == (
        "model.norm",
        "scale initializer name",
    )
    assert _from_weight(g, "a.b", "legacy node name", "model.norm.weight") == (
        "a.b",
        "legacy node name",
    )
    assert _from_weight(g, None, "node name", ".weight") == (None, "node name")
    assert _from_weight(g, None, "node name", "w") == (None, "node name")
    assert _from_weight(g, None, "node name", None) == (None, "node name")
    # one initializer read by two norms (onnxruntime keeps one of equal all-ones weights):
    # its name is the first module's, so it names neither
    assert _from_weight(graph(2), None, "node name", "model.norm.weight") == (None, "node name")
