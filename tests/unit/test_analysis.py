"""Unit tests of rmsnorm_eps.analysis (the ratio library) and compare_dump's shared parts:
layer discovery for a config inside the library, and every member accounted for."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.config import load_config
from rmsnorm_eps.dumps import npy_bytes
from rmsnorm_eps.errors import InputFileError


def _dump(tmp_path: Path) -> Path:
    """Layers a (readable), b (int32: unreadable) and a directory entry hiding q values."""
    path = tmp_path / "d.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("a.npy", npy_bytes(np.array([1e-3, 2.0])))
        zf.writestr("b.npy", npy_bytes(np.array([1, 2], np.int32)))
        zf.writestr("hidden.npy/", npy_bytes(np.array([1e-12])))
    return path


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(
        "schema_version: 1\ndefaults: {eps: 1.0e-6, placement: inside}\n", encoding="utf-8"
    )
    return path


def test_ratio_with_config_lists_unreadable_members(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path))
    with pytest.raises(InputFileError, match="unsupported dtype int32"):
        analyze_dump(_dump(tmp_path), None, config=cfg)
    report = analyze_dump(_dump(tmp_path), None, config=cfg, skip_unreadable=True)
    assert [layer.name for layer in report.layers] == ["a"]
    assert report.layers[0].eps == 1e-6 and report.layers[0].eps_source is not None
    assert sorted(u.name for u in report.skipped) == ["b", "hidden.npy/"]
    assert (report.members_total, report.members_analysed) == (3, 1)


def test_compare_from_config_lists_unreadable_members(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path))
    report = compare_dump(_dump(tmp_path), "config", "eps=1e-5", config=cfg, skip_unreadable=True)
    assert [layer.name for layer in report.layers] == ["a"]
    assert report.layers[0].spec_from.eps == 1e-6
    assert sorted(u.name for u in report.skipped) == ["b", "hidden.npy/"]
    assert (report.members_total, report.members_analysed) == (3, 1)


def test_compare_config_side_needs_a_config(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="needs a model config"):
        compare_dump(_dump(tmp_path), "config", "eps=1e-5", skip_unreadable=True)


def test_a_layer_failing_while_read_is_not_counted_as_analysed(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, a=np.array([1.0, 2.0]), c=np.array([-1.0, 2.0]))
    report = analyze_dump(path, 1e-6, skip_unreadable=True)
    assert [u.name for u in report.skipped] == ["c"]
    assert (report.members_total, report.members_analysed) == (2, 1)


def test_npy_file_is_one_member(tmp_path: Path) -> None:
    path = tmp_path / "q.npy"
    path.write_bytes(npy_bytes(np.array([1.0, 2.0])))
    report = analyze_dump(path, 1e-6)
    assert (report.members_total, report.members_analysed) == (1, 1)


def test_companions_count_as_analysed_members(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, **{"a": np.array([1.0, 2.0]), "a::position": np.array([0, 1])})
    report = analyze_dump(path, 1e-6)
    assert (report.members_total, report.members_analysed) == (2, 2)
    assert report.layers[0].first_token is not None
