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
        InputFileError,
        match=r"no column 'zz': columns are 'a', 'b' \(an index 0-1, or name:NAME for a header",
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
        # \s matches the separators U+001C-U+001F, which float() does not strip (fuzzed)
        ("a\n1\n\x1c.5\n", r"line 3, column 1 \('a'\): not a number"),
        ("a,b\n1,2\n3,4\x1f\n", r"line 3, column 2 \('b'\): not a number"),
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


def test_file_changed_after_opening_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file too big to keep is parsed again per column: a change since it was opened is an
    error (a small file is kept in memory: read once)."""
    from rmsnorm_eps.sources import csv as csv_source

    monkeypatch.setattr(csv_source, "MAX_CELLS", 1)
    path = _write(tmp_path / "q.csv", "a\n1\n2\n")
    (src,) = open_sources(path).sources
    _write(path, "a\n1\n2\n3\n")
    with pytest.raises(InputFileError, match=r"holds 3 rows now, 2 when opened"):
        _values(src)


def _column(src: Any) -> np.ndarray:
    return np.concatenate([v.copy() for _, v in src.iter_elements(1 << 20)])


def test_byte_order_mark_is_not_a_header(tmp_path: Path) -> None:
    """Excel's "CSV UTF-8" starts with a BOM: the first row stays a row of data."""
    path = tmp_path / "q.csv"
    path.write_bytes(b"\xef\xbb\xbf1e-9\n1.0\n")
    (src,) = open_sources(path).sources
    np.testing.assert_array_equal(_column(src), [1e-9, 1.0])
    path.write_bytes(b"\xef\xbb\xbfa,b\n1,2\n")
    assert [s.name for s in open_sources(path).sources] == ["a", "b"]


def test_digits_always_select_the_index(tmp_path: Path) -> None:
    """A header named like an index (``1,x``): ``--column 1`` is the second column, the one
    named ``1`` is ``--column name:1``."""
    path = _write(tmp_path / "q.csv", "1,x\n1e-9,2\n")
    (src,) = open_sources(path, column="1").sources
    assert src.name == "x"
    np.testing.assert_array_equal(_column(src), [2.0])
    (src,) = open_sources(path, column="name:1").sources
    assert src.name == "1"
    np.testing.assert_array_equal(_column(src), [1e-9])
    with pytest.raises(InputFileError, match="no column 'name:zz'"):
        open_sources(path, column="name:zz")


def test_non_utf8_error_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_bytes(b"a\n" + b"1\n" * 5000 + b"caf\xe9\n")
    with pytest.raises(InputFileError, match="line 5002: not UTF-8"):
        open_sources(path)


def test_all_columns_parsed_in_one_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """4,000 columns: the file is parsed once, not once per column."""
    from rmsnorm_eps.sources import csv as csv_source

    rng = np.random.default_rng(4)
    values = rng.random((30, 4000))
    path = tmp_path / "wide.csv"
    path.write_text("\n".join(",".join(repr(float(v)) for v in row) for row in values) + "\n")
    parses: list[int] = []
    real = csv_source._rows

    def counting(*args: Any) -> Any:
        parses.append(1)
        return real(*args)

    monkeypatch.setattr(csv_source, "_rows", counting)
    opened = open_sources(path)
    got = np.stack([_column(src) for src in opened.sources], axis=1)
    np.testing.assert_array_equal(got, values)
    assert len(parses) == 1


def test_big_files_parse_again_per_column_or_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rmsnorm_eps.sources import csv as csv_source

    monkeypatch.setattr(csv_source, "MAX_CELLS", 10)
    path = _write(tmp_path / "q.csv", "a,b\n" + "".join(f"{i},{2 * i}\n" for i in range(20)))
    _, b = open_sources(path).sources
    np.testing.assert_array_equal(_column(b), 2.0 * np.arange(20))
    wide = ",".join(f"c{i}" for i in range(9)) + "\n" + ("1," * 8 + "1\n") * 2
    with pytest.raises(InputFileError, match="more than 10 cells in 9 columns"):
        open_sources(_write(tmp_path / "w.csv", wide))
    monkeypatch.setattr(csv_source, "MAX_COLUMNS", 4)
    with pytest.raises(InputFileError, match="line 1: 9 columns, over the 4"):
        open_sources(_write(tmp_path / "w.csv", wide))
