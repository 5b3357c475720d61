"""An open zip archive shared by its member sources: :class:`ZipArchive` and :class:`ZipEntry`.

The archive file is opened once; stored members are read in place with positioned reads on it
(:meth:`ZipArchive.stream_at`), compressed ones through :mod:`zipfile` from a compact
:class:`ZipEntry` (``zipfile``'s own list of entries is dropped once the directory is read).
"""

from __future__ import annotations

import os
import threading
import zipfile
from pathlib import Path
from typing import IO, cast

__all__ = ["ZipArchive", "ZipEntry"]


class ZipEntry:
    """What reading one zip member through ``zipfile`` needs of its directory entry, compactly
    (a :class:`zipfile.ZipInfo` holds some twenty fields; this, eight, and not the name, which
    its source holds): :meth:`zipinfo` makes the entry ``zipfile`` opens when the member is
    read, with the same checks (name, CRC-32, and where this Python has it, ``zipfile``'s own
    overlap check: ``end_offset``)."""

    __slots__ = (
        "compress_size",
        "compress_type",
        "crc",
        "end_offset",
        "file_size",
        "flag_bits",
        "header_offset",
        "orig_filename",
    )

    def __init__(self, info: zipfile.ZipInfo) -> None:
        # the name as stored (it differs from ``filename`` only when it holds a NUL)
        self.orig_filename = None if info.orig_filename == info.filename else info.orig_filename
        self.header_offset = info.header_offset
        self.flag_bits = info.flag_bits
        self.compress_type = info.compress_type
        self.compress_size = info.compress_size
        self.file_size = info.file_size
        self.crc = info.CRC
        self.end_offset: int | None = getattr(info, "_end_offset", None)

    def zipinfo(self, filename: str) -> zipfile.ZipInfo:
        """A :class:`zipfile.ZipInfo` with the fields ``ZipFile.open`` reads; ``filename`` is
        the entry's (its ``ZipInfo.filename``)."""
        info = zipfile.ZipInfo(filename)
        info.filename = filename
        info.orig_filename = self.orig_filename or filename
        info.header_offset = self.header_offset
        info.flag_bits = self.flag_bits
        info.compress_type = self.compress_type
        info.compress_size = self.compress_size
        info.file_size = self.file_size
        info.CRC = self.crc
        if self.end_offset is not None:  # where zipfile set it (its "Overlapped entries" check)
            info._end_offset = self.end_offset  # type: ignore[attr-defined]
        return info


class ZipArchive:
    """One open zip archive shared by all its member sources.

    The central directory is read once, when the archive is opened; every member is then
    opened from its :class:`zipfile.ZipInfo` (never by name: names may repeat). The archive
    stays open while any of its sources is alive (``zipfile`` closes the file when collected).
    ``zipfile``'s own copy of the directory (``filelist``, ``NameToInfo``) is dropped once read
    (:meth:`forget_directory`): the sources keep what they need in compact fields (a
    :class:`ZipEntry` for members that must go through ``zipfile``: compressed ones).
    Members stored uncompressed are read in place through the archive's one open file
    (:meth:`stream_at`, positioned reads), never by opening the file again.
    """

    def __init__(self, path: Path, zf: zipfile.ZipFile) -> None:
        self.path = path
        self._zf = zf
        self._lock = threading.Lock()

    def forget_directory(self) -> None:
        """Drop ``zipfile``'s list and name index of the entries (members are opened by their
        own :class:`~zipfile.ZipInfo`, so neither is needed once the directory is read)."""
        self._zf.filelist = []
        self._zf.NameToInfo = {}

    def open(self, info: zipfile.ZipInfo | ZipEntry, filename: str = "") -> IO[bytes]:
        """A read stream of one member (CRC checked at its end by ``zipfile``); ``filename``
        names a :class:`ZipEntry`'s member."""
        if isinstance(info, ZipEntry):
            info = info.zipinfo(filename)
        with self._lock:
            if self._zf.fp is None:  # closed explicitly: open again (directory read again)
                self._zf = zipfile.ZipFile(self.path)
                self.forget_directory()
            return self._zf.open(info)

    def stream_at(self, offset: int) -> IO[bytes]:
        """A read stream of the archive's bytes from ``offset`` on: positioned reads on the
        archive's open file (no new file opened; safe from several threads); a new file when
        the archive was closed explicitly."""
        fp = self._zf.fp
        if fp is None:
            fh: IO[bytes] = open(self.path, "rb")  # noqa: SIM115 (closed by the caller)
            fh.seek(offset)
            return fh
        return cast("IO[bytes]", _PositionedStream(fp.fileno(), offset))

    def close(self) -> None:
        self._zf.close()


class _PositionedStream:
    """The bytes of an open file from ``offset`` on, read with ``os.pread`` (the file position
    is never moved, so streams on one file descriptor do not disturb each other). ``close``
    leaves the file descriptor open: it belongs to the :class:`ZipArchive`."""

    __slots__ = ("_fd", "_pos")

    def __init__(self, fd: int, offset: int) -> None:
        self._fd = fd
        self._pos = offset

    def fileno(self) -> int:
        return self._fd

    def read(self, n: int) -> bytes:
        data = os.pread(self._fd, n, self._pos)
        self._pos += len(data)
        return data

    def readinto(self, view: memoryview) -> int:
        n = os.preadv(self._fd, [view], self._pos)
        self._pos += n
        return n

    def close(self) -> None:
        pass
