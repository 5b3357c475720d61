"""Real exports read as configs: torch's TorchScript exporter (``dynamo=False``, opsets 14 and
17), all constants in external data (``size_threshold=0``), onnxruntime's optimized copies
(one of them with all-ones weights, which onnxruntime merges into one initializer), and
Gemma's ``1 + w`` gain folded by the dynamo and the TorchScript exporters. Each faithful export
must be EQUIVALENT to the model's config.json, every norm found with its module name and its
stored eps; the answer key (the norms, their eps) is what the tiny model was built with, and
onnxruntime runs each export to show it is a working model.

The eps is also measured through onnxruntime, independently of the reader: each norm's
subgraph (cut here, from its input to its output) runs on rows x_r whose mean square q_r is
eps/4, eps and 4 eps, where eps matters. For y = g x / sqrt(q + eps), the ratio of y/x
between rows a and b of one channel is rho with rho^2 = (q_b + eps) / (q_a + eps), whatever g
is, so eps = (q_b - rho^2 q_a) / (rho^2 - 1): the median over channels and row pairs must be
the eps the reader reports to float32 precision (relative 1e-5; it misses by ~3e-7), and that
eps must reproduce onnxruntime's y (g fitted per channel) 10 times better than eps * 1.001."""

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
from onnx import TensorProto, helper  # noqa: E402

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


def _cut(model: Any, inputs: list[str], output: str) -> Any:
    """The nodes and initializers of ``model`` that ``output`` depends on, back to ``inputs``
    (float32 of the export's shape (1, 3, DIM)), as a model of its own."""
    g = model.graph
    producer = {o: i for i, n in enumerate(g.node) for o in n.output}
    inits = {t.name: t for t in g.initializer}
    keep: set[int] = set()
    used: dict[str, Any] = {}
    need, seen = [output], set(inputs)
    while need:
        name = need.pop()
        if not name or name in seen:
            continue
        seen.add(name)
        if name in inits:
            used[name] = inits[name]
        else:
            keep.add(producer[name])
            need.extend(g.node[producer[name]].input)
    ins = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, fx.DIM]) for x in inputs]
    out = helper.make_tensor_value_info(output, TensorProto.FLOAT, None)
    nodes = [g.node[i] for i in sorted(keep)]
    sub = helper.make_graph(nodes, "cut", ins, [out], list(used.values()))
    return helper.make_model(sub, opset_imports=model.opset_import, ir_version=model.ir_version)


def _rows(eps: float) -> np.ndarray:
    """Three rows of mean square eps/4, eps, 4 eps (shape (1, 3, DIM), float32)."""
    z = np.random.default_rng(0).standard_normal((3, fx.DIM))
    z /= np.sqrt(np.mean(z * z, axis=1, keepdims=True))
    scale = np.array([0.5, 1.0, 2.0])[:, None] * np.sqrt(eps)
    return (z * scale).astype(np.float32)[None]


def _measured_eps(x: np.ndarray, y: np.ndarray) -> float:
    """eps = (q_b - rho^2 q_a) / (rho^2 - 1), rho = (y_a/x_a) / (y_b/x_b) per channel."""
    x64, y64 = x[0].astype(np.float64), y[0].astype(np.float64)
    q = np.mean(x64 * x64, axis=1)
    found = []
    for a, b in ((0, 1), (0, 2), (1, 2)):
        rho2 = ((y64[a] / x64[a]) / (y64[b] / x64[b])) ** 2
        found.append((q[b] - rho2 * q[a]) / (rho2 - 1.0))
    return float(np.median(np.concatenate(found)))


def _misfit(x: np.ndarray, y: np.ndarray, eps: float) -> float:
    """max |y - g x / sqrt(q + eps)| / max |y|, g fitted per channel by least squares."""
    x64, y64 = x[0].astype(np.float64), y[0].astype(np.float64)
    k = 1.0 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + eps)
    g = np.sum(y64 * x64 * k, axis=0) / np.sum((x64 * k) ** 2, axis=0)
    return float(np.max(np.abs(y64 - g * x64 * k)) / np.max(np.abs(y64)))


@pytest.mark.slow
@pytest.mark.parametrize(
    "stem", ["ts14", "ts17", "ts17-external", "ts17-ort", "ones-ort", "gemma", "gemma-ts17"]
)
def test_the_eps_read_is_the_eps_onnxruntime_applies(exports: dict[str, Path], stem: str) -> None:
    path = exports[stem]
    model = onnx.load(str(path))  # external data loaded: the cut runs on its own
    norms = find_norms(onnx.load(str(path), load_external_data=False), path)
    assert norms
    for norm in norms:
        assert norm.eps is not None, norm.name
        cut = _cut(model, list(norm.inputs), norm.output)
        session = ort.InferenceSession(cut.SerializeToString(), providers=["CPUExecutionProvider"])
        x = _rows(norm.eps)
        skips = {name: np.zeros_like(x) for name in norm.inputs[1:]}  # a Skip op's residual
        (y,) = session.run(None, {norm.inputs[0]: x, **skips})
        eps = _measured_eps(x, y)
        assert abs(eps / norm.eps - 1.0) < 1e-5, (norm.name, norm.eps, eps)
        misfit = _misfit(x, y, norm.eps)
        assert misfit < 1e-6 and 10 * misfit < _misfit(x, y, norm.eps * 1.001), norm.name
