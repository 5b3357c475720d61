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

from rmsnorm_eps.config.fields import shorten
from rmsnorm_eps.config.model import (
    ConfigEntry,
    NormConfig,
    NormSettings,
    Provenance,
    Resolved,
    missing,
)
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
_TF_VERSION = "5.24"
_TRANSFORMERS = "transformers, as of 5.24"


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


@dataclass(frozen=True)
class NonFinite:
    """A ``NaN``/``Infinity``/``-Infinity`` literal. Not JSON, but transformers writes them
    (``"time_step_limit": [0.0, Infinity]`` in Mamba2, Bamba and Falcon-H1 configs), so they
    are kept as this marker and refused only when a key the reader uses holds one."""

    text: str

    def __repr__(self) -> str:
        return self.text


def _non_finite(name: str) -> NonFinite:
    return NonFinite(name)


def _refuse_non_finite(raw: Any, path: Path, key: str) -> None:
    if isinstance(raw, NonFinite):
        raise InputFileError(path, f"invalid JSON: {raw.text} is not valid JSON", key=key)


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
    """Parse JSON (duplicate keys refused, at most :data:`MAX_JSON_BYTES`) into Python
    objects; NaN/Infinity literals become :class:`NonFinite` markers (refused where used)."""
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
        return json.loads(text, parse_constant=_non_finite, object_pairs_hook=_unique_pairs)
    except RecursionError:
        raise InputFileError(path, "invalid JSON: nested too deeply") from None
    except _DuplicateKey as exc:
        raise InputFileError(path, "duplicate key in a JSON object", key=shorten(exc.key)) from None
    except json.JSONDecodeError as exc:
        raise InputFileError(path, f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:
        raise InputFileError(path, f"invalid JSON: {shorten(str(exc))}") from None


def _eps_value(raw: Any, path: Path, key: str) -> float:
    _refuse_non_finite(raw, path, key)
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
    _refuse_non_finite(raw, path, key)
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
    if family is not None and family.hard_eps is not None:
        if eps.value is not None or eps.provenance.kind == "conflict":
            notes.append(
                f"the {mtype} modeling code ignores the config's eps keys: "
                f"it hard-codes eps={family.hard_eps:g}"
            )
        eps = Resolved(
            family.hard_eps,
            Provenance("framework", f"{family.source}: {family.impl}", note="hard-coded eps"),
        )

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
        where = family.source or _TRANSFORMERS
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
    for key in _DIM_KEYS:
        dim_hit = _find(scopes, key)
        if dim_hit is not None:
            settings["dim"] = Resolved(
                _positive_int(dim_hit[1], path, dim_hit[0]), Provenance("file", p, dim_hit[0])
            )
            break

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


Scopes = list[tuple[str, dict[str, Any]]]


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
    return Resolved(
        hs.value // nh.value,
        Provenance(
            "derived",
            str(path),
            note=f"{hs.provenance.key} // {nh.provenance.key} (no head_dim)",
        ),
    )


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
            dim = Resolved(
                heads.value * hd.value,
                Provenance(
                    "derived",
                    str(path),
                    note=f"{heads.provenance.key} * head_dim ({family.source}: "
                    f"Olmo2RMSNorm({heads_key} * head_dim))",
                ),
            )
        out.append(ConfigEntry(f"*.self_attn.{name}", (("dim", dim),)))
    return out


def _qk_cohere(scopes: Scopes, path: Path, family: Family) -> list[ConfigEntry]:
    """Cohere q_norm/k_norm (when use_qk_norm): CohereLayerNorm over head_dim per head."""
    if not _flag(scopes, path, "use_qk_norm", False):
        return []
    dim = _head_dim(scopes, path)
    return [ConfigEntry(f"*.self_attn.{n}", (("dim", dim),)) for n in ("q_norm", "k_norm")]


def _qk_l2(scopes: Scopes, path: Path, family: Family) -> list[ConfigEntry]:
    """Llama 4 qk_norm (when use_qk_norm, the class default): Llama4TextL2Norm(rms_norm_eps),
    x * rsqrt(mean(x^2) + eps) over head_dim, no weight, applied to q and k."""
    if not _flag(scopes, path, "use_qk_norm", True):
        return []
    why = "qk_norm = Llama4TextL2Norm(rms_norm_eps): no weight"
    return [
        ConfigEntry(
            "*.self_attn.qk_norm",
            (
                ("norm", Resolved("l2", _fw(family, why))),
                ("gain", Resolved("none", _fw(family, why))),
                ("dim", _head_dim(scopes, path)),
            ),
        )
    ]


def _mla(scopes: Scopes, path: Path, family: Family) -> list[ConfigEntry]:
    """DeepSeek MLA q_a_layernorm / kv_a_layernorm over q_lora_rank / kv_lora_rank. The
    modeling code builds them without eps=, so they keep the class default 1e-6 whatever
    rms_norm_eps says."""
    out = []
    for pattern, key in (
        ("*.self_attn.q_a_layernorm", "q_lora_rank"),
        ("*.self_attn.kv_a_layernorm", "kv_lora_rank"),
    ):
        rank = _int_key(scopes, path, key)
        if rank is None:
            continue
        cls = family.impl.split()[0]
        eps = Resolved(
            1e-6,
            _fw(
                family,
                f"{pattern.rsplit('.', 1)[1]} = {cls}({key}) keeps the class default eps=1e-6",
            ),
        )
        out.append(ConfigEntry(pattern, (("dim", rank), ("eps", eps))))
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
        p = str(path)
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
            dim = Resolved(total, Provenance("derived", p, note=why))
        elif groups is None:
            dim = missing(f"no {groups_key} key (group size = {why} / {groups_key})")
        else:
            assert isinstance(groups.value, int)
            dim = Resolved(
                total // groups.value,
                Provenance("derived", p, note=f"group size ({why}) // {groups.provenance.key}"),
            )
        order = (
            "gate before the norm: q = mean((x*silu(g))^2) per group"
            if first
            else "gate after the norm: q = mean(x^2) per group"
        )
        return [
            ConfigEntry(
                pattern,
                (
                    ("norm", Resolved("gated-rms", _fw(family, f"{cls}; {order}"))),
                    ("gain", Resolved("w", _fw(family, cls))),
                    ("weight_after_cast", Resolved(after_cast, _fw(family, cls))),
                    ("dim", dim),
                ),
            )
        ]

    return build


def _width(scopes: Scopes, path: Path, rule: str) -> tuple[int | None, str]:
    """The gated norm's full width by the modeling code's rule (named in ``rule``)."""

    def get(key: str) -> Any:
        hit = _find(scopes, key)
        return None if hit is None else hit[1]

    hidden = get("hidden_size")
    if rule == "expand":  # Mamba2: int(expand * hidden_size)
        e = get("expand")
        ok = isinstance(e, int | float) and isinstance(hidden, int)
        return (int(e * hidden) if ok else None), "int(expand * hidden_size)"
    if rule == "mamba_expand":  # Bamba, Falcon-H1 (mamba_d_ssm when set)
        d_ssm = get("mamba_d_ssm")
        if isinstance(d_ssm, int) and not isinstance(d_ssm, bool) and d_ssm > 0:
            return d_ssm, "mamba_d_ssm"
        e = get("mamba_expand")
        ok = isinstance(e, int | float) and isinstance(hidden, int)
        return (int(e * hidden) if ok else None), "int(mamba_expand * hidden_size)"
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
