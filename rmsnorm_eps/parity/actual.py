"""Reading an implementation's outputs: .npy, .npz or .safetensors (bfloat16 included).

Nothing is unpickled: .npy/.npz go through :func:`rmsnorm_eps.sources.open_sources` (its own
header parser); .safetensors through the safetensors package's numpy loader (extra
``safetensors``), whose bfloat16 arrays are ml_dtypes arrays, widened here to float64 exactly.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmsnorm_eps.errors import InputFileError, MissingExtraError

__all__ = ["ActualOutputs", "read_actual"]

#: Largest safetensors header read (a JSON text; one tensor's is about 80 bytes). The format
#: allows 100 MB, which the parser would hold several times over.
SAFETENSORS_HEADER_MAX = 16 << 20


_SAFETENSORS_FLOATS = ("F16", "BF16", "F32", "F64")
_SAFETENSORS_NAMES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "U32": "uint32",
    "I32": "int32",
    "U64": "uint64",
    "I64": "int64",
    "C64": "complex64",
}


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


def _read_npy_npz(path: Path, key: str | None, expect: tuple[int, int] | None) -> ActualOutputs:
    from rmsnorm_eps.sources.interface import open_sources

    sources = {s.key if s.key is not None else "": s for s in open_sources(path).sources}
    if list(sources) == [""]:
        if key is not None:
            raise InputFileError(path, "a .npy file holds one array; --key does not apply")
        src = sources[""]
    else:
        src = sources[_pick(list(sources), key, path)]
    _check_shape(src.shape, expect, path, src.key)
    out = np.empty(src.size, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # a signalling NaN widens to NaN (counted), silently
        for start, chunk in src.iter_elements(1 << 20):
            out[start : start + chunk.size] = chunk
    values = out.reshape(src.shape, order=src.order)
    return ActualOutputs(values, str(src.dtype.newbyteorder("=")), str(path), src.key)


def _read_safetensors(path: Path, key: str | None, expect: tuple[int, int] | None) -> ActualOutputs:
    try:
        from safetensors import safe_open
    except ImportError:
        raise MissingExtraError("safetensors", "safetensors", "reading .safetensors") from None
    from rmsnorm_eps.dtypes import name_of

    # importing ml_dtypes registers bfloat16 with numpy: safetensors' numpy loader needs it
    with contextlib.suppress(ImportError):
        import ml_dtypes  # noqa: F401

    try:
        with safe_open(str(path), framework="numpy") as fh:
            keys = sorted(fh.keys())
            if not keys:
                raise InputFileError(path, "holds no tensors")
            chosen = _pick(keys, key, path)
            view = fh.get_slice(chosen)
            stored = str(view.get_dtype())
            if stored not in _SAFETENSORS_FLOATS:
                raise InputFileError(
                    path,
                    f"unsupported dtype {_SAFETENSORS_NAMES.get(stored, stored)}: expected "
                    "float16, bfloat16, float32 or float64",
                    key=chosen,
                )
            _check_shape(tuple(view.get_shape()), expect, path, chosen)
            try:
                array = fh.get_tensor(chosen)
            except (TypeError, KeyError, ValueError) as exc:
                if "bfloat16" in str(exc):
                    raise MissingExtraError("ml_dtypes", "bf16", "bfloat16 outputs") from None
                raise InputFileError(path, f"unsupported tensor: {exc}", key=chosen) from None
    except (InputFileError, MissingExtraError):
        raise
    except Exception as exc:  # SafetensorError and friends: the file is not readable
        raise InputFileError(path, f"not a readable .safetensors file ({exc})") from None
    name = name_of(array.dtype)
    if name is None:
        raise InputFileError(
            path,
            f"unsupported dtype {array.dtype}: expected float16, bfloat16, float32 or float64",
            key=chosen,
        )
    with np.errstate(invalid="ignore"):  # a signalling NaN widens to NaN (counted), silently
        values = np.asarray(array).astype(np.float64)
    return ActualOutputs(values, name, str(path), chosen)


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
    from rmsnorm_eps.sources.sniff import Kind, check_regular_file, read_head, sniff

    p = Path(path)
    size = check_regular_file(p)
    kind = sniff(p)
    if kind in (Kind.NPY, Kind.ZIP, Kind.TORCH_ZIP):
        return _read_npy_npz(p, key, expect_shape)
    if kind is Kind.SAFETENSORS:
        # a safetensors file: 8-byte little-endian header length, then a JSON object
        n = int.from_bytes(read_head(p, 8), "little")
        if n > size - 8:
            raise InputFileError(
                p, f"safetensors header declares {n} bytes, but the file holds {size - 8} after it"
            )
        if n > SAFETENSORS_HEADER_MAX:
            raise InputFileError(
                p,
                f"safetensors header of {n} bytes is over the {SAFETENSORS_HEADER_MAX >> 20} MiB "
                "this reader accepts",
            )
        return _read_safetensors(p, key, expect_shape)
    if kind is Kind.EMPTY:
        raise InputFileError(p, "empty file")
    raise InputFileError(p, "not a .npy, .npz or .safetensors file (unrecognised first bytes)")
