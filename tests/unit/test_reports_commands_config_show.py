"""reports/commands/config_show.py: a config as read from one file (defaults, then every
pattern with its matching entries applied, each value with where it came from), in the
document (unrounded values, provenance) and the text (values for people, names escaped);
a config of many patterns keeps one row per pattern."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmsnorm_eps.config import load_config
from rmsnorm_eps.config.model import FIELDS, Provenance, Resolved
from rmsnorm_eps.reports.commands.config_show import (
    ConfigShowReporter,
    show_value,
    value_document,
)
from rmsnorm_eps.reports.options import RenderOptions

CONFIG = """\
schema_version: 1
model: tiny
source: https://example.org/config.json
defaults:
  eps: 1e-5
  placement: inside
  gain: w
  gain_baked: false
  dim: 64
  norm: rms
layers:
  "*.input_layernorm": {}
  "model.norm": {eps: 1e-6, gain_baked: true}
"""


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(CONFIG, "utf-8")
    return path


def _file(key: str) -> Provenance:
    return Provenance("file", "c.yaml", key, "")


def test_show_value_by_hand() -> None:
    assert show_value(Resolved(None, Provenance("missing", "", None, ""))) == "missing"
    assert show_value(Resolved(None, Provenance("conflict", "", None, "a vs b"))) == "conflict"
    assert show_value(Resolved(True, _file("k"))) == "true"
    assert show_value(Resolved(False, _file("k"))) == "false"
    assert show_value(Resolved(64, _file("k"))) == "64"
    assert show_value(Resolved(1e-5, _file("k"))) == "1e-05"
    f32 = Resolved(9.999999747378752e-06, _file("k"), stored="float32", short="1e-05")
    assert show_value(f32) == "9.999999747378752e-06 (float32; nearest short decimal 1e-05)"
    doc = value_document(f32)
    assert doc["value"] == 9.999999747378752e-06  # unrounded
    assert (doc["stored"], doc["short"]) == ("float32", "1e-05")
    assert doc["provenance"] == {"kind": "file", "source": "c.yaml", "key": "k", "note": None}
    assert "stored" not in value_document(Resolved(1e-5, _file("k")))


def test_document_defaults_and_each_pattern_with_its_entries(config_path: Path) -> None:
    doc = ConfigShowReporter().document(load_config(config_path))
    assert (doc["command"], doc["kind"], doc["model"]) == ("config show", "yaml", "tiny")
    assert doc["source"] == "https://example.org/config.json"
    assert list(doc["defaults"]) == list(FIELDS)
    assert doc["defaults"]["eps"]["value"] == 1e-5
    assert doc["defaults"]["eps"]["provenance"]["key"] == "defaults.eps"
    assert doc["defaults"]["reduction_dtype"]["value"] is None
    first, norm = doc["layers"]
    assert (first["pattern"], first["sets"]) == ("*.input_layernorm", [])
    assert first["settings"]["eps"]["value"] == 1e-5  # the defaults
    assert (norm["pattern"], norm["sets"]) == ("model.norm", ["eps", "gain_baked"])
    assert norm["settings"]["eps"]["value"] == 1e-6
    assert norm["settings"]["eps"]["provenance"]["key"] == 'layers["model.norm"].eps'
    assert norm["settings"]["gain_baked"]["value"] is True
    assert norm["settings"]["dim"]["value"] == 64


def test_text_defaults_layers_and_overrides(config_path: Path) -> None:
    config = load_config(config_path)
    out = ConfigShowReporter(RenderOptions()).text(config)
    lines = out.splitlines()
    assert lines[0] == f"{config_path} (yaml): model tiny"
    assert lines[1] == "source: https://example.org/config.json"
    eps_row = next(line.split() for line in lines if line.split()[:1] == ["eps"])
    assert eps_row == ["eps", "1e-05", "defaults.eps"]
    norm_row = next(line.split() for line in lines if line.split()[:1] == ["model.norm"])
    assert norm_row == ["model.norm", "1e-06", "inside", "w", "true", "64", "rms"]
    assert 'model.norm: eps = 1e-06 (layers["model.norm"].eps)' in lines
    assert 'model.norm: gain_baked = true (layers["model.norm"].gain_baked)' in lines


def test_text_escapes_hostile_patterns_and_model(tmp_path: Path) -> None:
    path = tmp_path / "h.yaml"
    path.write_text(
        'schema_version: 1\nmodel: "m\\e[31m</b>"\ndefaults: {eps: 1e-5, norm: rms}\n'
        'layers:\n  "x\\e[2J\\n::error::y ##[group]</testcase>*": {eps: 1e-6}\n',
        "utf-8",
    )
    config = load_config(path)
    out = ConfigShowReporter(RenderOptions()).text(config)
    assert "\x1b" not in out and "##[" not in out
    assert not any(line.lstrip().startswith("::") for line in out.splitlines())
    assert "x\\x1b[2J\\x0a\\x3a:error\\x3a:y \\x23#[group]</testcase>*" in out
    assert out.splitlines()[0].endswith("model m\\x1b[31m</b>")
    assert (
        ConfigShowReporter().document(config)["layers"][0]["pattern"]
        == "x\x1b[2J\n::error::y ##[group]</testcase>*"
    )


def test_many_patterns_keep_one_row_each(tmp_path: Path) -> None:
    n = 1001
    body = "".join(f'  "model.layers.{i}.norm": {{eps: {i + 1}e-7}}\n' for i in range(n))
    path = tmp_path / "many.yaml"
    path.write_text(f"schema_version: 1\ndefaults: {{eps: 1e-5}}\nlayers:\n{body}", "utf-8")
    out = ConfigShowReporter(RenderOptions()).text(load_config(path))
    rows = [line.split() for line in out.splitlines() if line.startswith(" model.layers.")]
    assert len(rows) == n
    assert rows[0][:2] == ["model.layers.0.norm", "1e-07"]
    assert rows[-1][:2] == [f"model.layers.{n - 1}.norm", repr(float(f"{n}e-7"))]
    overrides = [line for line in out.splitlines() if line.startswith("model.layers.")]
    assert len(overrides) == n
    assert not any(line.endswith(" ") for line in out.splitlines())
