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
"""

from __future__ import annotations

import math
import re
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rmsnorm_eps.errors import InputFileError, MissingExtraError, brief
from rmsnorm_eps.sources.interface import Opened, Unreadable
from rmsnorm_eps.sources.npz import COMPANION_SEP, _attach_companions, _local_extents
from rmsnorm_eps.sources.raw import ZIP_ERRORS, RawArraySource, check_float_dtype

__all__ = ["PICKLE_MAX", "open_torchsave"]

#: Largest ``data.pkl`` loaded: a dump of a few thousand tensors takes well under 256 KiB (about
#: 70 bytes per tensor), and what is unpickled from it stays within the 256 MiB memory budget
#: (importing torch alone takes about 240 MiB of it).
PICKLE_MAX = 256 << 10
_BYTEORDER_MAX = 16

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


class _Archive:
    """The zip directory of a torch.save file: its record prefix, data offsets, byte order."""

    def __init__(self, path: Path) -> None:
        try:
            with zipfile.ZipFile(path) as zf:
                infos = zf.infolist()
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
                self.big_endian = self._byteorder(zf, path)
        except ZIP_ERRORS as exc:
            raise InputFileError(path, f"not a readable torch.save archive ({exc})") from None
        #: absolute data offset -> (member, problem or None)
        self.records: dict[int, tuple[zipfile.ZipInfo, str | None]] = {}
        for i, (info, start) in enumerate(zip(infos, starts, strict=True)):
            if start is None:
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


def open_torchsave(path: Path, size: int, stored_as: str | None, lenient: bool) -> Opened:
    """Open every tensor of a ``torch.save`` file; see the module docstring."""
    del size
    archive = _Archive(path)
    obj = _load(path)
    torch = _import_torch()
    layers: list[RawArraySource] = []
    companions: list[RawArraySource] = []
    unreadable: list[Unreadable] = []
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
            src = _source(path, name, key, leaf, archive, stored_as, torch)
        except InputFileError as exc:
            if not lenient:
                raise
            unreadable.append(Unreadable(key, exc.problem))
            continue
        (companions if COMPANION_SEP in key else layers).append(src)
    layers = _attach_companions(path, layers, companions, unreadable if lenient else None)
    if not layers and not unreadable:
        raise InputFileError(path, "the torch.save file holds no tensors")
    return Opened(layers, unreadable, total)
