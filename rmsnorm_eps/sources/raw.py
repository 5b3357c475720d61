"""One array stored as contiguous raw bytes, in a file or in a zip member, read in bounded chunks.

:class:`RawArraySource` implements :class:`~rmsnorm_eps.sources.interface.ArraySource` for every
format whose array data are plain contiguous bytes of one dtype: ``.npy`` files, ``.npz``
members, and equally safetensors tensors (``data_offset`` = 8 + header length + the tensor's
begin offset) and the stored members of a ``torch.save`` zip. A reader for such a format only
parses its header and builds these; the streaming is here.

A source read in place (``data_offset`` set: a plain file, a stored zip member) is read with
positioned reads (``os.preadv``) into one reused buffer of a chunk, small enough to stay in
the cache; with ``threads`` > 1, in parallel into one buffer per task. It is never memory
mapped: a mapped file that another process truncates while it is read raises SIGBUS, which
ends the process with nothing on stderr (Python cannot catch it). A read that comes up short
is the one-line error "file changed while being read" instead. The copy out of the page cache
costs a warm read about 0.024 s per 512 MiB: ``analyze_dump`` of a 512 MiB float32 file
with ``raw=True`` on one thread took 0.063 s against 0.039 s mapped, of a 400 MB q dump 0.197 s
against 0.177 s (medians of 5 interleaved runs on a shared 2-CPU machine). A file shorter
than its header says before the read starts is read the buffered way, which reports where it
ends. Other sources (compressed members) are read with ``readinto`` into one reused buffer.

Why one module: the sequential, positioned-parallel and ranged readers share one buffer and
CRC discipline; split, each would re-state the same invariants.
"""

from __future__ import annotations

import lzma
import math
import os
import zipfile
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import numpy as np

from rmsnorm_eps.dtypes import STORED_FLOATS
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources.ziparchive import ZipArchive, ZipEntry

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "ZIP_ERRORS",
    "RawArraySource",
    "bits_dtype",
    "check_float_dtype",
    "default_threads",
    "describe_dtype",
    "is_bf16_storage",
]

T = TypeVar("T")

#: Bytes of stored data read per chunk. Small enough to stay in the last-level cache.
DEFAULT_CHUNK_BYTES = 1 << 22


#: What reading a damaged or unusual zip member can raise: a bad CRC or header (BadZipFile), a
#: corrupt deflate/lzma stream (zlib.error, LZMAError; bz2 raises OSError), an encrypted member
#: (RuntimeError), an unsupported compression method (NotImplementedError).
ZIP_ERRORS: tuple[type[Exception], ...] = (
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


def describe_dtype(dtype: np.dtype[Any]) -> str:
    """A dtype's name for messages: native-order name, ``object`` or ``structured [...]``."""
    if dtype.hasobject:
        return "object"
    if dtype.fields is not None:
        return f"structured {dtype.descr}"
    return str(dtype.newbyteorder("=")) if dtype.byteorder not in "=|" else str(dtype)


def is_bf16_storage(dtype: np.dtype[Any]) -> bool:
    """uint16, int16 or ``V2``: what bfloat16 bit patterns are stored as."""
    return dtype.fields is None and dtype.kind in "uiV" and dtype.itemsize == 2


def bits_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The uint16 dtype (same byte order) to read 2-byte bit patterns stored as ``dtype``:
    int16 and uint16 keep their byte order, ``V2`` is little-endian."""
    if dtype.kind == "V":
        return np.dtype("<u2")
    return np.dtype(dtype.byteorder.replace("|", "=") + "u2")


def check_float_dtype(
    dtype: np.dtype[Any], path: Path, key: str | None, stored_as: str | None = None
) -> None:
    """Refuse anything but float16/32/64 (either byte order) with a message naming the dtype.

    With ``stored_as="bfloat16"``, uint16, int16 and ``V2`` arrays (bfloat16 bit patterns) are
    accepted too.
    """
    if dtype.hasobject:
        raise InputFileError(
            path, "holds Python objects (pickled data); refusing to load it", key=key
        )
    if stored_as == "bfloat16" and is_bf16_storage(dtype):
        return
    if dtype.fields is None and dtype.kind == "f" and dtype.itemsize in (2, 4, 8):
        return  # float16, float32 or float64 in either byte order (the test below, faster)
    name = describe_dtype(dtype)
    if dtype.fields is not None or dtype.kind != "f" or name not in STORED_FLOATS:
        hint = (
            " (bfloat16 stored as int16, uint16 or V2? pass --dtype bfloat16)"
            if stored_as is None and is_bf16_storage(dtype)
            else ""
        )
        raise InputFileError(
            path,
            f"unsupported dtype {name}: expected float16, float32 or float64{hint}",
            key=key,
        )


def default_threads() -> int:
    """Worker threads used when none are asked for: 2 when a second CPU is free now, else 1.

    Measured (benchmarks/bench_stream.py, N x 4096 float32, warm page cache, 2-CPU machine):
    the copy out of the page cache is the cost a second thread shares (sources are read with
    positioned reads, never mapped: module docstring). Two threads were faster than one on an
    idle machine (0.214 s against 0.264 s for 1 GiB) and slower on a busy one (load average
    about 4: 2.09 s against 1.83 s for 4 GiB), so the CPUs this process may use, less the
    1-minute load average, rounded down, capped at 2, at least 1 (:func:`threads_for`).
    ``--threads N`` overrides it.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform: assume idle
        busy = 0.0
    return threads_for(cpus, busy)


def threads_for(cpus: int, load: float) -> int:
    """:func:`default_threads`'s rule: ``min(2, floor(cpus - load))``, at least 1."""
    free = int(cpus - load) if load == load else cpus  # a NaN load: assume idle
    return min(2, max(1, free))


@lru_cache(maxsize=64)
def _native_name(dtype: np.dtype[Any]) -> str:
    """``str`` of the dtype in native byte order (``float32``), once per distinct dtype."""
    return str(dtype.newbyteorder("="))


def _readinto_full(stream: IO[bytes], view: memoryview) -> int:
    got = 0
    total = len(view)
    while got < total:
        n = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            break
        got += n
    return got


@dataclass(frozen=True, slots=True)
class RawArraySource:
    """One array of a dump (a layer), stored as contiguous raw bytes; read lazily, by chunks.

    ``key`` is the name inside a container (an ``.npz`` member name without ``.npy``; ``None``
    for a plain ``.npy`` file). For a zip member, ``member_suffix`` is what its name adds to
    ``key`` (``".npy"``: :attr:`member` is the name), ``archive`` the shared open archive,
    ``skip`` the bytes of the member before the data (its ``.npy`` header) and ``info`` its
    directory entry when the member must be read through ``zipfile`` (compressed; ``None``
    when it is read in place). ``data_offset`` is the absolute file offset of the
    first data byte when the data can be read in place (a plain file, or an uncompressed
    member), which allows parallel positioned reads; ``None`` for compressed members (read as
    one stream). ``stored_as`` is ``"bfloat16"`` when the stored uint16/V2 values are bfloat16
    bit patterns. ``member_crc`` is the CRC-32 the zip directory records for the whole member,
    checked by the in-place readers as ``zipfile`` checks it when it reads a member.

    Slotted (no per-instance ``__dict__``): a dump of 100,000 layers holds 100,000 of these.
    """

    path: Path
    key: str | None
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    order: str = "C"  # 'C' or 'F': the order of the stored elements
    data_offset: int | None = None
    member_suffix: str | None = None
    info: zipfile.ZipInfo | ZipEntry | None = field(default=None, compare=False, repr=False)
    archive: ZipArchive | None = field(default=None, compare=False, repr=False)
    skip: int = 0
    stored_as: str | None = None
    # Companion arrays of this layer: ("position", source) for the member "<key>::position".
    companions: tuple[tuple[str, RawArraySource], ...] = ()
    member_crc: int | None = None

    def companion(self, name: str) -> RawArraySource | None:
        """The companion array ``name`` (e.g. "position") of this layer, if the dump has one."""
        return dict(self.companions).get(name)

    @property
    def member(self) -> str | None:
        """The zip member's name (``key`` + ``member_suffix``); ``None`` outside a zip."""
        if self.member_suffix is None:
            return None
        return (self.key or "") + self.member_suffix

    @property
    def name(self) -> str:
        """Layer name: the key, or the file's stem for a plain array file."""
        return self.key if self.key is not None else self.path.stem

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def members(self) -> int:
        """Container members this source stands for: itself and its companions."""
        return 1 + len(self.companions)

    @property
    def dtype_name(self) -> str:
        """The logical dtype of the values: ``bfloat16``, ``float32``, ... (native order)."""
        if self.stored_as is not None:
            return self.stored_as
        return _native_name(self.dtype)

    @property
    def _read_dtype(self) -> np.dtype[Any]:
        # bfloat16 bit patterns are handed out as uint16 whatever they are stored as
        return bits_dtype(self.dtype) if self.stored_as is not None else self.dtype

    def _open(self) -> IO[bytes]:
        """A stream positioned at the first data byte. A member stored uncompressed (it has a
        ``data_offset``) is read in place like a plain file, its CRC-32 checked by
        :meth:`iter_elements`; others go through ``zipfile`` (decompression, CRC)."""
        try:
            if self.archive is not None and self.data_offset is not None:
                return self.archive.stream_at(self.data_offset)  # the archive's open file
            if self.archive is None or self.info is None or self.data_offset is not None:
                fh: IO[bytes] = open(self.path, "rb")  # noqa: SIM115 (closed by the caller)
                fh.seek(self.data_offset or 0)
                return fh
            member = self.archive.open(self.info, self.member or "")
            skipped = member.read(self.skip)
            if len(skipped) != self.skip:
                member.close()
                raise InputFileError(self.path, "truncated member", key=self.key)
            return member
        except ZIP_ERRORS as exc:
            raise InputFileError(self.path, f"cannot read: {exc}", key=self.key) from None

    def _crc_start(self, stream: IO[bytes] | int) -> int | None:
        """CRC-32 of the member's bytes before the data, when read in place; else None
        (``stream``: an open file or its descriptor)."""
        if self.member_crc is None or self.data_offset is None or self.member_suffix is None:
            return None
        fd = stream if isinstance(stream, int) else stream.fileno()
        try:
            head = os.pread(fd, self.skip, self.data_offset - self.skip)
        except OSError as exc:
            raise InputFileError(self.path, f"cannot read: {exc.strerror or exc}") from None
        return zlib.crc32(head)

    def _bad_crc(self) -> InputFileError:
        return InputFileError(
            self.path, f"cannot read data: Bad CRC-32 for file {self.member!r}", key=self.key
        )

    def _changed(self) -> InputFileError:
        """A file long enough when the read began came up short: another process truncated
        (or replaced) it while it was read."""
        return InputFileError(
            self.path,
            f"file changed while being read: it ended before the {self.nbytes} bytes of shape "
            f"{self.shape} (was it rewritten or truncated by another process?)",
            key=self.key,
        )

    def _truncated(self, start: int, got: int) -> InputFileError:
        return InputFileError(
            self.path,
            f"truncated data: expected {self.nbytes} bytes for shape "
            f"{self.shape}, got {start * self.dtype.itemsize + got}",
            key=self.key,
        )

    def iter_elements(self, elems_per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start, values)``: consecutive 1-D runs of stored elements in file order.

        ``values`` is a native-byte-order array, valid until the next iteration (a view of a
        reused buffer): copy what you keep. ``start`` is the
        position of ``values[0]`` in file order.
        """
        per = max(1, min(elems_per_chunk, self.size))
        in_place = self._in_place(per) if self.data_offset is not None else None
        if in_place is None:
            yield from self._read_chunks(per)
        else:
            yield from in_place

    def _in_place(self, per: int) -> Iterator[tuple[int, np.ndarray]] | None:
        """:meth:`iter_elements` of a source read in place: positioned reads (``os.preadv``)
        into one reused buffer, never a memory map (module docstring: a mapped file truncated
        while read kills the process with SIGBUS). None where the file cannot be opened or is
        shorter than its header says before the read starts (then it is read the buffered way,
        which says where it ends)."""
        if self.data_offset is None or self.size == 0:
            return None
        try:
            stream = self._open()  # a stored member: the archive's own open file
        except InputFileError:
            return None  # the buffered reader reports it
        try:
            fd = stream.fileno()  # none for bytes already in memory (a shared torch storage)
            short = os.fstat(fd).st_size < self.data_offset + self.nbytes
        except (OSError, ValueError):
            short = True
        if short:
            stream.close()
            return None
        return self._positioned(stream, fd, per)

    def _positioned(self, stream: IO[bytes], fd: int, per: int) -> Iterator[tuple[int, np.ndarray]]:
        """The chunks of :meth:`_in_place` (``stream``, whose descriptor is ``fd``, is closed at
        the end); the CRC-32 of a stored member is checked before its last chunk is used, as
        zipfile checks it."""
        _, buf, raw, native = self._buffer(per)
        itemsize = buf.dtype.itemsize
        total = self.size
        try:
            crc = self._crc_start(fd)
            for start in range(0, total, per):
                n = min(per, total - start)
                chunk = self._pread(fd, start, n, buf, None, changed=True)
                if crc is not None:
                    crc = zlib.crc32(raw[: n * itemsize], crc)
                    if start + n >= total and crc != self.member_crc:
                        raise self._bad_crc()
                yield start, chunk if native is None else chunk.byteswap().view(native)
        finally:
            stream.close()

    def _buffer(
        self, per: int
    ) -> tuple[np.dtype[Any], np.ndarray, memoryview, np.dtype[Any] | None]:
        """A reused read buffer of ``per`` elements, its bytes, and the native dtype its chunks
        are byte-swapped to (None when the stored order is native)."""
        dtype = self._read_dtype
        buf = np.empty(per, dtype=dtype)
        native = dtype.newbyteorder("=") if not dtype.isnative else None
        return dtype, buf, buf.data.cast("B"), native

    def _read_chunks(self, per: int) -> Iterator[tuple[int, np.ndarray]]:
        """:meth:`iter_elements` by ``readinto`` into one reused buffer."""
        dtype, buf, raw, native = self._buffer(per)
        total = self.size
        stream = self._open()
        try:
            crc = self._crc_start(stream)
            start = 0
            while start < total:
                n = min(per, total - start)
                nbytes = n * dtype.itemsize
                try:
                    got = _readinto_full(stream, raw[:nbytes])
                except ZIP_ERRORS as exc:
                    raise InputFileError(
                        self.path, f"cannot read data: {exc}", key=self.key
                    ) from None
                if got < nbytes:
                    raise self._truncated(start, got)
                if crc is not None:  # checked before the last chunk is used, as zipfile does
                    crc = zlib.crc32(raw[:nbytes], crc)
                    if start + n >= total and crc != self.member_crc:
                        raise self._bad_crc()
                yield start, buf[:n] if native is None else buf[:n].byteswap().view(native)
                start += n
        finally:
            stream.close()

    def iter_range(
        self, first: int, count: int, elems_per_chunk: int
    ) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start, values)`` for the stored elements ``first`` to ``first + count`` only,
        read in place (positioned reads: a source with ``data_offset``), at most
        ``elems_per_chunk`` at a time; ``values`` is valid until the next iteration. What a
        Fortran-ordered ``--raw`` file is read with, a block of rows at a time, column by
        column, so that each byte is read once. (The CRC-32 of a stored zip member is checked
        by :meth:`iter_elements` only.)"""
        if self.data_offset is None:
            raise ValueError("iter_range needs a source read in place")
        per = max(1, min(elems_per_chunk, count))
        _, buf, _, native = self._buffer(per)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            raise InputFileError(self.path, f"cannot read: {exc.strerror or exc}") from None
        try:
            start = first
            while start < first + count:
                n = min(per, first + count - start)
                yield start, self._pread(fd, start, n, buf, native)
                start += n
        finally:
            os.close(fd)

    def _pread(
        self,
        fd: int,
        start: int,
        n: int,
        buf: np.ndarray,
        native: np.dtype[Any] | None,
        *,
        changed: bool = False,
    ) -> np.ndarray:
        """Elements ``start`` to ``start + n`` of a source read in place, read into ``buf`` with
        positioned reads (the file position never moves), in native byte order. A short read
        is :meth:`_changed` when the file was checked long enough before (``changed``), else
        :meth:`_truncated`."""
        assert self.data_offset is not None
        itemsize = buf.dtype.itemsize
        view = buf.data.cast("B")[: n * itemsize]
        got = 0
        while got < len(view):
            try:
                k = os.preadv(fd, [view[got:]], self.data_offset + start * itemsize + got)
            except OSError as exc:
                raise InputFileError(
                    self.path, f"cannot read data: {exc.strerror or exc}", key=self.key
                ) from None
            if k <= 0:
                raise self._changed() if changed else self._truncated(start, got)
            got += k
        return buf[:n] if native is None else buf[:n].byteswap().view(native)

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
        total = self.size
        per = max(1, min(elems_per_chunk, total))
        if threads <= 1 or self.data_offset is None or total <= per:
            for start, values in self.iter_elements(per):
                yield start, fn(start, values)
            return
        yield from _ParallelReader(self, per, threads).run(fn)


class _ParallelReader:
    """Positioned parallel reads of an in-place source (see :meth:`RawArraySource.iter_mapped`)."""

    def __init__(self, src: RawArraySource, per: int, threads: int) -> None:
        self.src = src
        self.per = per
        self.threads = threads
        self.dtype = src._read_dtype
        self.native = self.dtype.newbyteorder("=") if not self.dtype.isnative else None
        self.total = src.size
        assert src.data_offset is not None
        self.base = src.data_offset

    def _read(self, fd: int, start: int, buf: np.ndarray) -> np.ndarray:
        return self.src._pread(fd, start, min(self.per, self.total - start), buf, self.native)

    def run(self, fn: Callable[[int, np.ndarray], T]) -> Iterator[tuple[int, T]]:
        # imported here: concurrent.futures (with logging and queue) costs about 25 ms of
        # start-up that a one-thread run never needs
        from concurrent.futures import ThreadPoolExecutor

        src, per, total = self.src, self.per, self.total
        try:
            fd = os.open(src.path, os.O_RDONLY)
        except OSError as exc:
            raise InputFileError(src.path, f"cannot read: {exc.strerror or exc}") from None

        def task(start: int, buf: np.ndarray) -> T:
            return fn(start, self._read(fd, start, buf))

        crc: int | None = None
        if src.member_crc is not None:  # fold the CRC-32 in file order, as zipfile would
            crc = zlib.crc32(os.pread(fd, src.skip, self.base - src.skip))
        starts = iter(range(0, total, per))
        pending: deque[tuple[int, Future[T], np.ndarray]] = deque()
        pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="rmsnorm-eps-read")
        try:
            for _ in range(self.threads + 1):
                s = next(starts, None)
                if s is None:
                    break
                buf = np.empty(per, self.dtype)
                pending.append((s, pool.submit(task, s, buf), buf))
            while pending:
                s, fut, buf = pending.popleft()
                result = fut.result()
                if crc is not None:  # the raw bytes: fn reads the buffer, never writes it
                    nbytes = min(per, total - s) * self.dtype.itemsize
                    crc = zlib.crc32(buf.data.cast("B")[:nbytes], crc)
                    if s + per >= total and crc != src.member_crc:
                        raise src._bad_crc()
                yield s, result
                nxt = next(starts, None)  # the consumer is done with ``buf``: reuse it
                if nxt is not None:
                    pending.append((nxt, pool.submit(task, nxt, buf), buf))
        finally:
            for _, fut, _ in pending:
                fut.cancel()
            pool.shutdown(wait=True)
            os.close(fd)
