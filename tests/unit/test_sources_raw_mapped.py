"""rmsnorm_eps.sources.raw, sources read in place: mapped a window at a time, the chunks are
the same values as the buffered reader's (every dtype and byte order, in a file and in a
stored zip member, across window edges), a short file is the buffered reader's error line, a
stored member's CRC-32 is checked, and each window is mapped once."""

from __future__ import annotations

import mmap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources import open_sources
from rmsnorm_eps.sources import raw as raw_module

pytestmark = pytest.mark.skipif(
    getattr(mmap, "MAP_POPULATE", None) is None, reason="mapped reads need MAP_POPULATE"
)

RNG = np.random.default_rng(11)


def _chunks(path: Path, per: int, dtype: str | None = None) -> list[tuple[int, np.ndarray]]:
    (src,) = open_sources(path, dtype=dtype).sources
    return [(s, v.copy()) for s, v in src.iter_elements(per)]


def _same_both_ways(
    path: Path, per: int, monkeypatch: pytest.MonkeyPatch, dtype: str | None = None
) -> np.ndarray:
    mapped = _chunks(path, per, dtype)
    with monkeypatch.context() as m:
        m.setattr(raw_module, "_POPULATE", None)  # the buffered reader
        buffered = _chunks(path, per, dtype)
    assert [s for s, _ in mapped] == [s for s, _ in buffered]
    for (_, a), (_, b) in zip(mapped, buffered, strict=True):
        assert a.dtype == b.dtype and a.dtype.isnative
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))  # bit for bit
    return np.concatenate([v for _, v in mapped])


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8", "<f2", ">f2", "<u2", ">u2"])
@pytest.mark.parametrize("window", [4096, 3 * 4096 + 8, 1 << 25])
def test_mapped_chunks_are_the_buffered_ones(
    tmp_path: Path, dtype: str, window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(raw_module, "MAP_WINDOW", window)
    a = RNG.uniform(-5, 5, (301, 17)).astype(dtype)
    path = tmp_path / "a.npy"
    np.save(path, a)
    values = _same_both_ways(path, 53, monkeypatch, "bfloat16" if a.dtype.kind == "u" else None)
    np.testing.assert_array_equal(values, a.astype(a.dtype.newbyteorder("=")).ravel())
    assert values.dtype == (np.uint16 if a.dtype.kind == "u" else a.dtype.newbyteorder("="))


def test_a_stored_zip_member_is_mapped_and_its_crc_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(raw_module, "MAP_WINDOW", 8192)
    a = RNG.uniform(0, 1, (200, 64)).astype(np.float32)
    path = tmp_path / "d.npz"
    np.savez(path, layer=a)  # stored, not compressed
    np.testing.assert_array_equal(_same_both_ways(path, 1000, monkeypatch), a.ravel())
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("layer.npy")
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + 128 + 4000
    data[at] ^= 0x01  # one bit of the data, past the header
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(data))
    with pytest.raises(InputFileError, match=r"Bad CRC-32 for file 'layer\.npy'"):
        _chunks(bad, 1000)


def test_a_file_short_when_read_is_the_buffered_readers_error(tmp_path: Path) -> None:
    path = tmp_path / "short.npy"
    np.save(path, np.ones((100, 8), np.float32))
    (src,) = open_sources(path).sources  # opened whole, then cut before it is read
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(InputFileError, match=r"truncated data: expected 3200 bytes .* got 3160"):
        list(src.iter_elements(64))


def test_each_window_is_mapped_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raw_module, "MAP_WINDOW", 64 * 4 * 10)  # ten chunks of 64 float32
    path = tmp_path / "w.npy"
    np.save(path, np.arange(64 * 95, dtype=np.float32))
    calls: list[int] = []
    real = mmap.mmap

    def counting(fd: int, length: int, **kw: object) -> mmap.mmap:
        calls.append(length)
        return real(fd, length, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(raw_module.mmap, "mmap", counting)
    values = np.concatenate([v for _, v in _chunks(path, 64)])
    np.testing.assert_array_equal(values, np.arange(64 * 95, dtype=np.float32))
    assert len(calls) == 1 + 10  # the first chunk, then 94 chunks in windows of ten


def test_one_thread_by_default_where_files_are_mapped() -> None:
    assert raw_module.default_threads() == 1
