"""onnx_graph, decomposed part: decomposed norms matched by structure, on graphs built here with
onnx.helper: each variant of the square, the reduction, the eps placement (inside, outside,
clamp, rsqrt, dropped), the divide and the gain, with the eps value and dtype as stored."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rmsnorm_eps.config.onnx_graph import _decomposed, _index  # noqa: E402

D = 5


def _c(name: str, value: Any, dtype: Any = np.float32) -> Any:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _norm(nodes: list[Any], inits: list[Any], start: str = "mean") -> Any:
    """The norm found at the reduction node named ``start``."""
    inits = [*inits, _c("two", 2.0), _c("m.weight", np.full(D, 0.5)), _c("one", 1.0)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])
    g = _index(helper.make_graph(nodes, "g", [x], [], inits), "graph", None)
    (node,) = (n for n in nodes if n.name == start)
    return _decomposed(g, node)


def _head(square: str = "pow", reduce: str = "ReduceMean") -> list[Any]:
    sq = (
        helper.make_node("Pow", ["x", "two"], ["sq"], name="pow")
        if square == "pow"
        else helper.make_node("Mul", ["x", "x"], ["sq"], name="mul_sq")
    )
    return [sq, helper.make_node(reduce, ["sq"], ["q"], name="mean", keepdims=1)]


def test_inside_with_reciprocal_and_weight() -> None:
    nodes = [
        *_head("mul"),
        helper.make_node("Add", ["q", "eps"], ["qe"], name="add_eps"),
        helper.make_node("Sqrt", ["qe"], ["r"], name="sqrt"),
        helper.make_node("Reciprocal", ["r"], ["inv"], name="recip"),
        helper.make_node("Mul", ["x", "inv"], ["n"], name="times"),
        helper.make_node("Mul", ["n", "m.weight"], ["y"], name="gain"),
    ]
    norm = _norm(nodes, [_c("eps", 1e-6)])
    assert norm.eps == float(np.float32(1e-6)) and norm.eps_dtype == "float32"
    assert norm.eps_where == "initializer 'eps', input of 'add_eps'"
    assert (norm.norm, norm.placement, norm.gain, norm.dim) == ("rms", "inside", "w", D)
    assert norm.op == "decomposed ReduceMean/Mul/Add/Sqrt/Reciprocal/Mul/Mul"
    assert norm.nodes == ("mean", "mul_sq", "add_eps", "sqrt", "recip", "times", "gain")
    assert (norm.inputs, norm.output, norm.scale) == (("x",), "y", "m.weight")
    assert (norm.name, norm.name_from) == ("m", "scale initializer name")
    assert (norm.add_dtype, norm.eps_default) == ("float32", False)


@pytest.mark.parametrize(("op", "placement"), [("Add", "outside"), ("Max", "clamp")])
def test_eps_after_the_sqrt_is_outside_or_a_clamp(op: str, placement: str) -> None:
    nodes = [
        *_head(),
        helper.make_node("Sqrt", ["q"], ["s"], name="sqrt"),
        helper.make_node(op, ["eps", "s"], ["r"], name="after"),  # the constant first
        helper.make_node("Div", ["x", "r"], ["n"], name="div"),
        helper.make_node("Mul", ["m.weight", "n"], ["y"], name="gain"),
    ]
    norm = _norm(nodes, [_c("eps", 1e-5, np.float64)])
    assert (norm.placement, norm.eps, norm.eps_dtype) == (placement, 1e-5, "float64")
    assert norm.gain == "w" and norm.output == "y"


def test_a_sqrt_without_eps_is_dropped() -> None:
    nodes = [
        *_head(),
        helper.make_node("Sqrt", ["q"], ["r"], name="sqrt"),
        helper.make_node("Div", ["x", "r"], ["y"], name="div"),
    ]
    norm = _norm(nodes, [])
    assert norm.eps is None and norm.eps_dtype is None
    assert norm.eps_where.startswith("eps is 0: the pattern adds no eps before the divide")
    # no weight after an RMS pattern: reported as l2
    assert (norm.norm, norm.gain, norm.output) == ("l2", "none", "y")


@pytest.mark.parametrize("with_eps", [True, False])
def test_an_rsqrt_as_pow_minus_half(with_eps: bool) -> None:
    tail = [
        helper.make_node("Pow", ["qe" if with_eps else "q", "mhalf"], ["rs"], name="rsqrt"),
        helper.make_node("Mul", ["x", "rs"], ["n"], name="times"),
        helper.make_node("Mul", ["n", "g"], ["y"], name="gain"),
        helper.make_node("Add", ["m.weight", "one"], ["g"], name="one_plus"),
    ]
    add = [helper.make_node("Add", ["q", "eps"], ["qe"], name="add_eps")] if with_eps else []
    norm = _norm([*_head(), *add, *tail], [_c("eps", 1e-6, np.float16), _c("mhalf", -0.5)])
    assert norm.gain == "1+w" and norm.dim == D and norm.scale == "m.weight"
    assert norm.norm == "rms" and norm.placement == "inside"
    if with_eps:
        assert norm.eps == float(np.float16(1e-6)) and norm.eps_dtype == "float16"
    else:
        assert norm.eps is None and norm.eps_where.startswith("eps is 0")


def test_a_centred_square_is_a_layernorm() -> None:
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mu"], name="mu"),
        helper.make_node("Sub", ["x", "mu"], ["xc"], name="sub"),
        helper.make_node("Pow", ["xc", "two"], ["sq"], name="pow"),
        helper.make_node("ReduceMean", ["sq"], ["q"], name="mean"),
        helper.make_node("Add", ["q", "eps"], ["qe"], name="add_eps"),
        helper.make_node("Sqrt", ["qe"], ["r"], name="sqrt"),
        helper.make_node("Div", ["xc", "r"], ["n"], name="div"),
        helper.make_node("Mul", ["n", "m.weight"], ["y"], name="gain"),
    ]
    norm = _norm(nodes, [_c("eps", 1e-12)])
    assert norm.norm == "layer" and norm.inputs == ("x",)  # x, not x - mean(x)
    assert norm.eps == float(np.float32(1e-12))
    assert _norm(nodes, [_c("eps", 1e-12)], start="mu") is None  # the mean alone is no norm


@pytest.mark.parametrize("reduce", ["ReduceSumSquare", "ReduceSum"])
def test_sum_reductions_have_the_sum_placement(reduce: str) -> None:
    head = (
        [helper.make_node("ReduceSumSquare", ["x"], ["q"], name="mean")]
        if reduce == "ReduceSumSquare"
        else _head(reduce="ReduceSum")
    )
    nodes = [
        *head,
        helper.make_node("Add", ["q", "eps"], ["qe"], name="add_eps"),
        helper.make_node("Sqrt", ["qe"], ["r"], name="sqrt"),
        helper.make_node("Div", ["x", "r"], ["n"], name="div"),
        helper.make_node("Mul", ["n", "m.weight"], ["y"], name="gain"),
    ]
    norm = _norm(nodes, [_c("eps", 5e-6)])
    assert norm.placement == "sum" and norm.eps == float(np.float32(5e-6))


def test_an_eps_of_unequal_elements_is_not_readable() -> None:
    nodes = [
        *_head(),
        helper.make_node("Add", ["q", "eps"], ["qe"], name="add_eps"),
        helper.make_node("Sqrt", ["qe"], ["r"], name="sqrt"),
        helper.make_node("Div", ["x", "r"], ["y"], name="div"),
    ]
    norm = _norm(nodes, [_c("eps", [1e-6, 2e-6])])
    assert norm.eps is None and norm.eps_dtype == "float32"
    assert norm.eps_where == "eps not readable: initializer 'eps' (elements differ)"


def test_structures_that_are_not_norms() -> None:
    cube = [
        helper.make_node("Pow", ["x", "three"], ["sq"], name="pow"),
        helper.make_node("ReduceMean", ["sq"], ["q"], name="mean"),
        helper.make_node("Sqrt", ["q"], ["r"], name="sqrt"),
        helper.make_node("Div", ["x", "r"], ["y"], name="div"),
    ]
    assert _norm(cube, [_c("three", 3.0)]) is None  # x^3 is not a square
    no_divide = [*_head(), helper.make_node("Sqrt", ["q"], ["y"], name="sqrt")]
    assert _norm(no_divide, []) is None
    plain = [helper.make_node("ReduceMean", ["x"], ["y"], name="mean")]
    assert _norm(plain, []) is None


@pytest.mark.parametrize(
    ("scale", "gain"),
    [("onnx::Mul_17", "unknown (folded)"), ("m.weight", "w"), ("w", "w")],
)
def test_a_scale_folded_by_torchscript_has_no_gain_read_as_w(scale: str, gain: str) -> None:
    # TorchScript folds GemmaRMSNorm's 1 + w into 'onnx::Mul_17' and keeps no class: the
    # stored g is 1 + w or w, the graph cannot tell (a parameter's own name is its w)
    nodes = [
        *_head(),
        helper.make_node("Add", ["q", "eps"], ["qe"], name="add_eps"),
        helper.make_node("Sqrt", ["qe"], ["r"], name="sqrt"),
        helper.make_node("Div", ["x", "r"], ["n"], name="div"),
        helper.make_node("Mul", ["n", scale], ["y"], name="gain"),
    ]
    norm = _norm(nodes, [_c("eps", 1e-6), _c(scale, np.full(D, 1.25))])
    assert (norm.gain, norm.dim, norm.scale) == (gain, D, scale)
    if gain != "w":
        assert "w or 1 + w (e.g. Gemma's) cannot be told from the graph" in norm.gain_where
