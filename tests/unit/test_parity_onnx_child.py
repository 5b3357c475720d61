"""parity/onnx_child.py: onnxruntime in a bounded child process. A request runs and returns
the output exactly; onnxruntime's refusal comes back as one line; a child that cannot start
under its address-space limit, or that runs past its wall limit, is killed with one line; the
next request starts a fresh child; nothing the child writes reaches the parent's stderr."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from rmsnorm_eps.parity.onnx_child import OrtChild, OrtChildError  # noqa: E402


def _model(op: str = "Relu", name: str = "n") -> bytes:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name=name)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    out: bytes = model.SerializeToString()
    return out


def test_a_run_returns_the_output_exactly() -> None:
    x = np.array([[-1.0, 0.5, -0.0, 3.0], [2.0, -2.0, 1e-30, -1e30]], np.float32)
    with OrtChild() as child:
        y = child.run(_model(), {"x": x}, "y")
        y16 = child.run(_model("Neg"), {"x": x}, "y")  # the same child, a second request
    assert y.dtype == np.float32 and y.shape == (2, 4)
    assert np.array_equal(y, np.maximum(x, 0))
    assert np.array_equal(y16, -x)


def test_a_refusal_is_one_line_and_the_child_serves_on(capfd: pytest.CaptureFixture[str]) -> None:
    with OrtChild() as child:
        with pytest.raises(OrtChildError) as info:
            child.run(_model("NoSuchOp", name="::warning title=x::"), {"x": np.ones((1, 4))}, "y")
        assert "NoSuchOp" in str(info.value) and "\n" not in str(info.value)
        y = child.run(_model(), {"x": np.ones((1, 4), np.float32)}, "y")
    assert np.array_equal(y, np.ones((1, 4), np.float32))
    assert "::warning" not in capfd.readouterr().err


def test_a_child_that_cannot_start_under_its_limit_is_one_line() -> None:
    with OrtChild(memory_limit=64 << 20) as child, pytest.raises(OrtChildError) as info:
        child.run(_model(), {"x": np.ones((1, 4), np.float32)}, "y")
    assert str(info.value).startswith("the child process ended with code")
    assert "\n" not in str(info.value)


def test_the_wall_limit_kills_the_child_and_the_next_request_starts_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    child = OrtChild(wall_limit=0.5)
    calls: list[Any] = []
    real = child._read_header

    def slow_header(limit: float, what: str) -> Any:
        calls.append(limit)
        if len(calls) == 1:  # the first answer is given no time at all
            return real(0.0, what)
        return real(limit, what)

    monkeypatch.setattr(child, "_read_header", slow_header)
    with child:
        with pytest.raises(OrtChildError, match=r"ran past the 0\.5 s wall limit"):
            child.run(_model(), {"x": np.ones((1, 4), np.float32)}, "y")
        assert child._proc is None  # killed
        y = child.run(_model(), {"x": np.ones((1, 4), np.float32)}, "y")
    assert np.array_equal(y, np.ones((1, 4), np.float32))
