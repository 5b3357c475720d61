"""Atomic file output: a report is either the old file or the complete new one, never half."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from rmsnorm_eps.errors import InputFileError

__all__ = ["atomic_write_bytes", "atomic_write_text", "in_place_target"]


def _write_special(target: Path, data: bytes) -> None:
    """Write to an existing non-regular file (``/dev/stdout``, a FIFO) in place: renaming over
    it would replace the device or pipe with a plain file."""
    try:
        with open(target, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        raise InputFileError(target, f"cannot write: {exc.strerror or exc}") from None


#: Where the paths of open file descriptors live (``/dev/stdout`` links to ``/proc/self/fd/1``).
_FD_DIRS = ("/proc/self/fd/", "/dev/fd/", f"/proc/{os.getpid()}/fd/")
_STREAMS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def in_place_target(target: Path) -> int | bool:
    """How ``target`` must be written when it is not a plain path to a regular file: the file
    descriptor it names (``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``, or a symlink
    to one of them: written through a duplicate of that descriptor, so ``-o /dev/stdout`` with
    stdout redirected to a file, even in append mode, lands in that file), True for any other
    path under ``/dev`` or ``/proc`` or an existing non-regular file (written in place: a
    rename would replace the symlink, device or pipe with a plain file), False for a regular
    file or a new path (written atomically). Each link of the path is followed in turn."""
    path = os.path.abspath(target)
    for _ in range(40):  # the kernel's own limit on nested links
        if path in _STREAMS:
            return _STREAMS[path]
        for prefix in _FD_DIRS:
            rest = path[len(prefix) :] if path.startswith(prefix) else ""
            if rest.isdecimal() and rest.isascii():
                return int(rest)
        if path.startswith(("/dev/", "/proc/")):
            return True
        try:
            link = os.readlink(path)
        except OSError:
            break
        path = os.path.normpath(os.path.join(os.path.dirname(path), link))
    try:
        st = os.stat(target)
    except OSError:
        return False
    return not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)


def _write_fd(target: Path, fd: int, data: bytes) -> None:
    """Write to a duplicate of file descriptor ``fd`` (its offset and append mode shared;
    nothing truncated): the bytes follow what the process already wrote there."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        dup = os.dup(fd)
    except OSError as exc:
        raise InputFileError(target, f"cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(dup, "wb", closefd=True) as fh:
            fh.write(data)
    except OSError as exc:
        raise InputFileError(target, f"cannot write: {exc.strerror or exc}") from None


def _final_mode(target: Path) -> int:
    """Mode for the new file: the old file's, or what ``open()`` would give (0o666 & ~umask)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, rename it over ``path``.

    A reader (or a crash) sees either the previous file or the complete new one. Targets that
    exist but are not regular files (devices, FIFOs) are written in place instead; a directory
    is an error.
    """
    target = Path(path)
    try:
        st = os.stat(target)
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputFileError(target, "is a directory")
    how = in_place_target(target)
    if how is not False and not isinstance(how, bool):
        _write_fd(target, how, data)
        return
    if how is True:
        _write_special(target, data)
        return
    mode = _final_mode(target)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise InputFileError(target, f"cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise InputFileError(target, f"cannot write: {exc.strerror or exc}") from None
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))
