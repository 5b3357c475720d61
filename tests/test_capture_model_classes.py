"""Model classes (loading.model_class): a *ForConditionalGeneration that AutoModelForCausalLM
does not map (Chameleon) loads through its own class in transformers' chameleon module; a class
that exists nowhere is refused in one line naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from rmsnorm_eps.capture.errors import CaptureError  # noqa: E402
from rmsnorm_eps.capture.hooks import QCapture  # noqa: E402
from rmsnorm_eps.capture.loading import load_model, model_class, run_texts  # noqa: E402

WORDS = ["a", "b", "c", "d", "e", "f"]


def _chameleon_config(**kw: Any) -> Any:
    from transformers import ChameleonConfig

    vq = {
        "embed_dim": 8,
        "num_embeddings": 16,
        "base_channels": 32,
        "channel_multiplier": [1],
        "num_res_blocks": 1,
        "latent_channels": 4,
        "resolution": 16,
        "attn_resolutions": [],
    }
    return ChameleonConfig(
        vocab_size=64,
        hidden_size=24,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=3,
        num_key_value_heads=3,
        max_position_embeddings=64,
        pad_token_id=0,
        vq_config=vq,
        vocabulary_map={"<image>": 3},
        **kw,
    )


@pytest.mark.slow  # importing transformers' chameleon modeling takes ~10 s
def test_the_model_class_follows_the_auto_mapping_or_the_models_own_class() -> None:
    from transformers import AutoModel, AutoModelForCausalLM, BertConfig, LlamaConfig
    from transformers.models.chameleon import ChameleonForConditionalGeneration

    archs = ["ChameleonForConditionalGeneration"]
    assert model_class(_chameleon_config(architectures=archs)) is ChameleonForConditionalGeneration
    assert model_class(LlamaConfig(architectures=["LlamaForCausalLM"])) is AutoModelForCausalLM
    assert model_class(BertConfig(architectures=["BertForMaskedLM"])) is AutoModel
    cfg = _chameleon_config(architectures=["ChameleonNoSuchForCausalLM"])
    with pytest.raises(CaptureError) as err:
        model_class(cfg)
    line = str(err.value)
    assert "\n" not in line and "'ChameleonNoSuchForCausalLM'" in line
    assert "AutoModelForCausalLM" in line and "no such model class" in line


@pytest.mark.slow
def test_chameleon_loads_through_its_own_class_and_is_captured(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.chameleon import ChameleonForConditionalGeneration

    torch.manual_seed(0)
    cfg = _chameleon_config(architectures=["ChameleonForConditionalGeneration"])
    ChameleonForConditionalGeneration(cfg).save_pretrained(tmp_path)
    vocab = ["[PAD]", "[UNK]", "[EOS]", "<image>", *WORDS]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # type: ignore[assignment]
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    ).save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    assert type(loaded.model) is ChameleonForConditionalGeneration and loaded.family == "causal"
    inputs: list[Any] = []
    final = dict(loaded.model.named_modules())["model.norm"]
    handle = final.register_forward_pre_hook(lambda _m, a: inputs.append(a[0].detach().double()))
    texts = ["a b c", "d e", "f"]
    try:
        with QCapture(loaded.model) as cap:
            run_texts(loaded, texts, batch_size=3)  # B == T == H == 3
    finally:
        handle.remove()
    mods = {m.name: m for m in cap.result().modules}
    ran = {n: m for n, m in mods.items() if m.count}
    assert set(ran) == {
        "model.layers.0.self_attn.q_norm",
        "model.layers.0.self_attn.k_norm",
        "model.layers.0.input_layernorm",
        "model.layers.0.post_attention_layernorm",
        "model.norm",
    }
    assert all(m.norm in (None, "rms", "layer") for m in mods.values())
    m = ran["model.norm"]
    assert (m.norm, m.eps, m.count) == ("rms", 1e-5, 6)
    x = inputs[0]  # (then the layout probe's rerun with one sequence fewer)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    np.testing.assert_allclose(m.q, (x * x).mean(-1)[mask].numpy(), rtol=1e-12)
    qn = ran["model.layers.0.self_attn.q_norm"]
    assert (qn.norm, qn.heads, qn.dim, qn.count) == ("layer", 3, 8, 18)
