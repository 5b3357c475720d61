"""Many-member ``.npz`` archives: the cached ``.npy`` header parser agrees with numpy's own
reader, opened sources stay small (tracemalloc), and the archive file is opened once."""

from __future__ import annotations

import gc
import io
import itertools
import tokenize
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.dumps import npy_bytes
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources import MAX_LAYERS, open_sources
from rmsnorm_eps.sources.npy import NpyHeader, read_npy_header
from rmsnorm_eps.sources.raw import RawArraySource
from rmsnorm_eps.sources.ziparchive import ZipEntry

_DTYPES = [
    "<f2",
    "<f4",
    "<f8",
    ">f2",
    ">f4",
    ">f8",
    "<i4",
    ">u2",
    "|u1",
    "|b1",
    "<c8",
    "|V2",
    "<M8[s]",
    [("a", "<f4"), ("b", ">i2")],
    ("<f4", (2,)),
]
_SHAPES: list[tuple[int, ...]] = [(), (0,), (3,), (2, 3), (1, 0, 5), (1 << 40,)]


def _header(dtype: Any, shape: tuple[int, ...], fortran: bool, version: int) -> bytes:
    """A ``.npy`` header as numpy writes it (versions 1 and 2)."""
    fp = io.BytesIO()
    meta = {
        "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
        "fortran_order": fortran,
        "shape": shape,
    }
    if version == 1:
        np.lib.format.write_array_header_1_0(fp, meta)
    else:
        np.lib.format.write_array_header_2_0(fp, meta)
    return fp.getvalue()


def _numpy_reads(raw: bytes) -> tuple[tuple[int, ...], bool, np.dtype[Any], int]:
    fp = io.BytesIO(raw)
    major, _ = np.lib.format.read_magic(fp)
    fmt = np.lib.format
    read = fmt.read_array_header_1_0 if major == 1 else fmt.read_array_header_2_0
    shape, fortran, dtype = read(fp)
    return shape, fortran, dtype, fp.tell()


def _ours(raw: bytes, key: str = "k") -> NpyHeader:
    return read_npy_header(io.BytesIO(raw), Path("d.npz"), key)


def test_cached_header_parser_agrees_with_numpy() -> None:
    cases = itertools.product(_DTYPES, _SHAPES, (False, True), (1, 2))
    for dtype, shape, fortran, version in cases:
        raw = _header(dtype, shape, fortran, version)
        want_shape, want_fortran, want_dtype, want_len = _numpy_reads(raw)
        first = _ours(raw)
        assert (first.shape, first.fortran_order, first.dtype, first.header_len) == (
            want_shape,
            want_fortran,
            want_dtype,
            want_len,
        ), (dtype, shape, fortran, version)
        assert first.order == ("F" if fortran else "C")
        again = _ours(bytes(raw))  # equal bytes, another object: the cached result
        assert again is first


def test_header_text_variants_agree_with_numpy() -> None:
    """Texts numpy does not write itself but reads: key order, quotes, spacing, version 3."""
    texts = [
        "{'shape': (2, 3), 'fortran_order': True, 'descr': '>f8'}",
        '{"descr": "<f2", "fortran_order": False, "shape": (4,)}',
        "{ 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 5 , ) , }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': ()}",
    ]
    for text in texts:
        body = text.encode("latin1") + b"\n"
        for major, width in ((1, 2), (2, 4), (3, 4)):
            raw = b"\x93NUMPY" + bytes([major, 0]) + len(body).to_bytes(width, "little") + body
            ours = _ours(raw)
            arr = np.load(io.BytesIO(raw + b"\x00" * (ours.nbytes)), allow_pickle=False)
            assert (ours.shape, ours.dtype) == (arr.shape, arr.dtype), (text, major)
            assert ours.fortran_order == ("True" in text)
            assert ours.header_len == len(raw)


@pytest.mark.parametrize(
    ("text", "problem", "numpy_refuses"),
    [
        ("{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}", "(fortran_order)", True),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", "(shape (-1,))", False),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (True,)}", "(shape (True,))", False),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': 3}", "(shape 3)", True),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", "(keys)", True),
        ("['<f4', False, (3,)]", "(keys)", True),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)", "malformed .npy", True),
        ("{'descr': __import__('os'), 'fortran_order': False, 'shape': (3,)}", "malformed", True),
        ("{'descr': '<q9', 'fortran_order': False, 'shape': (3,)}", "unknown dtype '<q9'", True),
    ],
)
def test_refused_headers_and_errors_name_each_key(
    text: str, problem: str, numpy_refuses: bool
) -> None:
    """Refused as before the cache (numpy's reader refuses most of them too; a negative or
    boolean dimension it lets through, to fail later)."""
    body = text.encode("latin1") + b"\n"
    raw = b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body
    if numpy_refuses:
        with pytest.raises((ValueError, SyntaxError, tokenize.TokenError)):
            _numpy_reads(raw)
    for key in ("first", "second"):  # the second answer comes from the cache: its own key
        with pytest.raises(InputFileError) as err:
            _ours(raw, key)
        assert problem in str(err.value) and f"[{key}]" in str(err.value)


def test_structured_and_object_members_refused_as_before(tmp_path: Path) -> None:
    structured = np.zeros(3, [("a", "<f4"), ("b", "<f4")])
    path = tmp_path / "d.npz"
    np.savez(path, s=structured, f=np.ones(3, np.float32))
    with pytest.raises(InputFileError, match=r"\[s\]: unsupported dtype structured"):
        open_sources(path)
    opened = open_sources(path, lenient=True)
    assert [s.name for s in opened.sources] == ["f"]
    assert [u.name for u in opened.unreadable] == ["s"]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        body = b"{'descr': '|O', 'fortran_order': False, 'shape': (1,)}\n"
        zf.writestr("o.npy", b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body)
    (tmp_path / "o.npz").write_bytes(buf.getvalue())
    with pytest.raises(InputFileError, match=r"\[o\]: holds Python objects"):
        open_sources(tmp_path / "o.npz")


def _many(path: Path, n: int) -> Path:
    item = npy_bytes(np.arange(3, dtype=np.float32))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(n):
            zf.writestr(f"model.layers.{i}.input_layernorm.npy", item)
    path.write_bytes(buf.getvalue())
    return path


def test_memory_per_member_of_opened_members_at_the_layer_cap(tmp_path: Path) -> None:
    n = MAX_LAYERS
    path = _many(tmp_path / "many.npz", n)
    open_sources(_many(tmp_path / "warm.npz", 2))  # imports and caches, outside the count
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        opened = open_sources(path)
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert opened.members_total == n and len(opened.sources) == n
    per_member, peak_per_member = (held - base) / n, (peak - base) / n
    # measured 291 B held and 680 B at peak (877 and 1237 before ZipInfo was dropped)
    assert per_member <= 400, f"{per_member:.0f} B held per member"
    assert peak_per_member <= 1000, f"{peak_per_member:.0f} B per member at peak"
    shapes = {id(src.shape) for src in opened.sources}
    dtypes = {id(src.dtype) for src in opened.sources}
    assert len(shapes) == 1 and len(dtypes) == 1  # one parsed header shared by all
    assert sum(float(v.sum()) for s in opened.sources for _, v in s.iter_elements(8)) == 3.0 * n


def test_archive_opened_once_for_headers_and_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    path = _many(tmp_path / "d.npz", 300)
    opens: list[str] = []
    real_open, real_io_open, real_os_open = builtins.open, io.open, __import__("os").open

    def counting(real: Any) -> Any:
        def wrapper(file: Any, *args: Any, **kwargs: Any) -> Any:
            if str(file) == str(path):
                opens.append(str(file))
            return real(file, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(builtins, "open", counting(real_open))
    monkeypatch.setattr(io, "open", counting(real_io_open))
    monkeypatch.setattr("os.open", counting(real_os_open))
    opened = open_sources(path)
    total = sum(v.size for s in opened.sources for _, v in s.iter_elements(8))
    assert total == 3 * 300
    assert len(opens) <= 3, opens  # sniffing, the archive; not one per member


def test_members_read_after_the_archive_is_closed(tmp_path: Path) -> None:
    q = np.arange(5, dtype=np.float32)
    stored, packed = tmp_path / "s.npz", tmp_path / "c.npz"
    np.savez(stored, x=q)
    np.savez_compressed(packed, x=q)
    for path in (stored, packed):
        (src,) = open_sources(path).sources
        assert isinstance(src, RawArraySource) and src.member == "x.npy"
        assert (src.info is None) == (path == stored)  # ZipInfo kept for zipfile's reads only
        assert src.archive is not None
        src.archive.close()
        values = np.concatenate([v.copy() for _, v in src.iter_elements(2)])
        assert values.tolist() == q.tolist()


_ZIPINFO_FIELDS = (
    "filename",
    "orig_filename",
    "header_offset",
    "flag_bits",
    "compress_type",
    "compress_size",
    "file_size",
    "CRC",
    "_end_offset",  # zipfile's own overlap check, in the Pythons that have it
)


def test_compressed_members_keep_what_zipfile_reads(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    q = {f"l{i}": np.arange(i + 1, dtype=np.float32) for i in range(3)}
    np.savez_compressed(path, **q)  # type: ignore[arg-type]
    opened = open_sources(path)
    with zipfile.ZipFile(path) as zf:
        want = {info.filename: info for info in zf.infolist()}
    for src in opened.sources:
        assert isinstance(src, RawArraySource) and isinstance(src.info, ZipEntry)
        made, real = src.info.zipinfo(f"{src.name}.npy"), want[f"{src.name}.npy"]
        for field in _ZIPINFO_FIELDS:
            assert getattr(made, field, None) == getattr(real, field, None), field
        values = np.concatenate([v.copy() for _, v in src.iter_elements(2)])
        assert values.tolist() == q[src.name].tolist()


def test_compressed_member_with_bad_crc_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", npy_bytes(np.arange(1 << 16, dtype=np.float32)))
    raw = bytearray(buf.getvalue())
    cd = raw.index(b"PK\x01\x02")
    raw[cd + 16] ^= 0xFF  # the CRC-32 the directory records
    (tmp_path / "d.npz").write_bytes(bytes(raw))
    (src,) = open_sources(tmp_path / "d.npz").sources
    with pytest.raises(InputFileError, match=r"\[x\]: cannot read data: Bad CRC-32"):
        for _ in src.iter_elements(16):
            pass
