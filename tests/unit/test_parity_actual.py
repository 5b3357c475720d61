"""rmsnorm_eps.parity.actual: an implementation's outputs read back exactly from .npy, .npz
(one member or by key) and .safetensors, and refused when the shape is not the probes'."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.parity.actual import read_actual

OUT = np.arange(12, dtype=np.float32).reshape(3, 4) / 7


def test_npy_npz_and_safetensors(tmp_path: Path) -> None:
    np.save(tmp_path / "y.npy", OUT)
    np.savez(tmp_path / "y.npz", out=OUT, other=OUT * 2)
    header = json.dumps({"y": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}})
    raw = header.encode()
    (tmp_path / "y.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + OUT.tobytes())
    for path, key in (("y.npy", None), ("y.npz", "out"), ("y.safetensors", None)):
        got = read_actual(tmp_path / path, key, expect_shape=(3, 4))
        assert got.dtype == "float32" and got.values.dtype == np.float64
        np.testing.assert_array_equal(got.values, OUT.astype(np.float64))  # exact widening
    other = read_actual(tmp_path / "y.npz", "other")
    assert other.key == "other"
    np.testing.assert_array_equal(other.values, (OUT * 2).astype(np.float64))


def test_a_wrong_shape_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "y.npy", OUT)
    with pytest.raises(InputFileError, match="shape"):
        read_actual(tmp_path / "y.npy", expect_shape=(4, 3))


def _safetensors(path: Path, header: dict[str, object], data: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def test_safetensors_is_read_by_the_dump_reader_with_its_one_header_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """parity --actual had its own safetensors path (the package, a 16 MiB header cap); it now
    reads through rmsnorm_eps.sources: no extra, bfloat16 widened exactly, the 4 MiB cap."""
    import sys

    from rmsnorm_eps.sources.safetensors import HEADER_MAX

    monkeypatch.setitem(sys.modules, "safetensors", None)  # not needed any more
    bits = (OUT.view(np.uint32) >> 16).astype("<u2")  # bfloat16 of OUT, truncated
    path = tmp_path / "bf.safetensors"
    _safetensors(
        path, {"y": {"dtype": "BF16", "shape": [3, 4], "data_offsets": [0, 24]}}, bits.tobytes()
    )
    got = read_actual(path, expect_shape=(3, 4))
    want = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    assert got.dtype == "bfloat16" and got.key == "y"
    np.testing.assert_array_equal(got.values, want)
    pad = {"__metadata__": {"pad": "x" * (HEADER_MAX + 1024)}}  # under the old 16 MiB cap
    big = tmp_path / "big.safetensors"
    _safetensors(
        big, {**pad, "y": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}}, OUT.tobytes()
    )
    with pytest.raises(InputFileError, match="over the 4 MiB this reader accepts"):
        read_actual(big, expect_shape=(3, 4))
