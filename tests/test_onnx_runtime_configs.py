"""Configs of other runtimes: TensorRT-LLM config.json (norm_epsilon), ExecuTorch params.json
(norm_eps), MLX (mlx-lm's HF-style config.json); a missing key shows the runtime's documented
default as a framework value with its source, or stays missing where the runtime has none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rmsnorm_eps.config import load_config


def _write(tmp_path: Path, data: dict[str, Any], name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


TRT = {
    "architecture": "LlamaForCausalLM",
    "dtype": "float16",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}


def test_trtllm_norm_epsilon_and_its_default(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, {**TRT, "norm_epsilon": 1e-6}))
    assert cfg.kind == "trtllm"
    eps = cfg.defaults.eps
    assert eps.value == 1e-6 and eps.provenance.kind == "file"
    assert eps.provenance.key == "norm_epsilon"
    assert (cfg.defaults.norm.value, cfg.defaults.placement.value) == ("rms", "inside")
    default = load_config(_write(tmp_path, TRT)).defaults.eps
    assert default.value == 1e-5 and default.provenance.kind == "framework"
    assert "PretrainedConfig" in default.provenance.source


def test_executorch_params_json_and_its_default(tmp_path: Path, cli: Any) -> None:
    base = {"dim": 64, "n_layers": 2, "n_heads": 4, "use_kv_cache": True}
    cfg = load_config(_write(tmp_path, {**base, "norm_eps": 1e-6}, "params.json"))
    assert cfg.kind == "executorch" and cfg.defaults.eps.value == 1e-6
    assert cfg.defaults.dim.value == 64 and cfg.defaults.gain.value == "w"
    default = load_config(_write(tmp_path, base, "params.json"))
    assert default.defaults.eps.value == 1e-5
    assert default.defaults.eps.provenance.kind == "framework"
    assert "model_args.py" in default.defaults.eps.provenance.source
    res = cli("config", "show", str(tmp_path / "params.json"))
    assert res.exit_code == 0 and "framework default" in res.stdout
    # Meta's own params.json (no ExecuTorch field): a missing norm_eps stays missing
    meta = load_config(_write(tmp_path, {"dim": 64, "n_layers": 2}, "meta.json"))
    assert meta.kind == "hf" and meta.defaults.eps.is_missing


def test_mlx_config_has_no_default_eps(tmp_path: Path) -> None:
    mlx = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "quantization": {"group_size": 64, "bits": 4},
    }
    cfg = load_config(_write(tmp_path, {**mlx, "rms_norm_eps": 1e-5}))
    assert cfg.kind == "mlx" and cfg.defaults.eps.value == 1e-5
    assert cfg.defaults.placement.value == "inside"
    missing = load_config(_write(tmp_path, mlx)).defaults.eps
    assert missing.is_missing and "mlx-lm" in missing.provenance.note
