"""Real exports read as configs: torch's TorchScript exporter (``dynamo=False``, opsets 14 and
17), all constants in external data (``size_threshold=0``), onnxruntime's optimized copies
(one of them with all-ones weights, which onnxruntime merges into one initializer), and
Gemma's ``1 + w`` gain folded by the dynamo exporter. Each faithful export must be EQUIVALENT
to the model's config.json, every norm found with its module name and its stored eps; the
answer key (the norms, their eps) is what the tiny model was built with, and onnxruntime runs
each export to show it is a working model."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

import onnx_fixture as fx  # noqa: E402

from rmsnorm_eps.config.onnx_graph import find_norms  # noqa: E402

F32_EPS = float(np.float32(fx.EPS))


def _export(model: Any, path: Path, *, dynamo: bool, opset: int) -> Path:
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(
            model, (torch.randn(1, 3, fx.DIM),), str(path), dynamo=dynamo, opset_version=opset
        )
    return path


def _all_ones(eps: float) -> Any:
    model = fx.tiny_model(eps)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
    return model


def _gemma() -> Any:
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    class Top(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = GemmaRMSNorm(fx.DIM, eps=1e-6)
            with torch.no_grad():
                self.norm.weight.copy_(0.1 * torch.randn(fx.DIM))

        def forward(self, x: Any) -> Any:
            return self.norm(x)

    torch.manual_seed(0)
    return Top().eval()


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from onnx.external_data_helper import convert_model_to_external_data

    base = tmp_path_factory.mktemp("exports")
    out = {
        f"ts{op}": _export(fx.tiny_model(fx.EPS), base / f"ts{op}.onnx", dynamo=False, opset=op)
        for op in (14, 17)
    }
    model = onnx.load(str(out["ts17"]))
    convert_model_to_external_data(
        model, location="ts17.data", size_threshold=0, convert_attribute=True
    )
    onnx.save(model, str(base / "ts17-external.onnx"))
    out["ts17-external"] = base / "ts17-external.onnx"
    out["ts17-ort"] = fx.ort_optimized(out["ts17"], base / "ts17-ort.onnx")
    ones = _export(_all_ones(fx.EPS), base / "ones.onnx", dynamo=True, opset=18)
    out["ones-ort"] = fx.ort_optimized(ones, base / "ones-ort.onnx")
    out["gemma"] = _export(_gemma(), base / "gemma.onnx", dynamo=True, opset=18)
    out["gemma-ts17"] = _export(_gemma(), base / "gemma-ts17.onnx", dynamo=False, opset=17)
    out["config"] = fx.write_config(base / "config.json")
    gemma_config = {
        "model_type": "gemma",
        "architectures": ["GemmaForCausalLM"],
        "rms_norm_eps": 1e-6,
        "hidden_size": fx.DIM,
        "num_hidden_layers": 1,
    }
    (base / "gemma.json").write_text(json.dumps(gemma_config))
    out["gemma-config"] = base / "gemma.json"
    return out


def _norms(path: Path) -> dict[str, Any]:
    return {n.name: n for n in find_norms(onnx.load(str(path), load_external_data=False), path)}


def _runs(path: Path) -> None:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    (out,) = session.run(None, {inp.name: np.ones((1, 3, fx.DIM), np.float32)})
    assert np.all(np.isfinite(out))


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["ts14", "ts17", "ts17-external", "ts17-ort"])
def test_torchscript_exports_are_read_faithfully(
    exports: dict[str, Path], cli: Any, stem: str
) -> None:
    path = exports[stem]
    _runs(path)
    norms = _norms(path)
    assert sorted(norms) == sorted(fx.NAMES)
    for norm in norms.values():
        assert norm.eps == F32_EPS, (norm.name, norm.eps_where)
        # the norm's input comes from a Cast or a residual Add: still rms with a weight
        assert (norm.norm, norm.gain, norm.dim) == ("rms", "w", fx.DIM), norm.name
        assert norm.scale == f"{norm.name}.weight"  # never an activation tensor
    res = cli("config", "diff", str(exports["config"]), str(path), "--format", "json")
    assert res.exit_code == 0, res.stdout
    assert json.loads(res.stdout)["equivalent"] is True


@pytest.mark.slow
def test_shared_all_ones_weight_names_no_norm_after_another(
    exports: dict[str, Path], cli: Any
) -> None:
    path = exports["ones-ort"]
    _runs(path)
    model = onnx.load(str(path))
    weights = {i.name for i in model.graph.initializer if i.name.endswith("norm.weight")}
    assert len(weights) == 1  # onnxruntime kept one of the five equal initializers
    norms = _norms(path)
    assert len(norms) == len(fx.NAMES)
    assert all(n.eps == F32_EPS for n in norms.values())
    assert not any(name.startswith("model.") or "#" in name for name in norms)
    res = cli("config", "diff", str(exports["config"]), str(path))
    assert res.exit_code == 0, res.stdout


@pytest.mark.slow
def test_gemma_gain_folded_by_the_exporter_is_one_plus_w(
    exports: dict[str, Path], cli: Any
) -> None:
    path = exports["gemma"]
    _runs(path)
    (norm,) = _norms(path).values()
    assert norm.gain == "1+w" and "GemmaRMSNorm multiplies by 1 + w" in norm.gain_where
    assert norm.eps == float(np.float32(1e-6))
    res = cli("config", "diff", str(exports["gemma-config"]), str(path))
    assert res.exit_code == 0, res.stdout


@pytest.mark.slow
def test_gemma_gain_folded_by_torchscript_is_unknown_never_w(
    exports: dict[str, Path], cli: Any
) -> None:
    path = exports["gemma-ts17"]
    _runs(path)
    (norm,) = _norms(path).values()
    assert norm.scale is not None and norm.scale.startswith("onnx::")  # 1 + w, folded
    assert norm.gain == "unknown (folded)", norm.gain
    assert norm.eps == float(np.float32(1e-6))
    res = cli("config", "diff", str(exports["gemma-config"]), str(path))
    assert res.exit_code == 1, res.stdout  # not proven equal, and never "B w"
    assert "DIFF gain [norm]: cannot compare: A 1+w" in res.stdout
    assert "cannot be told from the graph" in res.stdout and " vs B w " not in res.stdout
