"""``config show``, ``config diff`` and ``ratio --config``: exit codes and content."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
Cli = Callable[..., Any]

LLAMA3_JSON = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "rms_norm_eps": 1e-05,
}


def write(tmp_path: Path, name: str, content: str | dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(content) if isinstance(content, dict) else content, "utf-8")
    return path


def test_show_text_and_json(cli: Cli) -> None:
    res = cli("config", "show", str(CONFIGS / "qwen3-8b.yaml"))
    assert res.exit_code == 0
    assert "*.self_attn.q_norm: dim = 128" in res.stdout
    assert "defaults.eps" in res.stdout
    res = cli("config", "show", str(CONFIGS / "qwen3-8b.yaml"), "--format", "json")
    doc = json.loads(res.stdout)
    assert doc["command"] == "config show" and doc["schema_version"] == 1
    assert doc["defaults"]["eps"]["value"] == 1e-6
    assert doc["defaults"]["eps"]["provenance"]["key"] == "defaults.eps"
    q = next(x for x in doc["layers"] if x["pattern"] == "*.self_attn.q_norm")
    assert q["settings"]["dim"]["value"] == 128 and q["sets"] == ["eps", "dim"]


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_show_every_shipped_config(cli: Cli, name: str) -> None:
    res = cli("config", "show", str(CONFIGS / name), "--format", "json")
    assert res.exit_code == 0, res
    assert json.loads(res.stdout)["kind"] == "yaml"


def test_show_missing_eps_says_missing(cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path, "config.json", {"model_type": "llama"})
    res = cli("config", "show", str(path))
    assert res.exit_code == 0
    assert "missing; no eps key" in res.stdout
    words = " ".join(res.stdout.split())  # the long provenance wraps inside its column
    assert "class default would be 1e-06, but checkpoints usually set their own value" in words
    assert " eps missing missing; no eps key" in words  # setting and value columns kept


def test_show_bad_input_exit_2(cli: Cli, tmp_path: Path) -> None:
    res = cli("config", "show", str(tmp_path / "nope.yaml"))
    assert res.exit_code == 2 and "nope.yaml: no such file" in res.stderr
    bad = write(tmp_path, "bad.yaml", "schema_version: 1\ndefaults: {eps: tiny}\n")
    res = cli("config", "show", str(bad))
    assert res.exit_code == 2
    assert "bad.yaml [defaults.eps]: expected a number, got 'tiny'" in res.stderr
    empty = write(tmp_path, "empty.yaml", "")
    assert cli("config", "show", str(empty)).exit_code == 2


def test_diff_json_vs_equivalent_yaml_exit_0(cli: Cli, tmp_path: Path) -> None:
    hf = write(tmp_path, "config.json", LLAMA3_JSON)
    res = cli("config", "diff", str(hf), str(CONFIGS / "llama-3-8b.yaml"))
    assert res.exit_code == 0, res
    assert "EQUIVALENT" in res.stdout


def test_diff_eps_1e5_vs_1e6_exit_1(cli: Cli, tmp_path: Path) -> None:
    hf = write(tmp_path, "config.json", dict(LLAMA3_JSON, rms_norm_eps=1e-6))
    res = cli("config", "diff", str(hf), str(CONFIGS / "llama-3-8b.yaml"))
    assert res.exit_code == 1
    line = next(x for x in res.stdout.splitlines() if x.startswith("DIFF eps"))
    assert "A 1e-06 (rms_norm_eps) vs B 1e-05 (defaults.eps)" in line
    assert "DIFFERENT: 1 difference(s)" in res.stdout
    assert (
        cli("config", "diff", str(hf), str(CONFIGS / "llama-3-8b.yaml"), "--exit-zero").exit_code
        == 0
    )
    doc = json.loads(
        cli("config", "diff", str(hf), str(CONFIGS / "llama-3-8b.yaml"), "--format", "json").stdout
    )
    assert doc["equivalent"] is False
    assert [d["field"] for d in doc["differences"] if d["significant"]] == ["eps"]


def test_diff_gain_w_vs_1_plus_w_exit_1(cli: Cli, tmp_path: Path) -> None:
    a = write(
        tmp_path,
        "a.yaml",
        "schema_version: 1\ndefaults: {eps: 1e-6, placement: inside, gain: w, norm: rms}\n",
    )
    b = write(
        tmp_path,
        "b.yaml",
        "schema_version: 1\ndefaults: {eps: 1e-6, placement: inside, gain: 1+w, norm: rms}\n",
    )
    res = cli("config", "diff", str(a), str(b))
    assert res.exit_code == 1
    assert "DIFF gain [*]: differ: A w (defaults.gain) vs B 1+w (defaults.gain)" in res.stdout


def test_diff_placement_and_missing(cli: Cli, tmp_path: Path) -> None:
    a = write(
        tmp_path,
        "a.yaml",
        "schema_version: 1\ndefaults: {eps: 1e-6, placement: inside, gain: w, norm: rms}\n",
    )
    b = write(
        tmp_path,
        "b.yaml",
        "schema_version: 1\ndefaults: {eps: 1e-6, placement: outside, gain: w}\n",
    )
    res = cli("config", "diff", str(a), str(b))
    assert res.exit_code == 1
    assert "DIFF placement" in res.stdout
    assert "DIFF norm [*]: cannot compare: A rms (defaults.norm) vs B missing" in res.stdout


def test_diff_unreadable_exit_2(cli: Cli, tmp_path: Path) -> None:
    res = cli("config", "diff", str(CONFIGS / "t5-base.yaml"), str(tmp_path / "x.json"))
    assert res.exit_code == 2
    assert "x.json: no such file" in res.stderr


# ---- ratio --config -------------------------------------------------------------------------


@pytest.fixture
def qwen_dump(write_npz: Callable[..., Path]) -> Path:
    # q = 5e-5: q/eps = 50 with eps 1e-6 (passes 49.25...), 5 with eps 1e-5 (violates)
    q = np.full(4, 5e-5, np.float64)
    return write_npz(
        **{
            "model.layers.0.input_layernorm": q,
            "model.layers.0.self_attn.q_norm": q,
        }
    )


def test_ratio_config_applies_per_layer_eps(cli: Cli, tmp_path: Path, qwen_dump: Path) -> None:
    cfg = write(
        tmp_path,
        "c.yaml",
        "schema_version: 1\ndefaults: {eps: 1e-5}\nlayers:\n"
        "  '*.input_layernorm': {}\n  '*.self_attn.q_norm': {eps: 1e-6}\n",
    )
    res = cli("ratio", "--config", str(cfg), "--q-file", str(qwen_dump), "--format", "json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    eps = {layer["name"]: layer["eps"] for layer in doc["layers"]}
    assert eps == {"model.layers.0.input_layernorm": 1e-5, "model.layers.0.self_attn.q_norm": 1e-6}
    assert doc["summary"]["layers_affected"] == ["model.layers.0.input_layernorm"]
    ratios = {layer["name"]: layer["min_ratio"] for layer in doc["layers"]}
    assert ratios["model.layers.0.input_layernorm"] == pytest.approx(5.0, rel=1e-12)
    assert ratios["model.layers.0.self_attn.q_norm"] == pytest.approx(50.0, rel=1e-12)
    a = doc["layers"][0]["min_attenuation"]
    assert (
        f"{a:.6g}" == "0.912871"
    )  # sqrt(5/6), as in the old docs example (docs/configs.md now uses examples/configs)


def test_ratio_config_unmatched_layers_error(cli: Cli, tmp_path: Path, qwen_dump: Path) -> None:
    res = cli("ratio", "--config", str(CONFIGS / "llama-3-8b.yaml"), "--q-file", str(qwen_dump))
    assert res.exit_code == 2
    assert "1 dump layer(s) match no layer pattern" in res.stderr
    assert "model.layers.0.self_attn.q_norm" in res.stderr
    res = cli(
        "ratio",
        "--config",
        str(CONFIGS / "llama-3-8b.yaml"),
        "--q-file",
        str(qwen_dump),
        "--fallback-eps",
        "1e-6",
        "--allow-unmatched",  # the Llama config's other patterns match no layer of this dump
        "--format",
        "json",
    )
    assert res.exit_code == 1  # input_layernorm at 1e-5 violates; q_norm uses the fallback
    eps = {layer["name"]: layer["eps"] for layer in json.loads(res.stdout)["layers"]}
    assert eps["model.layers.0.self_attn.q_norm"] == 1e-6
    assert eps["model.layers.0.input_layernorm"] == 1e-5


def test_ratio_config_missing_eps(cli: Cli, tmp_path: Path, qwen_dump: Path) -> None:
    hf = write(tmp_path, "config.json", {"model_type": "qwen3", "head_dim": 128})
    res = cli("ratio", "--config", str(hf), "--q-file", str(qwen_dump))
    assert res.exit_code == 2
    assert "eps is missing" in res.stderr and "give --fallback-eps" in res.stderr
    res = cli("ratio", "--config", str(hf), "--q-file", str(qwen_dump), "--fallback-eps", "1e-6")
    assert res.exit_code == 0


def test_ratio_refuses_eps_with_config(cli: Cli) -> None:
    """--eps 1e-3 with a config that covers every layer used to run at the config's 1e-5 and
    say PASS with no word about --eps (at 1e-3 layer 0 fails)."""
    dump = str(EXAMPLES / "q_layers.npz")
    cfg = str(EXAMPLES / "per-layer.yaml")
    res = cli("ratio", dump, "--config", cfg, "--eps", "1e-3")
    assert res.exit_code == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--eps and --config are exclusive" in lines[0]
    assert "layers:" in lines[0] and "--fallback-eps" in lines[0]
    res = cli("ratio", dump, "--fallback-eps", "1e-3")
    assert res.exit_code == 2 and "--fallback-eps needs --config" in res.stderr


def test_ratio_needs_eps_or_config(cli: Cli, qwen_dump: Path) -> None:
    res = cli("ratio", "--q-file", str(qwen_dump))
    assert res.exit_code == 2 and "--config" in res.stderr


def test_help_does_not_import_heavy_modules() -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom rmsnorm_eps.cli import app\n"
        "try:\n    app(['config', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('yaml', 'numpy', 'gguf', 'rmsnorm_eps.config') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


EXAMPLES = ROOT / "examples" / "configs"


def test_ratio_config_on_the_shipped_examples(cli: Cli) -> None:
    # the docs/configs.md example: q_norm's own eps 1e-6 lets it pass, input_layernorm fails
    dump = str(EXAMPLES / "q_layers.npz")
    res = cli("ratio", "--config", str(EXAMPLES / "per-layer.yaml"), "-q", dump, "--format", "json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    rows = {x["name"]: (x["eps"], x["violations"], x["min_attenuation"]) for x in doc["layers"]}
    assert {k: (e, v) for k, (e, v, _) in rows.items()} == {
        "model.layers.0.input_layernorm": (1e-5, 1),
        "model.layers.0.self_attn.q_norm": (1e-6, 0),
    }
    shown = [f"{a:.6g}" for (_, _, a) in rows.values()]
    assert shown == ["0.912871", "0.990148"]  # sqrt(5/6), sqrt(50/51)
    res = cli("ratio", "--config", str(ROOT / "configs" / "llama-3-8b.yaml"), "-q", dump)
    assert res.exit_code == 2 and "model.layers.0.self_attn.q_norm" in res.stderr


def test_config_diff_on_the_shipped_examples(cli: Cli) -> None:
    res = cli(
        "config",
        "diff",
        str(EXAMPLES / "llama-3-8b-eps-1e-6.json"),
        str(ROOT / "configs" / "llama-3-8b.yaml"),
    )
    assert res.exit_code == 1 and "A 1e-06 (rms_norm_eps) vs B 1e-05" in res.stdout
    res = cli(
        "config",
        "diff",
        str(EXAMPLES / "llama-3-8b.json"),
        str(ROOT / "configs" / "llama-3-8b.yaml"),
    )
    assert res.exit_code == 0 and "EQUIVALENT" in res.stdout
    res = cli("config", "show", str(EXAMPLES / "llama-3-8b-no-eps.json"), "--format", "json")
    assert res.exit_code == 0
    assert json.loads(res.stdout)["defaults"]["eps"]["value"] is None


def test_ratio_config_shows_eps_provenance(cli: Cli) -> None:
    import jsonschema

    from rmsnorm_eps.reports.schema import load_schema

    dump = str(EXAMPLES / "q_layers.npz")
    llama = str(ROOT / "configs" / "llama-3-8b.yaml")
    res = cli(
        "ratio",
        "--config",
        llama,
        "--fallback-eps",
        "1e-6",
        "-q",
        dump,
        "--format",
        "json",
        "--allow-unmatched",
    )
    doc = json.loads(res.stdout)
    jsonschema.Draft202012Validator(load_schema("ratio")).validate(doc)
    sources = {x["name"]: x["eps_source"] for x in doc["layers"]}
    assert sources == {
        "model.layers.0.input_layernorm": (
            f"{llama}: defaults.eps (layer matches *.input_layernorm)"
        ),
        "model.layers.0.self_attn.q_norm": "--fallback-eps",
    }
    cfg = str(EXAMPLES / "per-layer.yaml")
    text = cli("ratio", "--config", cfg, "-q", dump, "--histogram", "none").stdout
    assert (
        f'eps 1e-06 from {cfg}: layers["*.self_attn.q_norm"].eps (layer matches '
        "*.self_attn.q_norm): model.layers.0.self_attn.q_norm"
    ) in text
    # without --config there is no provenance to show
    plain = cli("ratio", "--eps", "1e-5", "-q", dump, "--format", "json").stdout
    assert all("eps_source" not in x for x in json.loads(plain)["layers"])
    bare = cli("ratio", "--eps", "1e-5", "-q", dump, "--histogram", "none").stdout
    assert "eps 1e-05 from" not in bare and "(layer matches" not in bare


def test_a_pattern_that_matches_no_layer_is_an_error(cli: Cli, tmp_path: Path) -> None:
    """A typo beside a catch-all: every layer would silently keep the default eps."""
    np.savez(
        tmp_path / "q.npz",
        **{
            "model.layers.0.input_layernorm": np.array([1e-3, 1.0]),
            "model.norm": np.array([1.0]),
        },
    )
    config = tmp_path / "typo.yaml"
    config.write_text(
        "schema_version: 1\ndefaults: {eps: 1.0e-5}\nlayers:\n"
        '  "*.input_layernrom": {eps: 1.0e-6}\n  "*": {}\n',
        "utf-8",
    )
    res = cli("ratio", str(tmp_path / "q.npz"), "--config", str(config))
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1
    assert "1 layer pattern(s) match no layer of the dump: *.input_layernrom" in res.stderr
    assert "--allow-unmatched" in res.stderr
    res = cli(
        "compare",
        str(tmp_path / "q.npz"),
        "--from",
        "config",
        "-c",
        str(config),
        "--to",
        "eps=1e-6",
    )
    assert res.exit_code == 2 and "*.input_layernrom" in res.stderr
    # accepted on request: the override then applies to nothing, the default to every layer
    res = cli(
        "ratio",
        str(tmp_path / "q.npz"),
        "--config",
        str(config),
        "--allow-unmatched",
        "--format",
        "json",
    )
    assert res.exit_code == 0
    assert {ly["eps"] for ly in json.loads(res.stdout)["layers"]} == {1e-5}
