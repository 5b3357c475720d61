"""Epsilon settings to compare: ``eps=1e-6,placement=outside,dtype=float16`` or a framework default.

A SPEC is comma-separated ``key=value`` pairs:

* ``eps=E``: the epsilon (float64, > 0).
* ``placement=inside|outside|clamp|sum`` (default inside): the denominator of ``y = x / den`` is
  ``sqrt(q + eps)`` (inside), ``sqrt(q) + eps`` (outside), ``max(sqrt(q), eps)`` (clamp) or
  ``sqrt((d*q + eps) / d) = sqrt(q + eps/d)`` (sum: eps added to the sum of squares; needs
  ``dim=D``).
* ``dtype=float32|float16|bfloat16`` (default: exact float64 arithmetic): the precision in which
  eps is stored and ``q + eps`` is formed (see :mod:`rmsnorm_eps.compare.factor` for the model).
* ``framework=NAME[,dtype=T]``: eps from the framework's default (:func:`resolve_framework_eps`);
  here ``dtype`` is the INPUT dtype, the compute precision is the framework's documented one.

``config`` (per-layer settings from a model config) is not implemented yet: it is refused with
a message rather than guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rmsnorm_eps.errors import ConfigError, InvalidParameterError
from rmsnorm_eps.numerics import validate_eps

__all__ = [
    "COMPUTE_DTYPES",
    "FRAMEWORK_DEFAULTS",
    "PLACEMENTS",
    "EpsSpec",
    "FrameworkDefault",
    "parse_spec",
    "resolve_framework_eps",
]

PLACEMENTS = ("inside", "outside", "clamp", "sum")
COMPUTE_DTYPES = ("float64", "float32", "float16", "bfloat16")
_INPUT_DTYPES = COMPUTE_DTYPES
_KEYS = ("eps", "placement", "dim", "dtype", "framework")

#: float32 machine epsilon 2**-23 and float64 machine epsilon 2**-52.
_F32_EPS = 2.0**-23
_F64_EPS = 2.0**-52


@dataclass(frozen=True)
class FrameworkDefault:
    """A framework's default eps for an input dtype, and where q + eps is formed.

    ``compute_dtype`` is ``float32`` where the framework documents a float32 (or opmath)
    reduction for this input dtype, ``float64`` for float64 opmath, and ``None`` where this
    table does not know it (then the comparison is exact float64 arithmetic, said in ``note``).
    """

    framework: str
    input_dtype: str | None
    eps: float
    compute_dtype: str | None
    note: str


# name -> (eps, reduction, source). reduction: "float32" (always float32), "opmath" (float32 for
# half/float32 inputs, float64 for float64), None (not documented in FACTS.md).
_TABLE: dict[str, tuple[float | None, str | None, str]] = {
    "hf-llama": (
        1e-6,
        "float32",
        "HF LlamaRMSNorm / LlamaConfig default 1e-6 (Llama-2/3 "
        "checkpoints set 1e-5); fp32 reduction",
    ),
    "hf-mistral": (
        1e-6,
        "float32",
        "HF MistralConfig default 1e-6 (Mistral-7B checkpoints: 1e-5); fp32 reduction",
    ),
    "hf-gemma": (1e-6, "float32", "HF Gemma/Gemma2/Gemma3 RMSNorm default 1e-6; fp32"),
    "hf-olmo2": (1e-5, "float32", "HF Olmo2Config default 1e-5 (checkpoints appear to use 1e-6)"),
    "hf-t5": (1e-6, "float32", "HF T5LayerNorm default 1e-6 (key layer_norm_epsilon)"),
    "llama.cpp": (
        None,
        None,
        "llama.cpp has no default: eps is read from the GGUF key "
        "{arch}.attention.layer_norm_rms_epsilon",
    ),
    "flax": (1e-6, "opmath", "Flax linen/nnx RMSNorm default 1e-6; reductions in >= fp32"),
    "keras": (1e-6, None, "Keras RMSNormalization default 1e-6"),
    "mlx": (1e-5, None, "MLX nn.RMSNorm default 1e-5 (mx.fast.rms_norm has no default)"),
    "onnx": (1e-5, "float32", "ONNX RMSNormalization (opset 23) default 1e-5, stash_type 1 (fp32)"),
    "vllm": (1e-6, None, "vLLM RMSNorm default 1e-6"),
    "tensorrt-llm": (1e-6, None, "TensorRT-LLM rms_norm default 1e-6"),
    "flashinfer": (1e-6, None, "FlashInfer rmsnorm default 1e-6"),
    "torchtune": (1e-6, None, "torchtune RMSNorm default 1e-6"),
    "apex": (1e-5, None, "apex FusedRMSNorm class default 1e-5 (functional fused_rms_norm: 1e-6)"),
    "transformer-engine": (1e-5, None, "TransformerEngine RMSNorm default 1e-5"),
}

#: Frameworks :func:`resolve_framework_eps` knows (torch is resolved by input dtype).
FRAMEWORK_DEFAULTS: tuple[str, ...] = ("torch", *_TABLE)


def resolve_framework_eps(framework: str, dtype: str | None = None) -> FrameworkDefault:
    """The default eps of ``framework`` for inputs of ``dtype`` (FACTS.md section 2).

    torch (``torch.nn.RMSNorm`` / ``F.rms_norm`` with ``eps=None``): the machine epsilon of the
    compute (opmath) type, ``2**-23 = 1.1920929e-07`` for float16, bfloat16 and float32 inputs
    and ``2**-52 = 2.22e-16`` for float64 (torch 2.13.0; before pytorch PR 142848, half inputs
    used their own dtype's eps); the dtype is required. llama.cpp has no default (ConfigError).
    """
    name = framework.strip().lower()
    if dtype is not None and dtype not in _INPUT_DTYPES:
        raise InvalidParameterError(
            f"dtype must be one of {', '.join(_INPUT_DTYPES)}, got {dtype!r}"
        )
    if name == "torch":
        if dtype is None:
            raise ConfigError(
                "framework=torch: the default eps depends on the input dtype "
                "(1.1920929e-07 for float16/bfloat16/float32, 2.22e-16 for float64): add dtype="
            )
        wide = dtype == "float64"
        return FrameworkDefault(
            "torch",
            dtype,
            _F64_EPS if wide else _F32_EPS,
            "float64" if wide else "float32",
            "torch.nn.RMSNorm eps=None: machine eps of the opmath type "
            f"({'float64' if wide else 'float32'}), torch >= PR 142848 (measured on 2.13.0)",
        )
    if name not in _TABLE:
        raise ConfigError(
            f"unknown framework {framework!r}; known: {', '.join(FRAMEWORK_DEFAULTS)}"
        )
    eps, reduction, note = _TABLE[name]
    if eps is None:
        raise ConfigError(f"framework={name}: {note}; give eps= explicitly")
    compute: str | None
    if reduction == "float32":
        compute = "float32"
    elif reduction == "opmath" and dtype is not None:
        compute = "float64" if dtype == "float64" else "float32"
    else:
        compute = None
    if compute is None:
        why = "input dtype not given" if reduction == "opmath" else "not documented here"
        note += f"; compute precision {why}: modelled as exact float64"
    return FrameworkDefault(name, dtype, eps, compute, note)


@dataclass(frozen=True)
class EpsSpec:
    """One side of a comparison, fully resolved.

    ``dtype`` is the compute precision: ``float64`` means exact float64 arithmetic (no
    rounding modelled); float32/float16/bfloat16 round eps, q and each intermediate.
    """

    text: str
    eps: float
    placement: str = "inside"
    dim: int | None = None
    dtype: str = "float64"
    framework: str | None = None
    input_dtype: str | None = None
    note: str | None = None

    def describe(self) -> str:
        """A short human-readable form: ``eps=1e-06 inside float64``."""
        parts = [f"eps={self.eps:.8g}", self.placement]
        if self.dim is not None:
            parts.append(f"d={self.dim}")
        parts.append(self.dtype)
        if self.framework is not None:
            inp = f" {self.input_dtype} input" if self.input_dtype else ""
            parts.append(f"({self.framework} default{inp})")
        return " ".join(parts)


def _pairs(text: str, option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or not value:
            raise InvalidParameterError(f"{option} {text!r}: expected key=value, got {part!r}")
        if key not in _KEYS:
            raise InvalidParameterError(
                f"{option} {text!r}: unknown key {key!r}; keys: {', '.join(_KEYS)}"
            )
        if key in out:
            raise InvalidParameterError(f"{option} {text!r}: {key} given twice")
        out[key] = value
    if not out:
        raise InvalidParameterError(f"{option}: empty SPEC; give e.g. eps=1e-6")
    return out


def parse_spec(text: str, option: str = "SPEC") -> EpsSpec:
    """Parse and resolve a SPEC (see the module docstring); ``option`` names it in errors."""
    if text.strip().lower() == "config":
        raise InvalidParameterError(
            f"{option} config (per-layer settings from --config) is not implemented yet; "
            "give an explicit SPEC such as eps=1e-6"
        )
    kv = _pairs(text, option)
    placement = kv.get("placement", "inside").lower()
    if placement not in PLACEMENTS:
        raise InvalidParameterError(
            f"{option} {text!r}: placement must be one of {', '.join(PLACEMENTS)}, "
            f"got {placement!r}"
        )
    dim: int | None = None
    if "dim" in kv:
        try:
            dim = int(kv["dim"])
        except ValueError:
            raise InvalidParameterError(
                f"{option} {text!r}: dim must be a positive integer, got {kv['dim']!r}"
            ) from None
        if dim <= 0:
            raise InvalidParameterError(f"{option} {text!r}: dim must be >= 1, got {dim}")
        if placement != "sum":
            raise InvalidParameterError(f"{option} {text!r}: dim is only used by placement=sum")
    if placement == "sum" and dim is None:
        raise InvalidParameterError(
            f"{option} {text!r}: placement=sum adds eps to the sum of squares; give dim=D"
        )
    dtype = kv.get("dtype")
    if dtype is not None and dtype not in COMPUTE_DTYPES:
        raise InvalidParameterError(
            f"{option} {text!r}: dtype must be one of {', '.join(COMPUTE_DTYPES)}, got {dtype!r}"
        )
    if "framework" in kv:
        if "eps" in kv:
            raise InvalidParameterError(f"{option} {text!r}: give eps= or framework=, not both")
        if "placement" in kv and placement != "inside":
            raise InvalidParameterError(
                f"{option} {text!r}: framework defaults put eps inside the square root; "
                "give eps= to model another placement"
            )
        fd = resolve_framework_eps(kv["framework"], dtype)
        return EpsSpec(
            text=text,
            eps=fd.eps,
            placement="inside",
            dim=None,
            dtype=fd.compute_dtype or "float64",
            framework=fd.framework,
            input_dtype=dtype,
            note=fd.note,
        )
    if "eps" not in kv:
        raise InvalidParameterError(f"{option} {text!r}: give eps=E or framework=NAME")
    try:
        eps_value = float(kv["eps"])
    except ValueError:
        raise InvalidParameterError(
            f"{option} {text!r}: eps must be a number, got {kv['eps']!r}"
        ) from None
    if not math.isfinite(eps_value) or eps_value <= 0.0:
        raise InvalidParameterError(f"{option} {text!r}: eps must be finite and > 0")
    return EpsSpec(
        text=text,
        eps=validate_eps(eps_value),
        placement=placement,
        dim=dim,
        dtype=dtype or "float64",
    )
