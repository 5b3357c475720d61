"""capture/loading.py. Loading what people run (issue 13 item 5): causal LMs, encoder-decoder
(T5: encoder and decoder stacks, decoder positions from the decoder inputs) and encoder-only
models (BERT via the base model class), chosen from the config's architectures; anything else
refused in one line. Unit level: the device check (torch's CUDA answers patched both ways), the
load keywords per dtype alias, where inputs go, the refusals of ``load_model`` before anything
loads (naming the path), teacher forcing's shifted ids, and ``run_texts`` on a hand-built module
(the tokens counted against the masks, the batches, progress and the vocabulary check)."""

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
from rmsnorm_eps.capture.loading import (  # noqa: E402
    DTYPES,
    LoadedModel,
    _shift_right,
    forward,
    input_device,
    load_model,
    model_family,
    placement,
    resolve_device,
    run_texts,
)
from rmsnorm_eps.errors import InputFileError  # noqa: E402

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


def _cuda(monkeypatch: pytest.MonkeyPatch, count: int, current: int = 0) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)


def test_resolve_device_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    _cuda(monkeypatch, 0)
    assert resolve_device(" CPU ") == "cpu"
    assert resolve_device("auto") == "cpu"  # nothing to spread over
    for name in ("cuda", "cuda:0"):
        with pytest.raises(CaptureError, match=f"--device {name}: no CUDA device is visible"):
            resolve_device(name)
    for bad in ("gpu", "cuda:x", "cuda:", "tpu\x1b[31m"):
        with pytest.raises(CaptureError, match="is not one of cpu, cuda, cuda:N, mps, auto"):
            resolve_device(bad)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(CaptureError, match="the MPS backend is not available here"):
        resolve_device("mps")


def test_resolve_device_with_two_cuda_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    _cuda(monkeypatch, 2, current=1)
    assert resolve_device("cuda") == "cuda:1"  # the current device, by index
    assert resolve_device("cuda:0") == "cuda:0" and resolve_device("auto") == "auto"
    with pytest.raises(CaptureError, match="--device cuda:2: only 2 CUDA device"):
        resolve_device("cuda:2")


def test_placement_keywords_for_every_dtype_alias() -> None:
    for alias, canonical in DTYPES.items():
        assert placement("cpu", alias) == {"dtype": getattr(torch, canonical)}
    assert placement("cuda:1", "bf16") == {"dtype": torch.bfloat16, "device_map": "cuda:1"}
    assert placement("auto", "fp16")["device_map"] == "auto"
    with pytest.raises(CaptureError, match=r"dtype must be one of float32, fp32, .*, got 'int8'"):
        placement("cpu", "int8")


def test_input_device_is_the_embeddings_then_the_first_parameter() -> None:
    emb = torch.nn.Embedding(3, 2).to(torch.device("meta"))

    class WithEmbeddings(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)  # on the CPU
            self.emb = emb

        def get_input_embeddings(self) -> Any:
            return self.emb

    assert input_device(WithEmbeddings()).type == "meta"
    assert input_device(torch.nn.Linear(2, 2).to(torch.device("meta"))).type == "meta"
    assert input_device(torch.nn.ReLU()) == torch.device("cpu")  # no parameter at all


def test_load_model_refuses_before_loading_and_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="no such directory") as info:
        load_model(tmp_path / "absent")
    assert info.value.path == str(tmp_path / "absent")
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(InputFileError, match="is not a directory"):
        load_model(f)
    with pytest.raises(InputFileError, match=r"not a model directory: no config\.json"):
        load_model(tmp_path)
    pytest.importorskip("gguf")
    with pytest.raises(CaptureError, match="--gguf takes a file name inside"):
        load_model(tmp_path, gguf="../x.gguf")
    with pytest.raises(InputFileError, match="no such GGUF file") as info:
        load_model(tmp_path, gguf="m.gguf")
    assert info.value.path == str(tmp_path / "m.gguf")


def test_shift_right_is_the_start_token_then_the_ids_but_the_last() -> None:
    ids = torch.tensor([[5, 6, 7], [8, 9, 0]])
    start = SimpleNamespace(decoder_start_token_id=3, pad_token_id=1)
    assert _shift_right(start, ids).tolist() == [[3, 5, 6], [3, 8, 9]]
    assert _shift_right(SimpleNamespace(pad_token_id=1), ids)[:, 0].tolist() == [1, 1]
    assert _shift_right(SimpleNamespace(), ids)[:, 0].tolist() == [0, 0]
    assert ids.tolist() == [[5, 6, 7], [8, 9, 0]]  # the input is not changed


class _Recorder(torch.nn.Module):
    """A model that records each call's keyword arguments."""

    def __init__(self, vocab: int = 16) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, 2)
        self.calls: list[dict[str, Any]] = []
        self.config = SimpleNamespace(vocab_size=vocab, decoder_start_token_id=0)

    def get_input_embeddings(self) -> Any:
        return self.emb

    def forward(self, **kw: Any) -> None:
        assert not torch.is_grad_enabled()
        self.calls.append(kw)


def test_forward_gives_an_encoder_decoder_the_shifted_ids() -> None:
    model = _Recorder()
    ids, mask = torch.tensor([[4, 5, 6]]), torch.tensor([[1, 1, 0]])
    forward(model, "causal", ids, mask, torch.device("cpu"))
    forward(model, "encoder-decoder", ids, mask, torch.device("cpu"))
    causal, seq2seq = model.calls
    assert set(causal) == {"input_ids", "attention_mask"}
    assert seq2seq["decoder_input_ids"].tolist() == [[0, 4, 5]]
    assert seq2seq["decoder_attention_mask"].tolist() == [[1, 1, 0]]


class _Tok:
    """Word ids of a fixed vocabulary, right padded with 0, as a HF tokenizer returns them."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab

    def __call__(self, texts: list[str], max_length: int | None = None, **_: Any) -> Any:
        rows = [[self.vocab[w] for w in t.split()][:max_length] for t in texts]
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int64)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return {"input_ids": ids, "attention_mask": mask}


def _loaded(vocab_size: int = 16) -> LoadedModel:
    tok = _Tok({w: i + 1 for i, w in enumerate(WORDS)})
    return LoadedModel(_Recorder(vocab_size), tok, "rec", "hand-built")


def test_run_texts_counts_the_real_tokens_of_every_batch() -> None:
    loaded = _loaded()
    texts = ["the quick brown fox", "hello", "lazy dog", "the fox jumps over", "dog"]
    seen: list[int] = []
    total = run_texts(loaded, texts, batch_size=2, progress=seen.append)
    assert total == sum(len(t.split()) for t in texts) == 12
    assert seen == [2, 4, 5] and len(loaded.model.calls) == 3
    assert [c["input_ids"].shape[0] for c in loaded.model.calls] == [2, 2, 1]
    firsts = [c["input_ids"][:, 0].tolist() for c in loaded.model.calls]  # the texts in order
    assert firsts == [[WORDS.index(t.split()[0]) + 1 for t in texts[i : i + 2]] for i in (0, 2, 4)]
    truncated = _loaded()
    assert run_texts(truncated, texts, max_tokens=2, batch_size=8) == 2 + 1 + 2 + 2 + 1


def test_run_texts_refusals() -> None:
    with pytest.raises(CaptureError, match="no text to run"):
        run_texts(_loaded(), [])
    # "hello" is id 9: a model with 9 token ids does not have it
    with pytest.raises(CaptureError, match="token id 9 >= the model's vocab_size 9"):
        run_texts(_loaded(vocab_size=9), ["the fox", "hello"])
    empty = LoadedModel(_Recorder(), lambda texts, **kw: {
        "input_ids": torch.zeros((len(texts), 0), dtype=torch.int64),
        "attention_mask": torch.zeros((len(texts), 0), dtype=torch.int64),
    }, "e", "hand-built")  # fmt: skip
    with pytest.raises(CaptureError, match="a text produced no tokens"):
        run_texts(empty, ["x"])
