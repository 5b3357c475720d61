"""``.npy`` arrays: the header parser (never unpickles) and the opener of a plain ``.npy`` file.

The header is parsed with :func:`ast.literal_eval` (format versions 1, 2 and 3; identical
header texts once, see :func:`read_npy_header`) and object dtypes are refused; the data are
streamed by :class:`~rmsnorm_eps.sources.raw.RawArraySource`.
"""

from __future__ import annotations

import ast
import functools
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources.interface import Opened
from rmsnorm_eps.sources.raw import RawArraySource, check_float_dtype, is_bf16_storage
from rmsnorm_eps.sources.sniff import NPY_MAGIC

__all__ = ["NpyHeader", "check_declared_size", "open_npy", "read_npy_header", "stored"]

_MAX_HEADER = 1 << 16


@dataclass(frozen=True)
class NpyHeader:
    """What a ``.npy`` header declares."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    fortran_order: bool
    header_len: int  # bytes before the data

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def order(self) -> str:
        return "F" if self.fortran_order else "C"


def _header_text_len(fp: IO[bytes], path: Path, key: str | None) -> tuple[int, int, int]:
    """``(format major version, header text length, bytes before the text)``."""
    magic = fp.read(8)
    if len(magic) < 8 or not magic.startswith(NPY_MAGIC):
        raise InputFileError(path, "not a .npy array (bad magic bytes)", key=key)
    major = magic[6]
    if major not in (1, 2, 3):
        raise InputFileError(path, f"unsupported .npy format version {major}", key=key)
    width = 2 if major == 1 else 4
    raw = fp.read(width)
    if len(raw) != width:
        raise InputFileError(path, "truncated .npy header", key=key)
    hlen = int.from_bytes(raw, "little")
    if hlen > _MAX_HEADER:
        raise InputFileError(path, f".npy header too large ({hlen} bytes)", key=key)
    return major, hlen, 8 + width


def read_npy_header(fp: IO[bytes], path: Path, key: str | None = None) -> NpyHeader:
    """Parse a ``.npy`` header (format versions 1, 2 and 3) without unpickling anything.

    Identical header texts are parsed once (:func:`_parse_header`, a bounded cache keyed by
    the header bytes): the arrays of a dump share one :class:`NpyHeader` (and so one dtype and
    one shape object) per distinct header.
    """
    major, hlen, prefix = _header_text_len(fp, path, key)
    text_bytes = fp.read(hlen)
    if len(text_bytes) < hlen:
        raise InputFileError(path, "truncated .npy header", key=key)
    parsed = (
        _parse_header(major, prefix, text_bytes)
        if hlen <= _CACHED_HEADER_MAX
        else _parse_header.__wrapped__(major, prefix, text_bytes)
    )
    if isinstance(parsed, str):
        raise InputFileError(path, parsed, key=key)
    return parsed


#: Header texts up to this many bytes are cached (numpy writes 118 or so); with
#: :data:`_CACHED_HEADERS` entries the cache holds at most about 1 MiB.
_CACHED_HEADER_MAX = 1024
_CACHED_HEADERS = 1024


@functools.lru_cache(maxsize=_CACHED_HEADERS)
def _parse_header(major: int, prefix: int, text_bytes: bytes) -> NpyHeader | str:
    """The header a ``.npy`` header text declares, or the problem with it (a message).

    Pure in its arguments (so cached): the text is decoded (UTF-8 for version 3, else
    latin-1) and read with :func:`ast.literal_eval`, which builds literals only.
    """
    try:
        text = text_bytes.decode("utf-8" if major == 3 else "latin1")
        with warnings.catch_warnings():  # "invalid escape sequence" in a garbled header
            warnings.simplefilter("ignore")
            meta = ast.literal_eval(text)
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        return "malformed .npy header"
    if not isinstance(meta, dict) or set(meta) != {"descr", "fortran_order", "shape"}:
        return "malformed .npy header (keys)"
    shape = meta["shape"]
    if not isinstance(shape, tuple) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        return f"malformed .npy header (shape {shape!r})"
    if not isinstance(meta["fortran_order"], bool):
        return "malformed .npy header (fortran_order)"
    try:
        dtype = np.lib.format.descr_to_dtype(meta["descr"])
    except (TypeError, ValueError):
        return f"unknown dtype {meta['descr']!r}"
    return NpyHeader(dtype, shape, meta["fortran_order"], prefix + len(text_bytes))


def check_declared_size(path: Path, key: str | None, header: NpyHeader, available: int) -> None:
    """Refuse a header that declares more data than the ``available`` bytes hold."""
    need = header.header_len + header.nbytes
    if available < need:
        raise InputFileError(
            path,
            f"truncated: header declares shape {header.shape} of {header.dtype} "
            f"({header.nbytes} bytes) but only {max(0, available - header.header_len)} "
            "data bytes are present",
            key=key,
        )


def stored(header: NpyHeader, stored_as: str | None) -> str | None:
    """``stored_as`` when this array's dtype holds such bit patterns, else ``None``."""
    return stored_as if stored_as is not None and is_bf16_storage(header.dtype) else None


def open_npy(path: Path, size: int, stored_as: str | None, lenient: bool) -> Opened:
    """Open a plain ``.npy`` file: one source (a file that cannot be read raises, even
    ``lenient``: there is nothing else in it to analyse)."""
    try:
        with open(path, "rb") as fh:
            header = read_npy_header(fh, path)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    check_float_dtype(header.dtype, path, None, stored_as)
    check_declared_size(path, None, header, size)
    src = RawArraySource(
        path,
        None,
        header.dtype,
        header.shape,
        header.order,
        data_offset=header.header_len,
        stored_as=stored(header, stored_as),
    )
    return Opened([src], [], 1)
