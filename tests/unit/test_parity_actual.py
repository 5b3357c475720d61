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
