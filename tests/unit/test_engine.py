"""Unit tests of rmsnorm_eps.engine: chunk iteration, folding, the position split, the
sequential reader, index unravelling and the shared report aggregates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.dumps import npy_bytes
from rmsnorm_eps.engine import (
    PositionSplit,
    ReportTotals,
    SequentialReader,
    fold_chunks,
    iter_q_chunks,
    unravel,
)
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources.interface import open_sources
from rmsnorm_eps.summary import LayerAccumulator


def _source(tmp_path: Path, array: np.ndarray, name: str = "x.npy"):  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_bytes(npy_bytes(array))
    (src,) = open_sources(path).sources
    return src


def test_unravel_both_orders() -> None:
    assert unravel(5, (2, 3), "C") == (1, 2)
    assert unravel(5, (2, 3), "F") == (1, 2)
    assert unravel(1, (2, 3), "C") == (0, 1)
    assert unravel(1, (2, 3), "F") == (1, 0)
    assert unravel(0, (), "C") == ()


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_raw_q_matches_float64_reference(tmp_path: Path, order: str, dtype: type) -> None:
    x = np.random.default_rng(1).standard_normal((7, 5, 16)).astype(dtype)
    x = np.asfortranarray(x) if order == "F" else x
    src = _source(tmp_path, x)
    q_shape, index_order, d, chunks = iter_q_chunks(src, raw=True, chunk_bytes=256)
    assert q_shape == (7, 5) and d == 16
    flat = np.empty(35)
    for start, q in chunks:
        flat[start : start + q.size] = q
    want = (x.astype(np.float64) ** 2).mean(-1)
    got = flat.reshape(q_shape, order=index_order)  # type: ignore[call-overload]
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_stored_q_chunks_cover_every_value_in_order(tmp_path: Path) -> None:
    q = np.arange(1000, dtype=np.float32)
    src = _source(tmp_path, q)
    _, _, d, chunks = iter_q_chunks(src, raw=False, chunk_bytes=400, threads=2)
    assert d is None
    starts, values = zip(*((s, v.copy()) for s, v in chunks), strict=True)
    assert list(starts) == list(range(0, 1000, 100))
    np.testing.assert_array_equal(np.concatenate(values), q)


def test_empty_array_is_refused(tmp_path: Path) -> None:
    src = _source(tmp_path, np.zeros((0, 4), np.float32))
    with pytest.raises(InputFileError, match="empty array"):
        iter_q_chunks(src, raw=False)


def test_sequential_reader_slices_in_order(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, **{"a": np.ones(10), "a::position": np.arange(10, dtype=np.int32)})
    (layer,) = open_sources(path).sources
    src = layer.companion("position")
    assert src is not None
    reader = SequentialReader(src, chunk_bytes=12)  # 3 values per chunk: slices straddle them
    assert reader.read(0, 4).tolist() == [0, 1, 2, 3]
    assert reader.read(4, 5).tolist() == [4, 5, 6, 7, 8]
    with pytest.raises(RuntimeError, match="position reader at 9, asked for 3"):
        reader.read(3, 1)
    out = reader.read(9, 1)
    assert out.tolist() == [9] and out.dtype == np.int64


def test_position_split_remaps_subset_indices() -> None:
    q = np.array([5.0, 1.0, 7.0, 0.5, 9.0, 2.0])
    is_first = np.array([True, False, False, True, False, False])

    def kept(acc: LayerAccumulator) -> set[int]:
        return {int(i) for i in acc.worst_index}

    def remap(acc: LayerAccumulator, where):  # type: ignore[no-untyped-def]
        acc.worst_index = np.array([where[int(i)] for i in acc.worst_index], np.int64)
        return acc

    split = PositionSplit(lambda: LayerAccumulator(1.0, 3.0, 2), kept, remap)
    split.update(q[:3], 0, is_first[:3])
    split.update(q[3:], 3, is_first[3:])
    first, other = split.results()
    assert first.count == 2 and other.count == 4
    assert first.worst_index.tolist() == [3, 0]  # q 0.5 at 3, q 5.0 at 0
    assert other.worst_index.tolist() == [1, 5]  # q 1.0 at 1, q 2.0 at 5


def test_fold_chunks_names_the_index_of_a_negative_q(tmp_path: Path) -> None:
    src = _source(tmp_path, np.array([[1.0, 2.0], [3.0, -4.0]]))
    q_shape, order, _, chunks = iter_q_chunks(src, raw=False, chunk_bytes=8)
    acc = LayerAccumulator(1.0, 1.0, 1)
    with pytest.raises(InputFileError, match=r"negative q -4\.0 at index \[1, 1\]"):
        fold_chunks(src, chunks, acc, None, None, q_shape, order)


class _Layer:
    def __init__(self, name: str, count: int, violations: int, nonfinite: int) -> None:
        self.name, self.count, self.violations, self.nonfinite = name, count, violations, nonfinite


class _Report(ReportTotals):
    def __init__(self, layers: tuple[_Layer, ...]) -> None:
        self.layers = layers


def test_report_totals() -> None:
    r = _Report((_Layer("a", 10, 0, 0), _Layer("b", 30, 3, 1)))
    assert (r.count, r.violations, r.nonfinite) == (40, 3, 1)
    assert r.violation_fraction == 3 / 40
    assert r.layers_affected == ("b",)
    assert _Report(()).violation_fraction == 0.0
