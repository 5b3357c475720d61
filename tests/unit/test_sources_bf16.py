"""bfloat16 bit patterns stored as int16, uint16 or V2 in .npy/.npz dumps (``--dtype bfloat16``),
and what a file in no accepted format is told."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources import open_sources

#: 1.0, -2.5, 3.0e-3 (rounded), inf, and a NaN as bfloat16 bit patterns.
_BITS = np.array([0x3F80, 0xC020, 0x3B44, 0x7F80, 0x7FC0], np.uint16)


@pytest.mark.parametrize("dtype", ["<i2", ">i2", "<u2", ">u2", "V2"])
def test_npy_bits_in_any_two_byte_dtype(tmp_path: Path, dtype: str) -> None:
    stored = _BITS.astype("<u2").view("<i2").astype(dtype) if dtype[1:] == "i2" else None
    if dtype == "V2":
        stored = _BITS.astype("<u2").view("V2")
    elif stored is None:
        stored = _BITS.astype(dtype)
    path = tmp_path / "q.npy"
    np.save(path, stored)
    with pytest.raises(InputFileError, match=r"pass --dtype bfloat16"):
        open_sources(path)
    (src,) = open_sources(path, "bfloat16").sources
    assert src.dtype_name == "bfloat16"
    got = np.concatenate([c.copy() for _, c in src.iter_elements(2)])
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got, _BITS)


def test_npz_int16_and_raw_analysis_match_float32(tmp_path: Path) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 16)) * 1e-3).astype(ml_dtypes.bfloat16)
    for raw, arr in ((True, x), (False, np.abs(x))):
        np.savez(tmp_path / "bits.npz", layer=arr.view(np.int16))
        np.savez(tmp_path / "f32.npz", layer=arr.astype(np.float32))
        a = analyze_dump(tmp_path / "bits.npz", 1e-5, raw=raw, dtype="bfloat16")
        b = analyze_dump(tmp_path / "f32.npz", 1e-5, raw=raw)
        la, lb = a.layers[0], b.layers[0]
        assert la.dtype == "bfloat16" and lb.dtype == "float32"
        assert (la.count, la.below_bound, la.min_q, la.max_q, la.decades, la.worst) == (
            lb.count,
            lb.below_bound,
            lb.min_q,
            lb.max_q,
            lb.decades,
            lb.worst,
        )
        assert la.below_bound > 0


def test_other_files_get_the_accepted_formats_and_a_recipe(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"\x01\x02garbage")
    with pytest.raises(InputFileError) as err:
        open_sources(path)
    msg = str(err.value)
    assert "\n" not in msg
    for fmt in (".npy", ".npz", ".safetensors", ".pt/.pth", ".csv/.tsv", "numpy.save("):
        assert fmt in msg
    legacy = tmp_path / "old.pt"
    legacy.write_bytes(b"\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19.")
    with pytest.raises(InputFileError, match=r"legacy non-zip torch.save"):
        open_sources(legacy)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 16)
    with pytest.raises(InputFileError, match=r"a GGUF model file: not a .npy or .npz"):
        open_sources(gguf)
