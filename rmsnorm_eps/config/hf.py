"""Reader for Hugging Face ``config.json`` (and Meta's ``params.json``).

The eps key varies by model family (rms_norm_eps, layer_norm_eps, layer_norm_epsilon,
layernorm_epsilon, norm_epsilon, norm_eps) and does not tell the norm type: Qwen-1 stores an
RMSNorm eps under layer_norm_epsilon, GPT-2 a LayerNorm eps under the same key. The norm type,
gain convention and placement come from ``model_type`` (and ChatGLM's ``rmsnorm`` flag) through
the table below, whose provenance is the transformers class that implements the norm.
Multimodal configs nest the language model under ``text_config``. Several eps keys that
disagree are a conflict (no value is chosen); no key at all is "missing".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmsnorm_eps.config.model import (
    ConfigEntry,
    NormConfig,
    NormSettings,
    Provenance,
    Resolved,
    missing,
)
from rmsnorm_eps.config.fields import shorten
from rmsnorm_eps.errors import InputFileError, brief

__all__ = ["EPS_KEYS", "HF_FAMILIES", "MAX_JSON_BYTES", "load_json", "read_hf_config"]

#: Keys that hold a norm eps, in the order they are reported.
EPS_KEYS = (
    "rms_norm_eps",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "layernorm_epsilon",
    "norm_epsilon",
    "norm_eps",
)
_DIM_KEYS = ("hidden_size", "d_model", "n_embd", "dim")
_TRANSFORMERS = "transformers, as of 5.24"


@dataclass(frozen=True)
class Family:
    """How one HF model_type normalizes (from the class that implements it)."""

    norm: str  # rms | layer
    impl: str  # implementing class, for provenance
    gain: str = "w"
    weight_after_cast: bool | None = True  # None: not applicable / unknown
    reduction_dtype: str | None = "float32"
    class_eps: float | None = None  # the config class default eps (when known)
    per_head: bool = False  # q_norm/k_norm over head_dim
    mla: bool = False  # DeepSeek q_a_layernorm / kv_a_layernorm


def _rms(impl: str, class_eps: float | None = None, **kw: Any) -> Family:
    return Family("rms", impl, class_eps=class_eps, **kw)


def _gemma(impl: str, **kw: Any) -> Family:
    # Gemma multiplies by (1 + w) in float32, then casts (FACTS.md section 2).
    return Family("rms", impl, gain="1+w", weight_after_cast=False, class_eps=1e-6, **kw)


def _layer(impl: str) -> Family:
    return Family("layer", impl, weight_after_cast=None, reduction_dtype=None)


#: model_type -> family. Class default eps: FACTS.md section 2 (llama, mistral, gemma, olmo2, t5)
#: and measured on transformers 5.24 with AutoConfig.for_model (qwen2, qwen3, deepseek_v3).
HF_FAMILIES: dict[str, Family] = {
    "llama": _rms("LlamaRMSNorm", 1e-6),
    "mistral": _rms("MistralRMSNorm", 1e-6),
    "mixtral": _rms("MixtralRMSNorm"),
    "qwen2": _rms("Qwen2RMSNorm", 1e-6),
    "qwen2_moe": _rms("Qwen2MoeRMSNorm"),
    "qwen3": _rms("Qwen3RMSNorm", 1e-6, per_head=True),
    "qwen3_moe": _rms("Qwen3MoeRMSNorm", per_head=True),
    "phi3": _rms("Phi3RMSNorm"),
    "olmo2": _rms("Olmo2RMSNorm", 1e-5),
    "deepseek_v2": _rms("DeepseekV2RMSNorm", mla=True),
    "deepseek_v3": _rms("DeepseekV3RMSNorm", 1e-6, mla=True),
    "gemma": _gemma("GemmaRMSNorm"),
    "gemma2": _gemma("Gemma2RMSNorm"),
    "gemma3": _gemma("Gemma3RMSNorm", per_head=True),
    "gemma3_text": _gemma("Gemma3RMSNorm", per_head=True),
    "t5": _rms("T5LayerNorm (an RMSNorm)", 1e-6),
    "mt5": _rms("MT5LayerNorm (an RMSNorm)"),
    "qwen": _rms("Qwen-1 RMSNorm (remote code; eps under layer_norm_epsilon)"),
    "bert": _layer("torch.nn.LayerNorm in BertModel"),
    "gpt2": _layer("torch.nn.LayerNorm in GPT2Model"),
    "stablelm": _layer("torch.nn.LayerNorm in StableLmModel"),
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


#: Largest config.json read. Real ones are a few KiB (a classifier's id2label a few hundred
#: KiB); a JSON object costs Python about 40 times its text size, so 4 MiB stays far under
#: the 256 MiB peak-memory promise whatever the file holds.
MAX_JSON_BYTES = 4 << 20


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """object_pairs_hook: a JSON object whose keys repeat is refused (json would keep the last
    one silently, and two readers may pick different ones)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def load_json(path: Path) -> Any:
    """Parse strict JSON (NaN/Infinity and duplicate keys refused, at most
    :data:`MAX_JSON_BYTES`) into Python objects."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_JSON_BYTES:
        raise InputFileError(
            path, f"JSON config larger than {MAX_JSON_BYTES >> 20} MiB: refused (size cap)"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputFileError(path, "not UTF-8 text") from None
    del raw
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_pairs)
    except RecursionError:
        raise InputFileError(path, "invalid JSON: nested too deeply") from None
    except _DuplicateKey as exc:
        raise InputFileError(path, "duplicate key in a JSON object", key=shorten(exc.key)) from None
    except json.JSONDecodeError as exc:
        raise InputFileError(path, f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:
        raise InputFileError(path, f"invalid JSON: {shorten(str(exc))}") from None


def _eps_value(raw: Any, path: Path, key: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise InputFileError(path, f"expected a number, got {brief(raw)}", key=key)
    try:
        value = float(raw)
    except OverflowError:  # an integer literal beyond the float range
        value = math.inf
    if not math.isfinite(value) or value <= 0.0:
        raise InputFileError(path, f"eps must be a finite number > 0, got {brief(raw)}", key=key)
    return value


def _positive_int(raw: Any, path: Path, key: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise InputFileError(path, f"expected a positive integer, got {brief(raw)}", key=key)
    return raw


def _scopes(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(prefix, mapping) pairs to search: text_config first when present (multimodal)."""
    scopes: list[tuple[str, dict[str, Any]]] = []
    text = data.get("text_config")
    if isinstance(text, dict):
        scopes.append(("text_config.", text))
    scopes.append(("", data))
    return scopes


def _find(scopes: list[tuple[str, dict[str, Any]]], key: str) -> tuple[str, Any] | None:
    for prefix, scope in scopes:
        if key in scope and scope[key] is not None:
            return prefix + key, scope[key]
    return None


def _resolve_eps(
    scopes: list[tuple[str, dict[str, Any]]], path: Path, family: Family | None, mtype: str | None
) -> tuple[Resolved, list[str]]:
    notes: list[str] = []
    found = [
        (prefix + key, _eps_value(scope[key], path, prefix + key))
        for prefix, scope in scopes
        for key in EPS_KEYS
        if key in scope and scope[key] is not None
    ]
    if not found:
        note = "no eps key (" + ", ".join(EPS_KEYS) + ")"
        if family is not None and family.class_eps is not None:
            note += (
                f"; the transformers {mtype} config class default would be "
                f"{family.class_eps:g}, but checkpoints usually set their own value"
            )
        return missing(note), notes
    values = {v for _, v in found}
    if len(values) > 1:
        listed = ", ".join(f"{k}={v!r}" for k, v in found)
        notes.append(f"eps keys disagree: {listed}")
        return Resolved(None, Provenance("conflict", str(path), note=listed)), notes
    key, value = found[0]
    if len(found) > 1:
        notes.append("several eps keys, all equal: " + ", ".join(k for k, _ in found))
    return Resolved(value, Provenance("file", str(path), key)), notes


def read_hf_config(path: Path, data: Any | None = None) -> NormConfig:
    """Read a Hugging Face config.json (or Meta params.json) into a :class:`NormConfig`."""
    p = str(path)
    if data is None:
        data = load_json(path)
    if not isinstance(data, dict):
        raise InputFileError(path, "expected a JSON object at the top level")
    scopes = _scopes(data)
    notes: list[str] = []
    hit = _find(scopes, "model_type")
    mtype_key, mtype = hit if hit is not None else ("model_type", None)
    if mtype is not None and not isinstance(mtype, str):
        raise InputFileError(path, f"expected a string, got {brief(mtype)}", key=mtype_key)
    meta_params = mtype is None and "norm_eps" in data and "n_heads" in data
    family = HF_FAMILIES.get(mtype) if mtype else None
    if meta_params:
        family = Family("rms", "Meta llama reference model.py RMSNorm")
        mtype = "meta-llama params.json"
    eps, eps_notes = _resolve_eps(scopes, path, family, mtype)
    notes += eps_notes

    settings: dict[str, Resolved] = {"eps": eps}
    if family is None:
        why = f"model_type {brief(mtype)} is not in the table" if mtype else "no model_type key"
        notes.append(f"{why}: norm type, placement and gain are missing")
        for name in ("norm", "placement", "gain"):
            settings[name] = missing(why)
    if "rmsnorm" in data:  # ChatGLM: "rmsnorm": true selects RMSNorm over LayerNorm
        flag = data["rmsnorm"]
        if not isinstance(flag, bool):
            raise InputFileError(path, f"expected true or false, got {brief(flag)}", key="rmsnorm")
        family = _rms("ChatGLM RMSNorm") if flag else _layer("ChatGLM LayerNorm")
        settings["norm"] = Resolved("rms" if flag else "layer", Provenance("file", p, "rmsnorm"))
    if family is not None:
        impl = Provenance("framework", f"{family.impl}; {_TRANSFORMERS}")
        how = Provenance("derived", p, note=f"{mtype_key}={brief(mtype)} -> {family.impl}")
        settings.setdefault("norm", Resolved(family.norm, how))
        settings["placement"] = Resolved("inside", impl)
        settings["gain"] = Resolved(family.gain, how)
        settings["gain_baked"] = Resolved(False, impl)
        if family.reduction_dtype is not None:
            settings["reduction_dtype"] = Resolved(family.reduction_dtype, impl)
        if family.weight_after_cast is not None:
            settings["weight_after_cast"] = Resolved(family.weight_after_cast, impl)
    for key in _DIM_KEYS:
        dim_hit = _find(scopes, key)
        if dim_hit is not None:
            settings["dim"] = Resolved(
                _positive_int(dim_hit[1], path, dim_hit[0]), Provenance("file", p, dim_hit[0])
            )
            break

    entries = [ConfigEntry("*", ())]
    if family is not None and family.per_head:
        entries += _per_head(scopes, path)
    if family is not None and family.mla:
        for pattern, key in (
            ("*.self_attn.q_a_layernorm", "q_lora_rank"),
            ("*.self_attn.kv_a_layernorm", "kv_lora_rank"),
        ):
            rank = _find(scopes, key)
            if rank is not None:
                dim = Resolved(
                    _positive_int(rank[1], path, rank[0]), Provenance("file", p, rank[0])
                )
                entries.append(ConfigEntry(pattern, (("dim", dim),)))
    model = data.get("_name_or_path") if isinstance(data.get("_name_or_path"), str) else None
    return NormConfig(
        path=p,
        kind="hf",
        model=model or mtype,
        defaults=NormSettings().overlay(settings),
        entries=tuple(entries),
        notes=tuple(notes),
    )


def _per_head(scopes: list[tuple[str, dict[str, Any]]], path: Path) -> list[ConfigEntry]:
    """q_norm/k_norm over head_dim (Qwen3, Gemma 3); head_dim = hidden_size / heads if absent."""
    p = str(path)
    hd = _find(scopes, "head_dim")
    if hd is not None:
        dim = Resolved(_positive_int(hd[1], path, hd[0]), Provenance("file", p, hd[0]))
    else:
        hs, nh = _find(scopes, "hidden_size"), _find(scopes, "num_attention_heads")
        if hs is None or nh is None or not isinstance(hs[1], int) or not isinstance(nh[1], int):
            dim = missing("no head_dim, hidden_size or num_attention_heads key")
        else:
            dim = Resolved(
                hs[1] // nh[1], Provenance("derived", p, note=f"{hs[0]} / {nh[0]} (no head_dim)")
            )
    return [ConfigEntry(f"*.self_attn.{n}", (("dim", dim),)) for n in ("q_norm", "k_norm")]
