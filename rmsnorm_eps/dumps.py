"""Readers for dumps of q values or raw activations (compatibility entry points).

The readers live in :mod:`rmsnorm_eps.sources` (format-neutral: :func:`open_sources`,
:class:`~rmsnorm_eps.sources.interface.ArraySource`, one module per format). This module keeps
the names other modules and users import: :func:`open_dump`, :func:`open_dump_lenient`,
:func:`open_layers`, :func:`map_layers`, :func:`npy_bytes`, ...
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources.interface import Opened, Unreadable, open_sources
from rmsnorm_eps.sources.npy import NpyHeader, read_npy_header
from rmsnorm_eps.sources.npz import COMPANION_SEP
from rmsnorm_eps.sources.raw import (
    DEFAULT_CHUNK_BYTES,
    STORED_AS,
    RawArraySource,
    check_float_dtype,
    default_threads,
)
from rmsnorm_eps.sources.sniff import NPY_MAGIC, ZIP_MAGIC, check_regular_file

__all__ = [
    "COMPANION_SEP",
    "DEFAULT_CHUNK_BYTES",
    "NPY_MAGIC",
    "STORED_AS",
    "ZIP_MAGIC",
    "ArraySource",
    "NpyHeader",
    "Unreadable",
    "check_float_dtype",
    "check_regular_file",
    "default_threads",
    "map_layers",
    "npy_bytes",
    "open_dump",
    "open_dump_lenient",
    "open_layers",
    "read_npy_header",
]

T = TypeVar("T")

#: The concrete source type of ``.npy`` files and ``.npz`` members (compatibility name; the
#: format-neutral protocol is :class:`rmsnorm_eps.sources.ArraySource`).
ArraySource = RawArraySource


def open_dump(path: str | os.PathLike[str], dtype: str | None = None) -> list[Any]:
    """Open a dump and return one source per array (the first unreadable member raises).

    The format is decided by the file's magic bytes, not its extension. Headers, dtypes and
    declared sizes are all checked here, before any analysis starts. ``dtype="bfloat16"``
    (see :data:`STORED_AS`) reads uint16/V2 arrays as bfloat16 bit patterns; float arrays in the
    same dump are read as what they are.
    """
    return open_sources(path, dtype).sources


def open_dump_lenient(
    path: str | os.PathLike[str], dtype: str | None = None
) -> tuple[list[Any], list[Unreadable]]:
    """:func:`open_dump`, but a member that cannot be opened is returned in the second list
    (name and problem) instead of failing the whole dump (``--skip-unreadable``). A file that
    is not a readable dump at all still raises."""
    check_regular_file(Path(path))
    opened = open_sources(path, dtype, lenient=True)
    return opened.sources, opened.unreadable


def open_layers(
    path: str | os.PathLike[str], dtype: str | None = None, skip_unreadable: bool = False
) -> tuple[list[Any], list[Unreadable]]:
    """:func:`open_dump`, or :func:`open_dump_lenient` with ``skip_unreadable``."""
    opened = open_sources(path, dtype, lenient=skip_unreadable)
    return opened.sources, opened.unreadable


def map_layers(
    sources: list[Any],
    fn: Callable[[Any], T],
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


__all__ += ["Opened"]
