"""Loading what people run (issue 13 item 5): causal LMs, encoder-decoder (T5: encoder and decoder
stacks, decoder positions from the decoder inputs) and encoder-only models (BERT via the base
model class), chosen from the config's architectures; anything else refused in one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from rmsnorm_eps.capture.errors import CaptureError  # noqa: E402
from rmsnorm_eps.capture.loading import model_family  # noqa: E402

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "hello"]
TEXTS = ["the quick brown fox jumps over the lazy dog", "hello fox"]  # 9 and 2 tokens


def _save_tokenizer(d: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[EOS]", *WORDS]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # type: ignore[assignment]
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    ).save_pretrained(d)


def _model_dir(tmp: Path, kind: str) -> Path:
    from transformers import BertConfig, BertForMaskedLM, T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    if kind == "t5":
        cfg = T5Config(
            vocab_size=32,
            d_model=16,
            d_kv=4,
            d_ff=32,
            num_layers=1,
            num_decoder_layers=2,
            num_heads=4,
            pad_token_id=0,
            eos_token_id=2,
            decoder_start_token_id=0,
        )
        model: Any = T5ForConditionalGeneration(cfg)
    else:
        cfg = BertConfig(
            vocab_size=32,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=4,
            layer_norm_eps=1e-12,
        )
        model = BertForMaskedLM(cfg)
    d = tmp / kind
    model.save_pretrained(d)
    _save_tokenizer(d)
    return d


def _capture(cli: Callable[..., Any], d: Path, tmp: Path) -> tuple[dict[str, Any], Path, Path]:
    args = [a for t in TEXTS for a in ("--text", t)]
    out, cfg = tmp / f"{d.name}.npz", tmp / f"{d.name}.yaml"
    r = cli(
        "capture",
        "--model",
        str(d),
        *args,
        "--save-data",
        str(out),
        "--config-out",
        str(cfg),
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), out, cfg


def test_t5_encoder_and_decoder_stacks(cli: Callable[..., Any], tmp_path: Path) -> None:
    import yaml

    doc, out, cfg = _capture(cli, _model_dir(tmp_path, "t5"), tmp_path)
    mods = {m["name"]: m for m in doc["modules"]}
    enc = [n for n in mods if n.startswith("encoder.")]
    dec = [n for n in mods if n.startswith("decoder.")]
    assert len(enc) == 1 * 2 + 1 and len(dec) == 2 * 3 + 1  # T5 blocks + final norms
    assert {(m["norm"], m["gain"], m["eps"]) for m in mods.values()} == {("rms", "w", 1e-6)}
    assert all(m["count"] == 11 for m in mods.values())
    with np.load(out) as z:
        # decoder inputs are the texts shifted right (teacher forcing): same lengths
        for name in (enc[0], dec[0]):
            assert z[name + "::position"].tolist() == [*range(9), 0, 1]
            assert z[name + "::batch"].tolist() == [0] * 9 + [1] * 2
    written = yaml.safe_load(cfg.read_text())
    assert written["defaults"]["norm"] == "rms" and written["defaults"]["gain"] == "w"
    # a file meant to be committed: the model by its directory's name, no path of this machine
    assert written["source"].startswith("live modules of t5 (transformers ")
    assert str(tmp_path) not in cfg.read_text()
    r = cli("ratio", "--config", str(cfg), "--q-file", str(out), "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)["layers"]) == len(mods)


def test_bert_base_model_layer_norms(cli: Callable[..., Any], tmp_path: Path) -> None:
    import yaml

    doc, out, cfg = _capture(cli, _model_dir(tmp_path, "bert"), tmp_path)
    names = [m["name"] for m in doc["modules"]]
    assert names[0] == "embeddings.LayerNorm" and not any(n.startswith("cls.") for n in names)
    assert len(names) == 3  # embeddings + attention output + layer output (base model only)
    for m in doc["modules"]:
        assert (m["norm"], m["gain"], m["bias"], m["eps"]) == ("layer", "w", True, 1e-12)
    written = yaml.safe_load(cfg.read_text())
    assert written["defaults"]["norm"] == "layer" and written["defaults"]["eps"] == 1e-12
    with np.load(out) as z:
        assert z["embeddings.LayerNorm::norm"].tolist() == [1] * 11
    # ratio reads the dump (v/eps against the same bound), companions and all
    r = cli("ratio", "--eps", "1e-12", "--q-file", str(out), "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert [ly["name"] for ly in json.loads(r.stdout)["layers"]] == names


def test_unsupported_architecture_is_named_in_one_line(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    d = _model_dir(tmp_path, "bert")
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["BertForImageSegmentation\x1b[31m" + "x" * 500]
    (d / "config.json").write_text(json.dumps(cfg))
    r = cli("capture", "--model", str(d), "--text", "hello", "--save-data", str(tmp_path / "o.npz"))
    assert r.exit_code == 2
    line = r.stderr.strip()
    assert "\n" not in line and len(line) < 600 and "\x1b" not in line
    assert "BertForImageSegmentation" in line and "not supported" in line
    assert "encoder-decoder" in line


def test_model_family_from_config() -> None:
    def cfg(archs: Any, enc_dec: bool = False) -> Any:
        return SimpleNamespace(architectures=archs, is_encoder_decoder=enc_dec)

    assert model_family(cfg(["LlamaForCausalLM"])) == "causal"
    assert model_family(cfg(["GPT2LMHeadModel"])) == "causal"
    assert model_family(cfg(["Gemma3ForConditionalGeneration"])) == "causal"
    assert model_family(cfg(["T5ForConditionalGeneration"], True)) == "encoder-decoder"
    assert model_family(cfg(["BertForMaskedLM"])) == "encoder"
    assert model_family(cfg(["RobertaModel"])) == "encoder"
    assert model_family(cfg(None)) == "causal"
    with pytest.raises(CaptureError, match="'ViTForImageClassification' is not supported"):
        model_family(cfg(["ViTForImageClassification"]))
