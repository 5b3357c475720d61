"""Which kernel sums the squares of 16-bit raw rows on the fast path: numpy (always installed)
or the compiled kernels of the ``[fast]`` extra (:mod:`rmsnorm_eps.kernels_numba`, numba,
loaded by :mod:`rmsnorm_eps.kernels_compiled`).

Both give the same reports: either sum is within :func:`rmsnorm_eps.kernels.fast_error_bound`
of the exact one, and every q that decides anything or is shown is recomputed exactly
(:class:`rmsnorm_eps.kernels.Refiner`). They differ in speed: the compiled kernels read
float16 and bfloat16 at about float32's bytes/s, numpy's at a fraction of it, but loading them
costs start-up (about 0.1 s from their cache; the first run, which imports numba and compiles
them, about 1.5 s). So ``auto`` uses them only for a dump of at least :data:`AUTO_MIN_BYTES`
(per dtype), and they are loaded only when a 16-bit chunk reaches the fast path: never for
``--help``, ``bound``, q dumps, float32 or float64 data.

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
    "check",
    "dump_bytes",
    "installed",
    "sixteen_bit_sums",
    "using",
    "wants_numba",
]

#: ``--kernel`` values: ``auto`` (numba for a dump of at least AUTO_MIN_BYTES of its dtype
#: when installed), ``numpy``, ``numba`` (required: an error without the extra).
Kernel = Literal["auto", "numpy", "numba"]
KERNELS: tuple[Kernel, ...] = ("auto", "numpy", "numba")

#: Dumps from this size (bytes on disk) use the compiled kernels under ``auto``, per 16-bit
#: dtype: where the time they save exceeds their start-up. Measured on the 2-CPU development
#: machine (docs/performance.md): the numpy kernels take about 0.26 s (float16) and 0.15 s
#: (bfloat16) more per GiB than the compiled ones, which cost about 0.08 s to load from their
#: cache on the idle machine and 0.25 s under a load average of 6.
AUTO_MIN_BYTES = {"float16": 512 << 20, "bfloat16": 1 << 30}

SumsKernel = Callable[["np.ndarray", bool], "np.ndarray"]

_lock = threading.Lock()
_active: Kernel = "numpy"  # the process's setting (:func:`using`); numpy unless set
_size = 0  # the size of the dump being read, for ``auto``
_loaded: SumsKernel | None = None
_failed = False
_decided: dict[bool, bool] = {}  # wants_numba of the current setting, per dtype (bf16)


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


def check(kernel: Kernel) -> None:
    """Refuse ``numba`` without the extra (:class:`MissingExtraError`, naming it)."""
    if kernel == "numba" and not installed():
        raise MissingExtraError("numba", "fast", "--kernel numba")


def wants_numba(kernel: Kernel, size: int, bf16: bool) -> bool:
    """Whether ``kernel`` on a dump of ``size`` bytes sums 16-bit rows (bfloat16 with
    ``bf16``, else float16) with the compiled kernels: ``numba``, or ``auto`` from
    :data:`AUTO_MIN_BYTES` of that dtype with numba installed."""
    if kernel == "numba":
        return True
    return (
        kernel == "auto"
        and size >= AUTO_MIN_BYTES["bfloat16" if bf16 else "float16"]
        and installed()
    )


@contextmanager
def using(kernel: Kernel, size: int = 0) -> Iterator[None]:
    """Run the block with ``kernel`` choosing what sums 16-bit rows of a dump of ``size``
    bytes (the previous setting is restored afterwards)."""
    global _active, _size
    before = _active, _size
    _active, _size = kernel, size
    _decided.clear()
    try:
        yield
    finally:
        _active, _size = before
        _decided.clear()


def sixteen_bit_sums(bf16: bool) -> SumsKernel | None:
    """The compiled kernel (``kernels_compiled.float32_sums``) when the setting wants it for
    this dtype (:func:`wants_numba`), imported on first use; None otherwise, or when numba
    cannot be loaded (the numpy kernels then serve: same results)."""
    global _loaded, _failed
    if _failed:
        return None
    wanted = _decided.get(bf16)
    if wanted is None:  # once per dtype and setting: the look-up for numba is not per chunk
        wanted = _decided[bf16] = wants_numba(_active, _size, bf16)
    if not wanted:
        return None
    if _loaded is None:
        with _lock:
            if _loaded is None and not _failed:
                _loaded = _load()
                _failed = _loaded is None
    return _loaded


def _load() -> SumsKernel | None:
    try:
        from rmsnorm_eps.kernels_compiled import float32_sums
    except Exception:  # a broken numba install: the numpy kernels give the same reports
        return None
    return float32_sums
