"""``compare --from config`` / ``--to config``: per-layer settings matched like ``ratio --config``.

The dump examples/configs/q_layers.npz holds q = 5e-5, 5e-4, 5e-3, 0.5 for
model.layers.0.input_layernorm and model.layers.0.self_attn.q_norm.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.compare.spec import LayerSpecs, parse_spec, specs_from_config
from rmsnorm_eps.config import load_config
from rmsnorm_eps.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "configs"
DUMP = EXAMPLES / "q_layers.npz"
PER_LAYER = EXAMPLES / "per-layer.yaml"
LAYERS = ["model.layers.0.input_layernorm", "model.layers.0.self_attn.q_norm"]
Cli = Callable[..., Any]


def _json(cli: Cli, *args: str) -> tuple[int, dict[str, Any]]:
    res = cli("compare", "-q", str(DUMP), *args, "--format", "json")
    return res.exit_code, json.loads(res.stdout)


def test_example_dump_is_what_its_script_writes(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_q_dump", EXAMPLES / "make_q_dump.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fresh = module.write(tmp_path / "q.npz")
    with np.load(fresh) as a, np.load(DUMP) as b:
        assert sorted(a.files) == sorted(b.files) == LAYERS
        for name in LAYERS:
            assert np.array_equal(a[name], b[name])


def test_per_layer_eps_from_yaml(cli: Cli) -> None:
    code, doc = _json(cli, "--from", "config", "--config", str(PER_LAYER), "--to", "eps=1e-6")
    assert code == 1
    assert doc["from"] == {"text": "config", "config": str(PER_LAYER), "per_layer": True}
    assert [layer["from"]["eps"] for layer in doc["layers"]] == [1e-5, 1e-6]
    assert [layer["moved"] for layer in doc["layers"]] == [1, 0]
    # q = 5e-5: sqrt(q + 1e-5) / sqrt(q + 1e-6) - 1; q_norm has eps 1e-6 on both sides
    first, qnorm = doc["layers"]
    assert first["max_abs_change"] == pytest.approx(math.sqrt(6e-5 / 5.1e-5) - 1, rel=1e-12)
    assert f"{first['max_abs_change']:.6g}" == "0.0846523"  # as shown in docs/configs.md
    assert qnorm["max_abs_change"] == 0.0
    second = first["worst"][1]
    assert (second["q"], f"{second['change']:.6g}") == (5e-4, "0.00894206")  # docs/compare.md
    assert 'layers["*.self_attn.q_norm"].eps' in qnorm["from"]["note"]
    assert "defaults.eps" in first["from"]["note"]


def test_per_layer_text_lists_settings_and_provenance(cli: Cli) -> None:
    res = cli(
        "compare", "-q", str(DUMP), "--from", "config", "-c", str(PER_LAYER), "--to", "eps=1e-6"
    )
    assert res.exit_code == 1
    out = res.stdout
    assert f"from: per layer from {PER_LAYER}" in out
    assert "  eps=1e-05 inside float64 for 1 layer(s): model.layers.0.input_layernorm" in out
    assert "  eps=1e-06 inside float64 for 1 layer(s): model.layers.0.self_attn.q_norm" in out
    assert "eps from defaults.eps; placement from defaults.placement" in out
    assert "by decade of q/eps_from (eps_from 1e-05)" in out


def test_to_config_is_the_inverse(cli: Cli) -> None:
    _, fwd = _json(cli, "--from", "config", "-c", str(PER_LAYER), "--to", "eps=1e-6")
    _, back = _json(cli, "--from", "eps=1e-6", "--to", "config", "-c", str(PER_LAYER))
    assert back["to"]["per_layer"] is True and back["from"]["eps"] == 1e-6
    f = fwd["layers"][0]["worst"][0]["factor"]
    b = back["layers"][0]["worst"][0]["factor"]
    assert f * b == pytest.approx(1.0, rel=1e-14)


def test_shipped_qwen3_config(cli: Cli) -> None:
    # configs/qwen3-8b.yaml: eps 1e-6 everywhere, reduction_dtype float32 (q + eps in float32)
    cfg = str(ROOT / "configs" / "qwen3-8b.yaml")
    code, doc = _json(cli, "--from", "config", "-c", cfg, "--to", "eps=1e-5", "--allow-unmatched")
    assert code == 1
    froms = [layer["from"] for layer in doc["layers"]]
    assert [(f["eps"], f["dtype"], f["placement"]) for f in froms] == [
        (1e-6, "float32", "inside"),
        (1e-6, "float32", "inside"),
    ]
    assert "reduction_dtype float32 from defaults.reduction_dtype" in froms[0]["note"]
    # q = 5e-5 stored exactly as float64, rounded to float32 by the model: change about -0.078
    assert [layer["moved"] for layer in doc["layers"]] == [1, 1]
    exact = math.sqrt(5.1e-5 / 6e-5) - 1
    assert doc["layers"][0]["worst"][0]["change"] == pytest.approx(exact, rel=1e-6)


def test_hf_json_and_gguf_configs(cli: Cli) -> None:
    code, doc = _json(
        cli, "--from", "config", "-c", str(EXAMPLES / "llama-3-8b.json"), "--to", "eps=1e-5"
    )
    assert code == 0  # rms_norm_eps 1e-05 vs 1e-5: the same eps; float32 rounding only
    assert {layer["from"]["eps"] for layer in doc["layers"]} == {1e-5}
    assert doc["layers"][0]["from"]["dtype"] == "float32"
    assert doc["summary"]["max_abs_change"] < 1e-6
    gguf = EXAMPLES / "smollm2-135m-meta.gguf"
    code, doc = _json(cli, "--from", "config", "-c", str(gguf), "--to", "eps=1e-5")
    assert code == 0
    eps = doc["layers"][0]["from"]["eps"]
    assert eps == 9.999999747378752e-06  # float32 storage of 1e-5
    assert doc["layers"][0]["from"]["dtype"] == "float64"  # llama.cpp: reduction in double
    assert 0 < doc["summary"]["max_abs_change"] < 1e-8


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            ROOT / "configs" / "llama-3-8b.yaml",
            "1 dump layer(s) match no layer pattern of the config (*.input_layernorm, "
            "*.post_attention_layernorm, model.norm): model.layers.0.self_attn.q_norm; "
            "fix the config or give an explicit SPEC to --from",
        ),
        (
            EXAMPLES / "llama-3-8b-no-eps.json",
            "eps is missing; no eps key",
        ),
    ],
)
def test_config_errors_exit_2(cli: Cli, config: Path, message: str) -> None:
    res = cli("compare", "-q", str(DUMP), "--from", "config", "-c", str(config), "--to", "eps=1")
    assert res.exit_code == 2 and message in res.stderr, res
    assert "Traceback" not in res.stderr


def _yaml(tmp_path: Path, defaults: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(f"schema_version: 1\ndefaults: {{{defaults}}}\n", encoding="utf-8")
    return path


def test_sum_placement_takes_dim_from_config(tmp_path: Path) -> None:
    cfg = load_config(_yaml(tmp_path, "eps: 1e-4, placement: sum, dim: 100"))
    side = specs_from_config(cfg, LAYERS)
    assert isinstance(side, LayerSpecs)
    spec = side.for_layer(LAYERS[0])
    assert (spec.placement, spec.dim, spec.eps, spec.dtype) == ("sum", 100, 1e-4, "float64")
    r = compare_dump(DUMP, side, parse_spec("eps=1e-6"))
    # eps added to the sum of squares: eps/d = 1e-6 on q, so both sides are the same
    assert r.max_abs_change is not None and r.max_abs_change < 1e-15


@pytest.mark.parametrize(
    ("defaults", "message"),
    [
        ("eps: 1e-4, placement: sum", "placement is sum but dim is missing for 2 layer(s)"),
        ("eps: 1e-4", "placement is missing for 2 layer(s)"),
    ],
)
def test_incomplete_config_is_refused(tmp_path: Path, defaults: str, message: str) -> None:
    cfg = load_config(_yaml(tmp_path, defaults))
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        specs_from_config(cfg, LAYERS, "--to")
    assert "give an explicit SPEC to --to" in str(info.value)


def test_sum_dim_must_match_raw_activations(cli: Cli, tmp_path: Path) -> None:
    x = np.full((3, 64), 0.01, np.float32)
    dump = tmp_path / "x.npz"
    np.savez(dump, **{LAYERS[0]: x})
    cfg = _yaml(tmp_path, "eps: 1e-4, placement: sum, dim: 128")
    res = cli(
        "compare", "-q", str(dump), "--raw", "--from", "config", "-c", str(cfg), "--to", "eps=1e-6"
    )
    assert res.exit_code == 2
    assert "--from 'config' says dim=128 but the activations have d = 64" in res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--from", "config", "--to", "eps=1e-5"), "--from config needs --config FILE"),
        (("--from", "eps=1e-6", "--to", "config"), "--to config needs --config FILE"),
        (
            ("--from", "eps=1e-6", "--to", "eps=1e-5", "-c", str(PER_LAYER)),
            "--config is used by --from config or --to config",
        ),
        (
            ("--from", "config", "--to", "config", "-c", str(PER_LAYER)),
            "would both read --config",
        ),
        (
            ("--from", "config", "--to", "eps=1e-5", "-c", str(EXAMPLES / "nope.yaml")),
            "nope.yaml: no such file",
        ),
    ],
)
def test_usage_errors(cli: Cli, args: tuple[str, ...], message: str) -> None:
    res = cli("compare", "-q", str(DUMP), *args)
    assert res.exit_code == 2 and message in res.stderr, res
