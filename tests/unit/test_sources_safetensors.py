"""Unit tests of rmsnorm_eps.sources.safetensors: strict header, every tensor accounted for."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources import Kind, open_sources, sniff
from rmsnorm_eps.sources.raw import RawArraySource
from rmsnorm_eps.sources.safetensors import open_safetensors


def _file(
    path: Path, header: bytes | dict[str, Any], data: bytes = b"", n: int | None = None
) -> Path:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if n is None else n) + text + data)
    return path


def _entry(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def _values(src: Any, per: int = 5) -> np.ndarray:
    return np.concatenate([c.copy() for _, c in src.iter_elements(per)])


def test_matches_the_reference_library(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(1)
    arrays = {
        "model.layers.0.input_layernorm": rng.standard_normal((3, 5)).astype(np.float32),
        "model.norm": rng.standard_normal((7,)).astype(np.float16),
        "x64": rng.standard_normal((2, 2, 2)),
    }
    path = tmp_path / "d.safetensors"
    st.save_file(arrays, str(path), metadata={"format": "np"})
    assert sniff(path) is Kind.SAFETENSORS
    opened = open_sources(path)
    assert opened.members_total == 3 and opened.unreadable == []
    got = {s.name: s for s in opened.sources}
    assert set(got) == set(arrays)
    for name, a in arrays.items():
        src = got[name]
        assert (src.shape, src.order, src.dtype_name) == (a.shape, "C", str(a.dtype))
        np.testing.assert_array_equal(_values(src, 4), a.ravel())
        par = [v.copy() for _, v in src.iter_mapped(2, lambda s, v: v.copy(), threads=2)]
        np.testing.assert_array_equal(np.concatenate(par), a.ravel())


def test_bf16_is_read_as_bfloat16_bits(tmp_path: Path) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.array([1.0, -2.5, 3e-3, np.inf], ml_dtypes.bfloat16)
    path = _file(tmp_path / "b.safetensors", {"q": _entry("BF16", [4], 0, 8)}, a.tobytes())
    (src,) = open_sources(path).sources
    assert src.dtype_name == "bfloat16" and src.stored_as == "bfloat16"
    np.testing.assert_array_equal(_values(src), a.view(np.uint16))


@pytest.mark.parametrize("code", ["I16", "U16"])
def test_int16_holds_bfloat16_with_dtype(tmp_path: Path, code: str) -> None:
    bits = np.array([0x3F80, 0xC020, 0x7F80], np.uint16)  # 1.0, -2.5, inf
    path = _file(tmp_path / "i.safetensors", {"q": _entry(code, [3], 0, 6)}, bits.tobytes())
    with pytest.raises(InputFileError, match=r"\[q\]: unsupported dtype u?int16.*--dtype bfloat16"):
        open_sources(path)
    (src,) = open_sources(path, "bfloat16").sources
    assert src.dtype_name == "bfloat16"
    got = _values(src)
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got, bits)


def test_metadata_is_ignored_but_checked(tmp_path: Path) -> None:
    data = np.ones(2, np.float32).tobytes()
    ok = {"__metadata__": {"a": "b"}, "q": _entry("F32", [2], 0, 8)}
    assert open_sources(_file(tmp_path / "ok.safetensors", ok, data)).members_total == 1
    bad = {"__metadata__": {"a": 1}, "q": _entry("F32", [2], 0, 8)}
    with pytest.raises(InputFileError, match=r"__metadata__ must map strings to strings"):
        open_sources(_file(tmp_path / "bad.safetensors", bad, data))


@pytest.mark.parametrize(
    ("header", "n", "message"),
    [
        (b'{"q": 1, "q": 2}', None, "duplicate key 'q'"),
        (b'{"q": {"dtype": "F32", "dtype": "F64"}}', None, "duplicate key 'dtype'"),
        (b'{"q": NaN}', None, "invalid JSON in safetensors header"),
        (b"[1, 2]", None, "expected an object, got list"),
        (b"{" + b'"a":' * 0 + b"[" * 50_000 + b"]" * 50_000 + b"}", None, "invalid"),
        (b"{\xff}", None, "invalid JSON"),
        (b"{}", None, "holds no tensors"),
        (b'{"q": 1}', 1 << 40, "safetensors header declares 1099511627776 bytes"),
        (b'{"q": 1}', 2**64 - 1, "declares 18446744073709551615 bytes"),
    ],
)
def test_whole_file_problems_always_raise(
    tmp_path: Path, header: bytes, n: int | None, message: str
) -> None:
    path = _file(tmp_path / "h.safetensors", header, b"\x00" * 8, n)
    with pytest.raises(InputFileError, match=message) as err:
        open_safetensors(path, path.stat().st_size, None, True)
    assert "h.safetensors" in str(err.value)


def test_header_over_the_cap_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rmsnorm_eps.sources.safetensors as mod

    monkeypatch.setattr(mod, "HEADER_MAX", 64)
    header = json.dumps({"__metadata__": {"pad": "x" * 100}}).encode()
    path = _file(tmp_path / "big.safetensors", header)
    with pytest.raises(InputFileError, match=r"over the 0 MiB this reader accepts"):
        open_safetensors(path, path.stat().st_size, None, False)


def test_short_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.safetensors"
    path.write_bytes(b"\x05\x00\x00")
    with pytest.raises(InputFileError, match=r"truncated safetensors header length"):
        open_safetensors(path, 3, None, False)


_F32 = np.arange(1, 9, dtype=np.float32).tobytes()  # 32 bytes of data


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (_entry("Q4", [2], 0, 8), "unknown safetensors dtype 'Q4'"),
        (_entry("I32", [2], 0, 8), "unsupported dtype int32"),
        (_entry("BOOL", [8], 0, 8), "unsupported dtype bool"),
        (_entry("F32", [-2], 0, 8), "invalid shape"),
        (_entry("F32", [True, 2], 0, 8), "invalid shape"),
        (_entry("F32", [2.0], 0, 8), "invalid shape"),
        (_entry("F32", [2], 8, 0), "invalid data_offsets"),
        (_entry("F32", [2], 0, 1 << 40), "invalid data_offsets"),
        (_entry("F32", [3], 0, 8), "needs 12 bytes, data_offsets give 8"),
        (_entry("F32", [1 << 62, 1 << 62], 0, 8), "needs"),
        ({"dtype": "F32", "shape": [2]}, "must be an object with dtype"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}, "must be an object"),
        ([1, 2], "must be an object"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 9]}, "invalid data_offsets"),
    ],
)
def test_bad_entry_is_one_unreadable_tensor(tmp_path: Path, entry: object, message: str) -> None:
    header = {"good": _entry("F32", [4], 16, 32), "bad": entry}
    path = _file(tmp_path / "e.safetensors", header, _F32)
    with pytest.raises(InputFileError, match=message) as err:
        open_sources(path)
    assert "[bad]" in str(err.value)
    opened = open_sources(path, lenient=True)
    assert [s.name for s in opened.sources] == ["good"]
    assert [u.name for u in opened.unreadable] == ["bad"]
    assert message.split("'")[0] in opened.unreadable[0].problem
    assert opened.members_total == 2
    np.testing.assert_array_equal(_values(opened.sources[0]), [5, 6, 7, 8])


def test_overlapping_tensors_are_reported(tmp_path: Path) -> None:
    header = {
        "a": _entry("F32", [4], 0, 16),
        "b": _entry("F32", [4], 8, 24),  # overlaps a
        "c": _entry("F32", [2], 24, 32),
        "z1": _entry("F32", [0], 8, 8),  # empty tensors overlap nothing
        "z2": _entry("F32", [0, 3], 8, 8),
    }
    path = _file(tmp_path / "o.safetensors", header, _F32)
    with pytest.raises(InputFileError, match=r"\[b\]: its bytes overlap tensor 'a'"):
        open_sources(path)
    opened = open_sources(path, lenient=True)
    assert [s.name for s in opened.sources] == ["a", "c", "z1", "z2"]
    assert [u.name for u in opened.unreadable] == ["b"]
    assert opened.members_total == 5


def test_empty_name_is_unreadable(tmp_path: Path) -> None:
    header = {"": _entry("F32", [2], 0, 8), "q": _entry("F32", [2], 8, 16)}
    path = _file(tmp_path / "n.safetensors", header, _F32[:16])
    with pytest.raises(InputFileError, match=r"empty name"):
        open_sources(path)
    opened = open_sources(path, lenient=True)
    assert [s.name for s in opened.sources] == ["q"] and len(opened.unreadable) == 1


def test_offsets_are_relative_to_the_data_buffer(tmp_path: Path) -> None:
    header = {"q": _entry("F64", [2], 8, 24)}
    data = b"\xff" * 8 + np.array([0.5, 2.0]).tobytes()
    (src,) = open_sources(_file(tmp_path / "r.safetensors", header, data)).sources
    assert isinstance(src, RawArraySource)
    np.testing.assert_array_equal(_values(src), [0.5, 2.0])


def test_companion_positions_are_attached(tmp_path: Path) -> None:
    q = np.array([1.0, 2.0, 3.0], np.float32).tobytes()
    pos = np.array([0, 1, 2], np.int64).tobytes()
    header = {"q": _entry("F32", [3], 0, 12), "q::position": _entry("I64", [3], 12, 36)}
    (src,) = open_sources(_file(tmp_path / "c.safetensors", header, q + pos)).sources
    comp = src.companion("position")
    assert src.members == 2 and comp is not None
    np.testing.assert_array_equal(_values(comp), [0, 1, 2])
