"""Unit tests of rmsnorm_eps.merge.combine: merging shards equals analysing their
concatenation; in-memory and file merges agree; the bound and top_k rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.dumps import npy_bytes
from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.merge.combine import merge_reports, merge_summaries
from rmsnorm_eps.merge.summary_format import write_summary


def _q(seed: int, rows: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q = rng.uniform(0, 1, (rows, 4)) * 10.0 ** rng.integers(-9, 0, (rows, 1))
    q[0, 1] = np.nan
    return q


def _shards(tmp_path: Path, top: int = 3) -> tuple[list[Path], np.ndarray]:
    parts = [_q(1, 5), _q(2, 7)]
    paths = []
    for i, part in enumerate(parts):
        dump = tmp_path / f"shard{i}.npy"
        dump.write_bytes(npy_bytes(part))
        out = tmp_path / f"s{i}.json"
        write_summary(analyze_dump(dump, 1e-6, top_k=top), out)
        paths.append(out)
    return paths, np.concatenate(parts)


def test_merge_equals_analysis_of_the_concatenation(tmp_path: Path) -> None:
    paths, whole = _shards(tmp_path)
    (tmp_path / "whole.npy").write_bytes(npy_bytes(whole))
    want = analyze_dump(tmp_path / "whole.npy", 1e-6, top_k=3).layers[0]
    got = merge_summaries(paths).layers[0]
    assert got.shape == want.shape == (12,) or got.shape == (12, 4)
    fields = ("count", "nan_count", "below_bound", "zero_count", "min_q", "max_q", "decades")
    assert [getattr(got, f) for f in fields] == [getattr(want, f) for f in fields]
    assert [w.index for w in got.worst] == [w.index for w in want.worst]
    assert [w.shard for w in got.worst] == [int(w.index[0] >= 5) for w in got.worst]


def test_merge_reports_equals_file_merge(tmp_path: Path) -> None:
    paths, _ = _shards(tmp_path)
    reports = [analyze_dump(tmp_path / f"shard{i}.npy", 1e-6, top_k=3) for i in range(2)]
    a = merge_reports(reports, ["s0", "s1"]).layers
    b = merge_summaries(paths).layers
    assert repr(a) == repr(b)  # NaN examples: compare their text, NaN != NaN


def test_top_k_cannot_exceed_what_the_shards_kept(tmp_path: Path) -> None:
    paths, _ = _shards(tmp_path, top=2)
    assert merge_summaries(paths, top_k=1).top_k == 1
    with pytest.raises(InvalidParameterError, match="top 3 exceeds"):
        merge_summaries(paths, top_k=3)


def test_different_bounds_need_an_explicit_one(tmp_path: Path) -> None:
    paths, _ = _shards(tmp_path)
    dump = tmp_path / "shard1.npy"
    write_summary(analyze_dump(dump, 1e-6, top_k=3, delta=0.1), paths[1])
    with pytest.raises(InvalidParameterError, match="different bounds"):
        merge_summaries(paths)


def test_layer_names_must_agree(tmp_path: Path) -> None:
    for i, names in enumerate((("a", "b"), ("a", "c"))):
        np.savez(tmp_path / f"d{i}.npz", **{n: np.ones(3) for n in names})
        write_summary(analyze_dump(tmp_path / f"d{i}.npz", 1e-6), tmp_path / f"m{i}.json")
    with pytest.raises(InputFileError, match="differ from"):
        merge_summaries([tmp_path / "m0.json", tmp_path / "m1.json"])


def test_nothing_to_merge() -> None:
    with pytest.raises(InvalidParameterError, match="at least one"):
        merge_summaries([])
