"""Unit tests of rmsnorm_eps.sources.csv: strict cells, header optional, --column selection."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.sources import Kind, open_sources, sniff


def _write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8", newline="")
    else:
        path.write_bytes(text)
    return path


def _values(src: Any, per: int = 2) -> list[float]:
    return [float(v) for _, c in src.iter_elements(per) for v in c]


def test_every_column_is_a_layer_named_by_its_header(tmp_path: Path) -> None:
    path = _write(tmp_path / "q.csv", 'a,"b c"\n1,2\n3.5,nan\n-1e-3, INF\n\n')
    assert sniff(path) is Kind.CSV
    opened = open_sources(path)
    assert [s.name for s in opened.sources] == ["a", "b c"] and opened.members_total == 2
    a, b = opened.sources
    assert (a.shape, a.dtype_name, a.order, a.size) == ((3,), "float64", "C", 3)
    assert _values(a) == [1.0, 3.5, -1e-3]
    got = _values(b, 1)
    assert got[0] == 2.0 and math.isnan(got[1]) and got[2] == math.inf
    starts = [s for s, _ in a.iter_elements(2)]
    assert starts == [0, 2]
    mapped = list(a.iter_mapped(2, lambda s, v: float(v.sum()), threads=2))
    assert mapped == [(0, 4.5), (2, -1e-3)]


def test_values_are_the_exact_doubles(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.random(1000) * 10.0 ** rng.integers(-30, 30, 1000)
    path = _write(tmp_path / "x.csv", "\n".join(repr(float(v)) for v in x) + "\n")
    (src,) = open_sources(path).sources
    assert src.name == "x" and src.key is None
    np.testing.assert_array_equal(np.array(_values(src, 64)), x)


def test_headerless_columns_and_tsv(tmp_path: Path) -> None:
    path = _write(tmp_path / "q.tsv", "1\t2\n3\t4\n")
    assert sniff(path) is Kind.TSV
    opened = open_sources(path)
    assert [s.name for s in opened.sources] == ["column0", "column1"]
    assert _values(opened.sources[1]) == [2.0, 4.0]


@pytest.mark.parametrize(("column", "name"), [("b", "b"), ("0", "a"), ("2", "2")])
def test_column_selects_by_name_or_index(tmp_path: Path, column: str, name: str) -> None:
    path = _write(tmp_path / "q.csv", "a,b,2\n1,2,3\n")
    opened = open_sources(path, column=column)
    assert [s.name for s in opened.sources] == [name] and opened.members_total == 1


def test_column_errors(tmp_path: Path) -> None:
    path = _write(tmp_path / "q.csv", "a,b\n1,2\n")
    with pytest.raises(
        InputFileError, match=r"no column 'zz': columns are 'a', 'b' \(or an index 0-1\)"
    ):
        open_sources(path, column="zz")
    with pytest.raises(InputFileError, match=r"no column '5'"):
        open_sources(path, column="5")
    npy = tmp_path / "q.npy"
    np.save(npy, np.ones(3))
    with pytest.raises(InputFileError, match=r"--column applies to .csv/.tsv dumps only"):
        open_sources(npy, column="a")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b\n1,2\n3,\n", r"line 3, column 2 \('b'\): empty cell"),
        ("a,b\n1,2\n3, \n", r"line 3, column 2 \('b'\): empty cell"),
        ("a,b\n1,2\n3,x1\n", r"line 3, column 2 \('b'\): not a number: 'x1'"),
        ("a\n1_000\n", r"line 2, column 1 \('a'\): not a number: '1_000'"),
        ("a\n0x10\n", "not a number: '0x10'"),
        ("a,b\n1,2\n3\n", "line 3: 1 cells, the first row has 2"),
        ("a,a\n1,2\n", "line 1: duplicate column 'a'"),
        ("a,\n1,2\n", "line 1: column 2 has an empty header"),
        ("a\n", "empty array"),
        ("\n\n", "no rows"),
        (",\n", "line 1: empty cells"),
        ('a\n"1\n', "line"),
        (b"a\n1\n\xff\n", "not UTF-8"),
        ("a\n" + "1" * 70_000 + "\n", "field larger than field limit"),
    ],
)
def test_bad_cells_name_file_line_and_column(
    tmp_path: Path, text: str | bytes, message: str
) -> None:
    path = _write(tmp_path / "bad.csv", text)
    with pytest.raises(InputFileError, match=message) as err:
        opened = open_sources(path, lenient=True)
        for src in opened.sources:
            if src.size == 0:
                raise InputFileError(src.path, "empty array", key=src.key)
    assert "bad.csv" in str(err.value)


def test_file_over_the_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rmsnorm_eps.sources.csv as mod

    monkeypatch.setattr(mod, "MAX_BYTES", 8)
    path = _write(tmp_path / "big.csv", "a\n1\n2\n3\n4\n")
    with pytest.raises(InputFileError, match=r"is over the 0 MiB read from a CSV/TSV file"):
        open_sources(path)


def test_file_changed_after_opening_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "q.csv", "a\n1\n2\n")
    (src,) = open_sources(path).sources
    _write(path, "a\n1\n2\n3\n")
    with pytest.raises(InputFileError, match=r"holds 3 rows now, 2 when opened"):
        _values(src)
