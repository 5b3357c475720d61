"""rmsnorm_eps.sources.interface: open_sources dispatches by content, validates its
parameters, and counts layers for the cap (companions and unreadable members included as the
cap's rule says) once the headers are read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmsnorm_eps.errors import InputFileError, InvalidParameterError
from rmsnorm_eps.sources import MAX_LAYERS, open_sources
from rmsnorm_eps.sources.interface import Opened, Unreadable, check_layer_count, layer_count
from tests.conftest import write_many_npz


def test_layer_count_leaves_out_companions() -> None:
    opened = Opened(
        [object(), object()],
        [Unreadable("bad", "x"), Unreadable("a::position", "y")],
        members_total=9,
    )
    assert layer_count(opened) == 3
    assert check_layer_count(Path("q.npz"), opened, 3) is opened
    with pytest.raises(InputFileError) as exc:
        check_layer_count(Path("q.npz"), opened, 2)
    assert str(exc.value) == (
        "q.npz: 3 layers, more than --max-layers 2 (raise it with --max-layers N)"
    )
    assert MAX_LAYERS == 4096


def test_companions_are_not_layers(tmp_path: Path) -> None:
    """Ten layers each with ::position and ::batch (30 members) are within a cap of 10."""
    arrays: dict[str, np.ndarray] = {}
    for i in range(10):
        arrays[f"l{i}"] = np.array([1.0])
        arrays[f"l{i}::position"] = np.array([0], np.int64)
        arrays[f"l{i}::batch"] = np.array([0], np.int64)
    path = write_many_npz(tmp_path / "c.npz", arrays)
    opened = open_sources(path, max_layers=10)
    assert len(opened.sources) == 10 and opened.members_total == 30
    assert all(src.members == 3 for src in opened.sources)
    with pytest.raises(InputFileError, match="10 layers, more than --max-layers 9"):
        open_sources(path, max_layers=9)


def test_unreadable_members_count_as_layers_companions_do_not(tmp_path: Path) -> None:
    """With ``lenient`` an unreadable layer is still a layer; an unreadable companion is not."""
    path = tmp_path / "u.npz"
    np.savez(
        path,
        a=np.array([1.0]),
        b=np.array(["text"]),  # not a float dtype: unreadable, a layer
        **{"c::position": np.array([0], np.int64)},  # type: ignore[arg-type]  # no layer c
    )
    opened = open_sources(path, lenient=True, max_layers=2)
    assert sorted(u.name for u in opened.unreadable) == ["b", "c::position"]
    with pytest.raises(InputFileError, match="2 layers, more than --max-layers 1"):
        open_sources(path, lenient=True, max_layers=1)


def test_csv_columns_are_layers(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text(",".join(f"c{i}" for i in range(5)) + "\n" + ",".join(["1"] * 5) + "\n")
    assert len(open_sources(path, max_layers=5).sources) == 5
    with pytest.raises(InputFileError, match="5 layers, more than --max-layers 4"):
        open_sources(path, max_layers=4)


def test_parameters_are_checked_before_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.npy"
    with pytest.raises(InvalidParameterError, match="max_layers"):
        open_sources(missing, max_layers=0)
    with pytest.raises(InvalidParameterError, match="dtype"):
        open_sources(missing, dtype="float8")


def test_what_is_not_a_dump_is_named(tmp_path: Path) -> None:
    yaml = tmp_path / "c.yaml"
    yaml.write_text("schema_version: 1\n")
    with pytest.raises(InputFileError, match=r"a YAML file: not a \.npy"):
        open_sources(yaml)
    empty = tmp_path / "e.npy"
    empty.write_bytes(b"")
    with pytest.raises(InputFileError, match="empty file"):
        open_sources(empty)
    np.save(tmp_path / "q.npy", np.ones(2))
    with pytest.raises(InputFileError, match=r"--column applies to \.csv/\.tsv"):
        open_sources(tmp_path / "q.npy", column="0")
