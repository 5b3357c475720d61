"""``parity onnx`` on hostile graphs stays bounded and quiet: a norm whose subgraph holds a
Loop of 2^62 iterations or a ConstantOfShape of 1 GiB ends with one line within seconds (not
run at all, and, with that refusal off, stopped by the child's wall or address-space limit);
onnxruntime's own log never reaches stderr (a node named like a workflow command stays
inert); ``--optimized-out`` refuses a model with external data (no file beside it is opened),
the model itself and a missing folder (named); an onnxruntime-optimized float16 copy, whose
fused norms keep the dimension only in the value shapes, is measured."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import onnx_fixture as fx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rmsnorm_eps.parity import onnx_child, onnx_runtime  # noqa: E402
from rmsnorm_eps.parity.onnx_runtime import measure_onnx  # noqa: E402

NAME = "encoder.ln"


def _fused_with_weight(path: Path, nodes: list[Any], inits: list[Any], weight: str) -> Path:
    """An RMSNormalization (opset 23) whose scale is ``weight``, made by ``nodes``."""
    model = fx.fused_model("RMSNormalization", eps=1e-5)
    norm = model.graph.node[0]
    norm.input[1] = weight
    for node in reversed(nodes):
        model.graph.node.insert(0, node)
    model.graph.initializer.extend(inits)
    onnx.save(model, str(path))
    return path


def _loop_bomb(path: Path) -> Path:
    """The weight passes through a Loop of 2^62 iterations."""
    v = [helper.make_tensor_value_info(n, t, s) for n, t, s in (
        ("i", TensorProto.INT64, []), ("c", TensorProto.BOOL, []),
        ("v", TensorProto.FLOAT, [fx.DIM]),
    )]  # fmt: skip
    outs = [
        helper.make_tensor_value_info("c2", TensorProto.BOOL, []),
        helper.make_tensor_value_info("v2", TensorProto.FLOAT, [fx.DIM]),
    ]
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c2"]),
            helper.make_node("Identity", ["v"], ["v2"]),
        ],
        "body",
        v,
        outs,
    )
    loop = helper.make_node("Loop", ["trip", "cond", "norm.weight"], ["wl"], body=body)
    inits = [
        numpy_helper.from_array(np.array(2**62, np.int64), "trip"),
        numpy_helper.from_array(np.array(True), "cond"),
    ]
    return _fused_with_weight(path, [loop], inits, "wl")


def _constant_of_shape_bomb(path: Path) -> Path:
    """The weight is sliced out of a ConstantOfShape of 2^28 float32 (1 GiB)."""
    nodes = [
        helper.make_node(
            "ConstantOfShape", ["big_shape"], ["big"],
            value=numpy_helper.from_array(np.array([1.0], np.float32), "one"),
        ),
        helper.make_node("Slice", ["big", "starts", "ends"], ["wl"]),
    ]  # fmt: skip
    inits = [
        numpy_helper.from_array(np.array([1 << 28], np.int64), "big_shape"),
        numpy_helper.from_array(np.array([0], np.int64), "starts"),
        numpy_helper.from_array(np.array([fx.DIM], np.int64), "ends"),
    ]
    return _fused_with_weight(path, nodes, inits, "wl")


def test_a_loop_or_constant_of_shape_in_a_norm_is_not_run(tmp_path: Path, cli: Any) -> None:
    for make, op in ((_loop_bomb, "Loop"), (_constant_of_shape_bomb, "ConstantOfShape")):
        path = make(tmp_path / f"{op}.onnx")
        started = time.monotonic()
        res = cli("parity", "onnx", str(path))
        assert time.monotonic() - started < 60
        assert res.exit_code == 1
        assert f"skipped {NAME}: the norm's subgraph holds a {op} node (not run" in res.stdout


@pytest.mark.parametrize("bomb", ["loop", "alloc"])
def test_the_child_limits_stop_a_bomb_when_the_refusal_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bomb: str
) -> None:
    monkeypatch.setattr(onnx_runtime, "_check_runnable", lambda node: None)
    monkeypatch.setattr(onnx_child, "WALL_LIMIT_S", 3.0)
    make = _loop_bomb if bomb == "loop" else _constant_of_shape_bomb
    started = time.monotonic()
    report = measure_onnx(make(tmp_path / "bomb.onnx"))
    assert time.monotonic() - started < 60
    (skip,) = report.skipped
    assert report.norms == () and not report.passed and skip.name == NAME
    assert skip.why.startswith("onnxruntime: ")
    if bomb == "loop":
        assert "ran past the 3 s wall limit" in skip.why
    else:
        assert "ConstantOfShape" in skip.why
    assert "\n" not in skip.why and len(skip.why) < 300


def _failing_at_run(path: Path, name: str) -> Path:
    """The weight is a Reshape of 8 values to 3: onnxruntime fails naming the node."""
    shape = numpy_helper.from_array(np.array([3], np.int64), "bad_shape")
    node = helper.make_node("Reshape", ["norm.weight", "bad_shape"], ["wl"], name=name)
    return _fused_with_weight(path, [node], [shape], "wl")


def test_onnxruntime_logs_never_reach_stderr_raw(
    tmp_path: Path, cli: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    hostile = "::warning title=x::pwn\x1b[31m"
    path = _failing_at_run(tmp_path / "m.onnx", hostile)
    res = cli("parity", "onnx", str(path))
    seen = capfd.readouterr()
    assert res.exit_code == 1 and f"skipped {NAME}: onnxruntime: " in res.stdout
    for text in (res.stdout, res.stderr, seen.out, seen.err):
        assert "::warning title" not in text and "\x1b" not in text


def test_optimized_out_refusals(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(fx.hand_model(), str(path))
    missing = tmp_path / "no-such-folder" / "opt.onnx"
    res = cli("parity", "onnx", str(path), "--optimized-out", str(missing))
    assert res.exit_code == 2
    assert f"its folder {missing.parent} does not exist" in res.stderr
    assert "SystemError" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    before = path.read_bytes()
    res = cli("parity", "onnx", str(path), "--optimized-out", str(path))
    assert res.exit_code == 2 and path.read_bytes() == before
    # every tensor in external data: refused before onnxruntime could open the data file
    ext = tmp_path / "ext" / "m.onnx"
    ext.parent.mkdir()
    onnx.save(fx.hand_model(), str(ext), save_as_external_data=True, size_threshold=0,
              location="m.data")  # fmt: skip
    data = ext.parent / "m.data"
    data.write_bytes(b"")  # emptied: a run that opened it would fail differently
    for out in (tmp_path / "opt.onnx", data):
        res = cli("parity", "onnx", str(ext), "--optimized-out", str(out))
        assert res.exit_code == 2, res.stdout
        assert "external data files" in res.stderr and "never opened" in res.stderr
        assert data.read_bytes() == b"" and not (tmp_path / "opt.onnx").exists()


def test_optimized_out_is_written_whole(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(fx.hand_model(), str(path))
    out = tmp_path / "opt.onnx"
    res = cli("parity", "onnx", str(path), "--optimized-out", str(out), "--format", "json")
    assert res.exit_code == 0, res.stdout
    assert json.loads(res.stdout)["optimized_out"] == str(out)
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["SimplifiedLayerNormalization"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "opt.onnx"]  # no temp left


def test_a_float16_norm_whose_weight_is_a_cast_is_measured(tmp_path: Path) -> None:
    """As in an optimized float16 copy: the scale is a Cast of a float32 initializer, so the
    dimension is only in the value shapes and the gain is read from the subgraph's outputs."""
    model = fx.fused_model("SimplifiedLayerNormalization", eps=1e-5, opset=18)
    w = np.linspace(0.5, 2.0, fx.DIM).astype(np.float32)
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "norm.weight"))
    model.graph.node[0].input[1] = "w16"
    cast = helper.make_node("Cast", ["norm.weight"], ["w16"], to=TensorProto.FLOAT16)
    model.graph.node.insert(0, cast)
    for vi in (*model.graph.input, *model.graph.output):
        vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    path = tmp_path / "fp16.onnx"
    onnx.save(model, str(path))
    report = measure_onnx(path)
    assert report.skipped == ()
    (n,) = report.norms
    assert n.dtype == "float16" and n.agrees and report.passed
    assert n.effective is not None and abs(n.effective - 1e-5) <= 0.05 * 1e-5


def test_the_parent_never_imports_onnxruntime(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "m.onnx"
    onnx.save(fx.hand_model(), str(path))
    code = (
        "import sys; from pathlib import Path; "
        "from rmsnorm_eps.parity.onnx_runtime import measure_onnx; "
        f"r = measure_onnx(Path({str(path)!r})); "
        "print(r.passed, 'onnxruntime' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["True", "False"]
