"""The config.json family table (issue 13 item 6): norm kind, gain, per-head/full-width/gated
entries and hard-coded eps for every current model type, each citing a modeling file that
exists; config.json -> our YAML -> read back resolves every layer the same."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from rmsnorm_eps.config import diff_configs, load_config
from rmsnorm_eps.config.globs import witness
from rmsnorm_eps.config.hf_families import HF_FAMILIES
from rmsnorm_eps.config.model import FIELDS, NormConfig
from rmsnorm_eps.config.yaml_writer import render_config_yaml

transformers = pytest.importorskip("transformers")
MODELS_DIR = Path(transformers.__file__).parent / "models"

#: model_type -> (norm, gain, {extra pattern: expected settings}); dims are functions of the
#: config dict, computed here the way the modeling file sizes the module.
Expected = tuple[str, str, dict[str, dict[str, Any]]]


def _hd(c: dict[str, Any]) -> int:
    return int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])


def _qk(c: dict[str, Any], **extra: Any) -> dict[str, dict[str, Any]]:
    return {f"*.self_attn.{n}": {"dim": _hd(c), **extra} for n in ("q_norm", "k_norm")}


def expected(mtype: str, c: dict[str, Any]) -> Expected:
    plain = {"norm": "rms", "gain": "w"}
    table: dict[str, Any] = {
        "qwen3": lambda: ("rms", "w", _qk(c)),
        "qwen3_moe": lambda: ("rms", "w", _qk(c)),
        "qwen3_next": lambda: (
            "rms",
            "1+w",
            {
                **_qk(c),
                "*.linear_attn.norm": {
                    "norm": "gated-rms",
                    "gain": "w",
                    "dim": c["linear_value_head_dim"],
                },
            },
        ),
        "gemma": lambda: ("rms", "1+w", {}),
        "gemma2": lambda: ("rms", "1+w", {}),
        "gemma3_text": lambda: ("rms", "1+w", _qk(c)),
        "recurrent_gemma": lambda: ("rms", "1+w", {}),
        "gemma3n_text": lambda: (
            "rms",
            "w",
            {**_qk(c), "*.self_attn.v_norm": {"dim": _hd(c), "gain": "none"}},
        ),
        "olmo": lambda: ("layer", "none", {}),
        "olmo2": lambda: (
            "rms",
            "w",
            {
                "*.self_attn.q_norm": {"dim": c["num_attention_heads"] * _hd(c)},
                "*.self_attn.k_norm": {"dim": c["num_key_value_heads"] * _hd(c)},
            },
        ),
        "cohere": lambda: ("layer", "w", _qk(c, norm="layer")),
        "falcon": lambda: ("layer", "w", {}),
        "gpt_neox": lambda: ("layer", "w", {}),
        "bert": lambda: ("layer", "w", {}),
        "roberta": lambda: ("layer", "w", {}),
        "mamba2": lambda: (
            "rms",
            "w",
            {
                "*.mixer.norm": {
                    "norm": "gated-rms",
                    "dim": int(c["expand"] * c["hidden_size"]) // c["n_groups"],
                }
            },
        ),
        "bamba": lambda: (
            "rms",
            "w",
            {
                "*.mamba.norm": {
                    "norm": "gated-rms",
                    "dim": int(c["mamba_expand"] * c["hidden_size"]) // c["mamba_n_groups"],
                }
            },
        ),
        "nemotron_h": lambda: (
            "rms",
            "w",
            {
                "*.mixer.norm": {
                    "norm": "gated-rms",
                    "dim": c["mamba_num_heads"] * c["mamba_head_dim"] // c["n_groups"],
                }
            },
        ),
        "falcon_h1": lambda: (
            "rms",
            "w",
            {
                "*.mamba.norm": {
                    "norm": "gated-rms",
                    "dim": (c["mamba_d_ssm"] or int(c["mamba_expand"] * c["hidden_size"]))
                    // c["mamba_n_groups"],
                    "weight_after_cast": False,
                }
            },
        ),
        "llama4_text": lambda: (
            "rms",
            "w",
            {"*.self_attn.qk_norm": {"norm": "l2", "gain": "none", "dim": _hd(c)}},
        ),
        "deepseek_v3": lambda: (
            "rms",
            "w",
            {
                "*.self_attn.q_a_layernorm": {"dim": c["q_lora_rank"], "eps": 1e-6},
                "*.self_attn.kv_a_layernorm": {"dim": c["kv_lora_rank"], "eps": 1e-6},
            },
        ),
    }
    if mtype not in table:
        return plain["norm"], plain["gain"], {}
    result: Expected = table[mtype]()
    return result


FAMILIES = (
    *("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "qwen3_next"),
    *("gemma", "gemma2", "gemma3_text", "gemma3n_text", "recurrent_gemma", "phi3"),
    *("olmo", "olmo2", "cohere", "falcon", "gpt_neox", "mamba2", "bamba", "nemotron_h"),
    *("falcon_h1", "llama4_text", "granite", "smollm3", "deepseek_v3", "t5", "bert", "roberta"),
)
#: Options that switch a family's extra norms on (off in the config class default).
SWITCHES: dict[str, dict[str, Any]] = {
    "cohere": {"use_qk_norm": True},
    "falcon_h1": {"mamba_rms_norm": True},
}


def _config_json(tmp_path: Path, mtype: str, **changes: Any) -> tuple[Path, dict[str, Any]]:
    config = transformers.AutoConfig.for_model(mtype, **{**SWITCHES.get(mtype, {}), **changes})
    path = tmp_path / mtype / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config.to_json_string(use_diff=False), "utf-8")
    return path, json.loads(path.read_text("utf-8"), parse_constant=lambda _: None)


@pytest.mark.parametrize("mtype", FAMILIES)
def test_family_table_entry(tmp_path: Path, mtype: str) -> None:
    path, data = _config_json(tmp_path, mtype)
    cfg = load_config(path.parent)  # the model directory, as capture --model DIR reads it
    assert cfg.path == str(path)
    norm, gain, extras = expected(mtype, data)
    assert cfg.defaults.norm.value == norm
    assert cfg.defaults.gain.value == gain
    assert cfg.defaults.placement.value == "inside"
    assert cfg.defaults.eps.value is not None, cfg.defaults.eps
    shown = dict(cfg.resolved_entries())
    assert set(shown) == {"*", *extras}
    for pattern, want in extras.items():
        got = {k: shown[pattern].get(k).value for k in want}
        assert got == want, pattern
    # the cited modeling file is real
    source = HF_FAMILIES[mtype].source
    rel = source.split(" src/transformers/models/", 1)[1]
    assert (MODELS_DIR / rel).is_file(), source
    assert source in cfg.defaults.placement.provenance.source


def test_deepseek_mla_eps_is_hard_coded(tmp_path: Path) -> None:
    path, _ = _config_json(tmp_path, "deepseek_v3", rms_norm_eps=1e-5)
    cfg = load_config(path)
    assert cfg.defaults.eps.value == 1e-5
    q_a = cfg.settings_for("model.layers.0.self_attn.q_a_layernorm")
    assert q_a is not None and q_a.eps.value == 1e-6
    assert q_a.eps.provenance.kind == "framework"
    assert "modeling_deepseek_v3.py" in q_a.eps.provenance.describe()


def test_olmo_eps_is_hard_coded(tmp_path: Path) -> None:
    path, _ = _config_json(tmp_path, "olmo")
    data = json.loads(path.read_text())
    data["layer_norm_eps"] = 1e-3  # not read by OlmoLayerNorm
    path.write_text(json.dumps(data))
    cfg = load_config(path)
    assert cfg.defaults.eps.value == 1e-5
    assert "hard-coded" in cfg.defaults.eps.provenance.describe()
    assert any("ignores the config's eps keys" in n for n in cfg.notes)


def _same_everywhere(a: NormConfig, b: NormConfig) -> None:
    for entry in (*a.entries, *b.entries):
        name = witness(entry.pattern)
        assert name is not None
        sa, sb = a.settings_for(name), b.settings_for(name)
        assert sa is not None and sb is not None
        for field in FIELDS:
            assert sa.get(field).value == sb.get(field).value, (name, field)


@pytest.mark.parametrize("mtype", FAMILIES)
def test_roundtrip_through_yaml(tmp_path: Path, mtype: str) -> None:
    path, _ = _config_json(tmp_path, mtype)
    cfg = load_config(path)
    yaml_path = tmp_path / f"{mtype}.yaml"
    yaml_path.write_text(render_config_yaml(cfg), "utf-8")
    back = load_config(yaml_path)
    _same_everywhere(cfg, back)
    assert diff_configs(cfg, back).equivalent


def test_capture_config_out_reads_back(tmp_path: Path) -> None:
    """capture --config-out writes `gain: none` for a weightless norm: readable as written."""
    from rmsnorm_eps.capture.output import write_config
    from rmsnorm_eps.capture.records import CaptureResult, ModuleRecord

    def record(name: str, gain: str, dim: int) -> ModuleRecord:
        known = {
            "name": name,
            "class_name": "X",
            "kind": "hf",
            "eps": 1e-6,
            "eps_source": "module.eps",
            "dim": dim,
            "input_dtype": "float32",
            "gain": gain,
            "weight": None,
            "weight_dtype": None,
            "layout": None,
            "heads": 1,
            "calls": 1,
            "count": 4,
        }
        required = {
            f.name: None
            for f in dataclasses.fields(ModuleRecord)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        return ModuleRecord(**{**required, **known})

    result = CaptureResult(
        modules=(
            record("model.layers.0.input_layernorm", "w", 64),
            record("model.layers.0.self_attn.v_norm", "none", 16),
        ),
        sequences=1,
        tokens=4,
        summary_only=False,
        q_dtype="float32",
        min_ratio=None,
    )
    out = tmp_path / "captured.yaml"
    write_config(result, out, "tiny", "test")
    cfg = load_config(out)
    v = cfg.settings_for("model.layers.0.self_attn.v_norm")
    assert v is not None and v.gain.value == "none" and v.dim.value == 16


def test_yaml_accepts_every_norm_kind_and_gain_none(tmp_path: Path) -> None:
    for norm in ("rms", "layer", "gated-rms", "l2"):
        p = tmp_path / f"{norm}.yaml"
        p.write_text(f"schema_version: 1\ndefaults: {{eps: 1e-6, norm: {norm}, gain: none}}\n")
        cfg = load_config(p)
        assert cfg.defaults.norm.value == norm and cfg.defaults.gain.value == "none"


def test_model_dir_with_several_ggufs_names_them(tmp_path: Path) -> None:
    from rmsnorm_eps.errors import InputFileError

    for name in ("a-Q4.gguf", "a-Q8.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    with pytest.raises(InputFileError, match=r"2 GGUF files \(a-Q4.gguf, a-Q8.gguf\)"):
        load_config(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputFileError, match=r"without config\.json"):
        load_config(empty)


def test_config_show_dir_cli(tmp_path: Path, cli: Any) -> None:
    path, _ = _config_json(tmp_path, "olmo2")
    res = cli("config", "show", str(path.parent), "--format", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["path"] == str(path)
    patterns = [x["pattern"] for x in doc["layers"]]
    assert patterns == ["*", "*.self_attn.q_norm", "*.self_attn.k_norm"]
