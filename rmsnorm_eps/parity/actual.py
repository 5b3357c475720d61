"""Reading an implementation's outputs: .npy, .npz, .safetensors or a torch.save file
(bfloat16 included).

Nothing is unpickled: every format goes through :func:`rmsnorm_eps.sources.open_sources`, the
readers ``ratio`` uses, with their header parsers and limits (a safetensors header over
:data:`~rmsnorm_eps.sources.safetensors.HEADER_MAX` is refused unread); bfloat16 values are
widened to float64 exactly from their bit patterns.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmsnorm_eps.errors import InputFileError

__all__ = ["ActualOutputs", "read_actual"]


@dataclass(frozen=True)
class ActualOutputs:
    """The outputs as float64 (exact widening) and the dtype they were stored in."""

    values: np.ndarray
    dtype: str
    source: str
    key: str | None


def _pick(keys: list[str], key: str | None, path: Path) -> str:
    if key is not None:
        if key not in keys:
            raise InputFileError(path, f"no array named {key!r} (has: {', '.join(keys)})", key=key)
        return key
    if len(keys) == 1:
        return keys[0]
    for preferred in ("outputs", "output", "y"):
        if preferred in keys:
            return preferred
    raise InputFileError(
        path, f"holds {len(keys)} arrays ({', '.join(keys)}); choose one with --key"
    )


def _check_shape(
    shape: tuple[int, ...], expect: tuple[int, int] | None, path: Path, key: str | None
) -> None:
    """Refuse outputs that cannot be (n, d) before they are read: a mis-shaped (or hostile,
    huge) array is never loaded. The rule is the one :func:`~rmsnorm_eps.parity.api.
    compare_outputs` applies: the same size, the last axis d."""
    if expect is None:
        return
    if math.prod(shape) != expect[0] * expect[1] or not shape or shape[-1] != expect[1]:
        raise InputFileError(
            path, f"outputs have shape {tuple(shape)}, the probes need {expect}", key=key
        )


def _read_source(path: Path, key: str | None, expect: tuple[int, int] | None) -> ActualOutputs:
    from rmsnorm_eps.kernels import bf16_to_float32
    from rmsnorm_eps.sources.interface import open_sources

    sources = {s.key if s.key is not None else "": s for s in open_sources(path).sources}
    if not sources:
        raise InputFileError(path, "holds no arrays")
    if list(sources) == [""]:
        if key is not None:
            raise InputFileError(path, "a .npy file holds one array; --key does not apply")
        src = sources[""]
    else:
        src = sources[_pick(list(sources), key, path)]
    _check_shape(src.shape, expect, path, src.key)
    bf16 = src.stored_as == "bfloat16"
    out = np.empty(src.size, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # a signalling NaN widens to NaN (counted), silently
        for start, chunk in src.iter_elements(1 << 20):
            out[start : start + chunk.size] = bf16_to_float32(chunk) if bf16 else chunk
    values = out.reshape(src.shape, order=src.order)
    return ActualOutputs(values, src.dtype_name, str(path), src.key)


def read_actual(
    path: str | os.PathLike[str],
    key: str | None = None,
    *,
    expect_shape: tuple[int, int] | None = None,
) -> ActualOutputs:
    """Read the implementation's outputs; the format is decided by the file's first bytes.

    With ``expect_shape`` (the probes' ``(n, d)``), outputs of another size or last axis are
    refused from their header, before any data is read.
    """
    from rmsnorm_eps.sources.sniff import Kind, check_regular_file, sniff

    p = Path(path)
    check_regular_file(p)
    kind = sniff(p)
    if kind in (Kind.NPY, Kind.ZIP, Kind.TORCH_ZIP, Kind.SAFETENSORS):
        return _read_source(p, key, expect_shape)
    if kind is Kind.EMPTY:
        raise InputFileError(p, "empty file")
    raise InputFileError(p, "not a .npy, .npz or .safetensors file (unrecognised first bytes)")
