"""rmsnorm_eps.sources.npy: the header parser equals numpy's on every format version, never
unpickles, and refuses headers that do not fit the file."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources.npy import check_declared_size, open_npy, read_npy_header, stored
from rmsnorm_eps.sources.raw import check_float_dtype

P = Path("q.npy")


def _npy(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, version=version, allow_pickle=False)
    return buf.getvalue()


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize(
    "array",
    [
        np.ones((2, 3), np.float32),
        np.asfortranarray(np.ones((2, 3), ">f8")),
        np.zeros(0, np.float16),
        np.ones((), np.float64),
    ],
    ids=["c", "fortran-be", "empty", "scalar"],
)
def test_header_equals_numpys(array: np.ndarray, version: tuple[int, int]) -> None:
    data = _npy(array, version)
    header = read_npy_header(io.BytesIO(data), P)
    fp = io.BytesIO(data)
    major, _ = np.lib.format.read_magic(fp)
    shape, fortran, dtype = (
        np.lib.format.read_array_header_1_0(fp)
        if major == 1
        else np.lib.format.read_array_header_2_0(fp)
    )
    assert (header.shape, header.fortran_order, header.dtype) == (shape, fortran, dtype)
    assert header.header_len == fp.tell()  # the data start where numpy starts reading
    assert header.size == array.size


def test_object_arrays_and_bad_headers_are_refused() -> None:
    body = b"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    obj = b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body
    header = read_npy_header(io.BytesIO(obj), P)  # parsed, never loaded...
    assert header.dtype == np.dtype(object)
    with pytest.raises(InputFileError, match="object"):  # ...and refused as a dtype
        check_float_dtype(header.dtype, P, None)
    call = b"{'descr': __import__('os').system('true'), 'fortran_order': False, 'shape': (1,)}"
    evil = b"\x93NUMPY\x01\x00" + len(call).to_bytes(2, "little") + call
    with pytest.raises(InputFileError):
        read_npy_header(io.BytesIO(evil), P)
    with pytest.raises(InputFileError):
        read_npy_header(io.BytesIO(b"\x93NUMPY\x01"), P)  # truncated


def test_declared_size_must_fit() -> None:
    data = _npy(np.ones(4, np.float64))
    header = read_npy_header(io.BytesIO(data), P)
    check_declared_size(P, None, header, len(data))  # ``available``: the file's bytes
    with pytest.raises(InputFileError, match=r"truncated: .* \(32 bytes\) but only 31"):
        check_declared_size(P, None, header, len(data) - 1)


def test_open_npy_and_bfloat16_bits(tmp_path: Path) -> None:
    path = tmp_path / "q.npy"
    values = np.array([1.0, 2.5, -3.0], np.float32)
    path.write_bytes(_npy(values))
    opened = open_npy(path, path.stat().st_size, None, False)
    (src,) = opened.sources
    assert opened.members_total == 1 and src.key is None and src.name == "q"
    got = np.concatenate([v.copy() for _, v in src.iter_elements(2)])
    np.testing.assert_array_equal(got, values)
    bits = read_npy_header(io.BytesIO(_npy(np.zeros(2, np.uint16))), P)
    assert stored(bits, "bfloat16") == "bfloat16" and stored(bits, None) is None
    floats = read_npy_header(io.BytesIO(_npy(values)), P)
    assert stored(floats, "bfloat16") is None  # a float array is read as what it is
    path.write_bytes(_npy(values)[:-4])
    with pytest.raises(InputFileError):
        open_npy(path, path.stat().st_size, None, False)
