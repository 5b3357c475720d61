"""An in-memory array as an :class:`~rmsnorm_eps.sources.interface.ArraySource`: what
:func:`rmsnorm_eps.check` analyses, with no file in between.

The array is held as given (a read-only view, never copied whole); chunks are slices of its
flattened C-order view, in native byte order, as the file readers hand them out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rmsnorm_eps.sources.interface import SerialSource

__all__ = ["MemoryArraySource"]


@dataclass(frozen=True, eq=False)
class MemoryArraySource(SerialSource):
    """One layer held in memory: ``values`` (float16/32/64, any shape) named ``key``.

    ``path`` is the label reports show in place of a file name (``<memory>``);
    ``companions`` are named companion arrays of the same layer (``("position", array)``).
    """

    path: Path
    key: str
    values: np.ndarray = field(repr=False)
    companions: tuple[tuple[str, MemoryArraySource], ...] = ()

    @property
    def name(self) -> str:
        """The layer name (the key)."""
        return self.key

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.values.dtype

    @property
    def dtype_name(self) -> str:
        return str(self.values.dtype.newbyteorder("="))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(k) for k in self.values.shape)

    @property
    def size(self) -> int:
        return int(self.values.size)

    @property
    def members(self) -> int:
        """The layer and its companions."""
        return 1 + len(self.companions)

    def companion(self, name: str) -> MemoryArraySource | None:
        """The companion array ``name`` of this layer, if any."""
        return dict(self.companions).get(name)

    def iter_elements(self, elems_per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, values)``: consecutive runs of at most ``elems_per_chunk`` elements of the
        C-order flattening, native byte order (a non-contiguous array is copied one chunk of
        rows at a time, never whole)."""
        flat = self.values.reshape(-1) if self.values.flags.c_contiguous else None
        per = max(1, elems_per_chunk)
        total = self.size
        native = self.values.dtype.newbyteorder("=")
        for start in range(0, total, per):
            stop = min(total, start + per)
            if flat is not None:
                chunk = flat[start:stop]
            else:
                idx = np.unravel_index(np.arange(start, stop, dtype=np.int64), self.values.shape)
                chunk = self.values[idx]
            yield start, np.asarray(chunk, dtype=native)
