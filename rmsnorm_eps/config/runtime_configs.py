"""Readers for the JSON configs of other runtimes: a TensorRT-LLM checkpoint ``config.json``
(``norm_epsilon``), an ExecuTorch ``params.json`` (``norm_eps``), and MLX (mlx-lm's HF-style
``config.json``).

Each recognised by its keys (a JSON file that is none of them is a Hugging Face config):

- TensorRT-LLM: a string ``architecture`` (singular) and ``dtype``, no ``model_type``
  (``tensorrt_llm.models.modeling_utils.PretrainedConfig`` writes them);
- ExecuTorch: ``dim`` and ``n_layers``, no ``model_type``, and one of the ModelArgs fields of
  ExecuTorch's ``examples/models/llama/model_args.py`` that Meta's params.json lacks
  (``norm_type``, ``use_kv_cache``, ...); a plain Meta params.json stays a Hugging Face-reader
  config (its missing ``norm_eps`` stays missing);
- MLX: an HF-style config with mlx-lm's ``quantization`` table (``group_size`` and ``bits``).

A key that is missing is never filled in silently: the runtime's documented default is shown as
a ``framework`` value with its public source (TensorRT-LLM's PretrainedConfig
``norm_epsilon: float = 1e-5``; ExecuTorch's ModelArgs ``norm_eps: float = 1e-5``), or, where
the runtime has none (mlx-lm's ModelArgs ``rms_norm_eps: float``, a required field), the eps is
missing with that reason.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rmsnorm_eps.config.model import NormConfig, NormSettings, Provenance, Resolved, missing

__all__ = [
    "EXECUTORCH_SOURCE",
    "MLX_SOURCE",
    "TRTLLM_SOURCE",
    "read_json_config",
    "runtime_of",
]

TRTLLM_SOURCE = (
    "TensorRT-LLM tensorrt_llm/models/modeling_utils.py PretrainedConfig(norm_epsilon=1e-5)"
)
EXECUTORCH_SOURCE = "ExecuTorch examples/models/llama/model_args.py ModelArgs.norm_eps = 1e-5"
EXECUTORCH_NORM = (
    "ExecuTorch examples/models/llama/norm.py RMSNorm: "
    "x * rsqrt(mean(x*x) + eps) in float32, then * weight"
)
MLX_SOURCE = "mlx-lm mlx_lm/models/llama.py ModelArgs.rms_norm_eps (required, no default)"
MLX_NORM = "mlx-lm nn.RMSNorm (mx.fast.rms_norm): x * rsqrt(mean(x^2) + eps)"
#: ModelArgs fields of ExecuTorch's llama example that Meta's params.json does not have; a
#: params.json with none of them is read as Meta's (the Hugging Face reader).
_EXECUTORCH_KEYS = (
    "norm_type",
    "use_kv_cache",
    "use_sdpa_with_kv_cache_op",
    "use_qk_norm",
    "attention_type",
    "act_fn",
    "enable_dynamic_shape",
    "max_context_len",
)
_SOURCES = {"TensorRT-LLM": TRTLLM_SOURCE, "ExecuTorch": EXECUTORCH_SOURCE}
_TRTLLM_RMS = ("Llama", "Mistral", "Mixtral", "Qwen", "InternLM", "Baichuan", "Deepseek")


def runtime_of(data: Any) -> str | None:
    """'trtllm', 'executorch', 'mlx' or None (a Hugging Face config) by the keys of ``data``."""
    if not isinstance(data, dict):
        return None
    if "model_type" not in data and isinstance(data.get("architecture"), str) and "dtype" in data:
        return "trtllm"
    if (
        "model_type" not in data
        and "dim" in data
        and "n_layers" in data
        and any(key in data for key in _EXECUTORCH_KEYS)
    ):
        return "executorch"
    quant = data.get("quantization")
    if "model_type" in data and isinstance(quant, dict) and {"group_size", "bits"} <= set(quant):
        return "mlx"
    return None


def read_json_config(path: Path) -> NormConfig:
    """A JSON config: one of the runtimes above, else a Hugging Face config.json."""
    from rmsnorm_eps.config.hf import read_hf_config
    from rmsnorm_eps.config.json_file import load_json

    data = load_json(path)
    runtime = runtime_of(data)
    if runtime == "trtllm":
        return _trtllm(path, data)
    base = read_hf_config(path, data)
    if runtime == "executorch":
        return _executorch(path, data, base)
    if runtime == "mlx":
        return _mlx(base)
    return base


def _eps(path: Path, data: dict[str, Any], key: str, runtime: str, notes: list[str]) -> Resolved:
    """eps from ``key``; when missing, the default 1e-5 the runtime documents (its ``source``
    in :data:`_SOURCES`), said so in ``notes``."""
    from rmsnorm_eps.config.hf import _eps_value

    if key in data:  # null is refused (NULL_EPS), never the documented default
        return Resolved(_eps_value(data[key], path, key), Provenance("file", str(path), key))
    source = _SOURCES[runtime]
    notes.append(f"{key} missing: {runtime}'s default 1e-5 shown ({source})")
    return Resolved(1e-5, Provenance("framework", source, note=f"{key} missing"))


def _dim(path: Path, data: dict[str, Any], key: str) -> Resolved:
    from rmsnorm_eps.config.hf import _positive_int

    if data.get(key) is not None:
        return Resolved(_positive_int(data[key], path, key), Provenance("file", str(path), key))
    return missing(f"no {key}")


def _trtllm(path: Path, data: dict[str, Any]) -> NormConfig:
    from rmsnorm_eps.config.model import ConfigEntry

    arch = str(data.get("architecture"))
    notes: list[str] = []
    eps = _eps(path, data, "norm_epsilon", "TensorRT-LLM", notes)
    settings: dict[str, Resolved] = {"eps": eps, "dim": _dim(path, data, "hidden_size")}
    if any(arch.startswith(x) for x in _TRTLLM_RMS):
        rule = Provenance("derived", str(path), "architecture", note=f"{arch}: RmsNorm")
        src = Provenance("framework", "TensorRT-LLM tensorrt_llm/functional.py rms_norm")
        settings.update(
            norm=Resolved("rms", rule),
            placement=Resolved("inside", src),
            gain=Resolved("w", src),
        )
    else:
        why = f"architecture {arch[:60]!r} is not one this reader knows"
        notes.append(f"{why}: norm type, placement and gain are missing")
    return NormConfig(
        path=str(path),
        kind="trtllm",
        model=arch,
        defaults=NormSettings().overlay(settings),
        entries=(ConfigEntry("*", ()),),
        notes=tuple(notes),
        source="TensorRT-LLM checkpoint config.json",
    )


def _executorch(path: Path, data: dict[str, Any], base: NormConfig) -> NormConfig:
    notes = list(base.notes)
    eps = _eps(path, data, "norm_eps", "ExecuTorch", notes)
    norm_type = data.get("norm_type", "rmsnorm")
    settings: dict[str, Resolved] = {"eps": eps, "dim": _dim(path, data, "dim")}
    if norm_type == "rmsnorm":
        src = Provenance("framework", EXECUTORCH_NORM)
        kind_src = (
            Provenance("file", str(path), "norm_type")
            if "norm_type" in data
            else Provenance("framework", "ExecuTorch ModelArgs.norm_type = 'rmsnorm'")
        )
        settings.update(
            norm=Resolved("rms", kind_src),
            placement=Resolved("inside", src),
            gain=Resolved("w", src),
            reduction_dtype=Resolved("float32", src),
        )
        notes = [n for n in notes if "norm type, placement and gain are missing" not in n]
    return replace(
        base,
        kind="executorch",
        model=base.model or "params.json",
        defaults=base.defaults.overlay(settings),
        notes=tuple(notes),
        source="ExecuTorch / Meta llama params.json",
    )


def _mlx(base: NormConfig) -> NormConfig:
    notes = list(base.notes)
    settings: dict[str, Resolved] = {}
    if base.defaults.eps.is_missing and base.defaults.eps.provenance.kind == "missing":
        settings["eps"] = missing(f"no eps key; {MLX_SOURCE}: mlx-lm refuses such a config")
    if base.defaults.norm.value == "rms":
        src = Provenance("framework", MLX_NORM)
        settings["placement"] = Resolved("inside", src)
    notes.append("MLX (mlx-lm) config: the HF keys, norms computed by mlx-lm's nn.RMSNorm")
    return replace(
        base,
        kind="mlx",
        defaults=base.defaults.overlay(settings),
        notes=tuple(notes),
        source="MLX (mlx-lm) config.json",
    )
