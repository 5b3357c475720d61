"""rmsnorm_eps.sources.raw: a raw array read in chunks gives back the array (C and Fortran
order, either byte order, in a file or a zip member), and the dtype checks name the dtype."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources import open_sources
from rmsnorm_eps.sources.raw import (
    bits_dtype,
    check_float_dtype,
    default_threads,
    describe_dtype,
    is_bf16_storage,
)

RNG = np.random.default_rng(3)


def _read(src, per: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    starts, parts = [], []
    for start, values in src.iter_elements(per):
        starts.append(start)
        parts.append(values.copy())  # valid until the next chunk only
        assert values.size <= per
    assert starts == list(np.cumsum([0] + [p.size for p in parts[:-1]]))
    return np.concatenate(parts)


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8", ">f2"])
@pytest.mark.parametrize("fortran", [False, True])
@pytest.mark.parametrize("per", [1, 7, 1000])
def test_chunks_give_back_the_array(tmp_path: Path, dtype: str, fortran: bool, per: int) -> None:
    a = RNG.uniform(0, 10, (5, 6)).astype(dtype)
    a = np.asfortranarray(a) if fortran else a
    np.save(tmp_path / "q.npy", a)
    (src,) = open_sources(tmp_path / "q.npy").sources
    assert src.order == ("F" if fortran else "C") and src.shape == (5, 6)
    flat = a.ravel(order=src.order).astype(np.float64)
    np.testing.assert_array_equal(_read(src, per), flat)
    mapped = list(
        src.iter_mapped(per, lambda start, v: (start, float(v.astype(np.float64).sum())), threads=2)
    )
    assert sum(m[1][1] for m in mapped) == pytest.approx(float(flat.sum()), rel=1e-12, abs=0)


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_zip_members_stored_or_compressed(tmp_path: Path, compression: int) -> None:
    a = RNG.uniform(0, 1, 1000)
    buf = io.BytesIO()
    np.save(buf, a)
    with zipfile.ZipFile(tmp_path / "d.npz", "w", compression) as zf:
        zf.writestr("x.npy", buf.getvalue())
    (src,) = open_sources(tmp_path / "d.npz").sources
    assert src.key == "x" and src.name == "x"
    np.testing.assert_array_equal(_read(src, 64), a)


def test_dtype_helpers() -> None:
    assert describe_dtype(np.dtype(">f4")) == "float32"
    assert describe_dtype(np.dtype(object)) == "object"
    assert is_bf16_storage(np.dtype("<u2")) and is_bf16_storage(np.dtype("V2"))
    assert not is_bf16_storage(np.dtype("<f2"))
    assert bits_dtype(np.dtype(">i2")) == np.dtype(">u2")
    for ok in ("<f2", ">f4", "<f8"):
        check_float_dtype(np.dtype(ok), Path("q.npy"), None)
    with pytest.raises(InputFileError, match="int32"):
        check_float_dtype(np.dtype("<i4"), Path("q.npy"), "k")
    assert default_threads() in (1, 2)


def test_threads_rule_follows_the_free_cpus() -> None:
    from rmsnorm_eps.sources.raw import threads_for

    assert threads_for(2, 0.0) == 2  # idle: a second thread overlaps reading and kernels
    assert threads_for(2, 0.9) == 1  # the second CPU is mostly busy
    assert threads_for(2, 4.0) == 1  # a shared machine: one thread
    assert threads_for(16, 1.0) == 2  # more than two never helped
    assert threads_for(1, 0.0) == 1
    assert threads_for(4, float("nan")) == 2
