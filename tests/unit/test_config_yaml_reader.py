"""Our YAML schema: numeric strings, unknown keys, bad values, unsafe tags, configs/*.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmsnorm_eps.config import load_config
from rmsnorm_eps.errors import InputFileError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_yaml_1_1_reads_1e_6_as_a_string_and_we_accept_it(tmp_path: Path) -> None:
    import yaml

    assert yaml.safe_load("eps: 1e-6")["eps"] == "1e-6"  # the YAML 1.1 trap itself
    cfg = load_config(write(tmp_path, "schema_version: 1\ndefaults: {eps: 1e-6, dim: '128'}\n"))
    assert cfg.defaults.eps.value == 1e-6
    assert isinstance(cfg.defaults.eps.value, float)
    assert cfg.defaults.dim.value == 128
    assert cfg.defaults.eps.provenance.key == "defaults.eps"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("schema_version: 1\ndefaults: {epsilon: 1e-6}\n", "defaults.epsilon"),
        ("schema_version: 1\nmodle: x\n", "unknown key 'modle'"),
        (
            "schema_version: 1\nlayers: {'*.q_norm': {eps: 1e-6, dims: 128}}\n",
            'layers["*.q_norm"].dims',
        ),
    ],
)
def test_unknown_keys_are_errors(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(InputFileError, match=None) as info:
        load_config(write(tmp_path, text))
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("defaults: {eps: one}", "defaults.eps", "expected a number, got 'one'"),
        ("defaults: {eps: true}", "defaults.eps", "expected a number, got True"),
        ("defaults: {eps: -1e-6}", "defaults.eps", "must be a finite number > 0"),
        ("defaults: {eps: .nan}", "defaults.eps", "must be a finite number > 0"),
        ("layers: {'*.k_norm': {eps: 1e-6x}}", 'layers["*.k_norm"].eps', "'1e-6x'"),
        ("defaults: {dim: 12.5}", "defaults.dim", "positive integer"),
        ("defaults: {placement: under}", "defaults.placement", "inside, outside, clamp, sum"),
        ("defaults: {gain: 2w}", "defaults.gain", "w, 1+w"),
        ("defaults: {norm: batch}", "defaults.norm", "rms, layer"),
        ("defaults: {gain_baked: 1}", "defaults.gain_baked", "true or false"),
    ],
)
def test_bad_values_name_the_key_path(tmp_path: Path, text: str, key: str, problem: str) -> None:
    with pytest.raises(InputFileError) as info:
        load_config(write(tmp_path, "schema_version: 1\n" + text + "\n"))
    assert info.value.key == key
    assert problem in str(info.value)


def test_python_tags_are_rejected_and_run_no_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = f"schema_version: 1\nmodel: !!python/object/apply:os.system ['touch {marker}']\n"
    with pytest.raises(InputFileError, match="invalid YAML"):
        load_config(write(tmp_path, text))
    assert not marker.exists()


def test_duplicate_keys_are_errors(tmp_path: Path) -> None:
    text = "schema_version: 1\nlayers:\n  '*.q_norm': {eps: 1e-6}\n  '*.q_norm': {eps: 1e-5}\n"
    with pytest.raises(InputFileError, match="duplicate key") as info:
        load_config(write(tmp_path, text))
    assert info.value.key == "layers.*.q_norm"


@pytest.mark.parametrize("text", ["schema_version: 2\n", "model: x\n", "- 1\n", "a: [\n"])
def test_bad_documents(tmp_path: Path, text: str) -> None:
    with pytest.raises(InputFileError):
        load_config(write(tmp_path, text))


def test_layers_overlay_defaults_in_file_order(tmp_path: Path) -> None:
    text = (
        "schema_version: 1\n"
        "defaults: {eps: 1e-5, dim: 4096}\n"
        "layers:\n"
        "  '*': {}\n"
        "  '*.self_attn.q_norm': {eps: 1e-6, dim: 128}\n"
        "  'model.layers.0.*': {eps: 1e-4}\n"
    )
    cfg = load_config(write(tmp_path, text))
    q0 = cfg.settings_for("model.layers.0.self_attn.q_norm")
    assert q0 is not None and q0.eps.value == 1e-4 and q0.dim.value == 128
    assert q0.eps.provenance.key == 'layers["model.layers.0.*"].eps'
    q1 = cfg.settings_for("model.layers.1.self_attn.q_norm")
    assert q1 is not None and q1.eps.value == 1e-6
    other = cfg.settings_for("model.norm")
    assert other is not None and other.eps.value == 1e-5 and other.dim.value == 4096
    assert other.placement.is_missing and other.placement.provenance.kind == "missing"


def test_no_layers_means_defaults_everywhere(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "schema_version: 1\ndefaults: {eps: 1e-5}\n"))
    s = cfg.settings_for("anything.at.all")
    assert s is not None and s.eps.value == 1e-5
    assert any("implicit '*'" in n for n in cfg.notes)


EXPECTED = {
    "llama-2-7b.yaml": (1e-5, "w", 4096),
    "llama-3-8b.yaml": (1e-5, "w", 4096),
    "mistral-7b.yaml": (1e-5, "w", 4096),
    "qwen2.5-7b.yaml": (1e-6, "w", 3584),
    "qwen3-8b.yaml": (1e-6, "w", 4096),
    "gemma-3-270m.yaml": (1e-6, "1+w", 640),
    "deepseek-v3.yaml": (1e-6, "w", 7168),
    "t5-base.yaml": (1e-6, "w", 768),
    "smollm2-135m.yaml": (1e-5, "w", 576),
}


def test_every_shipped_config_is_listed() -> None:
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_configs_resolve_every_setting(name: str) -> None:
    eps, gain, dim = EXPECTED[name]
    cfg = load_config(CONFIGS / name)
    assert cfg.defaults.eps.value == eps
    assert cfg.defaults.gain.value == gain
    assert cfg.defaults.dim.value == dim
    assert cfg.source and cfg.source.startswith("https://huggingface.co/")
    for pattern, settings in cfg.resolved_entries():
        for field in (
            "eps",
            "placement",
            "gain",
            "gain_baked",
            "reduction_dtype",
            "weight_after_cast",
            "dim",
            "norm",
        ):
            assert not settings.get(field).is_missing, (name, pattern, field)


def test_per_head_and_mla_dims() -> None:
    qwen3 = load_config(CONFIGS / "qwen3-8b.yaml")
    for n in ("q_norm", "k_norm"):
        s = qwen3.settings_for(f"model.layers.7.self_attn.{n}")
        assert s is not None and s.dim.value == 128 and s.eps.value == 1e-6
    s = qwen3.settings_for("model.layers.7.input_layernorm")
    assert s is not None and s.dim.value == 4096
    ds = load_config(CONFIGS / "deepseek-v3.yaml")
    q = ds.settings_for("model.layers.3.self_attn.q_a_layernorm")
    kv = ds.settings_for("model.layers.3.self_attn.kv_a_layernorm")
    assert q is not None and q.dim.value == 1536
    assert kv is not None and kv.dim.value == 512
    t5 = load_config(CONFIGS / "t5-base.yaml")
    for name in (
        "encoder.block.0.layer.0.layer_norm",
        "decoder.block.5.layer.2.layer_norm",
        "encoder.final_layer_norm",
        "decoder.final_layer_norm",
    ):
        assert t5.settings_for(name) is not None, name
    assert t5.settings_for("shared") is None
