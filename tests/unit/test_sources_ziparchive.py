"""rmsnorm_eps.sources.ziparchive: a member read through ZipArchive (from a compact ZipEntry,
or by positioned reads at its data offset) is the member zipfile reads."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from rmsnorm_eps.sources.ziparchive import ZipArchive, ZipEntry

MEMBERS = {"a.npy": b"alpha" * 100, "b.npy": b"bravo" * 7, "c/d.npy": b""}


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    path = tmp_path / "z.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in MEMBERS.items():
            zf.writestr(name, data, zipfile.ZIP_DEFLATED if name == "a.npy" else None)
    return path


def test_entries_open_like_zipfile(archive: Path) -> None:
    zf = zipfile.ZipFile(archive)
    infos = list(zf.infolist())
    za = ZipArchive(archive, zf)
    entries = [(i.filename, ZipEntry(i)) for i in infos]
    za.forget_directory()
    assert zf.filelist == [] and zf.NameToInfo == {}
    for name, entry in entries:
        with za.open(entry, name) as fh:
            assert fh.read() == MEMBERS[name]
    za.close()
    name, entry = entries[1]
    with za.open(entry, name) as fh:  # closed: opened again on demand
        assert fh.read() == MEMBERS[name]
    za.close()


def test_stream_at_reads_without_moving_the_file_position(archive: Path) -> None:
    zf = zipfile.ZipFile(archive)
    info = zf.getinfo("b.npy")
    za = ZipArchive(archive, zf)
    raw = archive.read_bytes()
    data_at = raw.index(MEMBERS["b.npy"])  # stored: the bytes lie as they are
    assert zf.fp is not None
    before = os.lseek(zf.fp.fileno(), 0, os.SEEK_CUR)
    stream = za.stream_at(data_at)
    assert stream.read(5) == b"bravo" and stream.read(info.file_size - 5) == MEMBERS["b.npy"][5:]
    assert os.lseek(zf.fp.fileno(), 0, os.SEEK_CUR) == before
    buf = bytearray(5)
    second = za.stream_at(data_at)
    assert second.readinto(memoryview(buf)) == 5 and bytes(buf) == b"bravo"
    za.close()
    with za.stream_at(data_at) as fh:  # closed archive: a fresh file at the offset
        assert fh.read(5) == b"bravo"
