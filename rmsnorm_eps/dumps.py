"""Readers for dumps of q values or raw activations (.npy and .npz), streamed in bounded chunks.

A dump is opened into one :class:`ArraySource` per array (a ``.npy`` file is one layer; each
member of a ``.npz`` is one layer, named by its key). Nothing is ever unpickled: the ``.npy``
header is parsed here with :func:`ast.literal_eval` and object dtypes are refused. Data are read
with ``readinto`` into one reused buffer, so the resident memory of a run does not grow with the
file (a memory map would: every touched page counts toward RSS).
"""

from __future__ import annotations

import ast
import io
import lzma
import math
import os
import stat
import warnings
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import numpy as np

from rmsnorm_eps.errors import InputFileError

__all__ = [
    "COMPANION_SEP",
    "DEFAULT_CHUNK_BYTES",
    "ArraySource",
    "Unreadable",
    "check_regular_file",
    "open_dump",
    "open_dump_lenient",
]

#: Bytes of stored data read per chunk. Small enough to stay in the last-level cache.
DEFAULT_CHUNK_BYTES = 1 << 22

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_MAX_HEADER = 1 << 16
_FLOAT_KINDS = {"float16", "float32", "float64"}
#: What reading a damaged or unusual zip member can raise: a bad CRC or header (BadZipFile), a
#: corrupt deflate/lzma stream (zlib.error, LZMAError; bz2 raises OSError), an encrypted member
#: (RuntimeError), an unsupported compression method (NotImplementedError).
_ZIP_ERRORS: tuple[type[Exception], ...] = (
    zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError, NotImplementedError,
    zlib.error, lzma.LZMAError, IndexError, KeyError,  # zipfile on mangled names and extras
)


def check_regular_file(path: Path) -> int:
    """Return the size of ``path`` after checking that it is a readable regular file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputFileError(path, "no such file") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot stat: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputFileError(path, "is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(path, "is not a regular file (FIFO, device or socket)")
    if not os.access(path, os.R_OK):
        raise InputFileError(path, "permission denied")
    return st.st_size


def _describe_dtype(dtype: np.dtype[Any]) -> str:
    if dtype.hasobject:
        return "object"
    if dtype.fields is not None:
        return f"structured {dtype.descr}"
    return str(dtype.newbyteorder("=")) if dtype.byteorder not in "=|" else str(dtype)


def check_float_dtype(dtype: np.dtype[Any], path: Path, key: str | None) -> None:
    """Refuse anything but float16/32/64 (either byte order) with a message naming the dtype."""
    if dtype.hasobject:
        raise InputFileError(
            path, "holds Python objects (pickled data); refusing to load it", key=key
        )
    name = _describe_dtype(dtype)
    if dtype.fields is not None or dtype.kind != "f" or name not in _FLOAT_KINDS:
        raise InputFileError(
            path,
            f"unsupported dtype {name}: expected float16, float32 or float64",
            key=key,
        )


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


def read_npy_header(fp: IO[bytes], path: Path, key: str | None = None) -> NpyHeader:
    """Parse a ``.npy`` header (format versions 1, 2 and 3) without unpickling anything."""
    magic = fp.read(8)
    if len(magic) < 8 or not magic.startswith(NPY_MAGIC):
        raise InputFileError(path, "not a .npy array (bad magic bytes)", key=key)
    major = magic[6]
    if major == 1:
        raw = fp.read(2)
        hlen = int.from_bytes(raw, "little") if len(raw) == 2 else -1
        prefix = 10
    elif major in (2, 3):
        raw = fp.read(4)
        hlen = int.from_bytes(raw, "little") if len(raw) == 4 else -1
        prefix = 12
    else:
        raise InputFileError(path, f"unsupported .npy format version {major}", key=key)
    if hlen < 0:
        raise InputFileError(path, "truncated .npy header", key=key)
    if hlen > _MAX_HEADER:
        raise InputFileError(path, f".npy header too large ({hlen} bytes)", key=key)
    text_bytes = fp.read(hlen)
    if len(text_bytes) < hlen:
        raise InputFileError(path, "truncated .npy header", key=key)
    try:
        text = text_bytes.decode("utf-8" if major == 3 else "latin1")
        with warnings.catch_warnings():  # "invalid escape sequence" in a garbled header
            warnings.simplefilter("ignore")
            meta = ast.literal_eval(text)
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        raise InputFileError(path, "malformed .npy header", key=key) from None
    if not isinstance(meta, dict) or set(meta) != {"descr", "fortran_order", "shape"}:
        raise InputFileError(path, "malformed .npy header (keys)", key=key)
    shape = meta["shape"]
    if not isinstance(shape, tuple) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise InputFileError(path, f"malformed .npy header (shape {shape!r})", key=key)
    if not isinstance(meta["fortran_order"], bool):
        raise InputFileError(path, "malformed .npy header (fortran_order)", key=key)
    try:
        dtype = np.lib.format.descr_to_dtype(meta["descr"])
    except (TypeError, ValueError):
        raise InputFileError(path, f"unknown dtype {meta['descr']!r}", key=key) from None
    return NpyHeader(dtype, shape, meta["fortran_order"], prefix + hlen)


def _readinto_full(stream: IO[bytes], view: memoryview) -> int:
    got = 0
    total = len(view)
    while got < total:
        n = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            break
        got += n
    return got


@dataclass(frozen=True)
class ArraySource:
    """One array of a dump: a layer. Its data are read lazily, chunk by chunk.

    ``key`` is the ``.npz`` member name without ``.npy`` (``None`` for a plain ``.npy`` file).
    """

    path: Path
    key: str | None
    header: NpyHeader
    member: str | None  # zip member name (with .npy) for .npz sources
    # Companion arrays of this layer: ("position", source) for the member "<key>::position",
    # etc. (see _attach_companions). Empty for dumps without them.
    companions: tuple[tuple[str, ArraySource], ...] = ()

    def companion(self, name: str) -> ArraySource | None:
        """The companion array ``name`` (e.g. "position") of this layer, if the dump has one."""
        return dict(self.companions).get(name)

    @property
    def name(self) -> str:
        """Layer name: the npz key, or the file's stem for a plain .npy file."""
        return self.key if self.key is not None else self.path.stem

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.header.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.header.shape

    def _open(self) -> tuple[IO[bytes], zipfile.ZipFile | None]:
        try:
            if self.member is None:
                fh: IO[bytes] = open(self.path, "rb")  # noqa: SIM115 (closed by the caller)
                fh.seek(self.header.header_len)
                return fh, None
            zf = zipfile.ZipFile(self.path)
            member = zf.open(self.member)
            skipped = member.read(self.header.header_len)
            if len(skipped) != self.header.header_len:
                raise InputFileError(self.path, "truncated member", key=self.key)
            return member, zf
        except _ZIP_ERRORS as exc:
            raise InputFileError(self.path, f"cannot read: {exc}", key=self.key) from None

    def iter_elements(self, elems_per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start, values)``: consecutive 1-D runs of stored elements in file order.

        ``values`` is a native-byte-order view into a reused buffer (valid until the next
        iteration): copy what you keep. ``start`` is the position of ``values[0]`` in file order.
        """
        dtype = self.header.dtype
        total = self.header.size
        per = max(1, min(elems_per_chunk, total))
        buf = np.empty(per, dtype=dtype)
        raw = buf.data.cast("B")
        native = dtype.newbyteorder("=") if not dtype.isnative else None
        stream, zf = self._open()
        try:
            start = 0
            while start < total:
                n = min(per, total - start)
                nbytes = n * dtype.itemsize
                try:
                    got = _readinto_full(stream, raw[:nbytes])
                except _ZIP_ERRORS as exc:
                    raise InputFileError(
                        self.path, f"cannot read data: {exc}", key=self.key
                    ) from None
                if got < nbytes:
                    raise InputFileError(
                        self.path,
                        f"truncated data: expected {self.header.nbytes} bytes for shape "
                        f"{self.shape}, got {start * dtype.itemsize + got}",
                        key=self.key,
                    )
                chunk = buf[:n]
                if native is not None:
                    chunk = chunk.byteswap().view(native)
                yield start, chunk
                start += n
        finally:
            stream.close()
            if zf is not None:
                zf.close()


def _check_declared_size(path: Path, key: str | None, header: NpyHeader, available: int) -> None:
    need = header.header_len + header.nbytes
    if available < need:
        raise InputFileError(
            path,
            f"truncated: header declares shape {header.shape} of {header.dtype} "
            f"({header.nbytes} bytes) but only {max(0, available - header.header_len)} "
            "data bytes are present",
            key=key,
        )


def _open_npy(path: Path, size: int) -> list[ArraySource]:
    try:
        with open(path, "rb") as fh:
            header = read_npy_header(fh, path)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    check_float_dtype(header.dtype, path, None)
    _check_declared_size(path, None, header, size)
    return [ArraySource(path, None, header, None)]


def _open_member(
    path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, seen: set[str]
) -> ArraySource:
    name = info.filename
    if not name.endswith(".npy"):
        raise InputFileError(path, f"member {name!r} is not a .npy array")
    key = name[: -len(".npy")]
    if key in seen:
        raise InputFileError(path, f"duplicate member {name!r}")
    seen.add(key)
    try:
        with zf.open(info) as member:
            header = read_npy_header(member, path, key)
    except _ZIP_ERRORS as exc:
        raise InputFileError(path, f"cannot read member: {exc}", key=key) from None
    if COMPANION_SEP in key:  # an integer side array of a layer, not a layer
        _check_companion_dtype(header.dtype, path, key)
    else:
        check_float_dtype(header.dtype, path, key)
    _check_declared_size(path, key, header, info.file_size)
    if info.file_size > header.header_len + header.nbytes:
        raise InputFileError(
            path,
            f"member is {info.file_size} bytes, its header declares "
            f"{header.header_len + header.nbytes}",
            key=key,
        )
    return ArraySource(path, key, header, name)


@dataclass(frozen=True)
class Unreadable:
    """A layer (npz member) that could not be read, and why: listed, never dropped silently."""

    name: str
    problem: str


def _open_npz(path: Path, skipped: list[Unreadable] | None = None) -> list[ArraySource]:
    """Open every member; a bad member raises, or is appended to ``skipped`` when given."""
    try:
        zf = zipfile.ZipFile(path)
    except _ZIP_ERRORS as exc:
        raise InputFileError(path, f"not a readable .npz archive ({exc})") from None
    sources: list[ArraySource] = []
    companions: list[ArraySource] = []
    seen: set[str] = set()
    with zf:
        for info in zf.infolist():
            if info.filename.endswith("/"):  # a directory (is_dir() fails on an empty name)
                continue
            try:
                src = _open_member(path, zf, info, seen)
            except InputFileError as exc:
                if skipped is None:
                    raise
                skipped.append(Unreadable(exc.key or info.filename, exc.problem))
                continue
            (companions if COMPANION_SEP in str(src.key) else sources).append(src)
    if not sources and not skipped:
        raise InputFileError(path, "the .npz archive holds no arrays")
    return _attach_companions(path, sources, companions)


# --------------------------------------------------------------------------- companions
# A member "<layer>::<what>" (e.g. "model.norm::position") is not a layer: it holds one integer
# per q value of <layer> (same shape), such as the token position written by `capture`.

#: Separator between a layer's key and its companion's name in .npz member names.
COMPANION_SEP = "::"


def _check_companion_dtype(dtype: np.dtype[Any], path: Path, key: str) -> None:
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "iu":
        raise InputFileError(
            path, f"companion array has dtype {_describe_dtype(dtype)}: expected an integer dtype",
            key=key,
        )


def _attach_companions(
    path: Path, layers: list[ArraySource], companions: list[ArraySource]
) -> list[ArraySource]:
    by_key = {src.key: src for src in layers}
    attached: dict[str, list[tuple[str, ArraySource]]] = {}
    for comp in companions:
        assert comp.key is not None
        base, _, what = comp.key.rpartition(COMPANION_SEP)
        layer = by_key.get(base)
        if layer is None:
            raise InputFileError(path, f"companion array without its layer {base!r}", key=comp.key)
        if comp.shape != layer.shape or comp.header.fortran_order != layer.header.fortran_order:
            raise InputFileError(
                path, f"companion array has shape {comp.shape}, its layer {base!r} has "
                f"{layer.shape}", key=comp.key,
            )
        attached.setdefault(base, []).append((what, comp))
    return [replace(src, companions=tuple(attached.get(str(src.key), ()))) for src in layers]


def open_dump(path: str | os.PathLike[str]) -> list[ArraySource]:
    """Open a ``.npy`` or ``.npz`` dump and return one :class:`ArraySource` per array.

    The format is decided by the file's magic bytes, not its extension. Headers, dtypes and
    declared sizes are all checked here, before any analysis starts.
    """
    p = Path(path)
    size = check_regular_file(p)
    try:
        with open(p, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise InputFileError(p, f"cannot read: {exc.strerror or exc}") from None
    if head.startswith(NPY_MAGIC):
        return _open_npy(p, size)
    if head[:4] in ZIP_MAGIC:
        return _open_npz(p)
    if not head:
        raise InputFileError(p, "empty file")
    raise InputFileError(p, "not a .npy or .npz file (unrecognised magic bytes)")


def open_dump_lenient(path: str | os.PathLike[str]) -> tuple[list[ArraySource], list[Unreadable]]:
    """:func:`open_dump`, but a ``.npz`` member that cannot be opened is returned in the second
    list (name and problem) instead of failing the whole dump (``--skip-unreadable``). A file
    that is not a readable dump at all still raises."""
    p = Path(path)
    check_regular_file(p)
    try:
        with open(p, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise InputFileError(p, f"cannot read: {exc.strerror or exc}") from None
    if head[:4] in ZIP_MAGIC:
        skipped: list[Unreadable] = []
        return _open_npz(p, skipped), skipped
    return open_dump(p), []


def npy_bytes(array: np.ndarray) -> bytes:
    """Serialize an array as .npy bytes (no pickling); used by writers and tests."""
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()
