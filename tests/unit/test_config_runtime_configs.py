"""config/runtime_configs.py: which runtime a JSON config is (by its keys, one key short of each
rule), and what each reader returns: the stored eps with its key, the runtime's documented
default as a framework value, the norm settings, and the refusals naming the file and key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmsnorm_eps.config.runtime_configs import (
    EXECUTORCH_SOURCE,
    MLX_SOURCE,
    TRTLLM_SOURCE,
    read_json_config,
    runtime_of,
)
from rmsnorm_eps.errors import InputFileError

TRT: dict[str, Any] = {"architecture": "LlamaForCausalLM", "dtype": "bfloat16", "hidden_size": 32}
ET: dict[str, Any] = {"dim": 48, "n_layers": 2, "n_heads": 4, "norm_type": "rmsnorm"}
MLX: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "quantization": {"group_size": 64, "bits": 4},
}


def _write(tmp_path: Path, data: Any, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_runtime_of_each_rule_and_one_key_short_of_it() -> None:
    assert runtime_of(TRT) == "trtllm"
    assert runtime_of({k: v for k, v in TRT.items() if k != "dtype"}) is None
    assert runtime_of({**TRT, "architecture": ["LlamaForCausalLM"]}) is None  # HF's plural list
    assert runtime_of({**TRT, "model_type": "llama"}) is None
    assert runtime_of(ET) == "executorch"
    assert runtime_of({"dim": 48, "n_layers": 2, "n_heads": 4}) is None  # Meta's params.json
    assert runtime_of({**ET, "model_type": "llama"}) is None
    assert runtime_of(MLX) == "mlx"
    assert runtime_of({**MLX, "quantization": {"bits": 4}}) is None
    assert runtime_of({**MLX, "quantization": 4}) is None
    assert runtime_of([TRT]) is None and runtime_of("trtllm") is None


def test_trtllm_eps_dim_and_rms_settings(tmp_path: Path) -> None:
    path = _write(tmp_path, {**TRT, "norm_epsilon": 3e-6})
    cfg = read_json_config(path)
    assert (cfg.kind, cfg.model, cfg.path) == ("trtllm", "LlamaForCausalLM", str(path))
    d = cfg.defaults
    assert d.eps.value == 3e-6 and d.eps.provenance.key == "norm_epsilon"
    assert d.eps.provenance.source == str(path)
    assert d.dim.value == 32 and d.dim.provenance.key == "hidden_size"
    assert (d.norm.value, d.placement.value, d.gain.value) == ("rms", "inside", "w")
    assert (
        d.norm.provenance.kind == "derived"
        and "LlamaForCausalLM: RmsNorm" in d.norm.provenance.note
    )
    assert [e.pattern for e in cfg.entries] == ["*"] and cfg.notes == ()


def test_trtllm_default_eps_and_an_unknown_architecture(tmp_path: Path) -> None:
    cfg = read_json_config(_write(tmp_path, {**TRT, "architecture": "GPTForCausalLM"}))
    eps = cfg.defaults.eps
    assert eps.value == 1e-5 and eps.provenance.kind == "framework"
    assert eps.provenance.source == TRTLLM_SOURCE and eps.provenance.note == "norm_epsilon missing"
    assert cfg.defaults.norm.is_missing and cfg.defaults.placement.is_missing
    assert cfg.notes[0].startswith("norm_epsilon missing: TensorRT-LLM's default 1e-5")
    assert cfg.notes[1].startswith("architecture 'GPTForCausalLM' is not one this reader knows")
    no_dim = read_json_config(
        _write(tmp_path, {k: v for k, v in TRT.items() if k != "hidden_size"})
    )
    assert (
        no_dim.defaults.dim.is_missing and no_dim.defaults.dim.provenance.note == "no hidden_size"
    )


@pytest.mark.parametrize(
    ("data", "key", "problem"),
    [
        ({**TRT, "norm_epsilon": -1e-6}, "norm_epsilon", "eps must be a finite number > 0"),
        ({**TRT, "norm_epsilon": "1e-6"}, "norm_epsilon", "expected a number"),
        ({**TRT, "hidden_size": 0}, "hidden_size", "expected a positive integer"),
        ({**ET, "norm_eps": 0.0}, "norm_eps", "eps must be a finite number > 0"),
        ({**ET, "dim": 4.5}, "dim", "expected a positive integer"),
        # null is refused, never "missing" -> the runtime's default 1e-5
        ({**TRT, "norm_epsilon": None}, "norm_epsilon", "null is not an eps"),
        ({**ET, "norm_eps": None}, "norm_eps", "null is not an eps"),
        ({**MLX, "rms_norm_eps": None}, "rms_norm_eps", "null is not an eps"),
        ({"model_type": "llama", "rms_norm_eps": None}, "rms_norm_eps", "null is not an eps"),
        (
            {"model_type": "llama", "rms_norm_eps": 1e-6, "text_config": {"layer_norm_eps": None}},
            "text_config.layer_norm_eps",
            "null is not an eps",
        ),
    ],
)
def test_bad_values_name_the_file_and_key(
    tmp_path: Path, data: dict[str, Any], key: str, problem: str
) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(InputFileError) as info:
        read_json_config(path)
    assert info.value.key == key and info.value.path == str(path)
    assert info.value.problem.startswith(problem)


def test_executorch_eps_default_and_norm_type(tmp_path: Path) -> None:
    path = _write(tmp_path, {**ET, "norm_eps": 1e-6}, "params.json")
    cfg = read_json_config(path)
    d = cfg.defaults
    assert cfg.kind == "executorch" and cfg.model == "meta-llama params.json"  # the HF reader's
    assert d.eps.value == 1e-6 and d.eps.provenance.key == "norm_eps"
    assert d.dim.value == 48
    assert (d.norm.value, d.norm.provenance.kind, d.norm.provenance.key) == (
        "rms",
        "file",
        "norm_type",
    )
    assert (d.placement.value, d.gain.value, d.reduction_dtype.value) == ("inside", "w", "float32")
    assert not any("norm type, placement and gain are missing" in n for n in cfg.notes)
    default = read_json_config(
        _write(
            tmp_path,
            {k: v for k, v in ET.items() if k != "norm_type"} | {"use_kv_cache": True},
            "p2.json",
        )
    )
    assert default.defaults.eps.value == 1e-5
    assert default.defaults.eps.provenance.source == EXECUTORCH_SOURCE
    assert default.defaults.norm.provenance.kind == "framework"
    assert any(n.startswith("norm_eps missing: ExecuTorch's default 1e-5") for n in default.notes)
    other = read_json_config(_write(tmp_path, {**ET, "norm_type": "layernorm"}, "p3.json"))
    assert other.kind == "executorch" and other.defaults.reduction_dtype.is_missing
    assert other.defaults.norm.value != "rms"


def test_mlx_keeps_the_hf_eps_and_has_no_default(tmp_path: Path) -> None:
    cfg = read_json_config(_write(tmp_path, {**MLX, "rms_norm_eps": 2e-6}))
    assert cfg.kind == "mlx" and cfg.defaults.eps.value == 2e-6
    assert cfg.defaults.eps.provenance.key == "rms_norm_eps"
    assert cfg.defaults.placement.value == "inside"
    assert cfg.notes[-1].startswith("MLX (mlx-lm) config")
    none = read_json_config(_write(tmp_path, MLX, "c2.json"))
    assert none.defaults.eps.is_missing and MLX_SOURCE in none.defaults.eps.provenance.note


def test_a_plain_hf_config_is_read_by_the_hf_reader(tmp_path: Path) -> None:
    cfg = read_json_config(
        _write(tmp_path, {"model_type": "llama", "rms_norm_eps": 1e-6, "hidden_size": 8})
    )
    assert cfg.kind == "hf" and cfg.defaults.eps.value == 1e-6


def test_a_null_eps_is_one_line_naming_file_and_key(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rmsnorm_eps.cli import app

    path = _write(tmp_path, {**TRT, "norm_epsilon": None})
    res = CliRunner().invoke(app, ["config", "show", str(path)])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr == (
        f"rmsnorm-eps: error: {path} [norm_epsilon]: null is not an eps: give a number, "
        "or remove the key\n"
    )
