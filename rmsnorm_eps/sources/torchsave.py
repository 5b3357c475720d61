"""``torch.save`` files (``.pt``/``.pth``, the zip format of torch >= 1.6): tensors read in place.

What is accepted: a tensor, a dict of tensors (a ``state_dict``; nested dicts give names joined
with ``.``), or a list/tuple of tensors (names are the indices), nested in any way. Every other
leaf (a number, a string, ``None``) is an entry that is not a tensor: it raises, or with
``lenient`` is listed as :class:`~rmsnorm_eps.sources.interface.Unreadable` by its name.

How it is read: the pickle (``<archive>/data.pkl``, at most :data:`PICKLE_MAX` bytes) is loaded
with ``torch.load(path, weights_only=True, map_location="meta")``: torch's restricted unpickler,
which refuses any global outside its allow-list, so no code from the file runs; and on the meta
device, so no tensor data are read or mapped (a memory map would count every touched page as
resident memory). The meta storages carry the absolute file offset of their zip record, which
is checked against the zip directory (a stored, unencrypted ``<archive>/data/<key>`` member
holding every byte the tensor needs); the data are then streamed from the file by
:class:`~rmsnorm_eps.sources.raw.RawArraySource`, in bounded chunks, like an ``.npz`` member.

dtypes: float16, float32, float64 and bfloat16 (its bit patterns read as uint16); int16 and
uint16 with ``stored_as="bfloat16"`` (``t.view(torch.int16)``); integer tensors named
``<layer>::<what>`` are companions of ``<layer>`` (as in an ``.npz``). Tensors must be C- or
Fortran-contiguous views of their storage (else: save ``t.contiguous()``).

Needs torch (the ``torch`` extra); without it the file is refused with one line naming the
extra.

Why one module: the zip accounting (every member referenced, no duplicate entry, one read per
storage) and the weights-only unpickling are one trust boundary and are checked in one pass.
"""

from __future__ import annotations

import bisect
import io
import math
import re
import threading
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from rmsnorm_eps.errors import InputFileError, MissingExtraError, brief
from rmsnorm_eps.sources.interface import Opened, Unreadable
from rmsnorm_eps.sources.npz import COMPANION_SEP, _local_extents, with_companions
from rmsnorm_eps.sources.raw import ZIP_ERRORS, RawArraySource, check_float_dtype

__all__ = ["PICKLE_MAX", "SHARED_MAX", "open_torchsave"]

#: Largest ``data.pkl`` loaded: a dump of a few thousand tensors takes well under 256 KiB (about
#: 70 bytes per tensor), and what is unpickled from it stays within the 256 MiB memory budget
#: (importing torch alone takes about 240 MiB of it).
PICKLE_MAX = 256 << 10
_BYTEORDER_MAX = 16
#: Bytes of storage records read once and kept in memory for the tensors whose bytes overlap
#: (views of one storage: ``x`` and ``x.t()``, or one tensor under many names).
SHARED_MAX = 64 << 20

T = TypeVar("T")

#: torch dtype name -> (numpy dtype of the stored bytes, little-endian; stored_as it implies).
_DTYPES: dict[str, tuple[str, str | None]] = {
    "float16": ("<f2", None),
    "float32": ("<f4", None),
    "float64": ("<f8", None),
    "bfloat16": ("<u2", "bfloat16"),
    "int16": ("<i2", None),
    "uint16": ("<u2", None),
    "int8": ("<i1", None),
    "uint8": ("<u1", None),
    "int32": ("<i4", None),
    "uint32": ("<u4", None),
    "int64": ("<i8", None),
    "uint64": ("<u8", None),
}


#: The records torch.save writes besides the pickle and the storages (``data/<key>``): they
#: hold no array data and are not referenced by the pickle.
_METADATA = frozenset(
    {
        "byteorder",
        "version",
        ".format_version",
        ".storage_alignment",
        ".data/version",
        ".data/serialization_id",
    }
)


class _Archive:
    """The zip directory of a torch.save file: its record prefix, data offsets, byte order.

    Refused here, before torch reads anything: an archive whose entry names repeat (torch's
    reader and :mod:`zipfile` would disagree on which of two ``data.pkl`` is the pickle: the
    size cap must apply to the one torch loads), a ``data.pkl`` over :data:`PICKLE_MAX`, and
    a file written on a big-endian machine (``byteorder`` record ``big``: torch's own loader
    crashes on it with ``map_location="meta"``).
    """

    def __init__(self, path: Path) -> None:
        try:
            with zipfile.ZipFile(path) as zf:
                infos = zf.infolist()
                _refuse_duplicates(path, infos)
                starts, problems = _local_extents(zf.fp, infos, zf.start_dir)
                pkl = infos[0] if infos else None
                if pkl is None or not pkl.filename.endswith("/data.pkl"):
                    raise InputFileError(path, "not a torch.save archive (no data.pkl first)")
                self.prefix = pkl.filename[: -len("data.pkl")]
                if pkl.file_size > PICKLE_MAX:
                    raise InputFileError(
                        path,
                        f"data.pkl of {pkl.file_size} bytes is over the {PICKLE_MAX >> 10} KiB "
                        "this reader loads",
                    )
                if self._byteorder(zf, path):
                    raise InputFileError(
                        path,
                        "written on a big-endian machine (byteorder record 'big'), which this "
                        "reader does not read: load it there and numpy.save each tensor",
                    )
        except ZIP_ERRORS as exc:
            raise InputFileError(path, f"not a readable torch.save archive ({exc})") from None
        self.big_endian = False
        #: absolute data offset -> (member, problem or None)
        self.records: dict[int, tuple[zipfile.ZipInfo, str | None]] = {}
        #: members that are neither the pickle, a metadata record nor a storage record
        self.foreign: list[str] = []
        for i, (info, start) in enumerate(zip(infos, starts, strict=True)):
            rel = (
                info.filename[len(self.prefix) :] if info.filename.startswith(self.prefix) else None
            )
            if i == 0 or rel in _METADATA:
                continue
            if rel is None or not rel.startswith("data/") or start is None:
                self.foreign.append(info.filename)
                continue
            problem = problems.get(i)
            if problem is None and info.compress_type != zipfile.ZIP_STORED:
                problem = "its record is compressed (torch.save stores records uncompressed)"
            if problem is None and info.flag_bits & 0x1:
                problem = "its record is encrypted"
            self.records.setdefault(start, (info, problem))

    def _byteorder(self, zf: zipfile.ZipFile, path: Path) -> bool:
        name = self.prefix + "byteorder"
        try:
            info = zf.getinfo(name)
        except KeyError:
            return False
        if info.file_size > _BYTEORDER_MAX:
            raise InputFileError(path, "invalid byteorder record")
        order = zf.read(info)
        if order not in (b"little", b"big"):
            raise InputFileError(path, f"invalid byteorder record {brief(order)}")
        return order == b"big"


def _refuse_duplicates(path: Path, infos: list[zipfile.ZipInfo]) -> None:
    """Refuse an archive in which two entries have one name (as stored, or as :mod:`zipfile`
    reads it): which of them a reader takes is up to the reader."""
    seen: set[str] = set()
    for info in infos:
        for name in {info.filename, info.orig_filename}:
            if name in seen:
                raise InputFileError(
                    path, f"two zip entries named {brief(name)}: refusing an ambiguous archive"
                )
        seen.update((info.filename, info.orig_filename))


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingExtraError("torch", "torch", "reading torch.save files") from None
    return torch


def _load(path: Path) -> Any:
    torch = _import_torch()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, weights_only=True, map_location="meta")
    except (MemoryError, RecursionError):
        raise InputFileError(path, "not a readable torch.save file (too large or deep)") from None
    except Exception as exc:  # UnpicklingError (refused global), RuntimeError (bad archive)...
        raise InputFileError(path, f"not a readable torch.save file: {_why(exc)}") from None


def _why(exc: Exception) -> str:
    """One short line from torch's (multi-line, partly ANSI-coloured) error."""
    text = str(exc)
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    if found is not None:
        return (
            f"its pickle needs {brief(found[1])}, which torch's weights-only loader refuses "
            "(only tensors, containers and numbers are loaded; nothing was run)"
        )
    found = re.search(r"WeightsUnpickler error: ([^\n]*)", text)
    line = found[1] if found is not None else (text.strip().splitlines() or [""])[0]
    return brief(line or type(exc).__name__)[1:-1]


class _Repeated:
    """A container met a second time (the pickle memo lets one object appear many times)."""


def _containers(item: Any) -> list[Any] | None:
    if isinstance(item, dict):
        return list(item.values())
    if isinstance(item, (list, tuple)):
        return list(item)
    return None


def _holders(obj: Any, torch: Any) -> set[int]:
    """``id()`` of every container that holds a tensor, at any depth (each container visited
    once: shared and self-referencing containers cost nothing more)."""
    holders: set[int] = set()
    seen: set[int] = set()
    stack: list[tuple[Any, bool]] = [(obj, False)]
    while stack:
        item, done = stack.pop()
        children = _containers(item)
        if children is None:
            continue
        if done:
            if any(isinstance(c, torch.Tensor) or id(c) in holders for c in children):
                holders.add(id(item))
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        stack.append((item, True))
        stack.extend((c, False) for c in children)
    return holders


def _leaves(obj: Any, torch: Any) -> Iterator[tuple[str | None, Any]]:
    """``(name, leaf)``: tensors and other leaves of nested dicts/lists/tuples, in order
    (iterative: the nesting depth is not bounded by the Python stack). A container holding no
    tensor is one leaf (one entry that is not a tensor, however many items it has); a container
    met again is a :class:`_Repeated` leaf, so the walk is linear in the pickle's size."""
    holders = _holders(obj, torch)
    seen: set[int] = set()
    stack: list[tuple[str | None, Any]] = [(None, obj)]
    while stack:
        name, item = stack.pop()
        if _containers(item) is not None:
            if id(item) in seen:
                yield name, _Repeated()
                continue
            seen.add(id(item))
            if id(item) in holders:
                pairs = list(item.items()) if isinstance(item, dict) else list(enumerate(item))
                for k, v in reversed(pairs):
                    stack.append((str(k) if name is None else f"{name}.{k}", v))
                continue
        yield name, item


def _order(shape: tuple[int, ...], stride: tuple[int, ...]) -> str | None:
    """``'C'`` or ``'F'`` when ``stride`` lays ``shape`` out contiguously, else ``None``."""
    if math.prod(shape) <= 1:
        return "C"
    for order, dims in (("C", range(len(shape) - 1, -1, -1)), ("F", range(len(shape)))):
        step = 1
        ok = True
        for i in dims:
            if shape[i] != 1 and stride[i] != step:
                ok = False
                break
            step *= shape[i]
        if ok:
            return order
    return None


def _record_offset(storage: Any) -> int | None:
    """The absolute file offset of a meta storage's record, as ``torch.load(...,
    map_location="meta")`` sets it (``_checkpoint_offset``; recent torch releases)."""
    offset = getattr(storage, "_checkpoint_offset", None)
    return offset if isinstance(offset, int) and not isinstance(offset, bool) else None


def _source(
    path: Path,
    key: str | None,
    name: str,
    t: Any,
    archive: _Archive,
    stored_as: str | None,
    torch: Any,
) -> RawArraySource:
    if t.layout != torch.strided or t.device.type != "meta":
        raise InputFileError(path, f"unsupported tensor layout {t.layout}", key=name)
    dtype_name = str(t.dtype).removeprefix("torch.")
    if dtype_name not in _DTYPES:
        raise InputFileError(
            path,
            f"unsupported dtype {dtype_name}: expected float16, bfloat16, float32 or float64",
            key=name,
        )
    code, implied = _DTYPES[dtype_name]
    dtype = np.dtype(code)
    if archive.big_endian:
        dtype = dtype.newbyteorder(">")
    companion = COMPANION_SEP in name
    if companion:
        if dtype.kind not in "iu":
            raise InputFileError(
                path, f"companion array has dtype {dtype_name}: expected an integer dtype", key=name
            )
        stored = None
    elif implied is not None:
        stored = implied
    else:
        check_float_dtype(dtype, path, name, stored_as)
        stored = stored_as if dtype.kind in "iu" else None
    shape = tuple(int(k) for k in t.shape)
    order = _order(shape, tuple(int(s) for s in t.stride()))
    if order is None:
        raise InputFileError(
            path, "a non-contiguous tensor view: save t.contiguous() instead", key=name
        )
    storage = t.untyped_storage()
    base = _record_offset(storage)
    if base is None:
        raise InputFileError(
            path,
            f"this torch ({torch.__version__}) does not report where tensor data are stored; "
            "convert with numpy.save",
            key=name,
        )
    record = archive.records.get(base)
    if record is None:
        raise InputFileError(
            path,
            "its storage is not where torch.save puts it (an archive written by another zip "
            "tool?): load it and torch.save it again",
            key=name,
        )
    info, problem = record
    if problem is not None:
        raise InputFileError(path, f"storage {brief(info.filename)}: {problem}", key=name)
    first = int(t.storage_offset()) * dtype.itemsize
    nbytes = math.prod(shape) * dtype.itemsize
    if first + nbytes > info.file_size or storage.nbytes() > info.file_size:
        raise InputFileError(
            path,
            f"truncated: shape {shape} of {dtype_name} at byte {first} needs "
            f"{first + nbytes} bytes, its record {brief(info.filename)} holds {info.file_size}",
            key=name,
        )
    return RawArraySource(
        path, key, dtype, shape, order, data_offset=base + first, stored_as=stored
    )


_FOREIGN = "a zip member that is not part of torch.save's format (not analysed)"


def _overlaps(sources: list[tuple[str, RawArraySource]]) -> set[int]:
    """Indices of the sources whose bytes overlap another one's (by file offset)."""
    spans = sorted(
        (src.data_offset or 0, src.nbytes, i) for i, (_, src) in enumerate(sources) if src.nbytes
    )
    out: set[int] = set()
    reach, owner = -1, -1
    for start, nbytes, i in spans:
        if start < reach:
            out.update((i, owner))
        if start + nbytes > reach:
            reach, owner = start + nbytes, i
    return out


class _StorageCache:
    """The bytes of one storage record, read from the file once (on first use) and shared by
    every tensor that refers to it: a storage referenced N times by overlapping tensors is read
    once, not N times. Quacks like :class:`~rmsnorm_eps.sources.ziparchive.ZipArchive` for
    :meth:`RawArraySource._open` (``stream_at`` an absolute file offset)."""

    def __init__(self, path: Path, start: int, size: int) -> None:
        self.path = path
        self.start = start
        self.size = size
        self._data: bytes | None = None
        self._lock = threading.Lock()

    def stream_at(self, offset: int) -> io.BytesIO:
        with self._lock:
            if self._data is None:
                try:
                    with open(self.path, "rb") as fh:
                        fh.seek(self.start)
                        self._data = fh.read(self.size)
                except OSError as exc:
                    raise InputFileError(self.path, f"cannot read: {exc.strerror or exc}") from None
        stream = io.BytesIO(self._data)
        stream.seek(offset - self.start)
        return stream


@dataclass(frozen=True, slots=True)
class _SharedSource(RawArraySource):
    """A tensor whose bytes overlap another tensor's: read from its :class:`_StorageCache`
    (one thread: the parallel reader would read the file again)."""

    def iter_mapped(
        self, elems_per_chunk: int, fn: Callable[[int, np.ndarray], T], threads: int = 1
    ) -> Iterator[tuple[int, T]]:
        return RawArraySource.iter_mapped(self, elems_per_chunk, fn, 1)


def _share(
    path: Path, archive: _Archive, made: list[tuple[str, RawArraySource]]
) -> tuple[list[tuple[str, RawArraySource]], list[tuple[str, str]]]:
    """Sources whose bytes overlap read their storage from one :class:`_StorageCache` per
    record, up to :data:`SHARED_MAX` bytes of such records in all; beyond, they are refused
    (each ``(name, problem)``)."""
    overlapping = _overlaps(made)
    if not overlapping:
        return made, []
    by_offset = sorted(archive.records)
    caches: dict[int, _StorageCache] = {}
    cached = 0
    out: list[tuple[str, RawArraySource]] = []
    refused: list[tuple[str, str]] = []
    for i, (key, src) in enumerate(made):
        if i not in overlapping:
            out.append((key, src))
            continue
        at = src.data_offset or 0
        base = by_offset[bisect.bisect_right(by_offset, at) - 1]
        info = archive.records[base][0]
        cache = caches.get(base)
        if cache is None and cached + info.file_size > SHARED_MAX:
            refused.append(
                (
                    key,
                    f"its bytes overlap another tensor's, and the storages shared so are over "
                    f"the {SHARED_MAX >> 20} MiB read once and kept (save each tensor's "
                    ".clone())",
                )
            )
            continue
        if cache is None:
            cache = caches[base] = _StorageCache(path, base, info.file_size)
            cached += info.file_size
        fields = {f: getattr(src, f) for f in RawArraySource.__dataclass_fields__}
        fields["archive"] = cache
        out.append((key, _SharedSource(**fields)))
    return out, refused


def _walk(
    path: Path, obj: Any, archive: _Archive, stored_as: str | None, lenient: bool, torch: Any
) -> tuple[list[tuple[str, RawArraySource]], list[Unreadable], int, set[int]]:
    """The tensors of the pickle as sources (and the entries refused, with ``lenient``), the
    number of entries, and the storage records referenced."""
    made: list[tuple[str, RawArraySource]] = []
    unreadable: list[Unreadable] = []
    referenced: set[int] = set()
    seen: set[str] = set()
    total = 0
    for name, leaf in _leaves(obj, torch):
        total += 1
        key = path.stem if name is None else name  # a lone tensor is named after the file
        try:
            if key in seen:
                raise InputFileError(path, f"duplicate name {brief(key)}")
            seen.add(key)
            if isinstance(leaf, _Repeated):
                raise InputFileError(path, "a second reference to a container", key=key)
            if not isinstance(leaf, torch.Tensor):
                raise InputFileError(
                    path, f"not a tensor ({type(leaf).__name__}): expected tensors only", key=key
                )
            if leaf.device.type == "meta":
                base = _record_offset(leaf.untyped_storage())
                if base is not None:
                    referenced.add(base)
            made.append((key, _source(path, name, key, leaf, archive, stored_as, torch)))
        except InputFileError as exc:
            if not lenient:
                raise
            unreadable.append(Unreadable(key, exc.problem))
    return made, unreadable, total, referenced


def open_torchsave(path: Path, size: int, stored_as: str | None, lenient: bool) -> Opened:
    """Open every tensor of a ``torch.save`` file; see the module docstring.

    Every member of the archive is accounted for: a member that is not torch's (another
    file zipped in, such as an ``.npy`` that makes the file a valid ``.npz`` too) or a storage
    record no tensor refers to is refused (with ``lenient``, listed as unreadable). Tensors
    whose bytes overlap (views of one storage) read it from one cache: each stored byte is
    read from the file once, however often the pickle refers to it.
    """
    del size
    archive = _Archive(path)
    if archive.foreign and not lenient:  # before torch reads anything
        raise InputFileError(path, _FOREIGN, key=archive.foreign[0])
    obj = _load(path)
    torch = _import_torch()
    made, unreadable, total, referenced = _walk(path, obj, archive, stored_as, lenient, torch)
    problems = [(name, _FOREIGN) for name in archive.foreign]
    problems += [
        (info.filename, "a storage record no tensor of the pickle refers to (not analysed)")
        for start, (info, _) in archive.records.items()
        if start not in referenced
    ]
    made, refused = _share(path, archive, made)
    problems += refused
    if problems and not lenient:
        name, problem = problems[0]
        raise InputFileError(path, problem, key=name)
    unreadable += [Unreadable(name, problem) for name, problem in problems]
    total += len(problems) - len(refused)  # the refused tensors are counted already
    return with_companions(
        path, made, unreadable, lenient, total, "the torch.save file holds no tensors"
    )
