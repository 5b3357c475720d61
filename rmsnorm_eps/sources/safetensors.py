"""``.safetensors`` files: the JSON header parsed strictly, every tensor streamed by offset.

Layout (https://github.com/huggingface/safetensors, "Format"): an 8-byte little-endian header
length ``n``, ``n`` bytes of UTF-8 JSON, then the data buffer. The header maps each tensor name
to ``{"dtype": ..., "shape": [...], "data_offsets": [begin, end]}`` (offsets relative to the data
buffer, little-endian values, C order); the optional ``"__metadata__"`` maps strings to
strings and is otherwise ignored.

What is refused, before any data is read:

* for the whole file (always raises): a header length over :data:`HEADER_MAX` (4 MiB: the
  Python objects parsed from JSON take up to about 20 times its size) or past the end of the file,
  a header that is not UTF-8 JSON, holds ``NaN``/``Infinity`` literals, is nested too deeply or
  repeats a key, a top level that is not an object, a ``__metadata__`` that is not a str -> str
  object, a file with no tensor;
* per tensor (raised, or with ``lenient`` listed as
  :class:`~rmsnorm_eps.sources.interface.Unreadable`): an entry that is not an object with
  exactly ``dtype``, ``shape`` and ``data_offsets``; an unknown dtype; a dtype other than
  F16/BF16/F32/F64 (I16/U16 are accepted as bfloat16 bit patterns with ``stored_as``); a shape
  that is not a list of non-negative integers; offsets that are not ``0 <= begin <= end <= data
  buffer length``; ``end - begin`` unlike ``prod(shape) * itemsize``; bytes that overlap
  another tensor's.

BF16 tensors are always read as bfloat16 (their bit patterns as little-endian uint16). A tensor
``<layer>::<what>`` of an integer dtype is a companion of ``<layer>`` (e.g. its token
positions), as in an ``.npz``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from rmsnorm_eps.errors import InputFileError, brief
from rmsnorm_eps.sources.interface import Opened, Unreadable
from rmsnorm_eps.sources.npz import COMPANION_SEP, with_companions
from rmsnorm_eps.sources.raw import RawArraySource, check_float_dtype

__all__ = ["DTYPES", "HEADER_MAX", "open_safetensors", "read_safetensors_header"]

#: Largest JSON header read. A dump of thousands of layers takes well under 1 MiB (about 80 bytes
#: per tensor); parsing 4 MiB of the worst JSON (``[[],[],...]``) stays within the memory budget.
HEADER_MAX = 4 << 20

#: Every dtype name of the safetensors format, and the numpy dtype its bytes are read as
#: (``None``: known, but not readable here: only its item size is used for the size check).
DTYPES: dict[str, tuple[int, np.dtype[Any] | None]] = {
    "BOOL": (1, None),
    "U8": (1, np.dtype("<u1")),
    "I8": (1, np.dtype("<i1")),
    "F8_E5M2": (1, None),
    "F8_E4M3": (1, None),
    "F8_E8M0": (1, None),
    "I16": (2, np.dtype("<i2")),
    "U16": (2, np.dtype("<u2")),
    "F16": (2, np.dtype("<f2")),
    "BF16": (2, np.dtype("<u2")),
    "I32": (4, np.dtype("<i4")),
    "U32": (4, np.dtype("<u4")),
    "F32": (4, np.dtype("<f4")),
    "I64": (8, np.dtype("<i8")),
    "U64": (8, np.dtype("<u8")),
    "F64": (8, np.dtype("<f8")),
    "C64": (8, None),
}
_NAMES = {
    "BOOL": "bool",
    "F8_E5M2": "float8_e5m2",
    "F8_E4M3": "float8_e4m3",
    "F8_E8M0": "float8_e8m0",
    "C64": "complex64",
}
_ENTRY_KEYS = {"dtype", "shape", "data_offsets"}
_METADATA = "__metadata__"


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _read_header(path: Path, size: int) -> tuple[dict[str, Any], int]:
    """The parsed header object and the absolute offset of the data buffer."""
    try:
        with open(path, "rb") as fh:
            raw_len = fh.read(8)
            if len(raw_len) < 8:
                raise InputFileError(path, "truncated safetensors header length")
            n = int.from_bytes(raw_len, "little")
            if n > size - 8:
                raise InputFileError(
                    path,
                    f"safetensors header declares {n} bytes, but the file holds {size - 8} "
                    "after it",
                )
            if n > HEADER_MAX:
                raise InputFileError(
                    path,
                    f"safetensors header of {n} bytes is over the "
                    f"{HEADER_MAX >> 20} MiB this reader accepts",
                )
            text = fh.read(n)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(text) != n:
        raise InputFileError(path, "truncated safetensors header")
    try:
        doc = json.loads(
            text.decode("utf-8"), object_pairs_hook=_pairs, parse_constant=_no_constant
        )
    except _Duplicate as dup:
        raise InputFileError(
            path, f"invalid safetensors header: duplicate key {brief(dup.key)}"
        ) from None
    except RecursionError:
        raise InputFileError(path, "invalid safetensors header: nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise InputFileError(path, f"invalid JSON in safetensors header ({exc})") from None
    if not isinstance(doc, dict):
        raise InputFileError(
            path, f"invalid safetensors header: expected an object, got {type(doc).__name__}"
        )
    meta = doc.pop(_METADATA, None)
    if meta is not None and not (
        isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())
    ):
        raise InputFileError(
            path, "invalid safetensors header: __metadata__ must map strings to strings"
        )
    return doc, 8 + n


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The header of a ``.safetensors`` file, tensor name -> entry (``__metadata__`` left out),
    checked as a whole as :func:`open_safetensors` checks it (length, UTF-8 JSON, one object);
    the entries themselves are not checked."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    return _read_header(path, size)[0]


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry(
    path: Path, key: str, entry: object, data_len: int
) -> tuple[str, tuple[int, ...], int, int]:
    """``(dtype name, shape, begin, end)`` of a well-formed entry, else raise naming ``key``."""
    if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
        raise InputFileError(
            path, "tensor entry must be an object with dtype, shape and data_offsets", key=key
        )
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise InputFileError(path, f"unknown safetensors dtype {brief(dtype)}", key=key)
    if not isinstance(shape, list) or not all(_is_count(k) for k in shape):
        raise InputFileError(path, f"invalid shape {brief(shape)}", key=key)
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_count(o) for o in offsets)
        or not offsets[0] <= offsets[1] <= data_len
    ):
        raise InputFileError(
            path,
            f"invalid data_offsets {brief(offsets)}: the data buffer holds {data_len} bytes",
            key=key,
        )
    begin, end = offsets
    need = math.prod(shape) * DTYPES[dtype][0]
    if end - begin != need:
        raise InputFileError(
            path,
            f"shape {tuple(shape)} of {dtype} needs {need} bytes, data_offsets give {end - begin}",
            key=key,
        )
    return dtype, tuple(shape), begin, end


def _overlaps(spans: list[tuple[int, int, str]]) -> dict[str, str]:
    """Tensors whose (non-empty) byte range overlaps an earlier one's: key -> problem."""
    problems: dict[str, str] = {}
    reach, owner = 0, ""
    for begin, end, key in sorted(s for s in spans if s[1] > s[0]):
        if begin < reach:
            problems[key] = f"its bytes overlap tensor {brief(owner)}"
        if end > reach:
            reach, owner = end, key
    return problems


def _source(
    path: Path,
    key: str,
    dtype: str,
    shape: tuple[int, ...],
    offset: int,
    stored_as: str | None,
) -> RawArraySource:
    np_dtype = DTYPES[dtype][1]
    companion = COMPANION_SEP in key
    if np_dtype is None:
        raise InputFileError(
            path,
            f"unsupported dtype {_NAMES.get(dtype, dtype)}: expected float16, bfloat16, "
            "float32 or float64",
            key=key,
        )
    if companion:
        if np_dtype.kind not in "iu":
            raise InputFileError(
                path, f"companion array has dtype {np_dtype}: expected an integer dtype", key=key
            )
        return RawArraySource(path, key, np_dtype, shape, "C", data_offset=offset)
    if dtype == "BF16":
        stored_as = "bfloat16"
    else:
        check_float_dtype(np_dtype, path, key, stored_as)
        if np_dtype.kind == "f":
            stored_as = None
    return RawArraySource(path, key, np_dtype, shape, "C", data_offset=offset, stored_as=stored_as)


def open_safetensors(path: Path, size: int, stored_as: str | None, lenient: bool) -> Opened:
    """Open every tensor of a ``.safetensors`` file; see the module docstring for what is
    refused."""
    header, base = _read_header(path, size)
    data_len = size - base
    entries: list[tuple[str, tuple[str, tuple[int, ...], int, int] | InputFileError]] = []
    spans: list[tuple[int, int, str]] = []
    for key, value in header.items():
        try:
            parsed = _entry(path, key, value, data_len)
        except InputFileError as exc:
            entries.append((key, exc))
            continue
        entries.append((key, parsed))
        spans.append((parsed[2], parsed[3], key))
    overlapping = _overlaps(spans)
    made: list[tuple[str, RawArraySource]] = []
    unreadable: list[Unreadable] = []
    for key, item in entries:
        try:
            if isinstance(item, InputFileError):
                raise item
            if key == "":
                raise InputFileError(path, "a tensor has an empty name")
            if key in overlapping:
                raise InputFileError(path, overlapping[key], key=key)
            dtype, shape, begin, _ = item
            src = _source(path, key, dtype, shape, base + begin, stored_as)
        except InputFileError as exc:
            if not lenient:
                raise
            unreadable.append(Unreadable(key, exc.problem))
            continue
        made.append((key, src))
    return with_companions(
        path, made, unreadable, lenient, len(header), "the .safetensors file holds no tensors"
    )
