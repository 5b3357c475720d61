"""``defaults``: the framework table and torch's eps=None rule."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from rmsnorm_eps.config.defaults import MACHINE_EPS, framework_defaults, torch_default_eps
from rmsnorm_eps.config.defaults_table import FRAMEWORK_DEFAULTS
from rmsnorm_eps.errors import InvalidParameterError

Cli = Callable[..., Any]


def test_torch_bfloat16_cli(cli: Cli) -> None:
    res = cli("defaults", "--framework", "torch", "--dtype", "bfloat16")
    assert res.exit_code == 0
    assert res.stdout.splitlines()[0] == "1.1920929e-07"
    assert "finfo(float32).eps" in res.stdout
    doc = json.loads(
        cli("defaults", "--framework", "torch", "--dtype", "bfloat16", "--format", "json").stdout
    )
    assert doc["rows"][0]["eps"] == 2.0**-23 == 1.1920928955078125e-07


@pytest.mark.parametrize(
    ("dtype", "version", "eps"),
    [
        ("float16", None, 2.0**-23),
        ("float32", None, 2.0**-23),
        ("float64", None, 2.0**-52),
        ("float16", "2.5.1", 2.0**-10),  # 9.765625e-04, the dtype's own
        ("bfloat16", "2.6", 2.0**-7),  # 7.8125e-03
        ("bfloat16", "2.7.0", 2.0**-23),
        ("bfloat16", "2.13.0+cpu", 2.0**-23),
    ],
)
def test_torch_rule(dtype: str, version: str | None, eps: float) -> None:
    assert torch_default_eps(dtype, version)[0] == eps


def test_machine_eps_matches_numpy() -> None:
    import numpy as np

    assert MACHINE_EPS["float16"] == float(np.finfo(np.float16).eps)
    assert MACHINE_EPS["float32"] == float(np.finfo(np.float32).eps)
    assert MACHINE_EPS["float64"] == float(np.finfo(np.float64).eps)


def test_torch_rule_matches_installed_torch() -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    for name in ("float16", "bfloat16", "float32", "float64"):
        dt = getattr(torch, name)
        x = torch.full((1, 4), 1e-4, dtype=dt)  # q = 1e-8: eps matters here
        ours = torch_default_eps(name, torch.__version__)[0]
        assert torch.equal(F.rms_norm(x, (4,)), F.rms_norm(x, (4,), eps=ours)), name


def test_table_rows_have_sources() -> None:
    frameworks = {r.framework for r in FRAMEWORK_DEFAULTS}
    assert {
        "torch",
        "transformers",
        "llama.cpp",
        "flax",
        "keras",
        "mlx",
        "apex",
        "transformer-engine",
        "onnx",
        "torchtune",
        "vllm",
        "tensorrt-llm",
    } <= frameworks
    assert all(r.source for r in FRAMEWORK_DEFAULTS)


def test_apex_has_two_rows_and_llama_cpp_has_no_number(cli: Cli) -> None:
    apex = framework_defaults("apex")
    assert [r.eps for r in apex.rows] == [1e-5, 1e-6]
    res = cli("defaults", "--framework", "llama.cpp", "--format", "json")
    row = json.loads(res.stdout)["rows"][0]
    assert row["eps"] is None and "read from the GGUF" in row["explanation"]


def test_full_table_text(cli: Cli) -> None:
    res = cli("defaults")
    assert res.exit_code == 0
    assert "transformer-engine" in res.stdout and "depends on the input" in res.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--framework", "caffe"), "unknown framework 'caffe'"),
        (("--dtype", "float8"), "'float8' is not one of"),
        (
            ("--framework", "torch", "--dtype", "float16", "--torch-version", "two"),
            "torch version must look like",
        ),
    ],
)
def test_bad_options_exit_2(cli: Cli, args: tuple[str, ...], needle: str) -> None:
    res = cli("defaults", *args)
    assert res.exit_code == 2 and needle in res.stderr


def test_invalid_dtype_raises() -> None:
    with pytest.raises(InvalidParameterError):
        torch_default_eps("int8")


def test_row_names_select_one_row(cli: Cli) -> None:
    # the names compare's framework=NAME takes; a framework name still selects all its rows
    res = cli("defaults", "--framework", "hf-llama")
    assert res.exit_code == 0 and res.stdout.splitlines()[0] == "1e-06"
    assert len(framework_defaults("transformers").rows) == 5
    doc = json.loads(cli("defaults", "--framework", "apex", "--format", "json").stdout)
    assert [r["name"] for r in doc["rows"]] == ["apex", "apex-functional"]
    assert "apex-functional" in cli("defaults").stdout
