"""Unit tests of rmsnorm_eps.sources: sniff, the npy and npz readers, members accounting."""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.dumps import npy_bytes
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources import MAX_LAYERS, OPENERS, Kind, open_sources, sniff
from rmsnorm_eps.sources.raw import RawArraySource


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _torch_zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        zf.writestr("archive/data/0", b"\x00" * 16)
    return path


def _safetensors(path: Path) -> Path:
    header = b'{"y": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'
    return _write(path, struct.pack("<Q", len(header)) + header + b"\x00" * 8)


def _npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def _gguf(path: Path) -> Path:
    return _write(path, b"GGUF" + struct.pack("<IQQ", 3, 0, 0))


@pytest.mark.parametrize(
    ("name", "make", "kind"),
    [
        ("a.npy", lambda p: _write(p, npy_bytes(np.ones(3, np.float32))), Kind.NPY),
        ("a.npz", lambda p: _npz(p, a=np.ones(3)), Kind.ZIP),
        ("empty.npz", lambda p: _write(p, b"PK\x05\x06" + b"\x00" * 18), Kind.ZIP),
        ("m.pt", _torch_zip, Kind.TORCH_ZIP),
        ("m.safetensors", _safetensors, Kind.SAFETENSORS),
        ("m.gguf", _gguf, Kind.GGUF),
        ("config.json", lambda p: _write(p, b'{"rms_norm_eps": 1e-06}'), Kind.JSON),
        ("config", lambda p: _write(p, b'  {"rms": {"a": 1}}'), Kind.JSON),
        ("c.yaml", lambda p: _write(p, b"model: x\n"), Kind.YAML),
        ("c", lambda p: _write(p, b"---\nmodel: x\n"), Kind.YAML),
        ("q.csv", lambda p: _write(p, b"a,b\n1,2\n"), Kind.CSV),
        ("q.tsv", lambda p: _write(p, b"a\tb\n1\t2\n"), Kind.TSV),
        ("e.npy", lambda p: _write(p, b""), Kind.EMPTY),
        ("x.bin", lambda p: _write(p, b"\x00\x01garbage"), Kind.UNKNOWN),
        ("x.txt", lambda p: _write(p, b"hello world\n"), Kind.UNKNOWN),
    ],
)
def test_sniff_every_kind(tmp_path: Path, name: str, make: object, kind: Kind) -> None:
    path = tmp_path / name
    make(path)  # type: ignore[operator]
    assert sniff(path) is kind


def test_sniff_ignores_extension_of_binary_formats(tmp_path: Path) -> None:
    path = _write(tmp_path / "looks.json", npy_bytes(np.ones(2)))
    assert sniff(path) is Kind.NPY


def test_sniff_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="no such file") as err:
        sniff(tmp_path / "nope.npy")
    assert "nope.npy" in str(err.value)


def test_every_registered_opener_imports() -> None:
    from rmsnorm_eps.sources.interface import _opener

    for kind in OPENERS:
        assert callable(_opener(kind))


def test_unregistered_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"a GGUF model file: not a \.npy or \.npz"):
        open_sources(_gguf(tmp_path / "m.gguf"))


def test_npy_source_fields_and_chunks(tmp_path: Path) -> None:
    a = np.arange(12, dtype=">f4").reshape(3, 4, order="F")
    a = np.asfortranarray(a)
    path = _write(tmp_path / "layer.npy", npy_bytes(a))
    opened = open_sources(path)
    (src,) = opened.sources
    assert opened.members_total == 1 and opened.unreadable == []
    assert (src.name, src.shape, src.order, src.size) == ("layer", (3, 4), "F", 12)
    assert src.dtype_name == "float32"
    got = np.concatenate([c.copy() for _, c in src.iter_elements(5)])
    np.testing.assert_array_equal(got, a.ravel(order="F"))
    starts = [s for s, _ in src.iter_elements(5)]
    assert starts == [0, 5, 10]


def test_npz_parallel_and_sequential_reads_agree(tmp_path: Path) -> None:
    a = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    path = _npz(tmp_path / "d.npz", x=a)
    (src,) = open_sources(path).sources
    assert isinstance(src, RawArraySource) and src.data_offset is not None
    seq = [float(v.sum()) for _, v in src.iter_mapped(1000, lambda s, v: v.copy(), threads=1)]
    par = [float(v.sum()) for _, v in src.iter_mapped(1000, lambda s, v: v.copy(), threads=2)]
    assert seq == par and len(seq) == 10


def test_npz_bad_crc_detected_by_parallel_reader(tmp_path: Path) -> None:
    a = np.zeros(10_000, np.float32)
    path = _npz(tmp_path / "d.npz", x=a)
    raw = bytearray(path.read_bytes())
    idx = raw.rindex(b"\x00" * 64)  # inside the data
    raw[idx] = 1
    path.write_bytes(bytes(raw))
    (src,) = open_sources(path).sources
    with pytest.raises(InputFileError, match="CRC"):
        for _ in src.iter_mapped(1000, lambda s, v: v, threads=2):
            pass
    with pytest.raises(InputFileError, match=r"\[x\]: cannot read data: Bad CRC-32"):
        for _ in src.iter_elements(1000):  # the sequential in-place read checks it too
            pass


def _zip_with(path: Path, entries: list[tuple[str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries:
            zf.writestr(zipfile.ZipInfo(name), data)
    return path


def test_every_member_accounted_for(tmp_path: Path) -> None:
    good = npy_bytes(np.ones(4, np.float32))
    bad = npy_bytes(np.full(4, 1e-30, np.float32))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns on the duplicate name
        path = _zip_with(
            tmp_path / "d.npz",
            [
                ("ok.npy", good),
                ("hidden.npy/", bad),
                ("", bad),
                ("dir/", b""),
                ("ok.npy", bad),
                ("notes.txt", b"x"),
            ],
        )
    with pytest.raises(InputFileError):
        open_sources(path)
    opened = open_sources(path, lenient=True)
    assert [s.name for s in opened.sources] == ["ok"]
    assert opened.members_total == 6
    assert len(opened.unreadable) == 5
    assert sum(s.members for s in opened.sources) + len(opened.unreadable) == 6
    problems = " | ".join(u.problem for u in opened.unreadable)
    assert "directory entry" in problems and "duplicate member" in problems


def test_overlapping_members_reported(tmp_path: Path) -> None:
    data = npy_bytes(np.ones(4, np.float32))
    path = _zip_with(tmp_path / "d.npz", [("a.npy", data)])
    raw = path.read_bytes()
    # a second directory entry "b.npy" pointing at the same local header as "a.npy"
    cd = raw.index(b"PK\x01\x02")
    eocd = raw.index(b"PK\x05\x06")
    entry = bytearray(raw[cd:eocd])
    second = bytes(entry).replace(b"a.npy", b"b.npy")
    count = struct.pack("<H", 2)
    end = bytearray(raw[eocd:])
    end[8:10] = count
    end[10:12] = count
    end[12:16] = struct.pack("<I", len(entry) * 2)
    path.write_bytes(raw[:cd] + bytes(entry) + second + bytes(end))
    opened = open_sources(path, lenient=True)
    sources, skipped = opened.sources, opened.unreadable
    assert [s.name for s in sources] == ["a"]
    assert [u.name for u in skipped] == ["b.npy"] or [u.name for u in skipped] == ["b"]
    # the entry points at a's local header: it names another file and overlaps a's bytes
    assert "its local header names 'a.npy', the directory 'b.npy'" in skipped[0].problem


def test_overlapping_members_with_matching_names_reported(tmp_path: Path) -> None:
    """Two directory entries for the same local header (and name): the second overlaps."""
    data = npy_bytes(np.ones(4, np.float32))
    path = _zip_with(tmp_path / "d.npz", [("a.npy", data)])
    raw = path.read_bytes()
    cd = raw.index(b"PK\x01\x02")
    eocd = raw.index(b"PK\x05\x06")
    entry = raw[cd:eocd]
    end = bytearray(raw[eocd:])
    end[8:10] = end[10:12] = struct.pack("<H", 2)
    end[12:16] = struct.pack("<I", len(entry) * 2)
    path.write_bytes(raw[:cd] + entry + entry + bytes(end))
    opened = open_sources(path, lenient=True)
    assert [s.name for s in opened.sources] == ["a"]
    assert opened.members_total == 2
    (problem,) = [u.problem for u in opened.unreadable]
    assert "overlap member 'a.npy'" in problem


def test_companion_without_layer_is_listed_when_lenient(tmp_path: Path) -> None:
    path = _npz(
        tmp_path / "d.npz",
        **{"a": np.ones(3, np.float32), "b::position": np.zeros(3, np.int64)},
    )
    with pytest.raises(InputFileError, match="without its layer"):
        open_sources(path)
    opened = open_sources(path, lenient=True)
    assert [u.name for u in opened.unreadable] == ["b::position"]
    assert opened.members_total == 2


def _positioned_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the positioned reads (``os.pread``/``os.preadv``: headers and data) and their bytes."""
    import os

    stats = {"calls": 0, "bytes": 0}
    pread, preadv = os.pread, os.preadv

    def counted_pread(fd: int, n: int, offset: int) -> bytes:
        data = pread(fd, n, offset)
        stats["calls"] += 1
        stats["bytes"] += len(data)
        return data

    def counted_preadv(fd: int, buffers: list[memoryview], offset: int) -> int:
        got = preadv(fd, buffers, offset)
        stats["calls"] += 1
        stats["bytes"] += got
        return got

    monkeypatch.setattr(os, "pread", counted_pread)
    monkeypatch.setattr(os, "preadv", counted_preadv)
    return stats


@pytest.mark.parametrize("n", [1024, MAX_LAYERS])
def test_members_open_and_read_in_linear_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    """Opening and reading n tiny members takes the same few reads per member whatever n (a
    quadratic reader, one that rescans the archive per member, would not): counted, not timed
    (the timing is in benchmarks/bench_many_layers.py)."""
    buf = io.BytesIO()
    item = npy_bytes(np.ones(2, np.float32))
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(n):
            zf.writestr(f"l{i}.npy", item)
    path = _write(tmp_path / "many.npz", buf.getvalue())
    stats = _positioned_reads(monkeypatch)
    opened = open_sources(path)
    total = sum(chunk.size for src in opened.sources for _, chunk in src.iter_elements(1024))
    assert (opened.members_total, total) == (n, 2 * n)
    assert stats["calls"] <= 4 * n, stats  # per member: local header, .npy header, data
    assert stats["bytes"] <= 3 * path.stat().st_size, stats
