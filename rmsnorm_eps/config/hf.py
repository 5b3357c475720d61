"""Reader for Hugging Face ``config.json`` (and Meta's ``params.json``).

The eps key varies by model family (rms_norm_eps, layer_norm_eps, layer_norm_epsilon,
layernorm_epsilon, norm_epsilon, norm_eps) and does not tell the norm type: Qwen-1 stores an
RMSNorm eps under layer_norm_epsilon, GPT-2 a LayerNorm eps under the same key. The norm type,
gain convention and placement come from ``model_type`` (and ChatGLM's ``rmsnorm`` flag) through
the family table (:mod:`rmsnorm_eps.config.hf_families`), whose provenance is the transformers
class that implements the norm.
Multimodal configs nest the language model under ``text_config``. Several eps keys that
disagree are a conflict (no value is chosen); no key at all is "missing".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rmsnorm_eps.config.fields import parse_eps
from rmsnorm_eps.config.hf_families import HF_FAMILIES, TRANSFORMERS, Family
from rmsnorm_eps.config.hf_families import layer_family as _layer
from rmsnorm_eps.config.hf_families import rms_family as _rms
from rmsnorm_eps.config.json_file import NULL_EPS, load_json, refuse_non_finite
from rmsnorm_eps.config.model import (
    ConfigEntry,
    NormConfig,
    NormSettings,
    Provenance,
    Resolved,
    missing,
)
from rmsnorm_eps.errors import InputFileError, brief

__all__ = ["EPS_KEYS", "read_hf_config"]

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
#: (prefix, mapping) pairs searched for a key: ``text_config.`` first (multimodal), then the top.
Scopes = list[tuple[str, dict[str, Any]]]


def _eps_value(raw: Any, path: Path, key: str) -> float:
    """parse_eps, but a JSON string is not a number (YAML's "1e-6" is), and null is refused
    (:data:`~rmsnorm_eps.config.json_file.NULL_EPS`)."""
    refuse_non_finite(raw, path, key)
    if raw is None:
        raise InputFileError(path, NULL_EPS, key=key)
    if isinstance(raw, str):
        raise InputFileError(path, f"expected a number, got {brief(raw)}", key=key)
    return parse_eps(raw, str(path), key)


def _positive_int(raw: Any, path: Path, key: str) -> int:
    refuse_non_finite(raw, path, key)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise InputFileError(path, f"expected a positive integer, got {brief(raw)}", key=key)
    return raw


def _scopes(data: dict[str, Any]) -> Scopes:
    """(prefix, mapping) pairs to search: text_config first when present (multimodal)."""
    text = data.get("text_config")
    return [("text_config.", text), ("", data)] if isinstance(text, dict) else [("", data)]


def _find(scopes: Scopes, key: str) -> tuple[str, Any] | None:
    for prefix, scope in scopes:
        if key in scope and scope[key] is not None:
            return prefix + key, scope[key]
    return None


def _resolve_eps(
    scopes: Scopes, path: Path, family: Family | None, mtype: str | None
) -> tuple[Resolved, list[str]]:
    notes: list[str] = []
    found = [
        (prefix + key, _eps_value(scope[key], path, prefix + key))
        for prefix, scope in scopes
        for key in EPS_KEYS
        if key in scope  # a null value is refused by _eps_value, never taken as missing
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
    mtype_key, mtype, family = _model_type(scopes, path, data)
    eps, notes = _resolve_eps(scopes, path, family, mtype)
    if family is not None and family.hard_eps is not None:
        eps = _hard_eps(eps, family, mtype, notes)
    settings: dict[str, Resolved] = {"eps": eps}
    if family is None:
        why = f"model_type {brief(mtype)} is not in the table" if mtype else "no model_type key"
        notes.append(f"{why}: norm type, placement and gain are missing")
        for name in ("norm", "placement", "gain"):
            settings[name] = missing(why)
    if "rmsnorm" in data:  # ChatGLM: "rmsnorm": true selects RMSNorm over LayerNorm
        family = _chatglm(data["rmsnorm"], path, settings)
    if family is not None:
        _family_settings(settings, family, p, mtype_key, mtype)
    _dim_setting(settings, scopes, path)
    entries = [ConfigEntry("*", ())]
    if family is not None:
        for extra in family.extras:
            entries += _BUILDERS[extra](scopes, path, family)
    model = data.get("_name_or_path") if isinstance(data.get("_name_or_path"), str) else None
    return NormConfig(
        path=p,
        kind="hf",
        model=model or mtype,
        defaults=NormSettings().overlay(settings),
        entries=tuple(entries),
        notes=tuple(notes),
    )


def _model_type(
    scopes: Scopes, path: Path, data: dict[str, Any]
) -> tuple[str, str | None, Family | None]:
    """(key, model_type, family): a Meta params.json (no model_type, ``norm_eps`` and
    ``n_heads``) is the Meta reference RMSNorm."""
    hit = _find(scopes, "model_type")
    mtype_key, mtype = hit if hit is not None else ("model_type", None)
    if mtype is not None and not isinstance(mtype, str):
        raise InputFileError(path, f"expected a string, got {brief(mtype)}", key=mtype_key)
    if mtype is None and "norm_eps" in data and "n_heads" in data:
        return mtype_key, "meta-llama params.json", _rms("Meta llama reference model.py RMSNorm")
    return mtype_key, mtype, HF_FAMILIES.get(mtype) if mtype else None


def _hard_eps(eps: Resolved, family: Family, mtype: str | None, notes: list[str]) -> Resolved:
    """The eps the modeling code hard-codes (OLMo-1), noting config keys it ignores."""
    if eps.value is not None or eps.provenance.kind == "conflict":
        notes.append(
            f"the {mtype} modeling code ignores the config's eps keys: "
            f"it hard-codes eps={family.hard_eps:g}"
        )
    return Resolved(
        family.hard_eps,
        Provenance("framework", f"{family.source}: {family.impl}", note="hard-coded eps"),
    )


def _chatglm(flag: Any, path: Path, settings: dict[str, Resolved]) -> Family:
    """ChatGLM's ``rmsnorm`` flag: RMSNorm when true, LayerNorm when false."""
    if not isinstance(flag, bool):
        raise InputFileError(path, f"expected true or false, got {brief(flag)}", key="rmsnorm")
    settings["norm"] = Resolved(
        "rms" if flag else "layer", Provenance("file", str(path), "rmsnorm")
    )
    return _rms("ChatGLM RMSNorm") if flag else _layer("ChatGLM LayerNorm")


def _family_settings(
    settings: dict[str, Resolved], family: Family, p: str, mtype_key: str, mtype: str | None
) -> None:
    """The settings the family's norm class fixes (norm unless set already, placement, gain,
    reduction dtype, when the weight is applied)."""
    where = family.source or TRANSFORMERS
    impl = Provenance("framework", f"{family.impl}; {where}")
    how = Provenance("derived", p, note=f"{mtype_key}={brief(mtype)} -> {family.impl}")
    settings.setdefault("norm", Resolved(family.norm, how))
    settings["placement"] = Resolved("inside", impl)
    settings["gain"] = Resolved(family.gain, how)
    settings["gain_baked"] = Resolved(False, impl)
    if family.reduction_dtype is not None:
        settings["reduction_dtype"] = Resolved(family.reduction_dtype, impl)
    if family.weight_after_cast is not None:
        settings["weight_after_cast"] = Resolved(family.weight_after_cast, impl)


def _dim_setting(settings: dict[str, Resolved], scopes: Scopes, path: Path) -> None:
    """``dim`` from the first width key present (:data:`_DIM_KEYS` order)."""
    for key in _DIM_KEYS:
        dim = _int_key(scopes, path, key)
        if dim is not None:
            settings["dim"] = dim
            return


def _int_key(scopes: Scopes, path: Path, key: str) -> Resolved | None:
    hit = _find(scopes, key)
    if hit is None:
        return None
    return Resolved(_positive_int(hit[1], path, hit[0]), Provenance("file", str(path), hit[0]))


def _head_dim(scopes: Scopes, path: Path) -> Resolved:
    """head_dim, or hidden_size // num_attention_heads when absent (as the attention classes
    do: ``getattr(config, "head_dim", hidden_size // num_attention_heads)``)."""
    hd = _int_key(scopes, path, "head_dim")
    if hd is not None:
        return hd
    hs, nh = _int_key(scopes, path, "hidden_size"), _int_key(scopes, path, "num_attention_heads")
    if hs is None or nh is None:
        return missing("no head_dim, hidden_size or num_attention_heads key")
    assert isinstance(hs.value, int) and isinstance(nh.value, int)
    note = f"{hs.provenance.key} // {nh.provenance.key} (no head_dim)"
    return _derived(hs.value // nh.value, path, note)


def _derived(value: int, path: Path, note: str) -> Resolved:
    return Resolved(value, Provenance("derived", str(path), note=note))


def _flag(scopes: Scopes, path: Path, key: str, default: bool) -> bool:
    hit = _find(scopes, key)
    if hit is None:
        return default
    if not isinstance(hit[1], bool):
        raise InputFileError(path, f"expected true or false, got {brief(hit[1])}", key=hit[0])
    return hit[1]


def _fw(family: Family, what: str) -> Provenance:
    return Provenance("framework", f"{family.source}: {what}")


def _qk_head(scopes: Scopes, path: Path, family: Family) -> list[ConfigEntry]:
    """q_norm/k_norm over head_dim, per head (Qwen3, Gemma 3, Gemma 3n, Qwen3-Next)."""
    dim = _head_dim(scopes, path)
    return [ConfigEntry(f"*.self_attn.{n}", (("dim", dim),)) for n in ("q_norm", "k_norm")]


def _v_gemma3n(scopes: Scopes, path: Path, family: Family) -> list[ConfigEntry]:
    """Gemma 3n's v_norm: Gemma3nRMSNorm(head_dim, with_scale=False), no weight."""
    gain = Resolved("none", _fw(family, "v_norm = Gemma3nRMSNorm(head_dim, with_scale=False)"))
    return [ConfigEntry("*.self_attn.v_norm", (("dim", _head_dim(scopes, path)), ("gain", gain)))]


def _qk_olmo2(scopes: Scopes, path: Path, family: Family) -> list[ConfigEntry]:
    """OLMo-2 q_norm/k_norm over the whole projection: num_attention_heads * head_dim and
    num_key_value_heads * head_dim (not per head)."""
    hd = _head_dim(scopes, path)
    out = []
    for name, heads_key in (("q_norm", "num_attention_heads"), ("k_norm", "num_key_value_heads")):
        heads = _int_key(scopes, path, heads_key)
        if heads_key == "num_key_value_heads" and heads is None:
            heads = _int_key(scopes, path, "num_attention_heads")  # the config class default
        if heads is None or hd.value is None:
            dim = missing(f"no {heads_key} or head dim")
        else:
            assert isinstance(heads.value, int) and isinstance(hd.value, int)
            how = f"{family.source}: Olmo2RMSNorm({heads_key} * head_dim)"
            dim = _derived(
                heads.value * hd.value, path, f"{heads.provenance.key} * head_dim ({how})"
            )
        out.append(ConfigEntry(f"*.self_attn.{name}", (("dim", dim),)))
    return out


def _qk_cohere(scopes: Scopes, path: Path, family: Family) -> list[ConfigEntry]:
    """Cohere q_norm/k_norm (when use_qk_norm): CohereLayerNorm over head_dim per head."""
    return _qk_head(scopes, path, family) if _flag(scopes, path, "use_qk_norm", False) else []


def _qk_l2(scopes: Scopes, path: Path, family: Family) -> list[ConfigEntry]:
    """Llama 4 qk_norm (when use_qk_norm, the class default): Llama4TextL2Norm(rms_norm_eps),
    x * rsqrt(mean(x^2) + eps) over head_dim, no weight, applied to q and k."""
    if not _flag(scopes, path, "use_qk_norm", True):
        return []
    fw = _fw(family, "qk_norm = Llama4TextL2Norm(rms_norm_eps): no weight")
    dim = _head_dim(scopes, path)
    settings = (("norm", Resolved("l2", fw)), ("gain", Resolved("none", fw)), ("dim", dim))
    return [ConfigEntry("*.self_attn.qk_norm", settings)]


def _mla(scopes: Scopes, path: Path, family: Family) -> list[ConfigEntry]:
    """DeepSeek MLA q_a_layernorm / kv_a_layernorm over q_lora_rank / kv_lora_rank. The
    modeling code builds them without eps=, so they keep the class default 1e-6 whatever
    rms_norm_eps says."""
    out = []
    cls = family.impl.split()[0]
    for name, key in (("q_a_layernorm", "q_lora_rank"), ("kv_a_layernorm", "kv_lora_rank")):
        rank = _int_key(scopes, path, key)
        if rank is not None:
            why = f"{name} = {cls}({key}) keeps the class default eps=1e-6"
            eps = Resolved(1e-6, _fw(family, why))
            out.append(ConfigEntry(f"*.self_attn.{name}", (("dim", rank), ("eps", eps))))
    return out


def _gated(
    pattern: str,
    cls: str,
    width: str,
    groups_key: str | None,
    gate_first: bool | None,
    after_cast: bool,
) -> Any:
    """A builder for a gated RMSNorm entry: dim is the group size width // groups."""

    def build(scopes: Scopes, path: Path, family: Family) -> list[ConfigEntry]:
        if family is HF_FAMILIES.get("falcon_h1") and not _flag(
            scopes, path, "mamba_rms_norm", False
        ):
            return []  # mamba_rms_norm false: the mixer's norm is nn.Identity
        first = gate_first
        if first is None:  # Falcon-H1: norm_before_gate=mamba_norm_before_gate (default true)
            first = not _flag(scopes, path, "mamba_norm_before_gate", True)
        total, why = _width(scopes, path, width)
        groups = _int_key(scopes, path, groups_key) if groups_key else None
        if total is None:
            dim = missing(why)
        elif groups_key is None:
            dim = _derived(total, path, why)
        elif groups is None:
            dim = missing(f"no {groups_key} key (group size = {why} / {groups_key})")
        else:
            assert isinstance(groups.value, int)
            why = f"group size ({why}) // {groups.provenance.key}"
            dim = _derived(total // groups.value, path, why)
        order = (
            "gate before the norm: q = mean((x*silu(g))^2) per group"
            if first
            else "gate after the norm: q = mean(x^2) per group"
        )
        fw = _fw(family, cls)
        settings = (
            ("norm", Resolved("gated-rms", _fw(family, f"{cls}; {order}"))),
            ("gain", Resolved("w", fw)),
            ("weight_after_cast", Resolved(after_cast, fw)),
            ("dim", dim),
        )
        return [ConfigEntry(pattern, settings)]

    return build


def _width(scopes: Scopes, path: Path, rule: str) -> tuple[int | None, str]:
    """The gated norm's full width by the modeling code's rule (named in ``rule``)."""

    def get(key: str) -> Any:
        hit = _find(scopes, key)
        return None if hit is None else hit[1]

    hidden = get("hidden_size")
    if rule in ("expand", "mamba_expand"):  # Mamba2; Bamba, Falcon-H1 (mamba_d_ssm when set)
        d_ssm = get("mamba_d_ssm") if rule == "mamba_expand" else None
        if isinstance(d_ssm, int) and not isinstance(d_ssm, bool) and d_ssm > 0:
            return d_ssm, "mamba_d_ssm"
        e = get(rule)
        ok = isinstance(e, int | float) and isinstance(hidden, int)
        return (int(e * hidden) if ok else None), f"int({rule} * hidden_size)"
    if rule == "heads":  # NemotronH: mamba_num_heads * mamba_head_dim
        h, d = get("mamba_num_heads"), get("mamba_head_dim")
        ok = isinstance(h, int) and isinstance(d, int)
        return (h * d if ok else None), "mamba_num_heads * mamba_head_dim"
    v = get("linear_value_head_dim")  # Qwen3-Next: per value head
    return (v if isinstance(v, int) and v > 0 else None), "linear_value_head_dim"


_BUILDERS: dict[str, Any] = {
    "qk_head": _qk_head,
    "v_gemma3n": _v_gemma3n,
    "qk_olmo2": _qk_olmo2,
    "qk_cohere": _qk_cohere,
    "qk_l2": _qk_l2,
    "mla": _mla,
    "gated_mamba2": _gated("*.mixer.norm", "MambaRMSNormGated", "expand", "n_groups", True, True),
    "gated_bamba": _gated(
        "*.mamba.norm", "BambaRMSNormGated", "mamba_expand", "mamba_n_groups", True, True
    ),
    "gated_nemotron_h": _gated(
        "*.mixer.norm", "NemotronHRMSNormGated", "heads", "n_groups", True, True
    ),
    "gated_falcon_h1": _gated(
        "*.mamba.norm", "FalconH1RMSNormGated", "mamba_expand", "mamba_n_groups", None, False
    ),
    "gated_qwen3_next": _gated(
        "*.linear_attn.norm", "Qwen3NextRMSNormGated", "value", None, False, True
    ),
}
