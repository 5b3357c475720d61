"""``--raw`` memory independent of row length and order (issue 21): rows longer than a chunk
read in pieces, Fortran-ordered files of many rows read a block of rows at a time; each
compared with numpy's float64 mean of squares (or variance) of the whole array."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps import engine
from rmsnorm_eps.engine import iter_q_chunks
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources import open_sources


def _q(path: Path, chunk_bytes: int, quantity: Any = "q", **kw: Any) -> np.ndarray:
    (src,) = open_sources(path, **kw).sources
    shape, order, _, chunks = iter_q_chunks(src, True, chunk_bytes, quantity=quantity)
    flat = np.full(int(np.prod(shape)), -1.0)
    for start, q in chunks:
        flat[start : start + q.size] = q
    return flat.reshape(shape, order=order)


def _npz(path: Path, x: np.ndarray) -> Path:
    buf = io.BytesIO()
    np.save(buf, x)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", buf.getvalue())
    return path


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_long_rows_in_pieces(tmp_path: Path, dtype: Any) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 1001)) * 3).astype(dtype)
    x[1, 7] = np.inf
    x[2, 500] = np.nan
    np.save(tmp_path / "x.npy", x)
    wide = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want_q = np.mean(wide * wide, axis=1)
        want_v = np.var(wide, axis=1)
    for path in (tmp_path / "x.npy", _npz(tmp_path / "x.npz", x)):
        got = _q(path, 200)  # 200 bytes: every row in many pieces, pieces across rows
        np.testing.assert_allclose(got, want_q, rtol=1e-12)
        got_v = _q(path, 200, "v")
        np.testing.assert_allclose(got_v[0], want_v[0], rtol=1e-9)
        assert np.isnan(got_v[1]) and np.isnan(got_v[2])


def test_long_float64_rows_do_not_overflow(tmp_path: Path) -> None:
    """x**2 overflows (4e308) where q = 1.3e308 does not; 1e-200 squares underflow."""
    x = np.array([[2e154, 0.0, -1e154] * 100, [1e-200, 5e-201, 0.0] * 100])
    np.save(tmp_path / "x.npy", x)
    m = np.max(np.abs(x), axis=1)
    want = np.mean((x / m[:, None]) ** 2, axis=1) * m * m
    assert np.isfinite(want).all() and want[0] > 1e308
    np.testing.assert_allclose(_q(tmp_path / "x.npy", 64), want, rtol=1e-12)


def test_bfloat16_long_rows(tmp_path: Path) -> None:
    bits = np.array([[0x3F80, 0x4000, 0xC040] * 50], np.uint16)  # 1, 2, -3
    np.save(tmp_path / "b.npy", bits)
    np.testing.assert_allclose(_q(tmp_path / "b.npy", 16, dtype="bfloat16"), [14 / 3], rtol=1e-12)


@pytest.mark.parametrize("quantity", ["q", "v"])
def test_fortran_order_in_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quantity: Any
) -> None:
    """More rows than a block: read a block of rows at a time, in place (.npy) or from
    passes over a deflated member (.npz)."""
    monkeypatch.setattr(engine, "F_BLOCK_ROWS", 7)
    rng = np.random.default_rng(2)
    x = np.asfortranarray(rng.standard_normal((4, 9, 5)).astype(np.float32) + 2)
    np.save(tmp_path / "f.npy", x)
    wide = x.astype(np.float64)
    want = np.mean(wide * wide, axis=-1) if quantity == "q" else np.var(wide, axis=-1)
    for path in (tmp_path / "f.npy", _npz(tmp_path / "f.npz", x)):
        np.testing.assert_allclose(_q(path, 24, quantity), want, rtol=1e-10)


def test_row_cap_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "RAW_ROW_MAX", 10)
    np.save(tmp_path / "x.npy", np.ones((2, 11), np.float32))
    with pytest.raises(InputFileError, match=r"--raw rows of 11 values: over the 10"):
        _q(tmp_path / "x.npy", 1 << 20)


def test_one_long_deflated_row_in_bounded_memory(tmp_path: Path) -> None:
    """One deflated row of 2**22 float32 (16 MiB): traced memory stays near a chunk, not the
    row and its float64 copy (48 MiB before). benchmarks/bench_raw_rows.py measures 2**27."""
    import tracemalloc

    path = _npz(tmp_path / "row.npz", np.full((1, 1 << 22), 0.5, np.float32))
    tracemalloc.start()
    try:
        q = _q(path, 1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert q.tolist() == [0.25]
    assert peak < 8 << 20, peak


# A compressed Fortran-ordered member of more rows than a block: decompressed once.


@pytest.fixture
def streams(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Blocks of 7 rows; every full pass over a stream-only (compressed) source is counted; the
    temporary copies go to their own directory."""
    import tempfile

    from rmsnorm_eps import engine
    from rmsnorm_eps.sources.raw import RawArraySource

    monkeypatch.setattr(engine, "F_BLOCK_ROWS", 7)
    spill = tmp_path / "tmp"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    passes: list[str] = []
    inner = RawArraySource.iter_elements

    def counted(self: RawArraySource, per: int) -> Any:
        if self.data_offset is None:
            passes.append(self.name)
        return inner(self, per)

    monkeypatch.setattr(RawArraySource, "iter_elements", counted)
    return passes


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", ">f4"])
@pytest.mark.parametrize("quantity", ["q", "v"])
def test_compressed_fortran_member_is_decompressed_once(
    tmp_path: Path, streams: list[str], dtype: str, quantity: Any
) -> None:
    rng = np.random.default_rng(3)
    x = np.asfortranarray((rng.standard_normal((4, 9, 5)) * 3 + 1).astype(dtype))
    if dtype == "float64" and quantity == "q":
        x[0, 0, :] = 1e154  # the sum of squares overflows float64, q does not: scaled sums
    wide = x.astype(np.float64)
    if quantity == "q":
        m = np.max(np.abs(wide), axis=-1, keepdims=True)
        want = np.mean((wide / m) ** 2, axis=-1) * m[..., 0] ** 2
    else:
        want = np.var(wide, axis=-1)
    got = _q(_npz(tmp_path / "f.npz", x), 96, quantity)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert streams == ["x"]  # one pass over the deflated stream for 36 rows (6 blocks)
    assert list((tmp_path / "tmp").iterdir()) == []  # the copy is removed


def test_compressed_fortran_bfloat16(tmp_path: Path, streams: list[str]) -> None:
    import ml_dtypes

    rng = np.random.default_rng(4)
    x = np.asfortranarray(rng.standard_normal((30, 6)).astype(ml_dtypes.bfloat16))
    bits = np.asfortranarray(x.view(np.uint16))
    got = _q(_npz(tmp_path / "b.npz", bits), 96, dtype="bfloat16")
    wide = x.astype(np.float64)
    np.testing.assert_allclose(got, np.mean(wide * wide, axis=-1), rtol=1e-12)
    assert streams == ["x"]


def test_compressed_fortran_without_temporary_space_is_one_line(
    tmp_path: Path, streams: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from rmsnorm_eps.errors import InputFileError

    x = np.asfortranarray(np.ones((30, 6), np.float32))
    path = _npz(tmp_path / "f.npz", x)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=1000))
    with pytest.raises(InputFileError, match=r"temporary copy of 720 bytes.*has 1000 free"):
        _q(path, 96)
    assert streams == []
