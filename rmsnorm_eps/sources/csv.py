"""CSV and TSV dumps: each column of q values is a layer (small, hand-made dumps).

The first row is a header when any of its cells is not a number: its cells name the columns
(names must be unique and non-empty). Without a header the columns are named ``column0``,
``column1``, ... (a single column takes the file's stem). ``column=`` (``--column``) selects
one column: digits are always its 0-based index (``1`` is the second column, even when a
column is named ``1``), ``name:TEXT`` the column whose header is ``TEXT`` (``name:1``), other
text a header name. By default every column is a layer.

Values are parsed strictly, as decimal numbers (``1``, ``-2.5``, ``3e-7``) or ``nan``/``inf``/
``-inf``/``infinity`` in any case (nonfinite values are counted by the analysis): an empty cell,
any other text, a row with another number of cells or a line that is not UTF-8 is an error
naming the file, the line and the column. Text is UTF-8, with or without a byte-order mark
(``utf-8-sig``: what Excel's "CSV UTF-8" writes), decoded line by line so that an error names
the line holding the bad bytes. Fields are split by :mod:`csv` (quotes allowed). Files over
:data:`MAX_BYTES` or :data:`MAX_COLUMNS` columns are refused.

The file is parsed once when opened, all columns together (time linear in the file): every
cell is checked and, up to :data:`MAX_CELLS` cells, kept as float64 (the exact nearest double
of the decimal text), from which each column is then read. A bigger file of at most
:data:`REPARSE_COLUMNS` columns is parsed again per column when analysed (at most that many
passes); a bigger one with more columns is refused (save it with ``numpy.save``).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from rmsnorm_eps.errors import InputFileError, brief
from rmsnorm_eps.sources.interface import Opened, SerialSource

__all__ = [
    "MAX_BYTES",
    "MAX_CELLS",
    "MAX_COLUMNS",
    "REPARSE_COLUMNS",
    "CsvColumnSource",
    "open_csv",
    "open_tsv",
]

#: Largest CSV/TSV file read (bigger dumps belong in .npy/.npz/.safetensors).
MAX_BYTES = 256 << 20
#: Longest cell accepted (the csv module's own limit, made explicit).
_MAX_FIELD = 1 << 16
_ROWS_PER_CHUNK = 1 << 14
#: Most columns (each is a layer).
MAX_COLUMNS = 1 << 16
#: Most cells kept in memory as float64 (64 MiB) after the one parse at opening.
MAX_CELLS = 1 << 23
#: Most columns of a file over :data:`MAX_CELLS` cells (each parsed again when analysed).
REPARSE_COLUMNS = 8
#: What ``--column`` prefixes a header name with when the name is made of digits.
NAME_PREFIX = "name:"

#: What float() reads: around the number, the white space it strips (``\s`` less the
#: separators U+001C-U+001F, which ``\s`` matches and float() refuses).
_NUMBER = re.compile(
    r"[^\S\x1c-\x1f]*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)"
    r"[^\S\x1c-\x1f]*",
    re.IGNORECASE,
)


def _is_number(cell: str) -> bool:
    return _NUMBER.fullmatch(cell) is not None


@dataclass(frozen=True)
class _Layout:
    delimiter: str
    names: tuple[str, ...]  # one per column of the file
    header: bool
    rows: int  # data rows
    #: every value, shape (rows, columns), when the file holds at most MAX_CELLS cells
    values: np.ndarray | None = field(default=None, compare=False, repr=False)


def _open_bytes(path: Path) -> IO[bytes]:
    try:
        return open(path, "rb")
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None


def _lines(path: Path, fh: IO[bytes]) -> Iterator[str]:
    """The file's lines, each decoded from UTF-8 on its own (a byte-order mark before the
    first is dropped), so a decoding error names its own line. A line ending in a lone CR
    (old Mac text) is split there as :func:`open` with ``newline=""`` splits it."""
    number = 0
    for raw in fh:
        parts = raw.splitlines(keepends=True) if b"\r" in raw[:-2] else (raw,)
        for part in parts:
            number += 1
            try:
                text = part.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise InputFileError(path, f"line {number}: not UTF-8 text") from None
            yield text


def _rows(path: Path, fh: IO[bytes], delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """``(line number, cells)`` of every non-blank row; errors name the line."""
    reader = csv.reader(_lines(path, fh), delimiter=delimiter, strict=True)
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputFileError(path, f"line {reader.line_num}: {exc}") from None
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
    """Read the whole file once: header, column names, every cell checked, rows counted, and
    the values kept while they fit :data:`MAX_CELLS`."""
    csv.field_size_limit(_MAX_FIELD)
    names: tuple[str, ...] = ()
    header = False
    rows = 0
    blocks: list[np.ndarray] | None = []
    block: list[list[float]] = []
    with _open_bytes(path) as fh:
        for line, cells in _rows(path, fh, delimiter):
            if not names:
                _check_width(path, len(cells))
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
            if blocks is None:
                continue
            if rows * len(names) > MAX_CELLS:
                blocks = None  # too many to keep: each column is parsed again
                block = []
                if len(names) > REPARSE_COLUMNS:
                    raise InputFileError(
                        path,
                        f"more than {MAX_CELLS} cells in {len(names)} columns: a CSV/TSV dump "
                        f"of that size may have {REPARSE_COLUMNS} columns at most; save it with "
                        "numpy.save('q.npz', ...)",
                    )
                continue
            block.append([float(c) for c in cells])
            if len(block) == _ROWS_PER_CHUNK:
                blocks.append(np.array(block, np.float64))
                block = []
    if not names:
        raise InputFileError(path, "no rows")
    values = None
    if blocks is not None:
        if block:
            blocks.append(np.array(block, np.float64))
        values = np.concatenate(blocks) if blocks else np.empty((0, len(names)), np.float64)
    return _Layout(delimiter, names, header, rows, values)


def _check_width(path: Path, n: int) -> None:
    if n > MAX_COLUMNS:
        raise InputFileError(
            path,
            f"line 1: {n} columns, over the {MAX_COLUMNS} a CSV/TSV dump may have; save it with "
            "numpy.save('q.npz', ...)",
        )


def _check_names(path: Path, names: tuple[str, ...]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if not name:
            raise InputFileError(path, f"line 1: column {i + 1} has an empty header")
        if name in seen:
            raise InputFileError(path, f"line 1: duplicate column {brief(name)}")
        seen.add(name)


@dataclass(frozen=True)
class CsvColumnSource(SerialSource):
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
    def size(self) -> int:
        return self.layout.rows

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
        if layout.values is not None:
            for start in range(0, layout.rows, per):
                yield start, np.ascontiguousarray(layout.values[start : start + per, self.column])
            return
        names = layout.names
        buf: list[float] = []
        start = 0
        with _open_bytes(self.path) as fh:
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


def _select(path: Path, names: tuple[str, ...], column: str) -> int:
    """The index ``column`` names: digits are the 0-based index, ``name:TEXT`` the column
    headed ``TEXT``, other text a header name."""
    text = column.strip()
    if text.isascii() and text.isdecimal():
        if int(text) < len(names):
            return int(text)
    else:
        name = column[len(NAME_PREFIX) :] if column.startswith(NAME_PREFIX) else column
        if name in names:
            return names.index(name)
    shown = ", ".join(brief(n) for n in names[:10]) + (", ..." if len(names) > 10 else "")
    raise InputFileError(
        path,
        f"no column {brief(column)}: columns are {shown} (an index 0-{len(names) - 1}, or "
        f"{NAME_PREFIX}NAME for a header name made of digits)",
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
