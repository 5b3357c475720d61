"""ONNX graphs read as configs must never give a vacuous verdict: every eps judged (NaN, inf,
negative, 0, an attribute of the wrong type: a finding naming the node, never 0.0),
``config diff`` with nothing compared or with a YAML pattern matching no norm is an error,
``ratio --config`` names file and layer of a bad eps, ``-o`` never replaces the model's own
files. Graphs are hand-made with onnx.helper (tests/onnx_fixture.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import onnx_fixture as fx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rmsnorm_eps.config import load_config  # noqa: E402
from rmsnorm_eps.config.onnx_graph import find_norms  # noqa: E402

NAME = "model.layers.0.input_layernorm"
ADD = "/model/layers.0/input_layernorm/Add"


def _save(model: Any, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def _only(path: Path) -> Any:
    (norm,) = find_norms(onnx.load(str(path), load_external_data=False), path)
    return norm


@pytest.mark.parametrize(
    ("eps", "said"),
    [
        (float("nan"), "eps is nan (not a number)"),
        (float("inf"), "eps is inf (not finite)"),
        (-1e-6, "eps is negative (-9.999999974752427e-07)"),
        (0.0, "eps is 0"),
    ],
)
def test_an_unusable_eps_is_a_finding_naming_node_and_value(
    tmp_path: Path, cli: Any, eps: float, said: str
) -> None:
    path = _save(fx.hand_model(eps=eps), tmp_path / "m.onnx")
    norm = _only(path)
    assert norm.eps is None and norm.eps_where.startswith(said) and repr(ADD) in norm.eps_where
    res = cli("config", "show", str(path))
    assert res.exit_code == 1 and "1 finding(s)" in res.stderr
    assert f"FINDING {NAME}: {said}" in res.stdout
    # ratio --config: the file and the layer are named, not "eps must be finite and > 0"
    dump = tmp_path / "q.npz"
    np.savez(dump, **{NAME: np.full(4, 1e-3)})
    ratio = cli("ratio", str(dump), "--config", str(path))
    assert ratio.exit_code == 2, ratio.stdout
    line = ratio.stderr.strip()
    assert "\n" not in line and str(path) in line and NAME in line and said in line


def _fused_with(attr: Any) -> Any:
    model = fx.fused_model("RMSNormalization")
    model.graph.node[0].attribute.append(attr)
    return model


@pytest.mark.parametrize(
    ("attr", "kind"),
    [
        (helper.make_attribute("epsilon", "1e-5"), "STRING"),
        (helper.make_attribute("epsilon", 1), "INT"),
        (helper.make_attribute("epsilon", [1e-5, 1e-5]), "FLOATS"),
        (
            helper.make_attribute(
                "epsilon", numpy_helper.from_array(np.array(1e-5, np.float32), "e")
            ),
            "TENSOR",
        ),
    ],
)
def test_an_epsilon_attribute_of_another_type_is_not_read_as_zero(
    tmp_path: Path, cli: Any, attr: Any, kind: str
) -> None:
    path = _save(_fused_with(attr), tmp_path / "m.onnx")
    norm = _only(path)
    assert norm.eps is None and not norm.eps_default
    assert (
        norm.eps_where
        == f"attribute epsilon of '/encoder/ln/RMSNormalization' has type {kind}, not FLOAT"
    )
    res = cli("config", "show", str(path))
    assert res.exit_code == 1 and f"type {kind}, not FLOAT" in res.stdout


def test_a_float_epsilon_attribute_of_zero_or_nan_is_a_finding(tmp_path: Path) -> None:
    for eps, said in ((0.0, "eps is 0"), (float("nan"), "eps is nan")):
        path = _save(_fused_with(helper.make_attribute("epsilon", eps)), tmp_path / "m.onnx")
        norm = _only(path)
        assert norm.eps is None and norm.eps_where.startswith(said)


def _no_norm_graph(path: Path) -> Path:
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    return _save(fx._model([node], []), path)


def test_config_diff_with_no_norm_in_the_graph_is_an_error_not_equivalent(
    tmp_path: Path, cli: Any
) -> None:
    path = _no_norm_graph(tmp_path / "relu.onnx")
    cfg = fx.write_config(tmp_path / "config.json")
    for args in ((cfg, path), (path, cfg), (path, path)):
        res = cli("config", "diff", str(args[0]), str(args[1]))
        assert res.exit_code == 2, res.stdout
        assert "EQUIVALENT" not in res.stdout + res.stderr
        assert res.stderr.count("\n") == 1
        assert "no normalization found in the ONNX graph: nothing to compare" in res.stderr


def test_config_diff_refuses_a_yaml_pattern_matching_no_norm(tmp_path: Path, cli: Any) -> None:
    path = _save(fx.hand_model(eps=1e-6), tmp_path / "m.onnx")
    good = tmp_path / "good.yaml"
    good.write_text(
        "schema_version: 1\ndefaults:\n  eps: 1.0e-6\n  placement: inside\n  gain: w\n  norm: rms\n"
        f"layers:\n  '{NAME}':\n    eps: 1.0e-6\n"
    )
    ok = cli("config", "diff", str(good), str(path))
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text(good.read_text().replace("input_layernorm", "input_layernrom"))
    res = cli("config", "diff", str(typo), str(path))
    assert res.exit_code == 2, res.stdout
    assert "1 layer pattern(s) match no norm of the ONNX graph" in res.stderr
    assert "input_layernrom" in res.stderr and str(typo) in res.stderr


def test_config_diff_json_keeps_the_short_decimal_a_string_per_its_schema(
    tmp_path: Path, cli: Any
) -> None:
    import jsonschema

    from rmsnorm_eps.reports.schema import load_schema

    path = _save(fx.hand_model(eps=1e-6), tmp_path / "m.onnx")
    cfg = fx.write_config(tmp_path / "config.json", 1e-5)
    res = cli("config", "diff", str(cfg), str(path), "--format", "json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, load_schema("config diff"))
    (eps,) = (d for d in doc["differences"] if d["field"] == "eps")
    assert eps["b"]["stored"] == "float32" and eps["b"]["short"] == "1e-06"


def test_output_never_replaces_the_models_external_data(tmp_path: Path, cli: Any) -> None:
    from onnx.external_data_helper import convert_model_to_external_data

    model = fx.hand_model(eps=1e-6)
    convert_model_to_external_data(model, location="weights.bin", size_threshold=0)
    path = _save(model, tmp_path / "m.onnx")
    data = tmp_path / "weights.bin"
    before = data.read_bytes()
    assert before
    for cmd in (["config", "show", str(path)], ["config", "diff", str(path), str(path)]):
        res = cli(*cmd, "-o", str(data))
        assert res.exit_code == 2, res.stdout
        assert "refusing to overwrite an input" in res.stderr
        assert f"external data of {path}" in res.stderr
        assert data.read_bytes() == before
    model_res = cli("config", "show", str(path), "-o", str(path))
    assert model_res.exit_code == 2 and path.stat().st_size > 0


def test_ratio_config_of_an_onnx_file_still_loads_through_load_config(tmp_path: Path) -> None:
    path = _save(fx.hand_model(eps=1e-6), tmp_path / "m.onnx")
    (entry,) = load_config(path).entries
    assert entry.pattern == NAME
    assert dict(entry.overrides)["eps"].value == float(np.float32(1e-6))


# ---------------------------------------------------------------- graph semantics


def _graph(nodes: list[Any], inits: list[Any], outputs: list[str], extra: str | None = None) -> Any:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, fx.DIM])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, fx.DIM]) for o in outputs]
    imports = [helper.make_opsetid("", 18)] + ([helper.make_opsetid(extra, 1)] if extra else [])
    graph = helper.make_graph(nodes, "g", [x], outs, inits)
    return helper.make_model(graph, opset_imports=imports)


def test_a_dead_decoy_norm_is_ignored_and_said_so(tmp_path: Path, cli: Any) -> None:
    """The decoy (eps 1e-5, output unused) must not supply the eps of the live path (none)."""
    live, live_inits = fx.legacy_rms("/model/layers.0/input_layernorm", eps=None)
    decoy, decoy_inits = fx.legacy_rms("/model/layers.0/decoy", eps=1e-5, out="unused")
    path = _save(_graph(live + decoy, live_inits + decoy_inits, ["y"]), tmp_path / "m.onnx")
    norm = _only(path)
    assert norm.name == NAME and norm.eps is None and norm.eps_where.startswith("eps is 0")
    res = cli("config", "show", str(path))
    assert res.exit_code == 1
    assert "FINDING model.layers.0.decoy: ignored, no graph output depends on it" in res.stdout
    assert "model.layers.0.decoy" not in {e.pattern for e in load_config(path).entries}


def test_ops_of_an_unknown_domain_are_not_read_as_onnx_ops(tmp_path: Path, cli: Any) -> None:
    nodes, inits = fx.legacy_rms(eps=1e-6)
    for node in nodes:
        if node.op_type == "Add":
            node.domain = "evil.ops"  # an "Add" that may compute anything
    path = _save(_graph(nodes, inits, ["y"], extra="evil.ops"), tmp_path / "m.onnx")
    norms = find_norms(onnx.load(str(path)), path)
    assert all(n.eps != float(np.float32(1e-6)) for n in norms)
    res = cli("config", "show", str(path))
    assert res.exit_code == 1
    assert "1 node(s) of unknown domain 'evil.ops' (first: Add " in res.stdout


def _eps_cone(kind: str) -> tuple[list[Any], str]:
    """Nodes computing the eps tensor ``eps`` and what it must read as (independently)."""
    c = helper.make_node
    if kind == "bfloat16":
        import torch

        nodes = [
            c("Constant", [], ["e0"], name="c0", value=fx._f("e", 1e-5)),
            c("Cast", ["e0"], ["e1"], name="to_bf16", to=TensorProto.BFLOAT16),
            c("Cast", ["e1"], ["eps"], name="to_f32", to=TensorProto.FLOAT),
        ]
        return nodes, repr(torch.tensor(1e-5, dtype=torch.bfloat16).float().item())
    nodes = [
        c("Constant", [], ["a"], name="ca", value=fx._f("a", 2e-6)),
        c("Constant", [], ["b"], name="cb", value=fx._f("b", 5.0)),
        c("Mul", ["a", "b"], ["eps"], name="fold_me"),
    ]
    return nodes, repr(float(np.float32(2e-6) * np.float32(5.0)))


@pytest.mark.parametrize("kind", ["bfloat16", "folded"])
def test_the_eps_is_the_value_reaching_the_add(tmp_path: Path, kind: str) -> None:
    cone, want = _eps_cone(kind)
    nodes, inits = fx.legacy_rms(eps=1e-6)
    p = "/model/layers.0/input_layernorm"
    nodes = [n for n in nodes if n.name != f"{p}/Constant_1"]
    for node in nodes:
        if node.op_type == "Add":
            node.input[1] = "eps"
    path = _save(_graph(cone + nodes, inits, ["y"]), tmp_path / "m.onnx")
    norm = _only(path)
    assert repr(norm.eps) == want
    if kind == "bfloat16":
        assert "Cast to bfloat16" in norm.eps_where and norm.eps != float(np.float32(1e-5))
        show = load_config(path).entries[0].overrides
        assert dict(show)["eps"].provenance.note == "eps rounded to bfloat16"
    else:
        assert "Mul 'fold_me' folded over" in norm.eps_where


def test_one_reduction_feeding_two_eps_additions_is_two_norms(tmp_path: Path) -> None:
    c = helper.make_node
    nodes = [
        c("Pow", ["x", "two"], ["sq"], name="/m/norm/Pow"),
        c("ReduceMean", ["sq", "axes"], ["q"], name="/m/norm/ReduceMean"),
    ]
    inits = [fx._f("two", 2.0), helper.make_tensor("axes", TensorProto.INT64, [1], [-1])]
    for i, (scope, eps) in enumerate((("a", 1e-5), ("b", 1e-6))):
        p = f"/m/{scope}"
        inits += [
            fx._f(f"e{i}", eps),
            numpy_helper.from_array(np.ones(fx.DIM, np.float32), f"w{i}"),
        ]
        nodes += [
            c("Add", ["q", f"e{i}"], [f"qe{i}"], name=f"{p}/Add"),
            c("Sqrt", [f"qe{i}"], [f"r{i}"], name=f"{p}/Sqrt"),
            c("Div", ["x", f"r{i}"], [f"n{i}"], name=f"{p}/Div"),
            c("Mul", [f"n{i}", f"w{i}"], [f"y{i}"], name=f"{p}/Mul"),
        ]
    path = _save(_graph(nodes, inits, ["y0", "y1"]), tmp_path / "m.onnx")
    norms = find_norms(onnx.load(str(path)), path)
    assert sorted((n.name, n.eps) for n in norms) == [
        ("m.a", float(np.float32(1e-5))),
        ("m.b", float(np.float32(1e-6))),
    ]


def test_constants_in_external_data_are_read_within_the_caps(tmp_path: Path) -> None:
    from onnx.external_data_helper import convert_model_to_external_data

    model = fx.hand_model(eps=1e-6)
    convert_model_to_external_data(
        model, location="weights.bin", size_threshold=0, convert_attribute=True
    )
    path = _save(model, tmp_path / "m.onnx")
    norm = _only(path)
    assert norm.eps == float(np.float32(1e-6)) and "(external data)" in norm.eps_where
    assert (norm.gain, norm.dim) == ("w", fx.DIM)
    # a location outside the model's folder is never opened
    model = onnx.load(str(path), load_external_data=False)
    for node in model.graph.node:
        for a in node.attribute if node.name.endswith("/Constant_1") else ():  # the eps
            if a.HasField("t"):
                for e in a.t.external_data:
                    if e.key == "location":
                        e.value = "../weights.bin"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "weights.bin").write_bytes((tmp_path / "weights.bin").read_bytes())
    moved = _save(model, tmp_path / "sub" / "m.onnx")
    assert "outside the model's folder, not read" in _only(moved).eps_where


# ---------------------------------------------------------------- names


def test_two_norms_with_one_name_are_both_kept_and_ratio_refuses_a_conflict(
    tmp_path: Path, cli: Any
) -> None:
    w = numpy_helper.from_array(np.ones(fx.DIM, np.float32), "w")
    nodes = [
        helper.make_node(
            "RMSNormalization", ["x", "w"], ["h"], name="/m/norm/RMSNormalization", epsilon=1e-5
        ),
        helper.make_node(
            "RMSNormalization", ["h", "w"], ["y"], name="/m/norm/RMSNormalization_1", epsilon=1e-6
        ),
    ]
    model = _graph(nodes, [w], ["y"])
    model.opset_import[0].version = 23
    path = _save(model, tmp_path / "m.onnx")
    config = load_config(path)
    assert [e.pattern for e in config.entries] == ["m.norm", "m.norm#2"]
    assert config.entries[0].overrides[0][1].provenance.kind == "conflict"
    res = cli("config", "show", str(path))
    assert (
        res.exit_code == 1
        and "FINDING 2 norms are named m.norm (kept as m.norm, m.norm#2)" in res.stdout
    )
    dump = tmp_path / "q.npz"
    np.savez(dump, **{"m.norm": np.full(4, 1e-3)})
    ratio = cli("ratio", str(dump), "--config", str(path))
    assert ratio.exit_code == 2 and "2 norms are named m.norm and disagree on eps" in ratio.stderr


def test_a_shared_initializer_names_no_norm_and_an_activation_is_no_weight(tmp_path: Path) -> None:
    w = numpy_helper.from_array(
        np.ones(fx.DIM, np.float32), "model.layers.0.input_layernorm.weight"
    )
    nodes = [
        helper.make_node("RMSNormalization", ["x", w.name], ["h"], name="n0", epsilon=1e-5),
        helper.make_node("RMSNormalization", ["h", w.name], ["y"], name="n1", epsilon=1e-5),
    ]
    model = _graph(nodes, [w], ["y"])
    model.opset_import[0].version = 23
    path = _save(model, tmp_path / "m.onnx")
    assert [n.name for n in find_norms(onnx.load(str(path)), path)] == ["n0", "n1"]
    # a decomposed norm multiplied by an activation (a residual sum) has no weight
    nodes, inits = fx.legacy_rms(eps=1e-6, out="normed")
    mul = next(n for n in nodes if n.op_type == "Mul")
    inits = [i for i in inits if i.name != mul.input[1]]
    nodes = [n for n in nodes if n is not mul] + [
        helper.make_node("Add", ["x", "x"], ["res"], name="/residual/Add"),
        helper.make_node("Mul", [mul.input[0], "res"], ["y"], name="/act/Mul"),
    ]
    path = _save(_graph(nodes, inits, ["y"]), tmp_path / "act.onnx")
    norm = _only(path)
    assert norm.gain == "none" and norm.scale is None


# ---------------------------------------------------------------- caps


def test_the_node_cap_is_checked_before_the_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rmsnorm_eps.config import onnx_graph
    from rmsnorm_eps.config.onnx_wire import count_nodes
    from rmsnorm_eps.errors import InputFileError

    path = _save(fx.hand_model(eps=1e-6), tmp_path / "m.onnx")
    assert count_nodes(path, 100) == 8  # Constant, Pow, ReduceMean, Constant, Add, Sqrt, Div, Mul
    inner = helper.make_graph([helper.make_node("Relu", ["x"], ["z"])], "b", [], [])
    branchy = fx._model(
        [helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=inner)], []
    )
    assert count_nodes(_save(branchy, tmp_path / "if.onnx"), 100) == 3  # subgraphs counted
    assert count_nodes(path, 3) == 4  # stops one past the cap

    def no_parse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("parsed a model over the node cap")

    monkeypatch.setattr(onnx_graph, "MAX_NODES", 7)
    monkeypatch.setattr(onnx, "load", no_parse)
    with pytest.raises(InputFileError, match="over 7 nodes"):
        load_config(path)
