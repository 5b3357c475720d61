"""The rich side of the text reports: what is printed in colour, and what a narrow terminal
must fold (:func:`rmsnorm_eps.reports.formats.text.render_blocks` sends here only those
blocks; everything else is written by the plain table writer).

The console never reads markup from strings (``markup=False``): a name like ``[/x]`` or
``[link=...]`` is shown as it is written, never interpreted. On a terminal of W columns a
table that does not fit is fitted by the rule of :mod:`rmsnorm_eps.reports.table` (drop the
names' shared prefix, then shorten them in the middle; :func:`fit_table`); if the name column
would be narrower than ``MIN_NAME`` characters, or the table has no name column, it is shown
one block per row (``name`` then ``  column: value`` lines). A word of running text longer
than W is shortened in the middle.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import replace

from rich import box
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

from rmsnorm_eps.reports import blocks
from rmsnorm_eps.reports.options import RenderOptions
from rmsnorm_eps.reports.table import ellipsize, fit_names, shorten_names

__all__ = ["fit_table", "render"]

#: Console width when the output is not a terminal: nothing is ever wrapped.
_UNBOUNDED = 1_000_000


# ----------------------------------------------------------------------------- tables
def _plain(cell: RenderableType) -> str:
    if isinstance(cell, Text):
        return cell.plain
    return str(cell)


def _with_names(table: Table, column: int, shown: dict[str, str]) -> Table:
    """A copy of ``table`` whose column ``column`` shows ``shown[name]`` for each name."""
    col = table.columns[column]
    cells: list[RenderableType] = []
    for cell in col.cells:
        new = shown.get(_plain(cell), _plain(cell))
        cells.append(Text(new, style=cell.style) if isinstance(cell, Text) else new)
    out = _copy(table)
    out.columns[column] = replace(col, _cells=cells)
    return out


def _copy(table: Table) -> Table:
    """A shallow copy of ``table`` with its own list of columns, none of which wraps or takes
    a share (``ratio``) of the line: each is as wide as its widest cell."""
    import copy

    out = copy.copy(table)
    out.columns = [replace(c, no_wrap=True, ratio=None) for c in table.columns]
    return out


def _width(console: Console, table: Table) -> int:
    """Columns the table needs to show every cell on one line."""
    options = console.options.update_width(_UNBOUNDED)
    return Measurement.get(console, options, table).maximum


def _header(column: Column) -> str:
    return " ".join(_plain(column.header).split())


def _compact(
    table: Table, width: int, names: dict[str, str], named: bool = False
) -> list[RenderableType]:
    """One block per row: the first cell on a line, then ``  header: value`` pairs packed on
    lines of at most ``width`` characters (a pair is never split). The first column's header
    is a line of its own above the blocks unless the column holds names (``named``)."""
    parts: list[RenderableType] = []
    if table.title is not None:
        parts.append(Text(_plain(table.title)))
    columns = table.columns
    if columns and table.show_header and not named and _header(columns[0]):
        parts.append(Text(ellipsize(_header(columns[0]), width)))
    rows = list(zip(*(list(c.cells) for c in columns), strict=True)) if columns else []
    inner = max(width - 2, 1)  # the pairs are indented by two spaces
    for r, cells in enumerate(rows):
        first = _plain(cells[0])
        style = (table.rows[r].style if r < len(table.rows) else None) or ""
        parts.append(Text(names.get(first, ellipsize(first, width)), style=style))
        lines: list[str] = []
        for column, cell in zip(columns[1:], cells[1:], strict=True):
            value = " ".join(_plain(cell).split("\n"))
            head = _header(column) if table.show_header else ""
            if not value and not head:
                continue
            pair = f"{head}: {value}" if head else value
            if lines and cell_len(lines[-1]) + 2 + cell_len(pair) <= inner:
                lines[-1] += "  " + pair
            else:
                lines.append(pair)  # (a pair longer than a line wraps between its words)
        if lines:
            body = _fit_text(Text("\n".join(lines), style=style), inner)
            parts.append(Padding(body, (0, 0, 0, 2)))
    parts.append(Text(""))  # a blank line after the blocks, as after a table
    return parts


def fit_table(
    table: Table, console: Console, width: int | None, noun: str | None = None, column: int = 0
) -> list[RenderableType]:
    """``table`` fitted into ``width`` columns by the rule of :mod:`rmsnorm_eps.reports.table`
    (``noun``: the table has names in ``column``), then one block per row if it still does
    not fit. None: not a terminal, the table with every cell on one line, however long."""
    fitted = _copy(table)
    if width is None or _width(console, fitted) <= width:
        return [fitted]
    if noun is None:
        return _compact(table, width, {})
    full = [_plain(c) for c in table.columns[column].cells]
    untitled = _copy(table)
    untitled.title = None
    fit = fit_names(
        full,
        _header(table.columns[column]),
        lambda shown: _width(console, _with_names(untitled, column, shown)),
        width,
        noun,
    )
    lead: list[RenderableType] = [Text(line) for line in fit.lead]
    if lead and table.title is not None:  # the title first, then the line about the names
        lead.insert(0, Text(_plain(table.title)))
        table = untitled
    if fit.fits:
        return [*lead, _with_names(table, column, fit.shown)]
    if column != 0:
        return _compact(table, width, {})
    short = shorten_names(fit.shown.values(), width)  # (3) one block per row
    return [*lead, *_compact(table, width, {n: short[s] for n, s in fit.shown.items()}, True)]


def _fit_text(part: Text, width: int) -> Text:
    """``part`` with every word longer than ``width`` shortened in the middle (rich wraps
    running text between words, so no word is then split)."""
    plain = part.plain
    if all(cell_len(w) <= width for w in plain.split()):
        return part
    lines = [" ".join(ellipsize(w, width) for w in line.split(" ")) for line in plain.split("\n")]
    return Text("\n".join(lines), style=part.style)


def _rich_table(table: blocks.Table) -> Table:
    """The rich table of a plain one (every column one line per cell)."""
    out = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        title=table.title,
        title_justify="left",
        show_header=table.show_header,
    )
    for column in table.columns:
        out.add_column(column.header, justify=column.justify, no_wrap=True)
    for row, style in zip(table.rows, table.styles, strict=True):
        cells = [
            Text(c.text, style=c.style or "") if isinstance(c, blocks.Text) else c for c in row
        ]
        out.add_row(*cells, style=style)
    return out


def _shown(block: blocks.Block, console: Console, width: int | None) -> list[RenderableType]:
    """What rich prints for ``block``: fitted to ``width`` (None: unbounded)."""
    if isinstance(block, blocks.Text):
        text = Text(block.text, style=block.style or "")
        return [text if width is None else _fit_text(text, width)]
    if isinstance(block, blocks.NamedTable):
        return fit_table(_rich_table(block.table), console, width, block.noun, block.column)
    return fit_table(_rich_table(block), console, width)


def render(parts: Sequence[blocks.Block], options: RenderOptions) -> str:
    """Print ``parts`` with rich (colour only if ``options.color``), fitted to
    ``options.width`` (None: not a terminal, no wrapping); the console's text as it is."""
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=_UNBOUNDED if options.width is None else options.width,
        color_system="standard" if options.color else None,
        force_terminal=options.color,
        no_color=not options.color,
        markup=False,
        highlight=False,
        emoji=False,
        soft_wrap=False,
    )
    for part in parts:
        for piece in _shown(part, console, options.width):
            console.print(piece)
    return buf.getvalue()
