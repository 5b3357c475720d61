"""``parity onnx``: each norm of an exported or hand-made graph run by onnxruntime (all
optimizations on) on the probes; the effective eps it measures must be within 5% of the eps
the graph stores (the exports' 1e-5, the hand-made graphs' 1e-6 and a fused op's schema
default 1e-12), and a norm whose eps differs from config.json, or that stores none, fails."""

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
from rmsnorm_eps.parity.onnx_runtime import measure_onnx  # noqa: E402


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return fx.exports(tmp_path_factory.getbasetemp() / "onnx-exports")


def _within(effective: float | None, stored: float, rel: float = 0.05) -> bool:
    return effective is not None and abs(effective - stored) <= rel * stored


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["tiny-opset18", "tiny-opset23", "tiny-fp16", "tiny-ort"])
def test_effective_eps_of_every_exported_norm_within_5_percent(
    models: dict[str, Path], stem: str
) -> None:
    report = measure_onnx(models[stem])
    assert not report.skipped
    assert sorted(n.name for n in report.norms) == sorted(fx.NAMES)
    for n in report.norms:
        assert n.stored is not None
        assert _within(n.effective, n.stored), n
        assert n.placement == "inside" and n.agrees
    want = "float16" if stem == "tiny-fp16" else "float32"
    assert {n.dtype for n in report.norms} == {want}
    if stem == "tiny-fp16":  # the float16-rounded eps is what runs
        assert all(n.stored == float(np.float16(fx.EPS)) for n in report.norms)


@pytest.mark.slow
def test_edited_and_dropped_eps_fail_against_config(models: dict[str, Path], cli: Any) -> None:
    config = load_config(models["config"])
    edited = measure_onnx(models["tiny-edited"], config=config)
    bad = [n for n in edited.norms if not n.agrees]
    assert [n.name for n in bad] == ["model.layers.1.post_attention_layernorm"]
    assert _within(bad[0].effective, 1e-6) and "configured" in bad[0].findings[0]
    res = cli(
        "parity",
        "onnx",
        str(models["tiny-eps1e-8"]),
        "--config",
        str(models["config-1e-8"]),
        "--format",
        "json",
    )
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["command"] == "parity onnx" and doc["passed"] is False
    for norm in doc["norms"]:
        assert norm["stored_eps"] is None and norm["effective_eps"] is None
        assert any("stores no eps" in f for f in norm["findings"])


def test_hand_made_graphs_and_their_fused_optimization(tmp_path: Path, cli: Any) -> None:
    for kwargs, placement in (({}, "inside"), ({"placement": "outside"}, "outside")):
        path = tmp_path / f"{placement}.onnx"
        onnx.save(fx.hand_model(**kwargs), str(path))
        (n,) = measure_onnx(path).norms
        assert n.name == "model.layers.0.input_layernorm"
        assert _within(n.effective, 1e-6) and n.placement == placement and n.agrees
    # onnxruntime fuses the legacy pattern into SimplifiedLayerNormalization; the optimized
    # copy keeps the eps and the name, and config show reads it
    out = tmp_path / "opt.onnx"
    res = cli("parity", "onnx", str(tmp_path / "inside.onnx"), "--optimized-out", str(out))
    assert res.exit_code == 0, res.stdout
    model = onnx.load(str(out))
    assert [x.op_type for x in model.graph.node] == ["SimplifiedLayerNormalization"]
    show = cli("config", "show", str(out), "--format", "json")
    assert show.exit_code == 0
    doc = json.loads(show.stdout)
    (layer,) = doc["layers"]
    assert layer["pattern"] == "model.layers.0.input_layernorm"
    assert layer["settings"]["eps"]["value"] == float(np.float32(1e-6))


def test_fused_schema_default_is_measured_and_fails(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "skip.onnx"
    onnx.save(fx.fused_model("SkipLayerNormalization", "com.microsoft"), str(path))
    (n,) = measure_onnx(path).norms
    assert _within(n.effective, 1e-12)  # the 1e-12 default is what onnxruntime runs
    assert not n.agrees and "schema default" in n.findings[0]
    for fmt in ("text", "markdown", "github", "junit", "sarif"):
        res = cli("parity", "onnx", str(path), "--format", fmt)
        assert res.exit_code == 1 and "encoder.ln" in res.stdout


def test_usage_errors(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(fx.hand_model(), str(path))
    assert cli("parity").exit_code == 2
    assert cli("parity", "onnx", str(path), "--probes", str(path)).exit_code == 2
    # the probe options are parity's own, not parity onnx's
    res = cli("parity", "--rule", "polygraphy", "onnx", str(path))
    assert res.exit_code == 2 and "--rule: options of `parity` itself" in res.stderr
    # the old spelling names the new one
    res = cli("parity", "--onnx", str(path))
    assert res.exit_code == 2
    assert f"`parity --onnx {path}` is now `parity onnx {path}`" in res.stderr
    assert cli("parity", "onnx").exit_code == 2  # MODEL is required
    assert cli("parity", "onnx", str(path), "--eps-rtol", "0").exit_code == 2
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff" * 64)
    res = cli("parity", "onnx", str(bad))
    assert res.exit_code == 2


def test_hostile_names_are_escaped_in_parity_reports(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(fx.hand_model(prefix="/model/\x1b[31mevil\n::error::pwn/norm"), str(path))
    for fmt in ("text", "json", "markdown", "github", "junit", "sarif"):
        res = cli("parity", "onnx", str(path), "--format", fmt)
        assert res.exit_code == 0, res.stdout
        assert "\x1b" not in res.stdout and "\n::error::pwn" not in res.stdout


def _two_norms_second_unmeasurable(path: Path, first: bool = True) -> Path:
    """layers.0 measurable (unless not ``first``); layers.1's weight is a graph input (it
    cannot be probed)."""
    from onnx import TensorProto, helper

    n0, i0 = fx.legacy_rms("/model/layers.0/input_layernorm", out="h")
    if not first:
        n0, i0 = [helper.make_node("Identity", ["x"], ["h"], name="id")], []
    n1, i1 = fx.legacy_rms("/model/layers.1/input_layernorm", x="h")
    model = fx._model(n0 + n1, i0)
    model.graph.initializer.extend(t for t in i1 if not t.name.endswith(".w"))
    (w,) = (t for t in i1 if t.name.endswith(".w"))
    model.graph.input.append(helper.make_tensor_value_info(w.name, TensorProto.FLOAT, [fx.DIM]))
    onnx.save(model, str(path))
    return path


def test_a_skipped_norm_fails_unless_allowed_and_nothing_measured_never_passes(
    tmp_path: Path, cli: Any
) -> None:
    path = _two_norms_second_unmeasurable(tmp_path / "two.onnx")
    res = cli("parity", "onnx", str(path))
    assert res.exit_code == 1
    assert "skipped model.layers.1.input_layernorm: " in res.stdout
    assert "FAIL: 1 norm(s) not measured (--allow-skipped accepts that)" in res.stdout
    assert "1 skipped: model.layers.1.input_layernorm (--allow-skipped" in res.stderr
    assert cli("parity", "onnx", str(path), "--exit-zero").exit_code == 1
    res = cli("parity", "onnx", str(path), "--allow-skipped", "--format", "json")
    assert res.exit_code == 0, res.stdout
    doc = json.loads(res.stdout)
    assert doc["passed"] is True and doc["allow_skipped"] is True
    assert [s["name"] for s in doc["skipped"]] == ["model.layers.1.input_layernorm"]
    # the only norm unmeasurable: 0 measured never passes, --allow-skipped or not
    alone = _two_norms_second_unmeasurable(tmp_path / "alone.onnx", first=False)
    res = cli("parity", "onnx", str(alone), "--allow-skipped")
    assert res.exit_code == 1 and "FAIL: no norm measured (1 skipped)" in res.stdout


def test_a_config_pattern_matching_no_norm_is_exit_2(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(fx.hand_model(), str(path))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "schema_version: 1\ndefaults: {eps: 1.0e-6}\nlayers:\n  '*.input_layernrom': {}\n"
    )
    res = cli("parity", "onnx", str(path), "--config", str(cfg))
    assert res.exit_code == 2
    assert "match no norm of the graph: '*.input_layernrom'" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_json_output_validates_against_its_schema(tmp_path: Path, cli: Any) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from rmsnorm_eps.reports.schema import load_schema

    path = _two_norms_second_unmeasurable(tmp_path / "two.onnx")
    res = cli("parity", "onnx", str(path), "--format", "json")
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 1 and doc["command"] == "parity onnx"
    assert len(doc["norms"]) == 1 and len(doc["skipped"]) == 1
    validator = jsonschema.Draft202012Validator(load_schema(doc["command"]))
    validator.validate(doc)
    doc["norms"][0]["surprise"] = 1  # an undocumented key fails
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(doc)


def test_a_norm_inside_an_if_branch_is_skipped_and_fails(tmp_path: Path, cli: Any) -> None:
    from onnx import TensorProto, helper, numpy_helper

    out = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, fx.DIM])
    then = helper.make_graph(
        [
            helper.make_node(
                "RMSNormalization", ["x", "norm.weight"], ["b"], name="/encoder/ln/RMS",
                epsilon=1e-5,
            )
        ],
        "then",
        [],
        [out],
    )  # fmt: skip
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "else", [], [out])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)
    inits = [
        numpy_helper.from_array(np.ones(fx.DIM, np.float32), "norm.weight"),
        numpy_helper.from_array(np.array(True), "cond"),
    ]
    path = tmp_path / "if.onnx"
    onnx.save(fx._model([node], inits, opset=23), str(path))
    res = cli("parity", "onnx", str(path))
    assert res.exit_code == 1, res.stdout
    assert "only main-graph norms are measured" in res.stdout
    assert "FAIL: no norm measured (1 skipped)" in res.stdout
