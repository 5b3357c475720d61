"""rmsnorm_eps.sources.sniff: the format by content (binary) or by content and name (text),
whatever the extension says; only regular files are read."""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.dumps import npy_bytes
from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources.sniff import Kind, check_regular_file, read_head, sniff


def _zip(first: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(first, b"x")
    return buf.getvalue()


def _safetensors() -> bytes:
    header = json.dumps({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    return struct.pack("<Q", len(header)) + header + b"\0\0\0\0"


CASES = [
    ("a.bin", b"", Kind.EMPTY),
    ("q.txt", npy_bytes(np.ones(2)), Kind.NPY),  # binary formats ignore the extension
    ("q.npy", _zip("a.npy"), Kind.ZIP),
    ("model.npz", _zip("archive/data.pkl"), Kind.TORCH_ZIP),
    ("x.json", _safetensors(), Kind.SAFETENSORS),
    ("m.bin", b"GGUF\x03\x00\x00\x00" + b"\0" * 16, Kind.GGUF),
    ("config", b'  {"a": 1}', Kind.JSON),
    ("c.json", b"[1, 2]", Kind.JSON),
    ("q.csv", b"a,b\n1,2\n", Kind.CSV),
    ("q.tsv", b"a\tb\n1\t2\n", Kind.TSV),
    ("c.yaml", b"schema_version: 1\n", Kind.YAML),
    ("c.txt", b"---\na: 1\n", Kind.YAML),
    ("c.txt", b"plain words\n", Kind.UNKNOWN),
    ("c.bin", b"\x80\x02\x00\x01binary", Kind.UNKNOWN),
]


@pytest.mark.parametrize(("name", "data", "kind"), CASES, ids=[c[2].value for c in CASES])
def test_kinds(tmp_path: Path, name: str, data: bytes, kind: Kind) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    assert sniff(path) is kind


def test_an_empty_zip_is_an_npz(tmp_path: Path) -> None:
    path = tmp_path / "e.npz"
    with zipfile.ZipFile(path, "w"):
        pass
    assert sniff(path) is Kind.ZIP


def test_read_head_and_regular_files(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abcdef")
    assert read_head(path, 4) == b"abcd" and read_head(path, 100) == b"abcdef"
    assert check_regular_file(path) == 6
    with pytest.raises(InputFileError, match=r"directory|regular"):
        check_regular_file(tmp_path)
    with pytest.raises(InputFileError):
        check_regular_file(tmp_path / "missing")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    with pytest.raises(InputFileError):
        check_regular_file(fifo)
