"""ONNX models for the tests, made here: tiny torch models exported by ``torch.onnx.export``
(dynamo), hand-made graphs (``onnx.helper``), a float16 copy, an onnxruntime-optimized copy.

The float16 copy emulates a whole-model float16 conversion (onnxconverter-common is not
installed here): every float32 initializer and Constant becomes float16 with
``onnx.numpy_helper`` (values rounded to the nearest float16), and the graph's inputs and
outputs are declared float16.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

#: The eps of the tiny model's config.json.
EPS = 1e-5
NAMES = (
    "model.layers.0.input_layernorm",
    "model.layers.0.post_attention_layernorm",
    "model.layers.1.input_layernorm",
    "model.layers.1.post_attention_layernorm",
    "model.norm",
)
DIM = 8


def tiny_model(eps: float) -> Any:
    """Two decoder-like layers of transformers' LlamaRMSNorm and a Linear, named as in
    LlamaForCausalLM (``model.layers.N.input_layernorm``), random weights."""
    import torch
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_layernorm = LlamaRMSNorm(DIM, eps)
            self.mlp = torch.nn.Linear(DIM, DIM)
            self.post_attention_layernorm = LlamaRMSNorm(DIM, eps)

        def forward(self, x: Any) -> Any:
            return self.post_attention_layernorm(x + self.mlp(self.input_layernorm(x)))

    class Inner(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList([Layer(), Layer()])
            self.norm = LlamaRMSNorm(DIM, eps)

        def forward(self, x: Any) -> Any:
            for layer in self.layers:
                x = layer(x)
            return self.norm(x)

    class Top(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = Inner()

        def forward(self, x: Any) -> Any:
            return self.model(x)

    torch.manual_seed(0)
    model = Top().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))  # distinct weights: none shared
    return model


def export_tiny(path: Path, eps: float, opset: int) -> Path:
    import contextlib
    import io

    import torch

    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(
            tiny_model(eps),
            (torch.randn(1, 3, DIM),),
            str(path),
            dynamo=True,
            opset_version=opset,
        )
    return path


def write_config(path: Path, eps: float = EPS) -> Path:
    path.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "rms_norm_eps": eps,
                "hidden_size": DIM,
                "num_hidden_layers": 2,
            }
        )
    )
    return path


def to_float16(src: Path, dst: Path) -> Path:
    """A float16 copy of ``src`` (see the module docstring: an emulation)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(src))

    def convert(t: Any) -> Any:
        if t.data_type != onnx.TensorProto.FLOAT:
            return t
        arr = numpy_helper.to_array(t).astype(np.float16)
        return numpy_helper.from_array(arr, t.name)

    graph = model.graph
    for i, t in enumerate(list(graph.initializer)):
        graph.initializer[i].CopyFrom(convert(t))
    for node in graph.node:
        for a in node.attribute:
            if a.name == "value" and a.HasField("t"):
                a.t.CopyFrom(convert(a.t))
    for vi in (*graph.input, *graph.output):
        if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    del graph.value_info[:]
    onnx.save(model, str(dst))
    return dst


def ort_optimized(src: Path, dst: Path) -> Path:
    """onnxruntime's optimized copy (basic+extended fusions, CPU) of ``src``."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return dst


# ---------------------------------------------------------------- hand-made graphs


def _f(name: str, value: float, dtype: Any = np.float32) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def _model(nodes: list[Any], inits: list[Any], *, opset: int = 18, extra: Any = None) -> Any:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, DIM])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, DIM])
    graph = helper.make_graph(nodes, "hand", [x], [y], inits)
    imports = [helper.make_opsetid("", opset)]
    if extra is not None:
        imports.append(helper.make_opsetid(extra, 1))
    return helper.make_model(graph, opset_imports=imports)


def legacy_rms(
    prefix: str = "/model/layers.0/input_layernorm",
    eps: float | None = 1e-6,
    x: str = "x",
    out: str = "y",
    *,
    weight: float = 1.0,
    gemma: bool = False,
    placement: str = "inside",
    eps_dtype: Any = np.float32,
    cast_eps: bool = False,
) -> tuple[list[Any], list[Any]]:
    """The legacy exporter's RMSNorm: Pow -> ReduceMean -> Add(Constant eps) -> Sqrt -> Div ->
    Mul(w); ``placement`` outside (Add after Sqrt) or clamp (Max after Sqrt)."""
    from onnx import TensorProto, helper, numpy_helper

    p = prefix
    nodes = [
        helper.make_node("Constant", [], [f"{p}/two"], name=f"{p}/Constant", value=_f("t", 2.0)),
        helper.make_node("Pow", [x, f"{p}/two"], [f"{p}/pow"], name=f"{p}/Pow"),
        helper.make_node(
            "ReduceMean", [f"{p}/pow", f"{p}/axes"], [f"{p}/q"], name=f"{p}/ReduceMean"
        ),
    ]
    inits = [helper.make_tensor(f"{p}/axes", TensorProto.INT64, [1], [-1])]

    w = numpy_helper.from_array(
        np.full(DIM, 0.1 if gemma else weight, np.float32), f"{p.strip('/').replace('/', '.')}.w"
    )
    inits.append(w)
    eps_name = f"{p}/eps"
    if eps is not None:
        raw = f"{p}/eps_raw" if cast_eps else eps_name
        nodes.append(
            helper.make_node(
                "Constant", [], [raw], name=f"{p}/Constant_1", value=_f("e", eps, eps_dtype)
            )
        )
        if cast_eps:
            nodes.append(
                helper.make_node("Cast", [raw], [eps_name], name=f"{p}/Cast", to=TensorProto.FLOAT)
            )
    if eps is None:
        nodes.append(helper.make_node("Sqrt", [f"{p}/q"], [f"{p}/r"], name=f"{p}/Sqrt"))
    elif placement == "inside":
        nodes.append(helper.make_node("Add", [f"{p}/q", eps_name], [f"{p}/qe"], name=f"{p}/Add"))
        nodes.append(helper.make_node("Sqrt", [f"{p}/qe"], [f"{p}/r"], name=f"{p}/Sqrt"))
    else:
        op = "Add" if placement == "outside" else "Max"
        nodes.append(helper.make_node("Sqrt", [f"{p}/q"], [f"{p}/s"], name=f"{p}/Sqrt"))
        nodes.append(helper.make_node(op, [f"{p}/s", eps_name], [f"{p}/r"], name=f"{p}/{op}"))
    nodes.append(helper.make_node("Div", [x, f"{p}/r"], [f"{p}/n"], name=f"{p}/Div"))
    scale = w.name
    if gemma:
        nodes.append(
            helper.make_node(
                "Constant", [], [f"{p}/one"], name=f"{p}/Constant_2", value=_f("o", 1.0)
            )
        )
        nodes.append(helper.make_node("Add", [w.name, f"{p}/one"], [f"{p}/g"], name=f"{p}/Add_1"))
        scale = f"{p}/g"
    nodes.append(helper.make_node("Mul", [f"{p}/n", scale], [out], name=f"{p}/Mul"))
    return nodes, inits


def hand_model(**kwargs: Any) -> Any:
    nodes, inits = legacy_rms(**kwargs)
    return _model(nodes, inits)


def fused_model(op: str, domain: str = "", eps: float | None = None, opset: int = 23) -> Any:
    """One fused norm op (epsilon attribute only when ``eps`` is given)."""
    from onnx import helper, numpy_helper

    attrs = {} if eps is None else {"epsilon": eps}
    w = numpy_helper.from_array(np.ones(DIM, np.float32), "norm.weight")
    b = numpy_helper.from_array(np.zeros(DIM, np.float32), "norm.bias")
    inits = [w]
    if op in ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization"):
        skip = numpy_helper.from_array(np.zeros((1, DIM), np.float32), "skip")
        inputs = ["x", "skip", "norm.weight"] + (["norm.bias"] if "Simplified" not in op else [])
        inits += [skip, b]
    elif op == "LayerNormalization":
        inputs = ["x", "norm.weight", "norm.bias"]
        inits.append(b)
    else:
        inputs = ["x", "norm.weight"]
    node = helper.make_node(op, inputs, ["y"], name="/encoder/ln/" + op, domain=domain, **attrs)
    return _model([node], inits, opset=opset, extra=domain or None)


_EXPORTS: dict[tuple[float, int, str], Path] = {}


def exports(base: Path) -> dict[str, Path]:
    """The exported models of the tests, made once per session under ``base`` (shared by the
    test modules that import this): opset 18 and 23 at eps 1e-5, opset 18 at eps 1e-8 (the
    exporter drops it), the float16 copy and the onnxruntime-optimized copy of opset 18, an
    edited eps (1e-6 in one norm), and the model's config.json."""
    key = (EPS, 0, str(base))
    if key not in _EXPORTS:
        base.mkdir(parents=True, exist_ok=True)
        export_tiny(base / "tiny-opset18.onnx", EPS, 18)
        export_tiny(base / "tiny-opset23.onnx", EPS, 23)
        export_tiny(base / "tiny-eps1e-8.onnx", 1e-8, 18)
        to_float16(base / "tiny-opset18.onnx", base / "tiny-fp16.onnx")
        ort_optimized(base / "tiny-opset18.onnx", base / "tiny-ort.onnx")
        edit_eps(base / "tiny-opset23.onnx", base / "tiny-edited.onnx", NAMES[3], 1e-6)
        write_config(base / "config.json")
        write_config(base / "config-1e-8.json", 1e-8)
        _EXPORTS[key] = base
    base = _EXPORTS[key]
    return {p.stem: p for p in base.iterdir()}


def edit_eps(src: Path, dst: Path, module: str, eps: float) -> Path:
    """A copy of an opset-23 export whose RMSNormalization for ``module`` has eps ``eps``."""
    import onnx

    model = onnx.load(str(src))
    for node in model.graph.node:
        scopes = [p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"]
        if node.op_type == "RMSNormalization" and scopes and f"'{module}'" in scopes[0]:
            for a in node.attribute:
                if a.name == "epsilon":
                    a.f = eps
    onnx.save(model, str(dst))
    return dst
