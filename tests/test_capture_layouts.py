"""Per-head layouts through the CLI on a tiny Gemma 3 (q_norm/k_norm on [B, H, T, D]): a padded
length equal to the head count, and mixed lengths with --batch-size 1 and 3, give the same q for
every (sequence, position, head)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

WORDS = ["a", "b", "c", "d", "e", "f", "g", "h"]
# 4 heads: the first text has exactly 4 tokens, so a batch pads to T == H == 4
TEXTS = ["a b c d", "e f", "g", "h a b"]


@pytest.fixture(scope="module")
def gemma3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, PreTrainedTokenizerFast

    torch.manual_seed(2)
    cfg = Gemma3TextConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=8,
        sliding_window=8,
        pad_token_id=0,
    )
    d = tmp_path_factory.mktemp("gemma3")
    Gemma3ForCausalLM(cfg).save_pretrained(d)
    vocab = ["[PAD]", "[UNK]", *WORDS]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # type: ignore[assignment]
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]"
    ).save_pretrained(d)
    return d


def _run(cli: Callable[..., Any], d: Path, out: Path, batch: int) -> dict[str, Any]:
    args = [a for t in TEXTS for a in ("--text", t)]
    r = cli(
        "capture",
        "--model",
        str(d),
        *args,
        "--save-data",
        str(out),
        "--batch-size",
        str(batch),
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.stderr
    return {m["name"]: m for m in json.loads(r.stdout)["modules"]}


def test_gemma3_heads_same_q_for_any_batch_size(
    cli: Callable[..., Any], gemma3_dir: Path, tmp_path: Path
) -> None:
    one = _run(cli, gemma3_dir, tmp_path / "b1.npz", 1)
    three = _run(cli, gemma3_dir, tmp_path / "b3.npz", 3)
    name = "model.layers.0.self_attn.q_norm"
    assert one[name]["layout"] == three[name]["layout"] == "heads [B, H, T, D]"
    assert one[name]["count"] == three[name]["count"] == (4 + 2 + 1 + 3) * 4
    with np.load(tmp_path / "b1.npz") as z1, np.load(tmp_path / "b3.npz") as z3:
        for mod in (name, "model.layers.0.self_attn.k_norm", "model.layers.0.input_layernorm"):

            def table(z: Any, mod: str = mod) -> dict[tuple[int, int, int], float]:
                head = z[mod + "::head"] if mod + "::head" in z.files else np.zeros_like(z[mod])
                keys = zip(z[mod + "::batch"], z[mod + "::position"], head, strict=True)
                return {(int(b), int(p), int(h)): float(q) for (b, p, h), q in zip(keys, z[mod])}

            a, b = table(z1), table(z3)
            assert a.keys() == b.keys()
            got = np.array([b[k] for k in sorted(a)])
            want = np.array([a[k] for k in sorted(a)])
            np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=mod)
