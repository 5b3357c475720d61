"""CSV and TSV dumps: each column of q values is a layer (small, hand-made dumps).

The first row is a header when any of its cells is not a number: its cells name the columns
(names must be unique and non-empty). Without a header the columns are named ``column0``,
``column1``, ... (a single column takes the file's stem). ``column=`` (``--column``) selects
one column by header name or 0-based index; by default every column is a layer.

Values are parsed strictly, as decimal numbers (``1``, ``-2.5``, ``3e-7``) or ``nan``/``inf``/
``-inf``/``infinity`` in any case (nonfinite values are counted by the analysis): an empty cell,
any other text, a row with another number of cells or a line that is not UTF-8 is an error
naming the file, the line and the column. Fields are split by :mod:`csv` (quotes allowed).
Files over :data:`MAX_BYTES` are refused. The file is read twice in bounded chunks of rows:
once when opened (every cell checked, rows counted), then per layer when analysed; values are
float64 (the exact nearest double of the decimal text).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from rmsnorm_eps.errors import InputFileError, brief
from rmsnorm_eps.sources.interface import Opened

__all__ = ["MAX_BYTES", "CsvColumnSource", "open_csv", "open_tsv"]

T = TypeVar("T")

#: Largest CSV/TSV file read (bigger dumps belong in .npy/.npz/.safetensors).
MAX_BYTES = 256 << 20
#: Longest cell accepted (the csv module's own limit, made explicit).
_MAX_FIELD = 1 << 16
_ROWS_PER_CHUNK = 1 << 14

_NUMBER = re.compile(
    r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)\s*", re.IGNORECASE
)


def _is_number(cell: str) -> bool:
    return _NUMBER.fullmatch(cell) is not None


@dataclass(frozen=True)
class _Layout:
    delimiter: str
    names: tuple[str, ...]  # one per column of the file
    header: bool
    rows: int  # data rows


def _open_text(path: Path) -> IO[str]:
    try:
        return open(path, encoding="utf-8", newline="")
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None


def _rows(path: Path, fh: IO[str], delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """``(line number, cells)`` of every non-blank row; errors name the line."""
    reader = csv.reader(fh, delimiter=delimiter, strict=True)
    line = 0
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputFileError(path, f"line {reader.line_num}: {exc}") from None
        except UnicodeDecodeError:
            raise InputFileError(path, f"line {line + 1}: not UTF-8 text") from None
        line = reader.line_num
        if cells and any(cells):
            yield line, cells
        elif cells:  # a row of empty cells
            raise InputFileError(path, f"line {line}: empty cells")


def _cell_error(
    path: Path, line: int, col: int, names: tuple[str, ...], cell: str
) -> InputFileError:
    what = "empty cell" if not cell.strip() else f"not a number: {brief(cell)}"
    return InputFileError(path, f"line {line}, column {col + 1} ({brief(names[col])}): {what}")


def _layout(path: Path, delimiter: str) -> _Layout:
    """Read the whole file once: header, column names, every cell checked, rows counted."""
    csv.field_size_limit(_MAX_FIELD)
    names: tuple[str, ...] = ()
    header = False
    rows = 0
    with _open_text(path) as fh:
        for line, cells in _rows(path, fh, delimiter):
            if not names:
                header = not all(_is_number(c) for c in cells)
                if header:
                    names = tuple(c.strip() for c in cells)
                    _check_names(path, names)
                    continue
                names = (
                    (path.stem,)
                    if len(cells) == 1
                    else tuple(f"column{i}" for i in range(len(cells)))
                )
            if len(cells) != len(names):
                raise InputFileError(
                    path, f"line {line}: {len(cells)} cells, the first row has {len(names)}"
                )
            for col, cell in enumerate(cells):
                if not _is_number(cell):
                    raise _cell_error(path, line, col, names, cell)
            rows += 1
    if not names:
        raise InputFileError(path, "no rows")
    return _Layout(delimiter, names, header, rows)


def _check_names(path: Path, names: tuple[str, ...]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if not name:
            raise InputFileError(path, f"line 1: column {i + 1} has an empty header")
        if name in seen:
            raise InputFileError(path, f"line 1: duplicate column {brief(name)}")
        seen.add(name)


@dataclass(frozen=True)
class CsvColumnSource:
    """One column of a CSV/TSV file as an :class:`~rmsnorm_eps.sources.ArraySource` (float64,
    shape ``(rows,)``), parsed again in chunks of rows whenever it is read."""

    path: Path
    key: str | None
    column: int
    layout: _Layout

    @property
    def name(self) -> str:
        return self.key if self.key is not None else self.path.stem

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(np.float64)

    @property
    def dtype_name(self) -> str:
        return "float64"

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.layout.rows,)

    @property
    def order(self) -> str:
        return "C"

    @property
    def size(self) -> int:
        return self.layout.rows

    @property
    def stored_as(self) -> str | None:
        return None

    @property
    def members(self) -> int:
        return 1

    def companion(self, name: str) -> None:
        """CSV columns have no companion arrays."""
        del name

    def iter_elements(self, elems_per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, values)``: the column's values in row order, at most ``elems_per_chunk``
        (and :data:`_ROWS_PER_CHUNK`) at a time."""
        per = max(1, min(elems_per_chunk, _ROWS_PER_CHUNK))
        layout = self.layout
        names = layout.names
        buf: list[float] = []
        start = 0
        with _open_text(self.path) as fh:
            rows = _rows(self.path, fh, layout.delimiter)
            if layout.header:
                next(rows, None)
            for line, cells in rows:
                if len(cells) != len(names):  # the file changed since it was opened
                    raise InputFileError(
                        self.path, f"line {line}: {len(cells)} cells", key=self.key
                    )
                cell = cells[self.column]
                if not _is_number(cell):
                    raise _cell_error(self.path, line, self.column, names, cell)
                buf.append(float(cell))
                if len(buf) == per:
                    yield start, np.array(buf, np.float64)
                    start += per
                    buf.clear()
        if buf:
            yield start, np.array(buf, np.float64)
            start += len(buf)
        if start != layout.rows:
            raise InputFileError(
                self.path, f"holds {start} rows now, {layout.rows} when opened", key=self.key
            )

    def iter_mapped(
        self, elems_per_chunk: int, fn: Callable[[int, np.ndarray], T], threads: int = 1
    ) -> Iterator[tuple[int, T]]:
        """``(start, fn(start, values))`` over :meth:`iter_elements` (one thread: parsing text
        holds the GIL)."""
        del threads
        for start, values in self.iter_elements(elems_per_chunk):
            yield start, fn(start, values)


def _select(path: Path, names: tuple[str, ...], column: str) -> int:
    if column in names:
        return names.index(column)
    text = column.strip()
    if text.isdecimal() and int(text) < len(names):
        return int(text)
    shown = ", ".join(brief(n) for n in names[:10]) + (", ..." if len(names) > 10 else "")
    raise InputFileError(
        path, f"no column {brief(column)}: columns are {shown} (or an index 0-{len(names) - 1})"
    )


def _open(path: Path, size: int, delimiter: str, column: str | None) -> Opened:
    if size > MAX_BYTES:
        raise InputFileError(
            path,
            f"{size} bytes is over the {MAX_BYTES >> 20} MiB read from a CSV/TSV file; "
            "save large dumps with numpy.save('q.npy', array)",
        )
    layout = _layout(path, delimiter)
    keyed = layout.header or len(layout.names) > 1
    columns = range(len(layout.names)) if column is None else [_select(path, layout.names, column)]
    sources = [
        CsvColumnSource(path, layout.names[i] if keyed else None, i, layout) for i in columns
    ]
    return Opened(sources, [], len(sources))


def open_csv(
    path: Path, size: int, stored_as: str | None, lenient: bool, column: str | None = None
) -> Opened:
    """Open a comma-separated dump (see the module docstring). ``stored_as`` does not apply
    (values are decimal text); a bad cell fails the file, even ``lenient``: it is read whole
    when opened."""
    del stored_as, lenient
    return _open(path, size, ",", column)


def open_tsv(
    path: Path, size: int, stored_as: str | None, lenient: bool, column: str | None = None
) -> Opened:
    """Open a tab-separated dump (as :func:`open_csv`)."""
    del stored_as, lenient
    return _open(path, size, "\t", column)
