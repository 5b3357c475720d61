"""rmsnorm_eps.config.resolve: a config by content, eps per dump layer with its provenance,
float32-stored eps equal to its decimal, and diff on resolved settings."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.config import diff_configs, eps_for_layers, load_config
from rmsnorm_eps.config.resolve import eps_equal, model_dir_config

ROOT = Path(__file__).resolve().parents[2]
PER_LAYER = ROOT / "examples" / "configs" / "per-layer.yaml"


def test_eps_equal_is_relative() -> None:
    assert eps_equal(1e-5, float(np.float32(1e-5)))
    assert not eps_equal(1e-5, 1.1e-5)
    assert eps_equal(0.0, 0.0)


def test_eps_for_layers_and_fallback() -> None:
    config = load_config(PER_LAYER)
    names = ["model.layers.0.input_layernorm", "model.layers.0.self_attn.q_norm", "other"]
    got = eps_for_layers(config, names, fallback=3e-3)
    assert got.eps == {names[0]: 1e-5, names[1]: 1e-6, names[2]: 3e-3}
    assert "q_norm" in got.provenance[names[1]]


def test_content_decides_the_reader_and_a_model_dir_is_its_config_json(tmp_path: Path) -> None:
    disguised = tmp_path / "config.txt"
    shutil.copy(ROOT / "examples" / "configs" / "llama-3-8b.json", disguised)
    assert (
        load_config(disguised).kind == load_config(ROOT / "examples/configs/llama-3-8b.json").kind
    )
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(ROOT / "examples" / "configs" / "llama-3-8b.json", model / "config.json")
    assert model_dir_config(model) == model / "config.json"
    assert diff_configs(load_config(model), load_config(disguised)).equivalent


def test_diff_finds_a_changed_eps(tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(PER_LAYER.read_text().replace("1e-6", "1e-7"), encoding="utf-8")
    diff = diff_configs(load_config(PER_LAYER), load_config(other))
    assert not diff.equivalent
    with pytest.raises(Exception):  # noqa: B017  (an empty dir is no model directory)
        model_dir_config(tmp_path / "missing")
