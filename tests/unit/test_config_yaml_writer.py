"""rmsnorm_eps.config.yaml_writer: the YAML written for a config reads back to the same
settings for every layer (and hostile names survive)."""

from __future__ import annotations

from pathlib import Path

import yaml

from rmsnorm_eps.config import diff_configs, load_config
from rmsnorm_eps.config.yaml_writer import config_yaml_document, render_config_yaml

ROOT = Path(__file__).resolve().parents[2]


def test_round_trip_of_the_examples(tmp_path: Path) -> None:
    for name in ("examples/configs/per-layer.yaml", "examples/configs/llama-3-8b.json"):
        config = load_config(ROOT / name)
        text = render_config_yaml(config)
        assert yaml.safe_load(text) == config_yaml_document(config)
        out = tmp_path / "back.yaml"
        out.write_text(text, encoding="utf-8")
        back = load_config(out)
        assert diff_configs(config, back).equivalent, name
        assert [e.pattern for e in back.entries] == [e.pattern for e in config.entries]


def test_hostile_patterns_load_back_exactly(tmp_path: Path) -> None:
    src = tmp_path / "c.yaml"
    names = ["a::b", "x##y", "tab\there", "\u202e.*", "'quoted'"]
    body = "".join(f'  "{n.encode("unicode_escape").decode()}": {{eps: 1e-6}}\n' for n in names)
    src.write_text(f"schema_version: 1\ndefaults: {{eps: 1e-5}}\nlayers:\n{body}", "utf-8")
    config = load_config(src)
    out = tmp_path / "out.yaml"
    text = render_config_yaml(config)
    out.write_text(text, encoding="utf-8")
    assert [e.pattern for e in load_config(out).entries] == names
