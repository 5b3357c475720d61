"""ONNX graphs as a config source: every norm found and named, eps as stored, ``config show``,
``config diff`` against the model's config.json, ``ratio --config model.onnx``, hostile files.

The exported models are made by torch.onnx.export (dynamo) in a session directory
(tests/onnx_fixture.py); the hand-made graphs by onnx.helper.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import onnx_fixture as fx  # noqa: E402

from rmsnorm_eps.config import load_config  # noqa: E402
from rmsnorm_eps.config.onnx_graph import (  # noqa: E402
    SCHEMA_DEFAULTS,
    find_norms,
    schema_default,
)
from rmsnorm_eps.errors import InputFileError  # noqa: E402

F32_EPS = float(np.float32(fx.EPS))


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return fx.exports(tmp_path_factory.getbasetemp() / "onnx-exports")


def _norms(path: Path) -> dict[str, Any]:
    model = onnx.load(str(path), load_external_data=False)
    return {n.name: n for n in find_norms(model, path)}


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["tiny-opset18", "tiny-opset23"])
def test_every_norm_of_an_export_is_found_named_and_exact(
    models: dict[str, Path], stem: str
) -> None:
    norms = _norms(models[stem])
    assert sorted(norms) == sorted(fx.NAMES)
    for norm in norms.values():
        assert norm.eps == F32_EPS  # the float32 the graph stores, exactly
        assert norm.eps_dtype == "float32" and not norm.eps_default
        assert (norm.norm, norm.placement, norm.gain, norm.dim) == ("rms", "inside", "w", fx.DIM)
        assert norm.name_from == "pkg.torch.onnx.name_scopes"
    kind = {"tiny-opset18": "decomposed", "tiny-opset23": "fused RMSNormalization"}[stem]
    assert all(n.op.startswith(kind) for n in norms.values())


@pytest.mark.slow
def test_torch_export_drops_eps_1e_8_and_that_is_a_finding(
    models: dict[str, Path], cli: Any
) -> None:
    model = onnx.load(str(models["tiny-eps1e-8"]))
    assert not any(n.op_type == "Add" and "layernorm" in n.name for n in model.graph.node)
    norms = _norms(models["tiny-eps1e-8"])
    assert sorted(norms) == sorted(fx.NAMES)
    assert all(n.eps is None and n.eps_where.startswith("eps is 0") for n in norms.values())
    res = cli("config", "show", str(models["tiny-eps1e-8"]))
    assert res.exit_code == 1
    assert res.stdout.count("FINDING") == len(fx.NAMES)


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["tiny-opset18", "tiny-opset23", "tiny-ort"])
def test_faithful_exports_are_equivalent_to_config_json(
    models: dict[str, Path], cli: Any, stem: str
) -> None:
    res = cli("config", "diff", str(models["config"]), str(models[stem]), "--format", "json")
    assert res.exit_code == 0, res.stdout
    doc = json.loads(res.stdout)
    assert doc["equivalent"] is True
    assert len(doc["patterns"]) == len(fx.NAMES)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stem", "config", "expect"),
    [
        ("tiny-edited", "config", "model.layers.1.post_attention_layernorm"),
        ("tiny-eps1e-8", "config-1e-8", "eps is 0"),
        ("tiny-fp16", "config", "float16"),
    ],
)
def test_unfaithful_exports_are_different(
    models: dict[str, Path], cli: Any, stem: str, config: str, expect: str
) -> None:
    res = cli("config", "diff", str(models[config]), str(models[stem]))
    assert res.exit_code == 1, res.stdout
    assert expect in res.stdout and "DIFFERENT" in res.stdout
    if stem == "tiny-edited":  # only the edited norm differs, and it is unlike its siblings
        diff_lines = [line for line in res.stdout.splitlines() if line.startswith("DIFF ")]
        assert len(diff_lines) == 1 and expect in diff_lines[0]
        show = cli("config", "show", str(models[stem]))
        assert show.exit_code == 1 and "unlike its 4 rms sibling(s)" in show.stdout
    if stem == "tiny-fp16":
        norms = _norms(models[stem])
        assert all(n.eps == float(np.float16(fx.EPS)) for n in norms.values())
        assert all(n.eps_dtype == "float16" for n in norms.values())


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["markdown", "github", "junit", "sarif"])
def test_ci_formats_carry_the_difference(models: dict[str, Path], cli: Any, fmt: str) -> None:
    res = cli(
        "config", "diff", str(models["config-1e-8"]), str(models["tiny-eps1e-8"]), "--format", fmt
    )
    assert res.exit_code == 1
    assert "model.norm" in res.stdout and "eps is 0" in res.stdout


@pytest.mark.slow
def test_ratio_takes_eps_per_layer_from_an_onnx_file(
    models: dict[str, Path], cli: Any, tmp_path: Path
) -> None:
    dump = tmp_path / "q.npz"
    q = {name: np.full(16, 1e-3) for name in fx.NAMES}
    np.savez(dump, **q)
    res = cli("ratio", str(dump), "--config", str(models["tiny-opset23"]), "--format", "json")
    assert res.exit_code in (0, 1), res.stdout
    doc = json.loads(res.stdout)
    text = json.dumps(doc)
    assert repr(F32_EPS) in text or str(F32_EPS) in text
    dropped = cli("ratio", str(dump), "--config", str(models["tiny-eps1e-8"]))
    assert dropped.exit_code == 2 and "eps is 0" in dropped.stderr


# ------------------------------------------------------------------ hand-made graphs


def _save(model: Any, path: Path) -> Path:
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(
    ("kwargs", "placement", "gain"),
    [
        ({}, "inside", "w"),
        ({"gemma": True}, "inside", "1+w"),
        ({"placement": "outside"}, "outside", "w"),
        ({"placement": "clamp"}, "clamp", "w"),
    ],
)
def test_legacy_patterns_by_structure(
    tmp_path: Path, kwargs: dict[str, Any], placement: str, gain: str
) -> None:
    path = _save(fx.hand_model(**kwargs), tmp_path / "m.onnx")
    (norm,) = _norms(path).values()
    assert norm.name == "model.layers.0.input_layernorm" and norm.name_from == "legacy node name"
    assert norm.eps == float(np.float32(1e-6)) and "Constant node" in norm.eps_where
    assert (norm.placement, norm.gain) == (placement, gain)


def test_eps_behind_a_cast_and_stored_float16(tmp_path: Path) -> None:
    model = fx.hand_model(eps_dtype=np.float16, cast_eps=True)
    (norm,) = _norms(_save(model, tmp_path / "m.onnx")).values()
    assert norm.eps == float(np.float16(1e-6)) and "behind a Cast to float32" in norm.eps_where


@pytest.mark.parametrize(
    ("op", "domain", "norm", "default"),
    [
        ("RMSNormalization", "", "rms", 1e-5),
        ("LayerNormalization", "", "layer", 1e-5),
        ("SimplifiedLayerNormalization", "", "rms", 1e-5),
        ("SkipLayerNormalization", "com.microsoft", "layer", 1e-12),
        ("SkipSimplifiedLayerNormalization", "com.microsoft", "rms", 1e-12),
    ],
)
def test_fused_ops_without_epsilon_use_the_schema_default_and_say_so(
    tmp_path: Path, cli: Any, op: str, domain: str, norm: str, default: float
) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(fx.fused_model(op, domain), str(path))
    (found,) = _norms(path).values()
    assert found.eps_default and found.eps == float(np.float32(default))
    assert "schema default" in found.eps_where and found.norm == norm
    # the table (public sources) agrees with the schema onnxruntime registers
    assert SCHEMA_DEFAULTS[(domain, op)][0] == pytest.approx(default, rel=1e-6)
    assert schema_default(domain, op) is not None
    cfg = fx.write_config(tmp_path / "config.json", 1e-6)
    res = cli("config", "diff", str(cfg), str(path))
    assert res.exit_code == 1 and "schema default" in res.stdout
    with_attr = tmp_path / "attr.onnx"
    onnx.save(fx.fused_model(op, domain, eps=1e-6), str(with_attr))
    (found,) = _norms(with_attr).values()
    assert found.eps == float(np.float32(1e-6)) and not found.eps_default


def test_norms_inside_if_branches_and_functions(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    then_nodes, then_inits = fx.legacy_rms("/model/then_norm", 1e-6, out="t_out")
    else_nodes, else_inits = fx.legacy_rms("/model/else_norm", 2e-6, out="e_out")
    out_t = helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [1, fx.DIM])
    out_e = helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [1, fx.DIM])
    then_g = helper.make_graph(then_nodes, "then", [], [out_t], then_inits)
    else_g = helper.make_graph(else_nodes, "else", [], [out_e], else_inits)
    cond = helper.make_tensor("cond", TensorProto.BOOL, [], [True])
    if_node = helper.make_node(
        "If", ["cond"], ["z"], name="branch", then_branch=then_g, else_branch=else_g
    )
    fn_nodes, _ = fx.legacy_rms("/fn/norm", 3e-6, x="a", out="b")
    # a function has no initializers: its weight and axes come in as inputs
    fn = helper.make_function(
        "local",
        "RmsFn",
        ["a", "/fn/norm/axes", "fn.norm.w"],
        ["b"],
        fn_nodes,
        [helper.make_opsetid("", 18)],
    )
    call = helper.make_node("RmsFn", ["z", "axes", "w"], ["y"], name="call", domain="local")
    inits = [
        helper.make_tensor("axes", TensorProto.INT64, [1], [-1]),
        onnx.numpy_helper.from_array(np.ones(fx.DIM, np.float32), "w"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, fx.DIM])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, fx.DIM])
    graph = helper.make_graph([if_node, call], "g", [x], [y], [cond, *inits])
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)],
        functions=[fn],
    )
    norms = _norms(_save(model, tmp_path / "m.onnx"))
    assert norms["model.then_norm"].eps == float(np.float32(1e-6))
    assert norms["model.else_norm"].eps == float(np.float32(2e-6))
    assert norms["fn.norm"].eps == float(np.float32(3e-6))
    assert "If 'branch'" in norms["model.then_norm"].graph
    assert norms["fn.norm"].graph == "function local.RmsFn"


def test_layernorm_and_sum_patterns(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [-1])
    eps = onnx.numpy_helper.from_array(np.array(1e-5, np.float32), "eps")
    two = onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="/ln/ReduceMean"),
        helper.make_node("Sub", ["x", "m"], ["d"], name="/ln/Sub"),
        helper.make_node("Pow", ["d", "two"], ["d2"], name="/ln/Pow"),
        helper.make_node("ReduceMean", ["d2", "axes"], ["v"], name="/ln/ReduceMean_1"),
        helper.make_node("Add", ["v", "eps"], ["ve"], name="/ln/Add"),
        helper.make_node("Sqrt", ["ve"], ["s"], name="/ln/Sqrt"),
        helper.make_node("Div", ["x", "s"], ["n"], name="/ln/Div"),
        helper.make_node("ReduceSumSquare", ["n", "axes"], ["ss"], name="/l2/ReduceSumSquare"),
        helper.make_node("Add", ["ss", "eps"], ["sse"], name="/l2/Add"),
        helper.make_node("Sqrt", ["sse"], ["r"], name="/l2/Sqrt"),
        helper.make_node("Div", ["n", "r"], ["y"], name="/l2/Div"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, fx.DIM])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, fx.DIM])
    graph = helper.make_graph(nodes, "g", [x], [y], [axes, eps, two])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    norms = _norms(_save(model, tmp_path / "m.onnx"))
    assert (norms["ln"].norm, norms["ln"].gain) == ("layer", "none")
    assert (norms["l2"].norm, norms["l2"].placement) == ("l2", "sum")


# ------------------------------------------------------------------ hostile files


def test_corrupt_and_hostile_files_are_one_line_exit_2(tmp_path: Path, cli: Any) -> None:
    from conftest import run_module

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07\x12\xff\xff\xff\xff\x0f garbage")
    res = run_module("config", "show", str(bad))
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("rmsnorm-eps: error:")
    assert "Traceback" not in res.stderr
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert cli("config", "show", str(empty)).exit_code == 2
    text = tmp_path / "text.onnx"
    text.write_text("not a model at all")
    assert cli("config", "show", str(text)).exit_code == 2


def test_size_and_node_caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rmsnorm_eps.config import onnx_graph

    path = _save(fx.hand_model(), tmp_path / "m.onnx")
    monkeypatch.setattr(onnx_graph, "MAX_NODES", 3)
    with pytest.raises(InputFileError, match="over 3 nodes"):
        load_config(path)
    monkeypatch.setattr(onnx_graph, "MAX_NODES", 1 << 20)
    monkeypatch.setattr(onnx_graph, "MAX_ONNX_BYTES", 100)
    with pytest.raises(InputFileError, match="over the 100-byte limit"):
        load_config(path)


def test_hostile_names_are_escaped_in_every_format(tmp_path: Path, cli: Any) -> None:
    prefix = "/model/\x1b[31mevil*[x]\n::error::pwn/norm"
    path = _save(fx.hand_model(prefix=prefix), tmp_path / "m.onnx")
    config = load_config(path)
    (entry,) = config.entries
    assert config.matching("model.\x1b[31mevil*[x]\n::error::pwn.norm") == (entry,)  # escaped
    for fmt in ("text", "json"):
        res = cli("config", "show", str(path), "--format", fmt)
        assert res.exit_code == 0, res.stdout
        assert "\x1b" not in res.stdout and "\n::error::" not in res.stdout
    cfg = fx.write_config(tmp_path / "config.json", 1e-5)
    for fmt in ("text", "json", "markdown", "github", "junit", "sarif"):
        res = cli("config", "diff", str(cfg), str(path), "--format", fmt)
        assert res.exit_code == 1
        assert "\x1b" not in res.stdout and "\n::error::pwn" not in res.stdout


@pytest.mark.slow
def test_compare_from_an_onnx_config(models: dict[str, Path], cli: Any, tmp_path: Path) -> None:
    dump = tmp_path / "q.npz"
    np.savez(dump, **{name: np.geomspace(1e-8, 1.0, 32) for name in fx.NAMES})
    same = cli(
        "compare",
        str(dump),
        "--from",
        "config",
        "--config",
        str(models["tiny-opset23"]),
        "--to",
        "eps=1e-5",
    )
    assert same.exit_code == 0, same.stdout  # the stored float32 1e-5 is the same setting
    other = cli(
        "compare",
        str(dump),
        "--from",
        "config",
        "--config",
        str(models["tiny-edited"]),
        "--to",
        "eps=1e-5",
    )
    assert other.exit_code == 1, other.stdout
    assert "model.layers.1.post_attention_layernorm" in other.stdout


def test_placement_outside_is_a_difference(tmp_path: Path, cli: Any) -> None:
    path = _save(fx.hand_model(placement="outside"), tmp_path / "m.onnx")
    cfg = fx.write_config(tmp_path / "config.json", 1e-6)
    res = cli("config", "diff", str(cfg), str(path))
    assert res.exit_code == 1
    (line,) = [x for x in res.stdout.splitlines() if x.startswith("DIFF ")]
    assert line.startswith("DIFF placement [model.layers.0.input_layernorm]")
    assert "A inside" in line and "B outside" in line


@pytest.mark.parametrize("eps", [1e-6, None])
def test_rsqrt_as_pow_minus_half_and_l2_without_weight(tmp_path: Path, eps: float | None) -> None:
    from onnx import TensorProto, helper

    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [-1])
    consts = [
        onnx.numpy_helper.from_array(np.array(v, np.float32), name)
        for name, v in (("two", 2.0), ("half", -0.5), ("eps", eps or 0.0))
    ]
    q = "qe" if eps is not None else "q"
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["x2"], name="/m/l2/Pow"),
        helper.make_node("ReduceMean", ["x2", "axes"], ["q"], name="/m/l2/ReduceMean"),
        *([helper.make_node("Add", ["q", "eps"], ["qe"], name="/m/l2/Add")] if eps else []),
        helper.make_node("Pow", [q, "half"], ["r"], name="/m/l2/Pow_1"),
        helper.make_node("Mul", ["x", "r"], ["y"], name="/m/l2/Mul"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, fx.DIM])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, fx.DIM])
    graph = helper.make_graph(nodes, "g", [x], [y], [axes, *consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (norm,) = _norms(_save(model, tmp_path / "m.onnx")).values()
    assert (norm.name, norm.norm, norm.gain, norm.placement) == ("m.l2", "l2", "none", "inside")
    if eps is None:
        assert norm.eps is None and norm.eps_where.startswith("eps is 0")
    else:
        assert norm.eps == float(np.float32(eps))


@pytest.mark.slow
def test_two_onnx_graphs_compare_on_their_norms(models: dict[str, Path], cli: Any) -> None:
    same = cli("config", "diff", str(models["tiny-opset18"]), str(models["tiny-ort"]))
    assert same.exit_code == 0, same.stdout  # onnxruntime's optimized copy keeps every eps
    fp16 = cli("config", "diff", str(models["tiny-opset18"]), str(models["tiny-fp16"]))
    assert fp16.exit_code == 1 and fp16.stdout.count("rounded to float16") == len(fx.NAMES)
