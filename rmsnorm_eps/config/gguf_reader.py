"""Reader for GGUF metadata through the ``gguf`` package (llama.cpp's Python library).

Only the header is parsed: ``gguf.GGUFReader`` memory-maps the file and the tensor data are
never touched, so a multi-GB model is not read into memory (benchmarks/gguf_metadata_rss.py).

GGUF stores eps as float32: 1e-5 reads back as 9.999999747378752e-06. The stored value is kept
(compare with a relative tolerance, never ==) together with the shortest decimal that reads
back as the same float32 ("1e-05").
"""

from __future__ import annotations

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
from rmsnorm_eps.errors import InputFileError, MissingExtraError

__all__ = ["GEMMA_ARCHS", "GGUF_MAGIC", "read_gguf_config", "short_float32"]

GGUF_MAGIC = b"GGUF"
#: Architectures whose converter adds the Gemma +1 into the stored norm weights (FACTS.md 3).
GEMMA_ARCHS = ("gemma", "gemma2", "gemma3", "gemma3n")
_LLAMA_CPP = "llama.cpp ggml_rms_norm: x / sqrt(mean(x^2) + eps)"


def short_float32(value: float) -> str:
    """The shortest decimal that reads back as the same float32 (9.999999747e-06 -> '1e-05')."""
    import numpy as np

    return str(np.float32(value))


def _open(path: Path) -> Any:
    try:
        from gguf import GGUFReader
    except ImportError:
        raise MissingExtraError("gguf", "gguf", "reading GGUF files") from None
    try:
        return GGUFReader(path, "r")
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    except (ValueError, IndexError, KeyError, OverflowError, TypeError, EOFError) as exc:
        raise InputFileError(path, f"truncated or malformed GGUF file ({exc})") from None


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return None
    return field.contents()


def read_gguf_config(path: Path) -> NormConfig:
    """Read the norm-relevant GGUF metadata into a :class:`NormConfig` (never tensor data)."""
    p = str(path)
    reader = _open(path)
    arch = _field(reader, "general.architecture")
    name = _field(reader, "general.name")
    if not isinstance(arch, str):
        raise InputFileError(path, "no general.architecture string", key="general.architecture")
    notes: list[str] = []
    settings: dict[str, Resolved] = {}
    rms_key = f"{arch}.attention.layer_norm_rms_epsilon"
    ln_key = f"{arch}.attention.layer_norm_epsilon"
    found = [
        (key, norm, float(v))
        for key, norm in ((rms_key, "rms"), (ln_key, "layer"))
        if (v := _field(reader, key)) is not None
    ]
    for key, _, v in found:
        if not v > 0.0 or v == float("inf"):
            raise InputFileError(path, f"eps must be a finite number > 0, got {v!r}", key=key)
    if not found:
        settings["eps"] = missing(f"no {rms_key} or {ln_key}; llama.cpp has no default eps")
        settings["norm"] = missing("no eps key tells the norm type")
    elif len(found) == 1:
        key, norm, value = found[0]
        settings["eps"] = Resolved(
            value, Provenance("file", p, key), stored="float32", short=short_float32(value)
        )
        settings["norm"] = Resolved(norm, Provenance("derived", p, note=f"key {key}"))
    else:
        listed = ", ".join(f"{k}={v!r}" for k, _, v in found)
        notes.append(f"both an RMSNorm and a LayerNorm eps are stored: {listed}")
        settings["eps"] = Resolved(None, Provenance("conflict", p, note=listed))
        settings["norm"] = Resolved(None, Provenance("conflict", p, note=listed))
    impl = Provenance("framework", _LLAMA_CPP)
    settings["placement"] = Resolved("inside", impl)
    if arch in GEMMA_ARCHS:
        baked = Provenance(
            "framework",
            "llama.cpp convert_hf_to_gguf adds the Gemma +1 into the stored norm weights",
        )
        settings["gain"] = Resolved("1+w", Provenance("derived", p, note=f"architecture {arch!r}"))
        settings["gain_baked"] = Resolved(True, baked)
        notes.append(
            "Gemma gain: the +1 is already in the stored weights; a runtime that "
            "adds 1 again produces garbage"
        )
    else:
        settings["gain"] = Resolved("w", impl)
        settings["gain_baked"] = Resolved(False, impl)
    settings["reduction_dtype"] = Resolved(
        "float64", Provenance("framework", "llama.cpp ggml CPU backend sums squares in double")
    )
    emb_key = f"{arch}.embedding_length"
    emb = _field(reader, emb_key)
    if emb is not None:
        settings["dim"] = Resolved(int(emb), Provenance("file", p, emb_key))
    entries = [ConfigEntry("*", ())]
    entries += _per_head_entries(reader, p, arch)
    model = name if isinstance(name, str) else arch
    return NormConfig(
        path=p,
        kind="gguf",
        model=model,
        defaults=NormSettings().overlay(settings),
        entries=tuple(entries),
        notes=tuple(notes),
    )


def _per_head_entries(reader: Any, p: str, arch: str) -> list[ConfigEntry]:
    """q_norm/k_norm entries when the file has attn_q_norm / attn_k_norm tensors (metadata only).

    The dim is the stored weight's length; the patterns use the Hugging Face module names the
    llama.cpp converter maps from (``*.self_attn.q_norm``).
    """
    entries = []
    names = {t.name: t for t in reader.tensors}
    for hf, gg in (("q_norm", "attn_q_norm"), ("k_norm", "attn_k_norm")):
        tensor = names.get(f"blk.0.{gg}.weight")
        if tensor is None:
            continue
        dim = Resolved(
            int(tensor.shape[0]),
            Provenance("file", p, f"tensor blk.0.{gg}.weight shape"),
        )
        entries.append(ConfigEntry(f"*.self_attn.{hf}", (("dim", dim),)))
    return entries
