"""The Hugging Face family table: model_type -> how its transformers modeling file normalizes.

Split from :mod:`rmsnorm_eps.config.hf` (the reader): each :class:`Family` names the class that
implements the norm and the public source read (the transformers modeling file and version).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["HF_FAMILIES", "TRANSFORMERS", "Family", "layer_family", "rms_family"]

_TF_VERSION = "5.24"
TRANSFORMERS = "transformers, as of 5.24"


def _src(model: str) -> str:
    """The public source of a family entry: the transformers modeling file, with the version
    whose code was read."""
    return f"transformers {_TF_VERSION} src/transformers/models/{model}/modeling_{model}.py"


@dataclass(frozen=True)
class Family:
    """How one HF model_type normalizes, as its transformers modeling file does it.

    ``norm``: rms (q = mean(x^2)), layer (v = mean((x - mean x)^2)), gated-rms, l2.
    ``gain``: w, 1+w or none (no weight). ``extras``: the entries beyond the block norms, by
    builder name (:data:`_BUILDERS`). ``hard_eps``: an eps the modeling code hard-codes for
    every norm, whatever the config says (OLMo-1).
    """

    norm: str
    impl: str  # implementing class
    source: str = ""  # public source: the modeling file and transformers version
    gain: str = "w"
    weight_after_cast: bool | None = True  # None: not applicable / unknown
    reduction_dtype: str | None = "float32"
    class_eps: float | None = None  # the config class default eps (when known)
    hard_eps: float | None = None
    extras: tuple[str, ...] = ()


def _rms(impl: str, class_eps: float | None = None, **kw: Any) -> Family:
    return Family("rms", impl, class_eps=class_eps, **kw)


def _gemma(impl: str, source: str = "", **kw: Any) -> Family:
    # (1 + w) multiplied in float32, then cast to the input dtype
    return Family("rms", impl, source, gain="1+w", weight_after_cast=False, class_eps=1e-6, **kw)


def _layer(impl: str, source: str = "", **kw: Any) -> Family:
    kw.setdefault("weight_after_cast", None)
    kw.setdefault("reduction_dtype", None)
    return Family("layer", impl, source, **kw)


#: model_type -> family. Every entry was read in the installed transformers 5.24 modeling file
#: named in its ``source``; class default eps measured with AutoConfig.for_model on 5.24.
HF_FAMILIES: dict[str, Family] = {
    "llama": _rms("LlamaRMSNorm", 1e-6, source=_src("llama")),
    "mistral": _rms("MistralRMSNorm", 1e-6, source=_src("mistral")),
    "mixtral": _rms("MixtralRMSNorm", 1e-5, source=_src("mixtral")),
    "qwen2": _rms("Qwen2RMSNorm", 1e-6, source=_src("qwen2")),
    "qwen2_moe": _rms("Qwen2MoeRMSNorm", 1e-6, source=_src("qwen2_moe")),
    "qwen3": _rms("Qwen3RMSNorm", 1e-6, source=_src("qwen3"), extras=("qk_head",)),
    "qwen3_moe": _rms("Qwen3MoeRMSNorm", 1e-6, source=_src("qwen3_moe"), extras=("qk_head",)),
    "qwen3_next": _gemma(
        "Qwen3NextRMSNorm (1 + w); Qwen3NextRMSNormGated in linear_attn",
        _src("qwen3_next"),
        extras=("qk_head", "gated_qwen3_next"),
    ),
    "phi3": _rms("Phi3RMSNorm", 1e-5, source=_src("phi3")),
    "granite": _rms("GraniteRMSNorm", 1e-6, source=_src("granite")),
    "smollm3": _rms("SmolLM3RMSNorm", 1e-6, source=_src("smollm3")),
    "olmo": _layer(
        "OlmoLayerNorm: F.layer_norm(x.float(), None, None, eps=1e-5), no weight, no bias",
        _src("olmo"),
        gain="none",
        reduction_dtype="float32",
        hard_eps=1e-5,
    ),
    "olmo2": _rms(
        "Olmo2RMSNorm (weight multiplied in float32)",
        1e-5,
        source=_src("olmo2"),
        weight_after_cast=False,
        extras=("qk_olmo2",),
    ),
    "deepseek_v2": _rms("DeepseekV2RMSNorm", 1e-6, source=_src("deepseek_v2"), extras=("mla",)),
    "deepseek_v3": _rms("DeepseekV3RMSNorm", 1e-6, source=_src("deepseek_v3"), extras=("mla",)),
    "gemma": _gemma("GemmaRMSNorm", _src("gemma")),
    "gemma2": _gemma("Gemma2RMSNorm", _src("gemma2")),
    "gemma3": _gemma("Gemma3RMSNorm", _src("gemma3"), extras=("qk_head",)),
    "gemma3_text": _gemma("Gemma3RMSNorm", _src("gemma3"), extras=("qk_head",)),
    "recurrent_gemma": _gemma("RecurrentGemmaRMSNorm", _src("recurrent_gemma")),
    # Gemma 3n multiplies by w itself (weight initialised to ones), not 1 + w
    "gemma3n": _rms(
        "Gemma3nRMSNorm (w multiplied in float32)",
        1e-6,
        source=_src("gemma3n"),
        weight_after_cast=False,
        extras=("qk_head", "v_gemma3n"),
    ),
    "gemma3n_text": _rms(
        "Gemma3nRMSNorm (w multiplied in float32)",
        1e-6,
        source=_src("gemma3n"),
        weight_after_cast=False,
        extras=("qk_head", "v_gemma3n"),
    ),
    "llama4": _rms("Llama4TextRMSNorm", 1e-5, source=_src("llama4"), extras=("qk_l2",)),
    "llama4_text": _rms("Llama4TextRMSNorm", 1e-5, source=_src("llama4"), extras=("qk_l2",)),
    "mamba2": _rms(
        "Mamba2RMSNorm; MambaRMSNormGated in mixer",
        1e-5,
        source=_src("mamba2"),
        extras=("gated_mamba2",),
    ),
    "bamba": _rms(
        "BambaRMSNorm; BambaRMSNormGated in mamba",
        1e-5,
        source=_src("bamba"),
        extras=("gated_bamba",),
    ),
    "nemotron_h": _rms(
        "NemotronHRMSNorm (weight multiplied in float32); NemotronHRMSNormGated in mixer",
        1e-5,
        source=_src("nemotron_h"),
        weight_after_cast=False,
        extras=("gated_nemotron_h",),
    ),
    "falcon_h1": _rms(
        "FalconH1RMSNorm; FalconH1RMSNormGated in mamba",
        1e-5,
        source=_src("falcon_h1"),
        extras=("gated_falcon_h1",),
    ),
    "t5": _rms("T5LayerNorm (an RMSNorm)", 1e-6, source=_src("t5")),
    "mt5": _rms("MT5LayerNorm (an RMSNorm)", 1e-6, source=_src("mt5")),
    "qwen": _rms("Qwen-1 RMSNorm (remote code; eps under layer_norm_epsilon)"),
    "cohere": _layer(
        "CohereLayerNorm (mean removed, weight, no bias, float32)",
        _src("cohere"),
        weight_after_cast=False,
        reduction_dtype="float32",
        class_eps=1e-5,
        extras=("qk_cohere",),
    ),
    "falcon": _layer("torch.nn.LayerNorm (weight and bias)", _src("falcon"), class_eps=1e-5),
    "gpt_neox": _layer("torch.nn.LayerNorm (weight and bias)", _src("gpt_neox"), class_eps=1e-5),
    "bert": _layer("torch.nn.LayerNorm (weight and bias)", _src("bert"), class_eps=1e-12),
    "gpt2": _layer("torch.nn.LayerNorm (weight and bias)", _src("gpt2"), class_eps=1e-5),
    "stablelm": _layer("torch.nn.LayerNorm (weight and bias)", _src("stablelm"), class_eps=1e-5),
}


rms_family = _rms
layer_family = _layer
