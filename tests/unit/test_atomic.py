"""rmsnorm_eps.atomic: the file is the old one or the complete new one; no temporary is left,
even when the write fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rmsnorm_eps import atomic
from rmsnorm_eps.atomic import atomic_write_bytes, atomic_write_text
from rmsnorm_eps.errors import InputFileError


def test_writes_replace_whole_files(tmp_path: Path) -> None:
    path = tmp_path / "r.txt"
    atomic_write_text(path, "first\n")
    atomic_write_text(path, "é second\n")
    assert path.read_bytes() == "é second\n".encode()
    atomic_write_bytes(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.txt"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.txt"
    path.write_text("old\n")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", broken_replace)
    with pytest.raises(InputFileError, match=r"r\.txt: cannot write: disk full"):
        atomic_write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.txt"]


def test_a_symlink_target_is_replaced_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "target.txt"
    target.write_text("keep\n")
    link = tmp_path / "link.txt"
    os.symlink(target, link)
    atomic_write_text(link, "new\n")
    assert target.read_text() == "keep\n" and link.read_text() == "new\n"
    assert not link.is_symlink()
