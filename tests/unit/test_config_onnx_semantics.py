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
from onnx import helper, numpy_helper  # noqa: E402

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
