"""Text format helpers: rich tables for people, readable without colour (NO_COLOR, pipes, CI
logs). Numbers are rounded for display only; every decision was taken on unrounded values.

The console never reads markup from strings (``markup=False``): a name like ``[/x]`` or
``[link=...]`` is shown as it is written, never interpreted.

Width (docs/reports.md, "Text reports at any width"):

* **Not a terminal** (``RenderOptions.width`` is None: ``-o FILE``, ``--report``, a pipe): no
  line is wrapped and no name is shortened; every line is as long as its content.
* **A terminal of W columns**: no number and no word is split across lines. A table that does
  not fit is fitted by the rule of :mod:`rmsnorm_eps.reports.table` (drop the names' shared
  prefix, then shorten them in the middle; :func:`fit_table`); if the name column would be
  narrower than ``MIN_NAME`` characters, or the table has no name column, it is shown one
  block per row (``name`` then ``  column: value`` lines). A word of running text longer
  than W is shortened in the middle.

No line ends with spaces.

Without colour, a table that fits is written by the plain table writer
(:func:`rmsnorm_eps.reports.table.table_lines`, the layout rich gives it); rich lays out what
is coloured, and the blocks and wrapped text of a narrow terminal.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, replace

from rich import box
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

from rmsnorm_eps.escape import no_ci_command
from rmsnorm_eps.reports.options import RenderOptions
from rmsnorm_eps.reports.table import Column as PlainColumn
from rmsnorm_eps.reports.table import ellipsize, fit_names, shorten_names, table_lines

__all__ = [
    "NamedTable",
    "fit_table",
    "fmt",
    "fmt_index",
    "plain_table_lines",
    "render_renderables",
    "simple_table",
]

#: Console width when the output is not a terminal: nothing is ever wrapped.
_UNBOUNDED = 1_000_000
#: One colour code at the very end of a line.
_CLOSING_CODE = re.compile(r"\x1b\[[0-9;]*m$")


def strip_trailing_spaces(line: str) -> str:
    """``line`` without the spaces at its end, keeping the colour codes that close it.

    Linear in the line's length: a table row padded to a 10,000-character name has as many
    trailing spaces, and a lookahead regex (`` +(?=(?:ESC[...m)*$)``) tries every one of them
    as a start, quadratic (80 s for one report of hostile names)."""
    if "\x1b" not in line:
        return line.rstrip(" ")
    codes: list[str] = []
    rest = line.rstrip(" ")
    while (m := _CLOSING_CODE.search(rest)) is not None:
        codes.append(m.group(0))
        rest = rest[: m.start()].rstrip(" ")
    return rest + "".join(reversed(codes))


def fmt(value: float | None, digits: int = 6) -> str:
    """Format a number for display: ``digits`` significant digits, '-' for None."""
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


def fmt_index(index: tuple[int, ...]) -> str:
    """``[i, j]``."""
    return "[" + ", ".join(str(i) for i in index) + "]"


def simple_table(*columns: str) -> Table:
    """A header-ruled table: the first column left-aligned, the others right-aligned."""
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for i, name in enumerate(columns):
        t.add_column(name, justify="left" if i == 0 else "right")
    return t


@dataclass(frozen=True)
class NamedTable:
    """A table whose column ``column`` holds names from an input (layers, modules, patterns):
    on a narrow terminal those names are shortened by :func:`fit_table`'s rule. ``noun`` names
    them in the ``NOUN under PREFIX`` line."""

    table: Table
    noun: str = "layers"
    column: int = 0

    def __rich__(self) -> Table:
        """Printed by rich directly (not through :func:`render_renderables`): the table."""
        return self.table


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


def _reproducible(table: Table) -> bool:
    """Whether :func:`~rmsnorm_eps.reports.table.table_lines` lays ``table`` out exactly as
    rich would (the style of every table of the reports)."""
    table_ok = (
        table.box in (box.SIMPLE_HEAD, box.SIMPLE)
        and not table.pad_edge
        and table.show_edge
        and not (table.show_footer or table.show_lines or table.leading)
        and not table.collapse_padding
        and table.padding == (0, 1, 0, 1)
        and (table.title is None or table.title_justify == "left")
        and table.caption is None
        and table.width is None
        and table.min_width is None
    )
    return (
        table_ok
        and bool(table.columns)
        and all(
            c.width is None and c.min_width is None and c.max_width is None for c in table.columns
        )
    )


def plain_table_lines(table: Table) -> list[str] | None:
    """The lines rich prints for ``table`` without colour (trailing spaces left in), made by
    the plain table writer, or None for a table whose style or cells it does not reproduce
    (then rich lays it out): cells of one line, a title no wider than the table."""
    if not _reproducible(table):
        return None
    body = [[_plain(c) for c in col.cells] for col in table.columns]
    if any("\n" in v for col in body for v in col):
        return None
    columns = [
        PlainColumn(_plain(c.header), c.justify if c.justify in ("right", "center") else "left")
        for c in table.columns
    ]
    lines = table_lines(columns, zip(*body, strict=True), None, table.show_header)
    if table.title is None:
        return lines
    title = _plain(table.title)
    if "\n" in title or cell_len(title) > cell_len(lines[0]):
        return None  # rich folds a title at the table's width
    return [title, *lines]


def _plain_fits(table: Table, options: RenderOptions) -> list[str] | None:
    """:func:`plain_table_lines` for a long table printed without colour, when it fits."""
    if options.color:
        return None
    lines = plain_table_lines(_copy(table))
    if lines is None or options.width is None:
        return lines
    return lines if max(cell_len(x.rstrip()) for x in lines) <= options.width else None


def _fit_text(part: Text, width: int) -> Text:
    """``part`` with every word longer than ``width`` shortened in the middle (rich wraps
    running text between words, so no word is then split)."""
    plain = part.plain
    if all(cell_len(w) <= width for w in plain.split()):
        return part
    lines = [" ".join(ellipsize(w, width) for w in line.split(" ")) for line in plain.split("\n")]
    return Text("\n".join(lines), style=part.style)


def render_renderables(parts: list[RenderableType], options: RenderOptions) -> str:
    """Render rich renderables to a string (colour only if ``options.color``), fitted to
    ``options.width`` (None: not a terminal, no wrapping); no line ends with spaces."""
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
        table = part.table if isinstance(part, NamedTable) else part
        plain = _plain_fits(table, options) if isinstance(table, Table) else None
        if plain is not None:  # thousands of rows: rich's layout, without rich's cost
            buf.write("".join(f"{x}\n" for x in plain))
            continue
        if isinstance(part, NamedTable):
            shown = fit_table(part.table, console, options.width, part.noun, part.column)
        elif isinstance(part, Table):
            shown = fit_table(part, console, options.width)
        elif isinstance(part, Text) and options.width is not None:
            shown = [_fit_text(part, options.width)]
        else:
            shown = [part]
        for piece in shown:
            console.print(piece)
    out = "".join(strip_trailing_spaces(line) + "\n" for line in buf.getvalue().splitlines())
    return no_ci_command(out)
