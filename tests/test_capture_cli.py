"""`rmsnorm-eps capture`: error paths (no model needed) and the real SmolLM2-135M run (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import smollm2_dir

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "RMSNorm divides each vector by the root mean square of its elements.",
    "Hello",
]
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# docs/capture.md's ratio excerpt: first token (n, min q/eps, max q) | other tokens (same)
DOC_POSITION_ROWS = {
    "model.layers.0.input_layernorm": (3, 695.1, 0.01227, 23, 713.7, 0.0161),
    "model.layers.0.post_attention_layernorm": (3, 1729, 0.01893, 23, 1298, 0.02568),
    "model.layers.1.input_layernorm": (3, 3.944e05, 6.851, 23, 1.805e05, 9.183),
    "model.layers.1.post_attention_layernorm": (3, 7.199e05, 13.68, 23, 3.089e05, 14.31),
    "model.layers.2.input_layernorm": (3, 6.221e06, 162, 23, 5.371e05, 35.75),
    "model.layers.2.post_attention_layernorm": (3, 5.751e06, 154.3, 23, 5.829e05, 36.52),
    "model.layers.3.input_layernorm": (3, 7.966e07, 1100, 23, 7.965e05, 680.5),
    "model.layers.3.post_attention_layernorm": (3, 7.923e07, 1095, 23, 8.56e05, 676.5),
    "model.layers.15.input_layernorm": (3, 8.931e10, 9.025e05, 23, 3.347e06, 85.46),
}
# docs/capture.md's capture excerpt: min q/eps per module
DOC_MIN_RATIO = {
    "model.layers.0.input_layernorm": 695.112,
    "model.layers.0.post_attention_layernorm": 1298.11,
    "model.layers.29.post_attention_layernorm": 6.05986e07,
    "model.norm": 4.29387e07,
}


def test_needs_text(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("capture", "--model", str(tmp_path), "--save-data", str(tmp_path / "d.npz"))
    assert r.exit_code == 2 and "--text" in r.stderr
    f = tmp_path / "t.txt"
    f.write_text("x\n")
    r = cli(
        "capture",
        "--model",
        str(tmp_path),
        "--text",
        "a",
        "--text-file",
        str(f),
        "--save-data",
        str(tmp_path / "d.npz"),
    )
    assert r.exit_code == 2 and "not both" in r.stderr


def test_bad_text_file_and_model_dir(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "t.txt"
    f.write_bytes(b"\xff\xfe bad")
    r = cli("capture", "--model", str(tmp_path), "--text-file", str(f), "--save-data", "d.npz")
    assert r.exit_code == 2 and "t.txt: not UTF-8 text" in r.stderr
    f.write_text("\n  \n")
    r = cli("capture", "--model", str(tmp_path), "--text-file", str(f), "--save-data", "d.npz")
    assert r.exit_code == 2 and "holds no text" in r.stderr
    r = cli("capture", "--model", str(tmp_path), "--text", "hi", "--save-data", "d.npz")
    assert r.exit_code == 2 and "not a model directory: no config.json" in r.stderr
    r = cli("capture", "--model", str(tmp_path / "none"), "--text", "hi", "--save-data", "d.npz")
    assert r.exit_code == 2 and "none: no such directory" in r.stderr
    r = cli(
        "capture",
        "--model",
        str(tmp_path),
        "--gguf",
        "m.gguf",
        "--text",
        "hi",
        "--save-data",
        "d.npz",
    )
    assert r.exit_code == 2 and "m.gguf: no such GGUF file" in r.stderr
    r = cli(
        "capture",
        "--model",
        str(tmp_path),
        "--text",
        "hi",
        "--save-data",
        "d.npz",
        "--dtype",
        "int8",
    )
    assert r.exit_code == 2 and "int8" in r.stderr
    r = cli(
        "capture",
        "--model",
        str(tmp_path),
        "--text",
        "hi",
        "--save-data",
        "d.npz",
        "--delta",
        "0.1",
    )
    assert r.exit_code == 2 and "--summary-only" in r.stderr


def _row(text: str, name: str) -> list[str]:
    return next(line.split() for line in text.splitlines() if line.split()[:1] == [name])


@pytest.mark.slow
def test_real_smollm2_capture_then_ratio(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The README's SmolLM2 example: exactly its commands, and the figures it shows.

    q/eps figures are checked to about 3 significant digits: the model runs on float32 CPU
    kernels whose summation order (and so the last bits of every activation) can differ between
    machines and torch builds. Counts and the stored eps are exact.
    """
    import yaml

    d = smollm2_dir()
    dump, cfg = tmp_path / "q.npz", tmp_path / "smollm2.yaml"
    args = [a for t in TEXTS for a in ("--text", t)]
    # rmsnorm-eps capture --model "$D" --gguf ... --text ... --out q.npz --config-out smollm2.yaml
    r = cli(
        "capture",
        "--model",
        d,
        "--gguf",
        GGUF,
        *args,
        "--save-data",
        str(dump),
        "--config-out",
        str(cfg),
    )
    assert r.exit_code == 0, r.stderr
    assert (
        "SmolLM2-135M-Instruct.Q4_1: 61 norm modules, 3 text(s), 26 tokens; "
        "live eps: 9.999999747378752e-06" in r.stdout
    )
    row = _row(r.stdout, "model.layers.0.input_layernorm")
    assert row[1:8] == ["rms", "9.9999997e-06", "576", "float32", "w", "tokens", "26"]
    assert float(row[8]) == pytest.approx(695.112, rel=2e-3)
    assert "captured 61 norm module(s), 3 text(s), 26 tokens" in r.stderr
    config = yaml.safe_load(cfg.read_text())
    assert config["schema_version"] == 1 and len(config["layers"]) == 61
    assert config["defaults"]["eps"] == 9.999999747378752e-06  # 1e-5 stored as float32
    # rmsnorm-eps ratio --config smollm2.yaml --q-file q.npz
    r = cli("ratio", "--config", str(cfg), "--q-file", str(dump))
    assert r.exit_code == 0, r.stderr
    assert "By token position: first token (position 0) | other tokens" in r.stdout
    assert "0 violation(s)" in r.stderr and "1586 inputs" in r.stderr  # 61 modules x 26 tokens
    r = cli("ratio", "--config", str(cfg), "--q-file", str(dump), "--format", "json")
    assert r.exit_code == 0, r.stderr
    layers = {ly["name"]: ly for ly in json.loads(r.stdout)["layers"]}
    assert len(layers) == 61
    l0 = layers["model.layers.0.input_layernorm"]
    assert l0["min_ratio"] == pytest.approx(695.112, rel=2e-3)  # the smallest of all layers
    assert min(ly["min_ratio"] for ly in layers.values()) == l0["min_ratio"]
    first, other = l0["first_token"], l0["other_tokens"]
    assert (first["count"], other["count"]) == (3, 23)
    assert first["min_ratio"] == pytest.approx(695.1, rel=2e-3)
    assert other["min_ratio"] == pytest.approx(713.7, rel=2e-3)
    mid = layers["model.layers.15.input_layernorm"]
    assert mid["first_token"]["min_ratio"] == pytest.approx(8.931e10, rel=2e-3)
    assert mid["first_token"]["max_q"] == pytest.approx(9.025e5, rel=2e-3)
    assert mid["other_tokens"]["max_q"] == pytest.approx(85.46, rel=2e-3)
    assert mid["first_token"]["min_q"] > 100 * mid["other_tokens"]["max_q"]
    for name, (n1, r1, q1, n2, r2, q2) in DOC_POSITION_ROWS.items():
        f, o = layers[name]["first_token"], layers[name]["other_tokens"]
        assert (f["count"], o["count"], f["violations"], o["violations"]) == (n1, n2, 0, 0)
        got = (f["min_ratio"], f["max_q"], o["min_ratio"], o["max_q"])
        assert got == pytest.approx((r1, q1, r2, q2), rel=2e-3), name
    for name, ratio in DOC_MIN_RATIO.items():
        assert layers[name]["min_ratio"] == pytest.approx(ratio, rel=2e-3), name
    # --summary-only on the same texts: `merge` reports from it what ratio found in the dump
    summ = tmp_path / "s.json"
    r = cli(
        "capture", "--model", d, "--gguf", GGUF, *args, "--save-data", str(summ), "--summary-only"
    )
    assert r.exit_code == 0, r.stderr
    r = cli("merge", str(summ), "--format", "json")
    assert r.exit_code == 0, r.stderr
    for ly in json.loads(r.stdout)["layers"]:
        ref = layers[ly["name"]]
        for part, want in ((ly, ref), (ly["first_token"], ref["first_token"])):
            assert part["count"] == want["count"] and part["min_q"] == want["min_q"]
            assert part["decades"] == want["decades"]
            assert [w["index"] for w in part["worst"]] == [w["index"] for w in want["worst"]]


def test_out_is_a_deprecated_spelling_of_save_data(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("capture", "--model", str(tmp_path / "none"), "--text", "hi", "--out", "d.npz")
    assert r.exit_code == 2
    assert "warning: --out is deprecated, use --save-data" in r.stderr
    r = cli(
        "capture", "--model", str(tmp_path), "--text", "hi", "--out", "a.npz", "--save-data", "b"
    )
    assert r.exit_code == 2 and "give --save-data once" in r.stderr


def test_an_output_that_is_the_text_file_is_refused(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    texts = tmp_path / "t.txt"
    texts.write_text("hello\n", encoding="utf-8")
    r = cli(
        "capture", "--model", str(tmp_path), "--text-file", str(texts), "--save-data", str(texts)
    )
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert texts.read_text(encoding="utf-8") == "hello\n"
