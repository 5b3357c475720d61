"""Which kernel sums the squares of 16-bit raw rows on the fast path: numpy (always installed)
or the compiled kernels of the ``[fast]`` extra (:mod:`rmsnorm_eps.kernels_numba`, numba).

Both give the same reports: either sum is within :func:`rmsnorm_eps.kernels.fast_error_bound`
of the exact one, and every q that decides anything or is shown is recomputed exactly
(:class:`rmsnorm_eps.kernels.Refiner`). They differ in speed: the compiled kernels read
float16 and bfloat16 at about float32's bytes/s, numpy's at a fraction of it, but importing
numba and loading its cached kernels costs about 0.5 s per process. So ``auto`` uses them
only for a dump of at least :data:`AUTO_MIN_BYTES`, and numba is imported only when a 16-bit
chunk reaches the fast path: never for ``--help``, ``bound``, q dumps, float32 or float64 data.

The choice is one setting of the process (:func:`using`), read by
:func:`rmsnorm_eps.kernels.mean_square_rows_fast`; the default is numpy.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rmsnorm_eps.errors import MissingExtraError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "AUTO_MIN_BYTES",
    "KERNELS",
    "Kernel",
    "choose",
    "dump_bytes",
    "installed",
    "sixteen_bit_sums",
    "using",
]

#: ``--kernel`` values: ``auto`` (numba for a dump of at least AUTO_MIN_BYTES when installed),
#: ``numpy``, ``numba`` (required: an error without the extra).
Kernel = Literal["auto", "numpy", "numba"]
KERNELS: tuple[Kernel, ...] = ("auto", "numpy", "numba")

#: Dumps from this size (bytes on disk) use the compiled kernels under ``auto``: where the
#: time saved on 16-bit data exceeds numba's start-up (docs/performance.md gives the figures).
AUTO_MIN_BYTES = 1 << 30

SumsKernel = Callable[["np.ndarray", bool], "np.ndarray"]

_lock = threading.Lock()
_active: Literal["numpy", "numba"] = "numpy"
_loaded: SumsKernel | None = None
_failed = False


def installed() -> bool:
    """Whether numba can be imported (looked up, not imported)."""
    if "numba" in sys.modules:
        return sys.modules["numba"] is not None
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):
        return False


def dump_bytes(path: Path) -> int:
    """The size of a dump on disk: the file's, or the sum of a directory's files (0 when it
    cannot be read: the reader reports that)."""
    try:
        if path.is_dir():
            return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
        return path.stat().st_size
    except OSError:
        return 0


def choose(kernel: Kernel, size: int) -> Literal["numpy", "numba"]:
    """The kernel for a dump of ``size`` bytes: ``numba`` when asked for (MissingExtraError
    without the extra), or under ``auto`` for a dump of at least AUTO_MIN_BYTES with numba
    installed; else ``numpy``."""
    if kernel == "numba":
        if not installed():
            raise MissingExtraError("numba", "fast", "--kernel numba")
        return "numba"
    if kernel == "auto" and size >= AUTO_MIN_BYTES and installed():
        return "numba"
    return "numpy"


@contextmanager
def using(kind: Literal["numpy", "numba"]) -> Iterator[None]:
    """Run the block with ``kind`` summing 16-bit rows (restored afterwards)."""
    global _active
    before = _active
    _active = kind
    try:
        yield
    finally:
        _active = before


def sixteen_bit_sums() -> SumsKernel | None:
    """The compiled kernel (``kernels_numba.float32_sums``) when numba is the active choice,
    imported on first use; None otherwise, or when numba cannot be loaded (the numpy kernels
    then serve: same results)."""
    global _loaded, _failed
    if _active != "numba" or _failed:
        return None
    if _loaded is None:
        with _lock:
            if _loaded is None and not _failed:
                _loaded = _load()
                _failed = _loaded is None
    return _loaded


def _load() -> SumsKernel | None:
    try:
        from rmsnorm_eps.kernels_numba import float32_sums
    except Exception:  # a broken numba install: the numpy kernels give the same reports
        return None
    return float32_sums
