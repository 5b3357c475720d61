"""Per-layer settings (eps, where it came from, quantity) are resolved once from the layer
names, before any layer is read, and handed to the reading driver as data."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rmsnorm_eps.analysis as analysis
from rmsnorm_eps.analysis import RatioSettings, analyze_dump
from rmsnorm_eps.config import load_config
from rmsnorm_eps.dumps import DumpReading, open_layers, read_layers
from rmsnorm_eps.errors import InvalidParameterError

LN = "model.layers.0.input_layernorm"
RMS = "model.layers.0.post_attention_layernorm"


def _dump_and_config(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(1)
    np.savez(
        tmp_path / "acts.npz",
        **{LN: rng.standard_normal((2, 8)), RMS: rng.standard_normal((2, 8))},
    )
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "schema_version: 1\n"
        "defaults: {eps: 1e-5, placement: inside, gain: w, norm: rms}\n"
        "layers:\n"
        '  "*.input_layernorm": {eps: 1e-6, norm: layer}\n'
        '  "*.post_attention_layernorm": {}\n',
        encoding="utf-8",
    )
    return tmp_path / "acts.npz", cfg


def test_ratio_resolves_every_layer_before_reading_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump, cfg = _dump_and_config(tmp_path)
    seen: list[tuple[str, RatioSettings]] = []
    original = analysis._analyze_layer

    def spy(src: Any, settings: RatioSettings, steps: Any) -> Any:
        if not seen:  # the first layer read: the config must not be consulted any more
            monkeypatch.setattr(type(config), "settings_for", _no_lookup)
        seen.append((src.name, settings))
        return original(src, settings, steps)

    config = load_config(cfg)
    monkeypatch.setattr(analysis, "_analyze_layer", spy)
    report = analyze_dump(dump, None, config=config, raw=True)
    got = dict(seen)
    assert got[LN].eps == 1e-6 and got[LN].quantity == "v"
    assert got[RMS].eps == 1e-5 and got[RMS].quantity == "q"
    assert got[LN].eps_source is not None and "input_layernorm" in got[LN].eps_source
    assert [ly.quantity for ly in report.layers] == [got[ly.name].quantity for ly in report.layers]


def _no_lookup(*args: Any) -> Any:
    raise AssertionError("a layer's settings were looked up while the layers were read")


def test_a_bad_setting_fails_before_any_layer_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump, _ = _dump_and_config(tmp_path)
    monkeypatch.setattr(analysis, "_analyze_layer", _no_lookup)
    with pytest.raises(InvalidParameterError, match="norm must be one of"):
        analyze_dump(dump, 1e-5, norm="batch")
    with pytest.raises(KeyError):
        analyze_dump(dump, {LN: 1e-5})  # no eps for the other layer


def test_the_driver_takes_settings_as_data(tmp_path: Path) -> None:
    """read_layers analyses each layer with settings[name] (the reuse of one stored tensor
    under equal settings: tests/unit/test_dumps.py)."""
    q = np.arange(1.0, 7.0)
    np.save(tmp_path / "q.npy", q)
    with open(tmp_path / "q.npy", "rb") as fh:
        body = fh.read()
    with zipfile.ZipFile(tmp_path / "two.npz", "w") as z:  # stored: read in place
        z.writestr("a.npy", body)
        z.writestr("b.npy", body)
    reading = DumpReading()
    calls: list[tuple[str, int]] = []

    def analyse(src: Any, setting: int) -> _Named:
        calls.append((src.name, setting))
        return _Named(src.name, setting)

    opened = open_layers(tmp_path / "two.npz", reading)
    read = read_layers(opened, reading, {"a": 1, "b": 2}, analyse)
    assert calls == [("a", 1), ("b", 2)] and read.layers == (_Named("a", 1), _Named("b", 2))


@dataclass(frozen=True)
class _Named:
    name: str
    setting: int
