"""Reading an implementation's outputs: .npy, .npz or .safetensors (bfloat16 included).

Nothing is unpickled: .npy/.npz go through :func:`rmsnorm_eps.dumps.open_dump` (its own header
parser); .safetensors through the safetensors package's numpy loader (extra ``safetensors``),
whose bfloat16 arrays are ml_dtypes arrays, widened here to float64 exactly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmsnorm_eps.errors import InputFileError, MissingExtraError

__all__ = ["ActualOutputs", "read_actual"]

_SAFETENSORS_MAGIC_MAX = 100_000_000


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


def _read_npy_npz(path: Path, key: str | None) -> ActualOutputs:
    from rmsnorm_eps.dumps import open_dump

    sources = {s.key if s.key is not None else "": s for s in open_dump(path)}
    if list(sources) == [""]:
        if key is not None:
            raise InputFileError(path, "a .npy file holds one array; --key does not apply")
        src = sources[""]
    else:
        src = sources[_pick(list(sources), key, path)]
    out = np.empty(src.header.size, dtype=np.float64)
    for start, chunk in src.iter_elements(1 << 20):
        out[start : start + chunk.size] = chunk
    values = out.reshape(src.shape, order="F" if src.header.fortran_order else "C")
    return ActualOutputs(values, str(src.dtype.newbyteorder("=")), str(path), src.key)


def _read_safetensors(path: Path, key: str | None) -> ActualOutputs:
    try:
        from safetensors import safe_open
    except ImportError:
        raise MissingExtraError("safetensors", "safetensors", "reading .safetensors") from None
    from rmsnorm_eps.parity.dtypes import name_of

    try:
        with safe_open(str(path), framework="numpy") as fh:
            keys = sorted(fh.keys())
            if not keys:
                raise InputFileError(path, "holds no tensors")
            chosen = _pick(keys, key, path)
            try:
                array = fh.get_tensor(chosen)
            except (TypeError, KeyError, ValueError) as exc:
                raise InputFileError(path, f"unsupported tensor: {exc}", key=chosen) from None
    except InputFileError:
        raise
    except MissingExtraError:
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
    return ActualOutputs(np.asarray(array).astype(np.float64), name, str(path), chosen)


def read_actual(path: str | os.PathLike[str], key: str | None = None) -> ActualOutputs:
    """Read the implementation's outputs; the format is decided by the file's first bytes."""
    from rmsnorm_eps.dumps import check_regular_file

    p = Path(path)
    size = check_regular_file(p)
    try:
        with open(p, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise InputFileError(p, f"cannot read: {exc.strerror or exc}") from None
    if head.startswith(b"\x93NUMPY") or head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return _read_npy_npz(p, key)
    if len(head) == 8 and 0 < int.from_bytes(head, "little") < min(size, _SAFETENSORS_MAGIC_MAX):
        return _read_safetensors(p, key)
    if not head:
        raise InputFileError(p, "empty file")
    raise InputFileError(p, "not a .npy, .npz or .safetensors file (unrecognised first bytes)")
