"""Hugging Face config.json (and Meta params.json): key variants, nesting, conflicts, norm types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmsnorm_eps.config import load_config
from rmsnorm_eps.config.hf import EPS_KEYS
from rmsnorm_eps.errors import InputFileError


def write_json(tmp_path: Path, data: Any, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("key", EPS_KEYS)
def test_every_eps_key_variant_is_read(tmp_path: Path, key: str) -> None:
    cfg = load_config(write_json(tmp_path, {"model_type": "llama", key: 3e-6}))
    assert cfg.defaults.eps.value == 3e-6
    assert cfg.defaults.eps.provenance.kind == "file"
    assert cfg.defaults.eps.provenance.key == key


def test_nested_text_config(tmp_path: Path) -> None:
    data = {
        "model_type": "gemma3",
        "text_config": {
            "model_type": "gemma3_text",
            "rms_norm_eps": 1e-6,
            "hidden_size": 640,
            "head_dim": 256,
        },
        "vision_config": {"layer_norm_eps": 1e-6, "hidden_size": 1152},
    }
    cfg = load_config(write_json(tmp_path, data))
    assert cfg.defaults.eps.provenance.key == "text_config.rms_norm_eps"
    assert cfg.defaults.dim.value == 640
    assert cfg.defaults.gain.value == "1+w"
    assert cfg.defaults.gain_baked.value is False
    assert cfg.defaults.weight_after_cast.value is False
    q = cfg.settings_for("model.language_model.layers.0.self_attn.q_norm")
    assert q is not None and q.dim.value == 256
    assert q.dim.provenance.key == "text_config.head_dim"


def test_conflicting_keys_are_reported_not_chosen(tmp_path: Path) -> None:
    data = {"model_type": "starcoder2", "norm_epsilon": 1e-5, "layer_norm_epsilon": 1e-6}
    cfg = load_config(write_json(tmp_path, data))
    assert cfg.defaults.eps.value is None
    assert cfg.defaults.eps.provenance.kind == "conflict"
    assert "layer_norm_epsilon=1e-06" in cfg.defaults.eps.provenance.note
    assert "norm_epsilon=1e-05" in cfg.defaults.eps.provenance.note
    assert any("disagree" in n for n in cfg.notes)


def test_agreeing_keys_are_fine(tmp_path: Path) -> None:
    data = {"model_type": "llama", "rms_norm_eps": 1e-5, "norm_eps": 1e-5}
    cfg = load_config(write_json(tmp_path, data))
    assert cfg.defaults.eps.value == 1e-5
    assert any("all equal" in n for n in cfg.notes)


@pytest.mark.parametrize(
    ("data", "eps", "key"),
    [
        (
            {"model_type": "bert", "layer_norm_eps": 1e-12, "hidden_size": 768},
            1e-12,
            "layer_norm_eps",
        ),
        (
            {"model_type": "gpt2", "layer_norm_epsilon": 1e-5, "n_embd": 768},
            1e-5,
            "layer_norm_epsilon",
        ),
    ],
)
def test_layernorm_models_are_layer_norms(
    tmp_path: Path, data: dict[str, Any], eps: float, key: str
) -> None:
    cfg = load_config(write_json(tmp_path, data))
    assert cfg.defaults.norm.value == "layer"
    assert cfg.defaults.eps.value == eps and cfg.defaults.eps.provenance.key == key
    assert cfg.defaults.dim.value == 768


def test_qwen1_layer_norm_epsilon_is_an_rmsnorm(tmp_path: Path) -> None:
    cfg = load_config(write_json(tmp_path, {"model_type": "qwen", "layer_norm_epsilon": 1e-6}))
    assert cfg.defaults.norm.value == "rms"
    assert cfg.defaults.eps.provenance.key == "layer_norm_epsilon"


@pytest.mark.parametrize(("flag", "norm"), [(True, "rms"), (False, "layer")])
def test_chatglm_rmsnorm_flag(tmp_path: Path, flag: bool, norm: str) -> None:
    data = {"model_type": "chatglm", "layernorm_epsilon": 1e-5, "rmsnorm": flag}
    cfg = load_config(write_json(tmp_path, data))
    assert cfg.defaults.norm.value == norm
    assert cfg.defaults.norm.provenance.key == "rmsnorm"
    assert cfg.defaults.eps.value == 1e-5


def test_missing_key_is_missing_with_class_default_hint(tmp_path: Path) -> None:
    cfg = load_config(write_json(tmp_path, {"model_type": "llama", "hidden_size": 4096}))
    eps = cfg.defaults.eps
    assert eps.value is None
    assert eps.provenance.kind == "missing"
    assert "class default would be 1e-06" in eps.provenance.note
    assert "checkpoints usually set their own" in eps.provenance.note


def test_unknown_model_type_leaves_norm_type_missing(tmp_path: Path) -> None:
    cfg = load_config(write_json(tmp_path, {"model_type": "mystery", "rms_norm_eps": 1e-5}))
    assert cfg.defaults.eps.value == 1e-5
    assert cfg.defaults.norm.is_missing and cfg.defaults.placement.is_missing
    assert cfg.defaults.gain.is_missing


def test_llama_and_qwen3_settings(tmp_path: Path) -> None:
    cfg = load_config(write_json(tmp_path, {"model_type": "llama", "rms_norm_eps": 1e-5}))
    d = cfg.defaults
    assert (
        d.placement.value,
        d.gain.value,
        d.reduction_dtype.value,
        d.weight_after_cast.value,
    ) == ("inside", "w", "float32", True)
    assert d.placement.provenance.kind == "framework"
    assert "LlamaRMSNorm" in d.placement.provenance.source
    q3 = load_config(
        write_json(
            tmp_path,
            {
                "model_type": "qwen3",
                "rms_norm_eps": 1e-6,
                "hidden_size": 4096,
                "num_attention_heads": 32,
            },
        )
    )
    k = q3.settings_for("model.layers.0.self_attn.k_norm")
    assert k is not None and k.dim.value == 128 and k.dim.provenance.kind == "derived"


def test_deepseek_mla_norm_dims(tmp_path: Path) -> None:
    data = {
        "model_type": "deepseek_v3",
        "rms_norm_eps": 1e-6,
        "hidden_size": 7168,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
    }
    cfg = load_config(write_json(tmp_path, data))
    s = cfg.settings_for("model.layers.0.self_attn.kv_a_layernorm")
    assert s is not None and s.dim.value == 512


def test_meta_params_json(tmp_path: Path) -> None:
    data = {"dim": 4096, "n_layers": 32, "n_heads": 32, "norm_eps": 1e-05}
    cfg = load_config(write_json(tmp_path, data, "params.json"))
    assert cfg.defaults.eps.value == 1e-5 and cfg.defaults.eps.provenance.key == "norm_eps"
    assert cfg.defaults.norm.value == "rms" and cfg.defaults.dim.value == 4096


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"model_type": "llama", "rms_norm_eps": NaN}', "NaN is not valid JSON"),
        ('{"model_type": "llama", "rms_norm_eps": "1e-5"}', "expected a number"),
        ('{"model_type": "llama", "rms_norm_eps": 0}', "finite number > 0"),
        ('{"model_type": "llama",', "invalid JSON at line 1"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_bad_json(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError) as info:
        load_config(path)
    assert needle in str(info.value)
