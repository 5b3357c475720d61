"""rmsnorm_eps.sources.raw, sources read in place: positioned reads into a reused buffer, never
a memory map; the chunks are the buffered reader's values (every dtype and byte order, in a
file and in a stored zip member), a short file is the buffered reader's error line, a stored
member's CRC-32 is checked, and a file truncated *while* it is read (.npy, stored .npz member,
.safetensors) is the one line "file changed while being read", not a SIGBUS."""

from __future__ import annotations

import json
import mmap
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources import open_sources
from rmsnorm_eps.sources import raw as raw_module

RNG = np.random.default_rng(11)
ROOT = Path(__file__).resolve().parents[2]


def _chunks(path: Path, per: int, dtype: str | None = None) -> list[tuple[int, np.ndarray]]:
    (src,) = open_sources(path, dtype=dtype).sources
    return [(s, v.copy()) for s, v in src.iter_elements(per)]


def _same_both_ways(
    path: Path, per: int, monkeypatch: pytest.MonkeyPatch, dtype: str | None = None
) -> np.ndarray:
    in_place = _chunks(path, per, dtype)
    with monkeypatch.context() as m:
        m.setattr(raw_module.RawArraySource, "_in_place", lambda self, per: None)  # buffered
        buffered = _chunks(path, per, dtype)
    assert [s for s, _ in in_place] == [s for s, _ in buffered]
    for (_, a), (_, b) in zip(in_place, buffered, strict=True):
        assert a.dtype == b.dtype and a.dtype.isnative
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))  # bit for bit
    return np.concatenate([v for _, v in in_place])


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8", "<f2", ">f2", "<u2", ">u2"])
def test_in_place_chunks_are_the_buffered_ones(
    tmp_path: Path, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = RNG.uniform(-5, 5, (301, 17)).astype(dtype)
    path = tmp_path / "a.npy"
    np.save(path, a)
    values = _same_both_ways(path, 53, monkeypatch, "bfloat16" if a.dtype.kind == "u" else None)
    np.testing.assert_array_equal(values, a.astype(a.dtype.newbyteorder("=")).ravel())
    assert values.dtype == (np.uint16 if a.dtype.kind == "u" else a.dtype.newbyteorder("="))


def test_nothing_is_memory_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kw: object) -> None:
        raise AssertionError("mmap.mmap called")

    monkeypatch.setattr(mmap, "mmap", refuse)
    path = tmp_path / "w.npy"
    np.save(path, np.arange(64 * 95, dtype=np.float32))
    values = np.concatenate([v for _, v in _chunks(path, 64)])
    np.testing.assert_array_equal(values, np.arange(64 * 95, dtype=np.float32))


def test_a_stored_zip_member_is_read_in_place_and_its_crc_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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


def _safetensors(path: Path, a: np.ndarray) -> None:
    header = json.dumps(
        {"t": {"dtype": "F32", "shape": list(a.shape), "data_offsets": [0, a.nbytes]}}
    ).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + a.tobytes())


#: Read two chunks, truncate the file to its first bytes, read on: a mapped reader died of
#: SIGBUS here (exit -7, nothing on stderr); the error line is printed instead.
_TRUNCATE_DURING_READ = """
import os, sys
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources import open_sources
path = sys.argv[1]
(src,) = open_sources(path).sources
try:
    for i, (start, values) in enumerate(src.iter_elements(1 << 16)):
        float(values.sum())
        if i == 1:  # inside the second 32 MiB window a mapped reader had mapped
            os.truncate(path, 4096)
except InputFileError as exc:
    print(exc)
"""


@pytest.mark.parametrize("kind", ["npy", "npz", "safetensors"])
def test_a_file_truncated_while_read_is_one_error_line(tmp_path: Path, kind: str) -> None:
    a = np.ones((768, 1 << 14), np.float32)  # 48 MiB: more than one 32 MiB window
    path = tmp_path / f"a.{kind}"
    if kind == "npy":
        np.save(path, a)
    elif kind == "npz":
        np.savez(path, layer=a)  # stored: read in place
    else:
        _safetensors(path, a)
    out = subprocess.run(
        [sys.executable, "-c", _TRUNCATE_DURING_READ, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, (out.returncode, out.stderr)
    assert "file changed while being read" in out.stdout, out.stdout


def test_the_cli_says_file_changed_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from rmsnorm_eps.cli import app

    path = tmp_path / "q.npy"
    np.save(path, np.ones(1 << 16))
    real = raw_module.RawArraySource._in_place

    def cut_after_open(self: raw_module.RawArraySource, per: int) -> object:
        chunks = real(self, per)  # checked long enough, then truncated before the first read
        path.write_bytes(path.read_bytes()[:1000])
        return chunks

    monkeypatch.setattr(raw_module.RawArraySource, "_in_place", cut_after_open)
    res = CliRunner().invoke(app, ["ratio", str(path), "--eps", "1e-5", "--threads", "1"])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith(f"rmsnorm-eps: error: {path}: file changed while being read")
    assert len(res.stderr.splitlines()) == 1


def test_default_threads_follow_the_free_cpus() -> None:
    assert raw_module.threads_for(2, 0.0) == 2 and raw_module.threads_for(2, 1.5) == 1
    assert 1 <= raw_module.default_threads() <= 2
