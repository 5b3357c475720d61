"""rmsnorm_eps.check and rmsnorm_eps.testing.assert_eps_safe: arrays, tensors and dicts in
memory give the report `ratio` gives for the same data in a file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import rmsnorm_eps
from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.reports import render
from rmsnorm_eps.testing import assert_eps_safe

MIN_RATIO = 49.2512562814


def _independent_q(x: np.ndarray) -> np.ndarray:
    """q = mean(x^2) over the last axis, one row at a time in Python floats (math.fsum)."""
    rows = x.reshape(-1, x.shape[-1]).astype(np.float64)
    return np.array([math.fsum(v * v for v in row) / row.size for row in rows])


def test_numpy_q_gives_the_file_report(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    layers = {
        "a": rng.lognormal(-8, 3, size=(4, 16)),
        "b": np.array([1e-7, 5e-4, 0.3], dtype=np.float32),
    }
    np.savez(tmp_path / "q.npz", **layers)
    in_memory = rmsnorm_eps.check(layers, eps=1e-5).report
    from_file = analyze_dump(tmp_path / "q.npz", 1e-5)
    assert in_memory.source == "<memory>"
    assert [ly.name for ly in in_memory.layers] == ["a", "b"]
    for mine, theirs in zip(in_memory.layers, from_file.layers, strict=True):
        assert mine == theirs
    # an independent count of the violations
    expected = sum(
        int(np.count_nonzero(v.astype(np.float64) / 1e-5 < MIN_RATIO)) for v in layers.values()
    )
    assert in_memory.violations == expected > 0


def test_raw_numpy_matches_an_independent_q() -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 5, 64)) * np.array([1e-4, 1e-3, 1.0])[:, None, None]).astype(
        np.float32
    )
    result = rmsnorm_eps.check(x, eps=1e-6, raw=True, top_k=15)
    q = _independent_q(x)
    layer = result.report.layers[0]
    assert layer.shape == (3, 5) and layer.raw_dim == 64
    assert layer.min_q == pytest.approx(q.min(), rel=1e-12)
    assert layer.below_bound == int(np.count_nonzero(q / 1e-6 < MIN_RATIO))
    worst = {tuple(w.index): w.q for w in layer.worst}
    for (i, j), value in worst.items():
        assert value == pytest.approx(q[i * 5 + j], rel=1e-12)


def test_torch_tensor_raw_is_reduced_where_it_lives() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(3)) * 1e-3
    result = rmsnorm_eps.check({"norm": x.to(torch.bfloat16)}, eps=1e-6, raw=True)
    q = _independent_q(x.to(torch.bfloat16).float().numpy())
    layer = result.report.layers[0]
    assert result.report.raw is True
    assert layer.shape == (2, 7) and layer.count == 14
    assert layer.min_q == pytest.approx(q.min(), rel=1e-12)
    assert layer.below_bound == int(np.count_nonzero(q / 1e-6 < MIN_RATIO))
    # q values given as a tensor: read as float64
    qt = torch.tensor([1e-6, 1.0], dtype=torch.float64)
    assert rmsnorm_eps.check(qt, eps=1e-6).report.layers[0].below_bound == 1


def test_per_layer_eps_and_budgets() -> None:
    q = {"x": np.array([1e-4, 1.0]), "y": np.array([1e-4, 1.0])}
    result = rmsnorm_eps.check(q, eps={"x": 1e-6, "y": 1e-5})
    assert [ly.eps for ly in result.report.layers] == [1e-6, 1e-5]
    assert result.violations == 1  # y: 1e-4/1e-5 = 10 < 49.25; x: 100 passes
    assert rmsnorm_eps.check(q, eps={"x": 1e-6, "y": 1e-5}, max_violations=1).passed
    with pytest.raises(InvalidParameterError, match="no eps for layer"):
        rmsnorm_eps.check(q, eps={"x": 1e-6})


def test_nonfinite_values_are_counted_not_dropped() -> None:
    result = rmsnorm_eps.check(np.array([np.nan, np.inf, 1.0]), eps=1e-6)
    layer = result.report.layers[0]
    assert (layer.nan_count, layer.inf_count, result.violations) == (1, 1, 2)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (np.array([1, 2, 3]), "unsupported dtype int64: expected float16, float32 or float64"),
        ({}, "empty"),
        ({"": np.ones(2)}, "non-empty strings"),
    ],
)
def test_bad_input_is_one_clear_error(data: object, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        rmsnorm_eps.check(data, eps=1e-6)


@pytest.mark.parametrize("dtype", ["int8", "int64", "bool", "complex64", "complex128", "<U3"])
def test_numpy_dtypes_the_cli_refuses_are_refused(dtype: str) -> None:
    with pytest.raises(rmsnorm_eps.InvalidInput) as info:
        rmsnorm_eps.check({"l": np.zeros(3, dtype)}, eps=1e-6)
    assert info.value.argument == "data['l']" and "unsupported dtype" in info.value.problem


@pytest.mark.parametrize("dtype", ["int8", "int64", "bool", "complex64", "float8_e4m3fn"])
def test_torch_dtypes_the_cli_refuses_are_refused(dtype: str) -> None:
    """They used to pass (converted to float64): the same numpy arrays are refused."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, dtype):
        pytest.skip(f"torch has no {dtype}")
    t = torch.zeros(3, 8, dtype=getattr(torch, dtype))
    for raw in (False, True):
        with pytest.raises(rmsnorm_eps.InvalidInput) as info:
            rmsnorm_eps.check(t, eps=1e-6, raw=raw)
        assert info.value.argument == "data" and f"unsupported dtype torch.{dtype}" in str(
            info.value
        )
    assert rmsnorm_eps.check(torch.ones(2, dtype=torch.bfloat16), eps=1e-6).passed


@pytest.mark.parametrize(
    ("eps", "argument", "problem"),
    [
        (None, "eps", "expected one number > 0, got None"),
        (np.array([1e-5]), "eps", "expected one number > 0, got ndarray"),
        ("1e-5", "eps", "expected one number > 0, got str '1e-5'"),
        (True, "eps", "expected one number > 0, got bool True"),
        (0.0, "eps", "must be finite and > 0"),
        (float("nan"), "eps", "must be finite and > 0"),
        ({"l": None}, "eps['l']", "expected one number > 0, got None"),
        ({"l": True}, "eps['l']", "expected one number > 0, got bool True"),
        ({"m": 1e-5}, "eps", "no eps for layer(s): l"),
    ],
)
def test_a_bad_eps_is_invalid_input_naming_it(eps: object, argument: str, problem: str) -> None:
    """eps=None/array/str raised builtin errors that never said eps; True was taken as 1.0."""
    with pytest.raises(rmsnorm_eps.InvalidInput) as info:
        rmsnorm_eps.check({"l": np.array([1.0])}, eps=eps)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    assert info.value.argument == argument and info.value.problem.startswith(problem)
    assert str(info.value) == f"{argument}: {info.value.problem}"


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"delta": 2.0}, "delta"),
        ({"delta": "0.01"}, "delta"),
        ({"min_ratio": -1.0}, "min_ratio"),
        ({"norm": "batch"}, "norm"),
        ({"top_k": -1}, "top_k"),
        ({"max_violations": -1}, "max_violations"),
        ({"max_fraction": 1.5}, "max_fraction"),
        ({"no_such_option": 1}, "options"),
    ],
)
def test_bad_options_are_invalid_input_naming_them(
    options: dict[str, object], argument: str
) -> None:
    with pytest.raises(rmsnorm_eps.InvalidInput) as info:
        rmsnorm_eps.check(np.array([1.0]), eps=1e-6, **options)  # type: ignore[arg-type]
    assert info.value.argument == argument


def test_a_negative_q_is_invalid_input_naming_the_layer() -> None:
    with pytest.raises(rmsnorm_eps.InvalidInput) as info:
        rmsnorm_eps.check({"l": np.array([1.0, -2.0])}, eps=1e-6)
    assert info.value.argument == "data['l']" and "negative" in info.value.problem


def test_the_cli_shape_warnings_are_in_the_result() -> None:
    # a q array shaped like activations (last axis 64), and raw on a 1-D array: ratio warns
    result = rmsnorm_eps.check({"x2": np.ones((3, 64))}, eps=1e-6)
    assert [w.key for w in result.warnings] == ["x2"]
    assert "looks like x**2 per element" in result.warnings[0].message
    assert result.warnings == result.report.warnings
    one = rmsnorm_eps.check({"v": np.ones(64)}, eps=1e-6, raw=True)
    assert len(one.warnings) == 1 and "1-D array" in one.warnings[0].problem
    assert rmsnorm_eps.check({"q": np.ones(64)}, eps=1e-6).warnings == ()


def test_torch_raw_warns_as_numpy_raw() -> None:
    torch = pytest.importorskip("torch")
    got = rmsnorm_eps.check({"v": torch.ones(64)}, eps=1e-6, raw=True).warnings
    want = rmsnorm_eps.check({"v": np.ones(64)}, eps=1e-6, raw=True).warnings
    assert got == want and len(got) == 1
    assert rmsnorm_eps.check({"x": torch.ones(4, 64)}, eps=1e-6, raw=True).warnings == ()


def test_render_is_what_the_cli_renders() -> None:
    result = rmsnorm_eps.check({"l": np.array([2e-5, 1.0])}, eps=1e-5)
    doc = json.loads(result.render("json"))
    assert doc["command"] == "ratio" and doc["layers"][0]["below_bound"] == 1
    assert result.render("text") == str(result)
    from rmsnorm_eps.reports import RenderOptions

    assert result.render("sarif") == render(
        result.report, "sarif", RenderOptions(gate=result.gate, histogram="none")
    )


def test_assert_eps_safe_names_the_layer() -> None:
    assert_eps_safe({"ok": np.array([1.0])}, eps=1e-5)
    with pytest.raises(AssertionError) as info:
        assert_eps_safe({"ok": np.array([1.0]), "bad.norm": np.array([1.0, 3e-5])}, eps=1e-5)
    message = str(info.value)
    assert "bad.norm: 1 of 2" in message and "min q/eps 3" in message
    assert "ok:" not in message
    assert_eps_safe({"bad.norm": np.array([1.0, 3e-5])}, eps=1e-5, max_violations=1)


def test_zero_vectors_are_apart_unless_asked() -> None:
    q = {"pad": np.array([0.0, 0.0, 1.0, 2e-6])}
    result = rmsnorm_eps.check(q, eps=1e-6)
    layer = result.report.layers[0]
    assert layer.zero_count == 2 and result.violations == 1 and not result.passed
    assert rmsnorm_eps.check(q, eps=1e-6, max_violations=1).passed
    strict = rmsnorm_eps.check(q, eps=1e-6, zero_is_violation=True, max_violations=1)
    assert strict.violations == 3 and not strict.passed
