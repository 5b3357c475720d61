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
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from rmsnorm_eps.errors import InputFileError, InvalidParameterError

__all__ = [
    "COMPANION_SEP",
    "DEFAULT_CHUNK_BYTES",
    "STORED_AS",
    "ArraySource",
    "Unreadable",
    "check_regular_file",
    "default_threads",
    "open_dump",
    "open_dump_lenient",
]

T = TypeVar("T")

#: Values of ``open_dump(..., dtype=)``: logical dtypes stored as raw bit patterns.
#: ``bfloat16``: arrays of dtype uint16 (either byte order) or ``V2`` (what ``np.save`` writes
#: for an ml_dtypes bfloat16 array; read as little-endian) hold bfloat16 bit patterns.
STORED_AS = ("bfloat16",)

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
    zipfile.BadZipFile,
    OSError,
    EOFError,
    ValueError,
    RuntimeError,
    NotImplementedError,
    zlib.error,
    lzma.LZMAError,
    IndexError,
    KeyError,  # zipfile on mangled names and extras
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


def check_float_dtype(
    dtype: np.dtype[Any], path: Path, key: str | None, stored_as: str | None = None
) -> None:
    """Refuse anything but float16/32/64 (either byte order) with a message naming the dtype.

    With ``stored_as="bfloat16"``, uint16 and ``V2`` arrays (bfloat16 bit patterns) are accepted
    too.
    """
    if dtype.hasobject:
        raise InputFileError(
            path, "holds Python objects (pickled data); refusing to load it", key=key
        )
    if stored_as == "bfloat16" and _is_bf16_storage(dtype):
        return
    name = _describe_dtype(dtype)
    if dtype.fields is not None or dtype.kind != "f" or name not in _FLOAT_KINDS:
        hint = (
            " (bfloat16 stored as uint16 or V2? pass --dtype bfloat16)"
            if stored_as is None and _is_bf16_storage(dtype)
            else ""
        )
        raise InputFileError(
            path,
            f"unsupported dtype {name}: expected float16, float32 or float64{hint}",
            key=key,
        )


def _is_bf16_storage(dtype: np.dtype[Any]) -> bool:
    return dtype.fields is None and (
        (dtype.kind == "u" and dtype.itemsize == 2) or (dtype.kind == "V" and dtype.itemsize == 2)
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


def default_threads() -> int:
    """Worker threads used when none are asked for: 2, or 1 on a single available CPU.

    Measured with benchmarks/bench_stream.py on the idle 2-CPU development machine, whole
    processes on N x 4096 float32 dumps: 1 GiB in 0.214 s with two threads against 0.264 s
    with one, 4 GiB in 0.374 s against 0.428 s. More threads do not help: the copy out of the
    page cache and numpy's kernels already saturate memory bandwidth with two. (On a machine
    whose CPUs are busy with other work, one thread can be faster: ``--threads 1``.)
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    return min(2, max(1, cpus))


@dataclass(frozen=True)
class ArraySource:
    """One array of a dump: a layer. Its data are read lazily, chunk by chunk.

    ``key`` is the ``.npz`` member name without ``.npy`` (``None`` for a plain ``.npy`` file).
    ``data_offset`` is the absolute file offset of the first data byte when the data can be
    read in place (a ``.npy`` file, or an uncompressed ``.npz`` member), which allows parallel
    positioned reads; ``None`` for compressed members (read as one stream).
    ``stored_as`` is ``"bfloat16"`` when the stored uint16/V2 values are bfloat16 bit patterns.
    """

    path: Path
    key: str | None
    header: NpyHeader
    member: str | None  # zip member name (with .npy) for .npz sources
    data_offset: int | None = None
    stored_as: str | None = None
    # Companion arrays of this layer: ("position", source) for the member "<key>::position",
    # etc. (see _attach_companions). Empty for dumps without them.
    companions: tuple[tuple[str, ArraySource], ...] = ()
    # CRC-32 the zip directory records for the whole member (header and data), checked by the
    # in-place parallel reader as zipfile checks it on the sequential path.
    member_crc: int | None = None

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
    def dtype_name(self) -> str:
        """The logical dtype of the values: ``bfloat16``, ``float32``, ... (native order)."""
        if self.stored_as is not None:
            return self.stored_as
        return str(self.header.dtype.newbyteorder("="))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.header.shape

    @property
    def _read_dtype(self) -> np.dtype[Any]:
        dtype = self.header.dtype
        return np.dtype("<u2") if dtype.kind == "V" else dtype

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

    def _truncated(self, start: int, got: int) -> InputFileError:
        return InputFileError(
            self.path,
            f"truncated data: expected {self.header.nbytes} bytes for shape "
            f"{self.shape}, got {start * self.header.dtype.itemsize + got}",
            key=self.key,
        )

    def iter_elements(self, elems_per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start, values)``: consecutive 1-D runs of stored elements in file order.

        ``values`` is a native-byte-order view into a reused buffer (valid until the next
        iteration): copy what you keep. ``start`` is the position of ``values[0]`` in file order.
        """
        dtype = self._read_dtype
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
                    raise self._truncated(start, got)
                chunk = buf[:n]
                if native is not None:
                    chunk = chunk.byteswap().view(native)
                yield start, chunk
                start += n
        finally:
            stream.close()
            if zf is not None:
                zf.close()

    def iter_mapped(
        self,
        elems_per_chunk: int,
        fn: Callable[[int, np.ndarray], T],
        threads: int = 1,
    ) -> Iterator[tuple[int, T]]:
        """Yield ``(start, fn(start, values))`` for the chunks of :meth:`iter_elements`, in order.

        With ``threads > 1`` and a source readable in place (``data_offset`` is set), chunks are
        read with ``os.preadv`` into per-task buffers and ``fn`` runs on ``threads`` worker
        threads (numpy and the read release the GIL), at most ``threads + 1`` chunks ahead of
        the consumer; memory stays bounded by that many chunk buffers. ``fn``'s result may be a
        view of the chunk buffer: it is valid until the next iteration.
        """
        total = self.header.size
        per = max(1, min(elems_per_chunk, total))
        if threads <= 1 or self.data_offset is None or total <= per:
            for start, values in self.iter_elements(per):
                yield start, fn(start, values)
            return
        dtype = self._read_dtype
        native = dtype.newbyteorder("=") if not dtype.isnative else None
        itemsize = dtype.itemsize
        base = self.data_offset
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            raise InputFileError(self.path, f"cannot read: {exc.strerror or exc}") from None

        def task(start: int, buf: np.ndarray) -> T:
            n = min(per, total - start)
            view = buf.data.cast("B")[: n * itemsize]
            got = 0
            while got < len(view):
                try:
                    k = os.preadv(fd, [view[got:]], base + start * itemsize + got)
                except OSError as exc:
                    raise InputFileError(
                        self.path, f"cannot read data: {exc.strerror or exc}", key=self.key
                    ) from None
                if k <= 0:
                    raise self._truncated(start, got)
                got += k
            chunk = buf[:n]
            if native is not None:
                chunk = chunk.byteswap().view(native)
            return fn(start, chunk)

        crc: int | None = None
        if self.member_crc is not None:  # fold the CRC-32 in file order, as zipfile would
            hlen = self.header.header_len
            crc = zlib.crc32(os.pread(fd, hlen, base - hlen))
        starts = iter(range(0, total, per))
        pending: deque[tuple[int, Future[T], np.ndarray]] = deque()
        pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rmsnorm-eps-read")
        try:
            for _ in range(threads + 1):
                s = next(starts, None)
                if s is None:
                    break
                buf = np.empty(per, dtype)
                pending.append((s, pool.submit(task, s, buf), buf))
            while pending:
                s, fut, buf = pending.popleft()
                result = fut.result()
                if crc is not None:  # the raw bytes: fn reads the buffer, never writes it
                    crc = zlib.crc32(buf.data.cast("B")[: min(per, total - s) * itemsize], crc)
                    if s + per >= total and crc != self.member_crc:
                        raise InputFileError(
                            self.path,
                            f"cannot read data: Bad CRC-32 for file {self.member!r}",
                            key=self.key,
                        )
                yield s, result
                nxt = next(starts, None)  # the consumer is done with ``buf``: reuse it
                if nxt is not None:
                    pending.append((nxt, pool.submit(task, nxt, buf), buf))
        finally:
            for _, fut, _ in pending:
                fut.cancel()
            pool.shutdown(wait=True)
            os.close(fd)


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


def _stored(header: NpyHeader, stored_as: str | None) -> str | None:
    return stored_as if stored_as is not None and _is_bf16_storage(header.dtype) else None


def _open_npy(path: Path, size: int, stored_as: str | None = None) -> list[ArraySource]:
    try:
        with open(path, "rb") as fh:
            header = read_npy_header(fh, path)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    check_float_dtype(header.dtype, path, None, stored_as)
    _check_declared_size(path, None, header, size)
    return [ArraySource(path, None, header, None, header.header_len, _stored(header, stored_as))]


_LOCAL_HEADER = 30  # fixed part of a zip local file header


def _member_data_offset(fp: IO[bytes], info: zipfile.ZipInfo) -> int | None:
    """Absolute offset of an uncompressed, unencrypted member's first byte, else None."""
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
        return None
    try:
        fp.seek(info.header_offset)
        local = fp.read(_LOCAL_HEADER)
    except (OSError, ValueError):
        return None
    if len(local) != _LOCAL_HEADER or local[:4] != b"PK\x03\x04":
        return None
    name_len = int.from_bytes(local[26:28], "little")
    extra_len = int.from_bytes(local[28:30], "little")
    return info.header_offset + _LOCAL_HEADER + name_len + extra_len


def _open_member(
    path: Path,
    zf: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    seen: set[str],
    stored_as: str | None,
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
        check_float_dtype(header.dtype, path, key, stored_as)
    _check_declared_size(path, key, header, info.file_size)
    if info.file_size > header.header_len + header.nbytes:
        raise InputFileError(
            path,
            f"member is {info.file_size} bytes, its header declares "
            f"{header.header_len + header.nbytes}",
            key=key,
        )
    start = _member_data_offset(zf.fp, info) if zf.fp is not None else None
    return ArraySource(
        path,
        key,
        header,
        name,
        None if start is None else start + header.header_len,
        None if COMPANION_SEP in key else _stored(header, stored_as),
        member_crc=info.CRC,
    )


@dataclass(frozen=True)
class Unreadable:
    """A layer (npz member) that could not be read, and why: listed, never dropped silently."""

    name: str
    problem: str


def _open_npz(
    path: Path, stored_as: str | None = None, skipped: list[Unreadable] | None = None
) -> list[ArraySource]:
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
                src = _open_member(path, zf, info, seen, stored_as)
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
            path,
            f"companion array has dtype {_describe_dtype(dtype)}: expected an integer dtype",
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
                path,
                f"companion array has shape {comp.shape}, its layer {base!r} has {layer.shape}",
                key=comp.key,
            )
        attached.setdefault(base, []).append((what, comp))
    return [replace(src, companions=tuple(attached.get(str(src.key), ()))) for src in layers]


def open_dump(path: str | os.PathLike[str], dtype: str | None = None) -> list[ArraySource]:
    """Open a ``.npy`` or ``.npz`` dump and return one :class:`ArraySource` per array.

    The format is decided by the file's magic bytes, not its extension. Headers, dtypes and
    declared sizes are all checked here, before any analysis starts. ``dtype="bfloat16"``
    (see :data:`STORED_AS`) reads uint16/V2 arrays as bfloat16 bit patterns; float arrays in the
    same dump are read as what they are.
    """
    if dtype is not None and dtype not in STORED_AS:
        raise InvalidParameterError(f"dtype must be one of {', '.join(STORED_AS)}, got {dtype!r}")
    p = Path(path)
    size = check_regular_file(p)
    try:
        with open(p, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise InputFileError(p, f"cannot read: {exc.strerror or exc}") from None
    if head.startswith(NPY_MAGIC):
        return _open_npy(p, size, dtype)
    if head[:4] in ZIP_MAGIC:
        return _open_npz(p, dtype)
    if not head:
        raise InputFileError(p, "empty file")
    raise InputFileError(p, "not a .npy or .npz file (unrecognised magic bytes)")


def open_dump_lenient(
    path: str | os.PathLike[str], dtype: str | None = None
) -> tuple[list[ArraySource], list[Unreadable]]:
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
        if dtype is not None and dtype not in STORED_AS:
            return open_dump(p, dtype), []  # raises the parameter error
        skipped: list[Unreadable] = []
        return _open_npz(p, dtype, skipped), skipped
    return open_dump(p, dtype), []


def open_layers(
    path: str | os.PathLike[str], dtype: str | None = None, skip_unreadable: bool = False
) -> tuple[list[ArraySource], list[Unreadable]]:
    """:func:`open_dump`, or :func:`open_dump_lenient` with ``skip_unreadable``."""
    if skip_unreadable:
        return open_dump_lenient(path, dtype)
    return open_dump(path, dtype), []


def map_layers(
    sources: list[ArraySource],
    fn: Callable[[ArraySource], T],
    skipped: list[Unreadable],
    skip_unreadable: bool,
) -> list[T]:
    """``fn`` over every layer. A layer whose data cannot be read (any :class:`InputFileError`)
    fails the run, or with ``skip_unreadable`` is appended to ``skipped`` with its problem:
    nothing is ever left out silently."""
    out: list[T] = []
    for src in sources:
        try:
            out.append(fn(src))
        except InputFileError as exc:
            if not skip_unreadable:
                raise
            skipped.append(Unreadable(src.name, exc.problem))
    return out


def npy_bytes(array: np.ndarray) -> bytes:
    """Serialize an array as .npy bytes (no pickling); used by writers and tests."""
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()
