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


@pytest.mark.parametrize(
    ("model_type", "arch", "family", "loads"),
    [
        ("reformer", "ReformerModelWithLMHead", "causal", "AutoModelForCausalLM"),
        ("bert-generation", "BertGenerationDecoder", "causal", "AutoModelForCausalLM"),
        ("bert-generation", "BertGenerationEncoder", "encoder", "AutoModel"),
        ("siglip_text_model", "SiglipTextModel", "encoder", "SiglipTextModel"),
    ],
)
def test_class_names_resolve_through_the_auto_mappings(
    model_type: str, arch: str, family: str, loads: str
) -> None:
    """Names no suffix rule knows (ReformerModelWithLMHead, BertGenerationDecoder/Encoder) are
    listed by transformers' auto mappings; SiglipTextConfig is in no model mapping, so its own
    class (built from that config class) is loaded."""
    from transformers import AutoConfig

    from rmsnorm_eps.capture.loading import model_family

    cfg = AutoConfig.for_model(model_type, architectures=[arch])
    assert model_family(cfg) == family
    assert model_class(cfg).__name__ == loads


def test_a_class_of_another_config_is_not_loaded() -> None:
    """An architectures entry naming a real class built from another config class is refused
    (the SigLIP vision tower is no model of a text config)."""
    from transformers import AutoConfig

    cfg = AutoConfig.for_model("siglip_text_model", architectures=["SiglipVisionModel"])
    with pytest.raises(CaptureError, match=r"'SiglipVisionModel'.*no such model class"):
        model_class(cfg)


@pytest.mark.slow
def test_siglip_text_model_loads_through_its_own_class_and_is_captured(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, SiglipTextConfig, SiglipTextModel

    torch.manual_seed(0)
    cfg = SiglipTextConfig(
        vocab_size=16,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=8,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        architectures=["SiglipTextModel"],
    )
    SiglipTextModel(cfg).save_pretrained(tmp_path)
    vocab = ["[PAD]", "[UNK]", "[EOS]", *WORDS]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # type: ignore[assignment]
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    ).save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    assert type(loaded.model) is SiglipTextModel and loaded.family == "encoder"
    with QCapture(loaded.model) as cap:
        assert run_texts(loaded, ["a b c", "d e"], batch_size=2) == 5
    mods = {m.name: m for m in cap.result().modules}
    assert mods["final_layer_norm"].count == 5
    assert {(m.norm, m.eps) for m in mods.values()} == {("layer", 1e-6)}
