"""``.npz`` archives: one source per ``.npy`` member, every member accounted for.

The zip central directory is read once per archive
(:class:`~rmsnorm_eps.sources.ziparchive.ZipArchive` is shared by the member sources), so opening
and reading N members takes time linear in N. The archive file is opened once: local headers,
``.npy`` headers and the data of stored members are read with positioned reads on it. What a
source keeps is compact: ``zipfile``'s own entries are dropped once read (a compressed member
keeps a :class:`~rmsnorm_eps.sources.ziparchive.ZipEntry`), and members with the same ``.npy``
header share its parsed dtype and shape (parsed once).

Every entry of the directory is either opened as an array or reported (raised, or with
``lenient`` listed as :class:`~rmsnorm_eps.sources.interface.Unreadable`): names not ending in
``.npy`` (an empty name, a directory ``x/``), a repeated name, an entry whose bytes overlap
another's or run into the central directory, a damaged header, a non-float dtype, a size that
disagrees with the header. ``Opened.members_total`` is the number of entries.

A member ``<layer>::<what>`` (e.g. ``model.norm::position``) is not a layer: it holds one
integer per q value of ``<layer>`` (same shape), such as the token position ``capture`` writes;
it is attached to its layer (:meth:`RawArraySource.companion`).
"""

from __future__ import annotations

import io
import os
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources.interface import Opened, Unreadable
from rmsnorm_eps.sources.npy import NpyHeader, check_declared_size, read_npy_header, stored
from rmsnorm_eps.sources.raw import ZIP_ERRORS, RawArraySource, check_float_dtype, describe_dtype
from rmsnorm_eps.sources.sniff import ZIP_LOCAL_MAGIC
from rmsnorm_eps.sources.ziparchive import ZipArchive, ZipEntry

__all__ = ["COMPANION_SEP", "open_npz", "with_companions"]

#: Separator between a layer's key and its companion's name in .npz member names.
COMPANION_SEP = "::"

_LOCAL_HEADER = 30  # fixed part of a zip local file header
#: Bytes read for a member's .npy header: its 64 KiB limit plus the 12-byte prefix.
_NPY_HEADER_READ = (1 << 16) + 12
#: Bytes read first for a member's .npy header (numpy writes 128 or so); more if it is longer.
_NPY_HEAD_GUESS = 512
#: Bytes read first after a local header's fixed part: its name (and the rest, if longer).
_LOCAL_NAME_GUESS = 256


def _local_name(local: bytes, info: zipfile.ZipInfo) -> str:
    """The name a local header holds, decoded as ``zipfile`` decodes it."""
    raw = local[_LOCAL_HEADER:]
    flags = int.from_bytes(local[6:8], "little")
    return raw.decode("utf-8" if flags & 0x800 else "cp437", errors="replace")


def _local_extents(
    fp: IO[bytes] | None, infos: list[zipfile.ZipInfo], end_of_data: int
) -> tuple[list[int | None], dict[int, str]]:
    """For each entry: the absolute offset of its data (None when its local header cannot be
    read), and the problems of entries whose local header names another file, or whose bytes
    overlap an earlier entry's or run past ``end_of_data`` (the central directory)."""
    starts: list[int | None] = []
    spans: list[tuple[int, int, int]] = []  # (first byte, end, entry index)
    problems: dict[int, str] = {}
    fd = -1
    if fp is not None:
        try:
            fd = fp.fileno()
        except (OSError, ValueError):
            fd = -1
    for i, info in enumerate(infos):
        local = b""
        if fd >= 0:  # positioned reads: no buffered re-read of the file at every seek
            try:
                local = os.pread(fd, _LOCAL_HEADER + _LOCAL_NAME_GUESS, info.header_offset)
                if len(local) >= _LOCAL_HEADER:
                    end = _LOCAL_HEADER + int.from_bytes(local[26:28], "little")
                    if end > len(local):
                        local += os.pread(fd, end - len(local), info.header_offset + len(local))
                    local = local[:end]
            except (OSError, ValueError, OverflowError):
                local = b""
        if len(local) < _LOCAL_HEADER or local[:4] != ZIP_LOCAL_MAGIC:
            starts.append(None)
            continue
        name_len = int.from_bytes(local[26:28], "little")
        extra_len = int.from_bytes(local[28:30], "little")
        data = info.header_offset + _LOCAL_HEADER + name_len + extra_len
        starts.append(data)
        spans.append((info.header_offset, data + info.compress_size, i))
        local_name = _local_name(local, info)
        if local_name != info.orig_filename:
            problems[i] = (
                f"its local header names {local_name!r}, the directory {info.orig_filename!r}"
            )
    reach, owner = -1, -1
    for first, end, i in sorted(spans):
        if first < reach:
            problems.setdefault(i, f"its bytes overlap member {infos[owner].filename!r}")
        elif end > end_of_data:
            problems.setdefault(i, "its bytes run into the zip central directory")
        if end > reach:
            reach, owner = end, i
    return starts, problems


def _read_header(
    archive: ZipArchive, info: zipfile.ZipInfo, in_place: int | None, key: str
) -> NpyHeader:
    """The member's ``.npy`` header: read in place for a stored member (on the archive's open
    file, at most the member's bytes), else via zipfile."""
    path = archive.path
    try:
        if in_place is not None:
            stream = archive.stream_at(in_place)
            try:
                limit = min(info.file_size, _NPY_HEADER_READ)
                head = stream.read(min(limit, _NPY_HEAD_GUESS))
                if len(head) == _NPY_HEAD_GUESS < limit:  # a long header: read the rest
                    head += stream.read(limit - len(head))
            finally:
                stream.close()
            return read_npy_header(io.BytesIO(head), path, key)
        with archive.open(info) as member:
            return read_npy_header(member, path, key)
    except ZIP_ERRORS as exc:
        raise InputFileError(path, f"cannot read member: {exc}", key=key) from None


def _check_companion_dtype(dtype: np.dtype[Any], path: Path, key: str) -> None:
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "iu":
        raise InputFileError(
            path,
            f"companion array has dtype {describe_dtype(dtype)}: expected an integer dtype",
            key=key,
        )


def _open_member(
    archive: ZipArchive,
    info: zipfile.ZipInfo,
    data_start: int | None,
    seen: set[str],
    stored_as: str | None,
) -> RawArraySource:
    path = archive.path
    name = info.filename
    if name.endswith("/"):
        raise InputFileError(path, f"member {name!r} is a directory entry, not a .npy array")
    if not name.endswith(".npy"):
        raise InputFileError(path, f"member {name!r} is not a .npy array")
    key = name[: -len(".npy")]
    if key in seen:
        raise InputFileError(path, f"duplicate member {name!r}")
    seen.add(key)
    in_place = (
        data_start
        if data_start is not None
        and info.compress_type == zipfile.ZIP_STORED
        and not info.flag_bits & 0x1
        else None
    )
    header = _read_header(archive, info, in_place, key)
    companion = COMPANION_SEP in key  # an integer side array of a layer, not a layer
    if companion:
        _check_companion_dtype(header.dtype, path, key)
    else:
        check_float_dtype(header.dtype, path, key, stored_as)
    check_declared_size(path, key, header, info.file_size)
    if info.file_size > header.header_len + header.nbytes:
        raise InputFileError(
            path,
            f"member is {info.file_size} bytes, its header declares "
            f"{header.header_len + header.nbytes}",
            key=key,
        )
    return RawArraySource(
        path,
        key,
        header.dtype,
        header.shape,
        header.order,
        data_offset=None if in_place is None else in_place + header.header_len,
        member_suffix=".npy",
        info=ZipEntry(info) if in_place is None else None,  # read through zipfile
        archive=archive,
        skip=header.header_len,
        stored_as=None if companion else stored(header, stored_as),
        member_crc=info.CRC,
    )


def with_companions(
    path: Path,
    made: list[tuple[str, RawArraySource]],
    unreadable: list[Unreadable],
    lenient: bool,
    total: int,
    empty: str,
) -> Opened:
    """The dump of the sources ``made`` (``(name, source)`` pairs): each member ``<layer>::<what>``
    attached to its layer as a companion. A companion without its layer, or not of its shape
    and order, raises (``lenient``: is listed in ``unreadable``); a dump without a layer or
    an unreadable member raises ``empty``."""
    layers = [src for name, src in made if COMPANION_SEP not in name]
    companions = [src for name, src in made if COMPANION_SEP in name]
    by_key = {src.key: src for src in layers}
    attached: dict[str, list[tuple[str, RawArraySource]]] = {}
    for comp in companions:
        assert comp.key is not None
        base, _, what = comp.key.rpartition(COMPANION_SEP)
        layer = by_key.get(base)
        problem = None
        if layer is None:
            problem = f"companion array without its layer {base!r}"
        elif comp.shape != layer.shape or comp.order != layer.order:
            problem = (
                f"companion array has shape {comp.shape}, its layer {base!r} has {layer.shape}"
            )
        if problem is not None:
            if not lenient:
                raise InputFileError(path, problem, key=comp.key)
            unreadable.append(Unreadable(comp.key, problem))
            continue
        attached.setdefault(base, []).append((what, comp))
    if attached:
        layers = [
            replace(src, companions=tuple(attached[str(src.key)])) if src.key in attached else src
            for src in layers
        ]
    if not layers and not unreadable:
        raise InputFileError(path, empty)
    return Opened(layers, unreadable, total)


def open_npz(path: Path, size: int, stored_as: str | None, lenient: bool) -> Opened:
    """Open every member of an ``.npz``; see the module docstring for what is refused."""
    del size  # the directory gives each member's size
    try:
        zf = zipfile.ZipFile(path)
    except ZIP_ERRORS as exc:
        raise InputFileError(path, f"not a readable .npz archive ({exc})") from None
    archive = ZipArchive(path, zf)
    entries: list[zipfile.ZipInfo | None] = list(zf.infolist())
    total = len(entries)
    archive.forget_directory()  # from here on ``entries`` holds the only copy
    starts, problems = _local_extents(zf.fp, cast("list[zipfile.ZipInfo]", entries), zf.start_dir)
    made: list[tuple[str, RawArraySource]] = []
    unreadable: list[Unreadable] = []
    seen: set[str] = set()
    for i in range(total):
        info = entries[i]
        assert info is not None
        entries[i] = None  # each entry is released once its source is made (or refused)
        try:
            if i in problems:
                raise InputFileError(path, f"member {info.filename!r}: {problems[i]}")
            src = _open_member(archive, info, starts[i], seen, stored_as)
        except InputFileError as exc:
            if not lenient:
                archive.close()
                raise
            unreadable.append(Unreadable(exc.key or info.filename, exc.problem))
            continue
        made.append((str(src.key), src))
    try:
        return with_companions(
            path, made, unreadable, lenient, total, "the .npz archive holds no arrays"
        )
    except InputFileError:
        archive.close()
        raise
