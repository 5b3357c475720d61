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


def _rms(impl: str, class_eps: float | None = None, model: str = "", **kw: Any) -> Family:
    """An RMSNorm family; ``model`` names its transformers modeling file (:func:`_src`)."""
    return Family("rms", impl, _src(model) if model else "", class_eps=class_eps, **kw)


def _gemma(impl: str, model: str, **kw: Any) -> Family:
    # (1 + w) multiplied in float32, then cast to the input dtype
    return Family("rms", impl, _src(model), "1+w", weight_after_cast=False, class_eps=1e-6, **kw)


def _layer(impl: str, model: str = "", **kw: Any) -> Family:
    # weight_after_cast and reduction_dtype unknown unless given
    kw = {"weight_after_cast": None, "reduction_dtype": None, **kw}
    return Family("layer", impl, _src(model) if model else "", **kw)


# Gemma 3n multiplies by w itself (weight initialised to ones), not 1 + w
_GEMMA3N = _rms(
    "Gemma3nRMSNorm (w multiplied in float32)",
    1e-6,
    "gemma3n",
    weight_after_cast=False,
    extras=("qk_head", "v_gemma3n"),
)
_LLAMA4 = _rms("Llama4TextRMSNorm", 1e-5, "llama4", extras=("qk_l2",))
_TORCH_LAYER_NORM = "torch.nn.LayerNorm (weight and bias)"

#: model_type -> family. Every entry was read in the installed transformers 5.24 modeling file
#: named in its ``source``; class default eps measured with AutoConfig.for_model on 5.24.
HF_FAMILIES: dict[str, Family] = {
    "llama": _rms("LlamaRMSNorm", 1e-6, "llama"),
    "mistral": _rms("MistralRMSNorm", 1e-6, "mistral"),
    "mixtral": _rms("MixtralRMSNorm", 1e-5, "mixtral"),
    "qwen2": _rms("Qwen2RMSNorm", 1e-6, "qwen2"),
    "qwen2_moe": _rms("Qwen2MoeRMSNorm", 1e-6, "qwen2_moe"),
    "qwen3": _rms("Qwen3RMSNorm", 1e-6, "qwen3", extras=("qk_head",)),
    "qwen3_moe": _rms("Qwen3MoeRMSNorm", 1e-6, "qwen3_moe", extras=("qk_head",)),
    "qwen3_next": _gemma(
        "Qwen3NextRMSNorm (1 + w); Qwen3NextRMSNormGated in linear_attn",
        "qwen3_next",
        extras=("qk_head", "gated_qwen3_next"),
    ),
    "phi3": _rms("Phi3RMSNorm", 1e-5, "phi3"),
    "granite": _rms("GraniteRMSNorm", 1e-6, "granite"),
    "smollm3": _rms("SmolLM3RMSNorm", 1e-6, "smollm3"),
    "olmo": _layer(
        "OlmoLayerNorm: F.layer_norm(x.float(), None, None, eps=1e-5), no weight, no bias",
        "olmo",
        gain="none",
        reduction_dtype="float32",
        hard_eps=1e-5,
    ),
    "olmo2": _rms(
        "Olmo2RMSNorm (weight multiplied in float32)",
        1e-5,
        "olmo2",
        weight_after_cast=False,
        extras=("qk_olmo2",),
    ),
    "deepseek_v2": _rms("DeepseekV2RMSNorm", 1e-6, "deepseek_v2", extras=("mla",)),
    "deepseek_v3": _rms("DeepseekV3RMSNorm", 1e-6, "deepseek_v3", extras=("mla",)),
    "gemma": _gemma("GemmaRMSNorm", "gemma"),
    "gemma2": _gemma("Gemma2RMSNorm", "gemma2"),
    "gemma3": _gemma("Gemma3RMSNorm", "gemma3", extras=("qk_head",)),
    "gemma3_text": _gemma("Gemma3RMSNorm", "gemma3", extras=("qk_head",)),
    "recurrent_gemma": _gemma("RecurrentGemmaRMSNorm", "recurrent_gemma"),
    "gemma3n": _GEMMA3N,
    "gemma3n_text": _GEMMA3N,
    "llama4": _LLAMA4,
    "llama4_text": _LLAMA4,
    "mamba2": _rms(
        "Mamba2RMSNorm; MambaRMSNormGated in mixer", 1e-5, "mamba2", extras=("gated_mamba2",)
    ),
    "bamba": _rms(
        "BambaRMSNorm; BambaRMSNormGated in mamba", 1e-5, "bamba", extras=("gated_bamba",)
    ),
    "nemotron_h": _rms(
        "NemotronHRMSNorm (weight multiplied in float32); NemotronHRMSNormGated in mixer",
        1e-5,
        "nemotron_h",
        weight_after_cast=False,
        extras=("gated_nemotron_h",),
    ),
    "falcon_h1": _rms(
        "FalconH1RMSNorm; FalconH1RMSNormGated in mamba",
        1e-5,
        "falcon_h1",
        extras=("gated_falcon_h1",),
    ),
    "t5": _rms("T5LayerNorm (an RMSNorm)", 1e-6, "t5"),
    "mt5": _rms("MT5LayerNorm (an RMSNorm)", 1e-6, "mt5"),
    "qwen": _rms("Qwen-1 RMSNorm (remote code; eps under layer_norm_epsilon)"),
    "cohere": _layer(
        "CohereLayerNorm (mean removed, weight, no bias, float32)",
        "cohere",
        weight_after_cast=False,
        reduction_dtype="float32",
        class_eps=1e-5,
        extras=("qk_cohere",),
    ),
    "falcon": _layer(_TORCH_LAYER_NORM, "falcon", class_eps=1e-5),
    "gpt_neox": _layer(_TORCH_LAYER_NORM, "gpt_neox", class_eps=1e-5),
    "bert": _layer(_TORCH_LAYER_NORM, "bert", class_eps=1e-12),
    "roberta": _layer(_TORCH_LAYER_NORM, "roberta", class_eps=1e-12),
    "gpt2": _layer(_TORCH_LAYER_NORM, "gpt2", class_eps=1e-5),
    "stablelm": _layer(_TORCH_LAYER_NORM, "stablelm", class_eps=1e-5),
}


rms_family = _rms
layer_family = _layer
