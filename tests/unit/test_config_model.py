"""rmsnorm_eps.config.model: a layer's settings are the defaults overlaid by every matching
entry in file order (a later entry wins), each value with where it came from."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from rmsnorm_eps.config import load_config
from rmsnorm_eps.config.model import FIELDS, ConfigEntry, NormConfig, NormSettings, missing

YAML = """schema_version: 1
defaults: {eps: 1e-5, placement: inside, gain: w, norm: rms}
layers:
  "*.input_layernorm": {}
  "model.layers.1*": {eps: 1e-6}
  "model.layers.1.input_layernorm": {eps: 2e-6, dim: 64}
"""


def test_later_entries_win_and_provenance_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(YAML, encoding="utf-8")
    config = load_config(path)
    s = config.settings_for("model.layers.1.input_layernorm")
    assert (s.eps.value, s.dim.value, s.placement.value) == (2e-6, 64, "inside")
    assert s.eps.provenance.key == 'layers["model.layers.1.input_layernorm"].eps'
    assert s.placement.provenance.key == "defaults.placement"
    s = config.settings_for("model.layers.12.input_layernorm")
    assert s.eps.value == 1e-6 and s.dim.value is None
    assert s.dim.provenance.kind == "missing"
    assert config.settings_for("lm_head.norm") is None  # no entry matches: not a norm of the file
    names = ["model.layers.1.input_layernorm", "model.layers.3.input_layernorm", "x.norm"]
    for name in names:  # matching is fnmatchcase, in file order
        want = [e.pattern for e in config.entries if fnmatch.fnmatchcase(name, e.pattern)]
        assert [e.pattern for e in config.matching(name)] == want
    assert config.unmatched(names) == ("x.norm",)


def test_settings_overlay() -> None:
    base = NormSettings()
    assert all(getattr(base, f).value is None for f in FIELDS)
    entry = ConfigEntry("a.*", ())
    config = NormConfig("c.yaml", "yaml", None, base, (entry,))
    assert config.matching("a.b") == (entry,) and config.matching("b.a") == ()
    assert missing("why").provenance.kind == "missing"
