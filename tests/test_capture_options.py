"""`rmsnorm-eps capture` options on a tiny random Llama saved as a model directory (no download):
--max-tokens, --dtype bfloat16, --module, --summary-only, and the progress bar's stream."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from rmsnorm_eps.capture import loading  # noqa: E402
from rmsnorm_eps.reports.schema import load_schema  # noqa: E402

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "hello"]
TEXTS = ["the quick brown fox jumps over the lazy dog", "hello w1 w2"]  # 9 and 3 tokens


def _capture(cli: Callable[..., Any], d: Path, out: Path, *extra: str) -> dict[str, Any]:
    args = [a for t in TEXTS for a in ("--text", t)]
    r = cli(
        "capture", "--model", str(d), *args, "--save-data", str(out), "--format", "json", *extra
    )
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)  # stdout holds the document and nothing else


def test_full_capture_counts_every_token(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    doc = _capture(cli, model_dir, tmp_path / "q.npz")
    assert (doc["sequences"], doc["tokens"]) == (2, 12)
    assert [m["count"] for m in doc["modules"]] == [12] * 5
    with np.load(tmp_path / "q.npz") as z:
        assert z["model.norm::position"].tolist() == [*range(9), 0, 1, 2]


def test_max_tokens_truncates_and_counts(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    doc = _capture(cli, model_dir, tmp_path / "q.npz", "--max-tokens", "4")
    assert (doc["sequences"], doc["tokens"]) == (2, 4 + 3)
    assert all(m["count"] == 7 for m in doc["modules"])
    with np.load(tmp_path / "q.npz") as z:
        assert z["model.layers.0.input_layernorm::position"].tolist() == [0, 1, 2, 3, 0, 1, 2]
        assert z["model.layers.0.input_layernorm::batch"].tolist() == [0, 0, 0, 0, 1, 1, 1]
    r = cli(
        "capture",
        "--model",
        str(model_dir),
        "--text",
        "x",
        "--save-data",
        "q.npz",
        "--max-tokens",
        "0",
    )
    assert r.exit_code == 2 and "--max-tokens" in r.stderr


def _swap_final_norm(monkeypatch: pytest.MonkeyPatch, make: Callable[[], Any]) -> None:
    """Load the directory as usual, then replace model.norm by ``make()`` (in the model's dtype)."""
    original = loading.load_model

    def load(*args: Any, **kw: Any) -> loading.LoadedModel:
        loaded = original(*args, **kw)
        dtype = next(loaded.model.parameters()).dtype
        loaded.model.model.norm = make().to(dtype)
        return loaded

    monkeypatch.setattr(loading, "load_model", load)


def test_dtype_bfloat16_q_in_float64_and_live_eps(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _swap_final_norm(monkeypatch, lambda: torch.nn.RMSNorm(32, eps=None))
    doc = _capture(cli, model_dir, tmp_path / "q.npz", "--dtype", "bfloat16")
    mods = {m["name"]: m for m in doc["modules"]}
    assert {m["input_dtype"] for m in mods.values()} == {"bfloat16"}
    assert mods["model.layers.0.input_layernorm"]["eps"] == 1e-5  # LlamaRMSNorm's attribute
    final = mods["model.norm"]  # torch.nn.RMSNorm(eps=None) on bfloat16 input: float32's eps
    assert final["kind"] == "torch.nn.RMSNorm" and final["eps"] == 1.1920928955078125e-07
    assert "bfloat16" in final["eps_source"]
    # layer 0's input is the bfloat16 embedding: q = mean(x^2) of those exact values, computed
    # in float64 (a bfloat16 reduction would keep only 8 significant bits)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    ids = [i for t in TEXTS for i in tok(t)["input_ids"]]
    emb = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).model.embed_tokens
    x = emb.weight.detach()[ids].double().numpy()
    expected = (x * x).mean(axis=-1)
    with np.load(tmp_path / "q.npz") as z:
        q = z["model.layers.0.input_layernorm"]
    np.testing.assert_allclose(q, expected, rtol=1e-7)
    assert q.dtype == np.float32
    bf16_rounded = torch.from_numpy(q).to(torch.bfloat16).float().numpy()
    assert np.count_nonzero(q != bf16_rounded) >= 10  # not values of a bfloat16 reduction


def test_layer_norm_is_found_and_a_listed_non_norm_is_listed_as_unknown(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _swap_final_norm(monkeypatch, lambda: torch.nn.LayerNorm(32, eps=3e-5))
    doc = _capture(cli, model_dir, tmp_path / "a.npz")
    final = doc["modules"][-1]
    assert (final["name"], final["norm"], final["class"]) == ("model.norm", "layer", "LayerNorm")
    assert final["eps"] == 3e-5 and final["count"] == 12 and final["dim"] == 32
    assert final["bias"] is True and final["gain"] == "w"
    with np.load(tmp_path / "a.npz") as z:
        assert z["model.norm::norm"].tolist() == [1] * 12  # NORM_CODES["layer"]
        assert "model.layers.0.input_layernorm::norm" not in z.files  # rms: no companion
    doc = _capture(cli, model_dir, tmp_path / "b.npz", "--module", "lm_head")
    head = doc["modules"][-1]
    assert (head["name"], head["norm"], head["count"]) == ("lm_head", "unknown", 0)
    assert "output does not have its input's shape" in head["reason"]
    args = [a for t in TEXTS for a in ("--text", t)]
    r = cli(
        "capture",
        "--model",
        str(model_dir),
        *args,
        "--save-data",
        str(tmp_path / "c.npz"),
        "--module",
        "lm_head",
    )
    assert r.exit_code == 0 and "not analysed: lm_head (Linear): unknown norm kind" in r.stdout
    r = cli(
        "capture",
        "--model",
        str(model_dir),
        "--text",
        "hello",
        "--save-data",
        str(tmp_path / "c"),
        "--module",
        "model.nope*",
    )
    assert r.exit_code == 2 and "no module named 'model.nope*'" in r.stderr


def test_summary_only_cli_writes_what_merge_reads(
    cli: Callable[..., Any], model_dir: Path, tmp_path: Path
) -> None:
    s = tmp_path / "s.json"
    args = [a for t in TEXTS for a in ("--text", t)]
    r = cli(
        "capture",
        "--model",
        str(model_dir),
        *args,
        "--save-data",
        str(s),
        "--summary-only",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.stderr
    shown = json.loads(r.stdout)
    jsonschema.Draft202012Validator(load_schema(shown["command"])).validate(shown)
    assert json.loads(s.read_text())["schema"] == "rmsnorm-eps-summary"
    m = cli("merge", str(s), "--format", "json")
    assert m.exit_code in (0, 1), m.stderr
    merged = json.loads(m.stdout)
    jsonschema.Draft202012Validator(load_schema("merge")).validate(merged)
    assert [ly["count"] for ly in merged["layers"]] == [ly["count"] for ly in shown["layers"]]
    assert merged["layers"][0]["first_token"]["count"] == 2
    assert merged["layers"][0]["min_q"] == shown["layers"][0]["min_q"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_goes_to_stderr_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from rmsnorm_eps.cli.capture_cmd import _progress

    out, err = io.StringIO(), _Tty()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    with _progress(3, True) as update:
        assert update is not None
        for n in range(1, 4):
            update(n, 10 * n)
    assert out.getvalue() == ""
    text = err.getvalue()
    assert "capturing" in text and "samples" in text and "tokens/s" in text  # drawn on stderr
    # not a terminal (or not rank 0): no bar at all, no progress callback
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with _progress(3, True) as update:
        assert update is None
    monkeypatch.setattr(sys, "stderr", _Tty())
    with _progress(3, False) as update:
        assert update is None
    assert out.getvalue() == ""
