"""Atomic file output: a report is either the old file or the complete new one, never half."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from rmsnorm_eps.errors import InputFileError

__all__ = ["atomic_write_bytes", "atomic_write_text"]


def _write_special(target: Path, data: bytes) -> None:
    """Write to an existing non-regular file (``/dev/stdout``, a FIFO) in place: renaming over
    it would replace the device or pipe with a plain file."""
    try:
        with open(target, "wb") as fh:
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
    if st is not None and not stat.S_ISREG(st.st_mode):
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
