"""The framework defaults table, as data: one row per API, each with its source.

Sources: each row's ``source`` names the public code or docs (the transformers rows: the
configuration/modeling files read in transformers 5.24); the torch row was also measured here
on torch 2.13.0 CPU (F.rms_norm with eps=None equals eps=finfo(float32).eps for
float16, bfloat16 and float32 inputs, and finfo(float64).eps for float64 inputs).
Edit this table, not the code, when a framework changes.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FRAMEWORK_DEFAULTS", "FrameworkDefault"]


@dataclass(frozen=True)
class FrameworkDefault:
    """One API's default eps. ``eps`` None: no fixed number (see ``rule``)."""

    framework: str  # the project or library (several rows may share it)
    api: str
    eps: float | None
    rule: str
    versions: str
    source: str
    #: Unique row name: ``defaults --framework NAME`` and ``compare --to framework=NAME``.
    name: str = ""
    #: Where ``q + eps`` is formed: "float32" (always), "opmath" (float32 for half and float32
    #: inputs, float64 for float64 inputs) or None (not documented by the source).
    reduction: str | None = None


_TF_AS_OF = "as of 5.24"
_TF_MODELS = "transformers 5.24 src/transformers/models/"

FRAMEWORK_DEFAULTS: tuple[FrameworkDefault, ...] = (
    FrameworkDefault(
        "torch",
        "torch.nn.RMSNorm / torch.nn.functional.rms_norm",
        None,
        "eps=None: machine eps of the compute (opmath) type: 1.1920929e-07 for float16, "
        "bfloat16 and float32 inputs, 2.220446e-16 for float64; before PR 142848 half inputs "
        "used their own dtype's eps (9.765625e-04 float16, 7.8125e-03 bfloat16)",
        ">= 2.4 (RMSNorm added); opmath rule from 2.7",
        "pytorch PR 142848 (merged Jan 2025), docs PR 173039 / issue 155527; measured on "
        "torch 2.13.0 CPU",
        name="torch",
        reduction="opmath",
    ),
    FrameworkDefault(
        "transformers",
        "LlamaRMSNorm / LlamaConfig.rms_norm_eps",
        1e-6,
        "class default; Llama-2/3 checkpoints set 1e-5; fp32 reduction, cast back, then x weight",
        _TF_AS_OF,
        _TF_MODELS + "llama/configuration_llama.py (rms_norm_eps: float = 1e-6) and "
        "modeling_llama.py (LlamaRMSNorm); AutoConfig.for_model('llama') on transformers 5.24",
        name="hf-llama",
        reduction="float32",
    ),
    FrameworkDefault(
        "transformers",
        "MistralConfig.rms_norm_eps",
        1e-6,
        "class default; Mistral-7B checkpoints set 1e-5",
        _TF_AS_OF,
        _TF_MODELS + "mistral/configuration_mistral.py (rms_norm_eps: float = 1e-6)",
        name="hf-mistral",
        reduction="float32",
    ),
    FrameworkDefault(
        "transformers",
        "Gemma/Gemma2/Gemma3 RMSNorm",
        1e-6,
        "gain (1 + w), multiplied in fp32, then cast",
        _TF_AS_OF,
        _TF_MODELS + "gemma/modeling_gemma.py (GemmaRMSNorm(dim, eps=1e-6): "
        "output * (1.0 + self.weight.float()), then type_as(x)); gemma2, gemma3 the same",
        name="hf-gemma",
        reduction="float32",
    ),
    FrameworkDefault(
        "transformers",
        "Olmo2Config.rms_norm_eps",
        1e-5,
        "class default; OLMo-2 checkpoints appear to use 1e-6",
        _TF_AS_OF,
        _TF_MODELS + "olmo2/configuration_olmo2.py (rms_norm_eps: float = 1e-5)",
        name="hf-olmo2",
        reduction="float32",
    ),
    FrameworkDefault(
        "transformers",
        "T5LayerNorm (an RMSNorm), key layer_norm_epsilon",
        1e-6,
        "class default",
        _TF_AS_OF,
        _TF_MODELS + "t5/configuration_t5.py (layer_norm_epsilon: float = 1e-6), "
        "modeling_t5.py (T5LayerNorm: no mean subtraction, no bias)",
        name="hf-t5",
        reduction="float32",
    ),
    FrameworkDefault(
        "meta-llama",
        "Meta llama reference RMSNorm class",
        1e-6,
        "ModelArgs.norm_eps is 1e-5; LLaMA-1 checkpoints used 1e-6",
        "llama reference code",
        "meta-llama/llama llama/model.py (RMSNorm(dim, eps: float = 1e-6); "
        "ModelArgs.norm_eps: float = 1e-5)",
        name="meta-llama",
    ),
    FrameworkDefault(
        "llama.cpp",
        "ggml_rms_norm",
        None,
        "no default: eps is read from the GGUF ({arch}.attention.layer_norm_rms_epsilon); sum "
        "of squares accumulated in double, 1/sqrtf(mean + eps)",
        "all",
        "ggml-org/llama.cpp ggml/src/ggml-cpu/ops.cpp (ggml_compute_forward_rms_norm_f32: "
        "sum of squares as ggml_float, i.e. double); src/llama-model.cpp reads "
        "LLM_KV_ATTENTION_LAYERNORM_RMS_EPS",
        name="llama.cpp",
    ),
    FrameworkDefault(
        "flax",
        "flax.linen / flax.nnx RMSNorm",
        1e-6,
        "reductions in >= fp32",
        "linen and nnx",
        "google/flax flax/linen/normalization.py (RMSNorm.epsilon: float = 1e-6, "
        "force_float32_reductions=True)",
        name="flax",
        reduction="opmath",
    ),
    FrameworkDefault(
        "keras",
        "keras.layers.RMSNormalization",
        1e-6,
        "layer default",
        "Keras 3",
        "keras-team/keras keras/src/layers/normalization/rms_normalization.py "
        "(RMSNormalization(axis=-1, epsilon=1e-6))",
        name="keras",
    ),
    FrameworkDefault(
        "mlx",
        "mlx.nn.RMSNorm",
        1e-5,
        "mx.fast.rms_norm has no default",
        "all",
        "ml-explore/mlx python/mlx/nn/layers/normalization.py (RMSNorm(dims, eps: float = 1e-5))",
        name="mlx",
    ),
    FrameworkDefault(
        "apex",
        "apex FusedRMSNorm (class)",
        1e-5,
        "class default",
        "all",
        "NVIDIA/apex apex/normalization/fused_layer_norm.py "
        "(FusedRMSNorm(normalized_shape, eps=1e-5, elementwise_affine=True))",
        name="apex",
    ),
    FrameworkDefault(
        "apex",
        "apex fused_rms_norm (functional)",
        1e-6,
        "functional default",
        "all",
        "NVIDIA/apex apex/normalization/fused_layer_norm.py "
        "(fused_rms_norm(input, normalized_shape, eps=1e-6))",
        name="apex-functional",
    ),
    FrameworkDefault(
        "transformer-engine",
        "TransformerEngine RMSNorm",
        1e-5,
        "zero_centered_gamma=True means gain (1 + gamma)",
        "all",
        "NVIDIA/TransformerEngine transformer_engine/pytorch/module/rmsnorm.py "
        "(RMSNorm(hidden_size, eps=1e-5, ..., zero_centered_gamma=False))",
        name="transformer-engine",
    ),
    FrameworkDefault(
        "onnx",
        "ONNX RMSNormalization",
        1e-5,
        "axis -1, stash_type 1 (fp32)",
        "opset 23",
        "ONNX operator RMSNormalization (opset 23) spec, onnx/docs/Operators.md "
        "(epsilon default 1e-05, axis -1, stash_type 1)",
        name="onnx",
        reduction="float32",
    ),
    FrameworkDefault(
        "torchtune",
        "torchtune RMSNorm",
        1e-6,
        "normalizes in fp32, casts back (type_as(x)), then x scale",
        "all",
        "pytorch/torchtune torchtune/modules/rms_norm.py (RMSNorm(dim, eps: float = 1e-6))",
        name="torchtune",
    ),
    FrameworkDefault(
        "vllm",
        "vLLM RMSNorm",
        1e-6,
        "class default",
        "all",
        "vllm-project/vllm vllm/model_executor/layers/layernorm.py "
        "(RMSNorm(hidden_size, eps: float = 1e-6))",
        name="vllm",
    ),
    FrameworkDefault(
        "tensorrt-llm",
        "TensorRT-LLM rms_norm",
        1e-6,
        "function default",
        "all",
        "NVIDIA/TensorRT-LLM tensorrt_llm/functional.py "
        "(rms_norm(input, normalized_shape, ..., eps=1e-06))",
        name="tensorrt-llm",
    ),
    FrameworkDefault(
        "flashinfer",
        "FlashInfer rmsnorm",
        1e-6,
        "function default",
        "all",
        "flashinfer-ai/flashinfer flashinfer/norm.py (rmsnorm(input, weight, eps: float = 1e-6))",
        name="flashinfer",
    ),
)
