"""parity/onnx_runtime.py: the eps onnxruntime really runs, on graphs built here with
onnx.helper: a decomposed RMSNorm per placement (the measured eps within 5% of the stored one,
the placement recovered), a graph whose eps was dropped, a configured eps unlike the stored
one, the backward slice and its refusals, and the report's verdict."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rmsnorm_eps.config.model import NormSettings, Provenance, Resolved  # noqa: E402
from rmsnorm_eps.config.onnx_graph import find_norms  # noqa: E402
from rmsnorm_eps.errors import InputFileError  # noqa: E402
from rmsnorm_eps.parity import onnx_runtime  # noqa: E402
from rmsnorm_eps.parity.onnx_runtime import (  # noqa: E402
    DEFAULT_REL_TOL,
    NormMeasurement,
    OnnxParityReport,
    SkippedNorm,
    _array,
    _configured,
    _slice,
    measure_onnx,
)

D = 16


def _c(name: str, value: Any, dtype: Any = np.float32) -> Any:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _rms_nodes(p: str, eps: float | None, placement: str, x: str, y: str) -> list[Any]:
    nodes = [
        helper.make_node("Pow", [x, "two"], [f"{p}sq"], name=f"/{p}/Pow"),
        helper.make_node("ReduceMean", [f"{p}sq", "axes"], [f"{p}q"], name=f"/{p}/ReduceMean"),
    ]
    if eps is None:
        nodes.append(helper.make_node("Sqrt", [f"{p}q"], [f"{p}r"], name=f"/{p}/Sqrt"))
    elif placement == "inside":
        nodes += [
            helper.make_node("Add", [f"{p}q", f"{p}eps"], [f"{p}qe"], name=f"/{p}/Add"),
            helper.make_node("Sqrt", [f"{p}qe"], [f"{p}r"], name=f"/{p}/Sqrt"),
        ]
    else:
        op = "Add" if placement == "outside" else "Max"
        nodes += [
            helper.make_node("Sqrt", [f"{p}q"], [f"{p}s"], name=f"/{p}/Sqrt"),
            helper.make_node(op, [f"{p}s", f"{p}eps"], [f"{p}r"], name=f"/{p}/{op}"),
        ]
    nodes += [
        helper.make_node("Div", [x, f"{p}r"], [f"{p}n"], name=f"/{p}/Div"),
        helper.make_node("Mul", [f"{p}n", f"{p}.weight"], [y], name=f"/{p}/Mul"),
    ]
    return nodes


def _save(tmp_path: Path, norms: list[tuple[str, float | None, str]], name: str = "m") -> Path:
    """A chain of decomposed RMSNorms x -> ... -> y, each (prefix, eps, placement)."""
    rng = np.random.default_rng(0)
    nodes: list[Any] = []
    inits = [_c("two", 2.0), numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    x = "x"
    for i, (p, eps, placement) in enumerate(norms):
        y = "y" if i == len(norms) - 1 else f"{p}out"
        nodes += _rms_nodes(p, eps, placement, x, y)
        inits.append(_c(f"{p}.weight", 1.0 + 0.1 * rng.standard_normal(D)))
        if eps is not None:
            inits.append(_c(f"{p}eps", eps))
        x = y
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", D])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("placement", ["inside", "outside", "clamp"])
def test_the_measured_eps_and_placement_are_the_graphs(tmp_path: Path, placement: str) -> None:
    eps = 1e-4
    report = measure_onnx(_save(tmp_path, [("a", eps, placement)]))
    (m,) = report.norms
    stored = float(np.float32(eps))
    assert m.name == "a" and m.stored == stored and m.probe_eps == stored
    assert m.effective is not None and abs(m.effective - stored) <= DEFAULT_REL_TOL * stored
    assert m.effective_low is not None and m.effective_high is not None
    assert m.effective_low <= m.effective <= m.effective_high
    assert (m.placement, m.placement_stored, m.dtype) == (placement, placement, "float32")
    assert m.findings == () and m.agrees and report.passed and report.findings == 0
    assert report.optimization == "onnxruntime CPU, ORT_ENABLE_ALL" and report.skipped == ()


def test_a_faithful_clamp_of_1e_3_agrees(tmp_path: Path) -> None:
    (m,) = measure_onnx(_save(tmp_path, [("a", 1e-3, "clamp")])).norms
    assert m.placement == "clamp" and m.agrees
    assert m.effective is not None and abs(m.effective - 1e-3) <= DEFAULT_REL_TOL * 1e-3


def test_a_faithful_eps_of_1e_3_outside_the_sqrt_agrees(tmp_path: Path) -> None:
    (m,) = measure_onnx(_save(tmp_path, [("a", 1e-3, "outside")])).norms
    assert m.placement == "outside" and m.agrees
    assert m.effective is not None and abs(m.effective - 1e-3) <= DEFAULT_REL_TOL * 1e-3


def test_a_dropped_eps_and_a_configured_eps_unlike_the_stored_one(tmp_path: Path) -> None:
    path = _save(tmp_path, [("a", None, "inside"), ("b", 1e-4, "inside")])
    eps = Resolved(1e-5, Provenance("file", "cfg.yaml", key="defaults.eps"))
    config = SimpleNamespace(
        path="cfg.yaml", kind="json", settings_for=lambda name: NormSettings(eps=eps)
    )
    report = measure_onnx(path, config=config)
    a, b = report.norms
    assert a.stored is None and a.probe_eps == 1e-5  # probes designed for the configured eps
    assert a.findings[0].startswith("the graph stores no eps (eps is 0")
    assert b.configured == 1e-5 and b.configured_from == "cfg.yaml: defaults.eps"
    assert b.effective is not None
    (finding,) = b.findings
    rel = abs(b.effective - 1e-5) / 1e-5
    assert finding.startswith(f"effective eps {b.effective:.6g} differs from the configured 1e-05")
    assert f"by {rel:.1%} (> 5%)" in finding
    assert not report.passed and report.findings == 2 and report.config == "cfg.yaml"


def test_configured_eps_lookup() -> None:
    assert _configured(None, "a") == (None, None)
    none = SimpleNamespace(path="c.yaml", settings_for=lambda name: None)
    assert _configured(none, "a") == (None, "c.yaml: no eps for a")
    blank = SimpleNamespace(path="c.yaml", settings_for=lambda name: NormSettings())
    assert _configured(blank, "a") == (None, "c.yaml: no eps for a")


def test_the_slice_stops_at_the_norm_input(tmp_path: Path) -> None:
    path = _save(tmp_path, [("a", 1e-4, "inside"), ("b", 1e-4, "inside")])
    model = onnx.load(str(path))
    first, second = find_norms(model, path)
    nodes, inits = _slice(model, second)
    assert [n.name for n in nodes] == [
        "/b/Pow",
        "/b/ReduceMean",
        "/b/Add",
        "/b/Sqrt",
        "/b/Div",
        "/b/Mul",
    ]
    assert sorted(t.name for t in inits) == ["axes", "b.weight", "beps", "two"]
    # a norm cut at the wrong input (b's q): the slice runs back to the graph input x
    with pytest.raises(ValueError, match="depends on the graph input 'x'"):
        _slice(model, SimpleNamespace(inputs=("bq",), output="y"))
    assert first.output == "aout" and second.inputs == ("aout",)


def test_the_slice_cap_skips_the_norm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_runtime, "MAX_SLICE_NODES", 5)  # the pattern has 6 nodes
    report = measure_onnx(_save(tmp_path, [("a", 1e-4, "inside")]))
    assert report.norms == ()
    assert report.skipped == (SkippedNorm("a", "more than 5 nodes between input and output"),)
    assert not report.passed  # nothing measured is no pass


def test_external_weights_are_not_read_and_unknown_names_are_none(tmp_path: Path) -> None:
    model = onnx.load(str(_save(tmp_path, [("a", 1e-4, "inside")])))
    w = next(t for t in model.graph.initializer if t.name == "a.weight")
    assert _array(model, "a.weight") == pytest.approx(numpy_helper.to_array(w).astype(np.float64))
    assert _array(model, "absent") is None and _array(model, None) is None
    w.data_location = TensorProto.EXTERNAL
    with pytest.raises(ValueError, match=r"'a\.weight' is external data"):
        _array(model, "a.weight")


def test_an_unloadable_model_for_the_optimized_copy_names_the_file(tmp_path: Path) -> None:
    path = _save(tmp_path, [("a", 1e-4, "inside")])
    model = onnx.load(str(path))
    model.graph.node[0].op_type = "NoSuchOp"
    bad = tmp_path / "bad.onnx"
    onnx.save(model, str(bad))
    with pytest.raises(InputFileError, match="onnxruntime cannot load the model") as info:
        measure_onnx(bad, optimized_out=tmp_path / "opt.onnx")
    assert info.value.path == str(bad)


def test_the_report_verdict() -> None:
    def m(findings: tuple[str, ...]) -> NormMeasurement:
        return NormMeasurement(
            "n", "op", 1e-5, "w", None, None, 1e-5, 1e-5, 1e-5, 1e-5,
            "inside", "inside", "float32", 10, "", findings,
        )  # fmt: skip

    def report(*norms: NormMeasurement) -> OnnxParityReport:
        return OnnxParityReport("m.onnx", None, None, 0.05, "o", norms, ())

    assert report(m(()), m(())).passed and report(m(()), m(())).findings == 0
    assert not report(m(()), m(("x",))).passed and report(m(("x",)), m(("y",))).findings == 2
    assert not report().passed


def _weight_as_input(tmp_path: Path) -> Path:
    """Norm a measured, then norm b whose weight is a graph input (not measurable)."""
    model = onnx.load(str(_save(tmp_path, [("a", 1e-4, "inside"), ("b", 1e-4, "inside")])))
    graph = model.graph
    w = next(t for t in graph.initializer if t.name == "b.weight")
    graph.initializer.remove(w)
    graph.input.append(helper.make_tensor_value_info("b.weight", TensorProto.FLOAT, [D]))
    path = tmp_path / "winput.onnx"
    onnx.save(model, str(path))
    return path


def test_a_skipped_norm_fails_the_report_unless_allowed(tmp_path: Path) -> None:
    path = _weight_as_input(tmp_path)
    report = measure_onnx(path)
    assert [n.name for n in report.norms] == ["a"] and report.norms[0].agrees
    (skip,) = report.skipped
    assert skip.name == "b" and ("graph input 'b.weight'" in skip.why or "no scale" in skip.why)
    assert report.findings == 0 and not report.passed  # one measured, one skipped: no PASS
    allowed = measure_onnx(path, allow_skipped=True)
    assert allowed.passed and allowed.allow_skipped and allowed.skipped == report.skipped


def test_a_config_pattern_that_matches_no_norm_is_an_error(tmp_path: Path) -> None:
    from rmsnorm_eps.config import load_config
    from rmsnorm_eps.errors import ConfigError

    path = _save(tmp_path, [("a", 1e-4, "inside")])
    cfg = tmp_path / "c.yaml"
    cfg.write_text("schema_version: 1\ndefaults: {eps: 1.0e-4}\nlayers:\n  a: {}\n  'x*': {}\n")
    with pytest.raises(ConfigError, match=r"pattern\(s\) match no norm of the graph: 'x\*'"):
        measure_onnx(path, config=load_config(cfg))
    cfg.write_text("schema_version: 1\ndefaults: {eps: 1.0e-4}\nlayers:\n  a: {}\n")
    assert measure_onnx(path, config=load_config(cfg)).passed
