"""sources/memory.py: an in-memory array as an ArraySource: its facts (name, dtype in native
order, shape, size, members), its companions, and chunks that are the C-order flattening in
native byte order, exactly covering the array, also for non-contiguous and big-endian arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.sources.memory import MemoryArraySource


def _joined(src: MemoryArraySource, per: int) -> tuple[list[int], np.ndarray]:
    starts, parts = [], []
    for start, chunk in src.iter_elements(per):
        starts.append(start)
        assert chunk.dtype.isnative and chunk.ndim == 1 and chunk.size <= max(1, per)
        parts.append(chunk)
    return starts, np.concatenate(parts) if parts else np.empty(0)


def test_facts_and_companions() -> None:
    pos = MemoryArraySource(Path("<memory>"), "l::position", np.arange(6, dtype=np.int64))
    src = MemoryArraySource(
        Path("<memory>"), "l", np.zeros((2, 3), np.float32), (("position", pos),)
    )
    assert (src.name, src.shape, src.size, src.order, src.stored_as) == ("l", (2, 3), 6, "C", None)
    assert src.dtype == np.float32 and src.dtype_name == "float32" and src.members == 2
    assert src.companion("position") is pos and src.companion("batch") is None
    assert "values" not in repr(src)


@pytest.mark.parametrize("per", [1, 4, 5, 12, 100, 0])
def test_chunks_cover_c_order(per: int) -> None:
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    starts, flat = _joined(MemoryArraySource(Path("m"), "k", a), per)
    step = max(1, per)
    assert starts == list(range(0, 12, step))
    np.testing.assert_array_equal(flat, a.reshape(-1))


def test_non_contiguous_and_big_endian() -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base.T[::2]  # (3, 4), not C-contiguous
    assert not view.flags.c_contiguous
    _, flat = _joined(MemoryArraySource(Path("m"), "k", view), 5)
    np.testing.assert_array_equal(flat, np.ascontiguousarray(view).reshape(-1))
    big = np.arange(5, dtype=">f8")
    src = MemoryArraySource(Path("m"), "k", big)
    assert src.dtype_name == "float64"
    _, flat = _joined(src, 2)
    assert flat.dtype == np.dtype("<f8") or flat.dtype.isnative
    np.testing.assert_array_equal(flat, [0, 1, 2, 3, 4])


def test_iter_mapped_and_empty() -> None:
    a = np.arange(7, dtype=np.float32)
    src = MemoryArraySource(Path("m"), "k", a)
    got = list(src.iter_mapped(3, lambda start, v: (start, float(v.sum())), threads=4))
    assert got == [(0, (0, 3.0)), (3, (3, 12.0)), (6, (6, 6.0))]
    assert list(MemoryArraySource(Path("m"), "k", np.empty((0, 4))).iter_elements(8)) == []


def test_chunks_are_views_not_copies() -> None:
    a = np.arange(10, dtype=np.float64)
    (_, chunk), *_ = MemoryArraySource(Path("m"), "k", a).iter_elements(4)
    assert np.shares_memory(chunk, a)
