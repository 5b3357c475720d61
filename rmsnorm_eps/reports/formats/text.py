"""Text format helpers: rich tables for people, readable without colour (NO_COLOR, pipes, CI
logs). Numbers are rounded for display only; every decision was taken on unrounded values.

The console never reads markup from strings (``markup=False``): a name like ``[/x]`` or
``[link=...]`` is shown as it is written, never interpreted.

Width (docs/reports.md, "Text reports at any width"):

* **Not a terminal** (``RenderOptions.width`` is None: ``-o FILE``, ``--report``, a pipe): no
  line is wrapped and no name is shortened; every line is as long as its content.
* **A terminal of W columns**: no number and no word is split across lines. A table that does
  not fit is fitted by one rule, :func:`fit_table`: (1) drop the prefix shared by every name of
  its name column, up to a ``.`` or ``/`` (a line ``layers under PREFIX`` says so); (2) if it
  still does not fit, shorten each name in the middle (``head…tail``, distinct names stay
  distinct); (3) if the name column would be narrower than :data:`MIN_NAME` characters, or the
  table has no name column, show one block per row (``name`` then ``  column: value`` lines).
  A word of running text longer than W is shortened in the middle.

No line ends with spaces.

A table of more than :data:`PLAIN_TABLE_ROWS` rows (thousands of layers) is written without
rich when no colour is wanted: :func:`plain_table_lines` lays it out exactly as rich would
(a test renders tables both ways), in time linear in its cells.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence
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

__all__ = [
    "ELLIPSIS",
    "MIN_NAME",
    "NamedTable",
    "common_prefix",
    "ellipsize",
    "fit_table",
    "fmt",
    "fmt_index",
    "plain_table_lines",
    "render_renderables",
    "shorten_names",
    "simple_table",
]

#: Marks the characters left out of a shortened name.
ELLIPSIS = "…"
#: Narrowest name column worth a table; below it the compact layout is used.
MIN_NAME = 16
#: Console width when the output is not a terminal: nothing is ever wrapped.
_UNBOUNDED = 1_000_000
#: Tables with more rows than this are laid out by :func:`plain_table_lines` (no colour).
PLAIN_TABLE_ROWS = 200
#: Spaces at the end of a line, before any colour codes that close it.
_TRAILING = re.compile(r" +(?=(?:\x1b\[[0-9;]*m)*$)")


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


# ----------------------------------------------------------------------------- names
def common_prefix(names: Sequence[str]) -> str:
    """The longest prefix of every name in ``names`` (two or more distinct names) that ends
    with ``.`` or ``/`` and leaves something of each name; ``""`` when there is none."""
    distinct = sorted(set(names))
    if len(distinct) < 2:
        return ""
    first, last = distinct[0], distinct[-1]  # sorted: their common prefix is everyone's
    same = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), None)
    prefix = first[: len(first) if same is None else same]
    while prefix:
        cut = max(prefix.rfind("."), prefix.rfind("/")) + 1
        prefix = prefix[:cut]
        if prefix and all(len(n) > len(prefix) for n in distinct):
            return prefix
        prefix = prefix[:-1]
    return ""


def ellipsize(name: str, width: int, head: int | None = None) -> str:
    """``name`` if it takes at most ``width`` terminal cells, else its start (``head`` cells;
    default: half of what fits), :data:`ELLIPSIS`, and its end: at most ``width`` cells in all
    (a wide character, such as CJK, takes two cells)."""
    if cell_len(name) <= width:
        return name
    keep = max(width - 1, 0)
    h = keep // 2 if head is None else min(max(head, 0), keep)
    start = _cells_from(name, h)
    end = _cells_from(name[::-1], keep - h)[::-1]
    return start + ELLIPSIS + end


def _cells_from(name: str, cells: int) -> str:
    """The longest start of ``name`` that takes at most ``cells`` terminal cells."""
    out, used = [], 0
    for ch in name:
        used += cell_len(ch)
        if used > cells:
            break
        out.append(ch)
    return "".join(out)


def shorten_names(names: Iterable[str], width: int) -> dict[str, str]:
    """Each distinct name -> what is shown for it: itself if it has at most ``width``
    terminal cells, else :func:`ellipsize` of it. Distinct names are shown distinct: when a
    shortening is already taken, the ellipsis moves, and if no place works, more is shown."""
    unique = list(dict.fromkeys(names))
    shown = {n: n for n in unique if cell_len(n) <= width}
    taken = set(shown.values())
    for name in unique:
        if name in shown:
            continue
        choice = name
        for w in range(max(width, 1), cell_len(name)):
            keep = w - 1
            default = keep // 2
            heads = sorted(range(keep + 1), key=lambda h: (abs(h - default), h))
            found = next(
                (s for s in (ellipsize(name, w, h) for h in heads) if s not in taken), None
            )
            if found is not None:
                choice = found
                break
        shown[name] = choice
        taken.add(choice)
    return shown


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
    """``table`` fitted into ``width`` columns by the rule of the module docstring (``noun``:
    the table has names in ``column``). None: not a terminal, the table with every cell on
    one line, however long."""
    if width is None:
        return [_copy(table)]
    fitted = _copy(table)
    if _width(console, fitted) <= width:
        return [fitted]
    names: dict[str, str] = {}
    lead: list[RenderableType] = []
    if noun is not None:
        full = [_plain(c) for c in table.columns[column].cells]
        names = {n: n for n in full}
        prefix = common_prefix(full)
        if prefix:  # (1) drop the prefix every name shares
            lead = [Text(f"{noun} under {ellipsize(prefix, width - len(noun) - 7)}")]
            if table.title is not None:  # the title first, then the line about the names
                lead.insert(0, Text(_plain(table.title)))
                table = _copy(table)
                table.title = None
            names = {n: n[len(prefix) :] for n in full}
            fitted = _with_names(table, column, names)
            if _width(console, fitted) <= width:
                return [*lead, fitted]
        # (2) shorten in the middle: the name column gets what the other columns leave
        name_width = max(cell_len(s) for s in [*names.values(), _header(fitted.columns[column])])
        budget = width - (_width(console, fitted) - name_width)
        if budget >= MIN_NAME:
            short = shorten_names(names.values(), budget)
            names = {n: short[s] for n, s in names.items()}
            fitted = _with_names(table, column, names)
            if _width(console, fitted) <= width:
                return [*lead, fitted]
        if column == 0:  # (3) one block per row, the name on a line of its own
            short = shorten_names(names.values(), width)
            shown = {n: short[s] for n, s in names.items()}
            return [*lead, *_compact(table, width, shown, named=True)]
    return _compact(table, width, {})


def _justify(text: str, width: int, how: str) -> str:
    gap = width - cell_len(text)
    if how == "right":
        return " " * gap + text
    if how == "center":
        return " " * (gap // 2) + text + " " * (gap - gap // 2)
    return text + " " * gap


def _reproducible(table: Table) -> bool:
    """Whether :func:`plain_table_lines` lays ``table`` out exactly as rich would."""
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
    """The lines rich prints for ``table`` without colour, trailing spaces left in, or None
    for a table whose style this does not reproduce (then rich lays it out).

    Reproduced: box SIMPLE_HEAD or SIMPLE with its edges, ``pad_edge=False``, padding (0, 1),
    a left-justified title, one-line cells, no footer, no column widths set. Each column is as
    wide as its widest cell (in terminal cells); columns are separated by a space between two
    paddings; the header is ruled with ``─`` across the cells, paddings and separators.
    """
    if not _reproducible(table):
        return None
    columns = table.columns
    cells = [[_plain(c) for c in col.cells] for col in columns]
    heads = [_plain(c.header) for c in columns]
    if any("\n" in v for col in cells for v in col) or any("\n" in h for h in heads):
        return None
    show_header = table.show_header
    widths = [
        max([cell_len(v) for v in col] + ([cell_len(h)] if show_header else []) + [0])
        for col, h in zip(cells, heads, strict=True)
    ]
    last = len(columns) - 1
    hows = [c.justify if c.justify in ("right", "center") else "left" for c in columns]

    def line(values: Sequence[str]) -> str:
        parts = []
        for i, (v, w, how) in enumerate(zip(values, widths, hows, strict=True)):
            parts.append(("" if i == 0 else " ") + _justify(v, w, how) + ("" if i == last else " "))
        return " " + " ".join(parts) + " "

    inner = sum(widths) + 2 * len(columns) - 2 + last
    out: list[str] = []
    if table.title is not None:
        out.append(_plain(table.title))
    out.append(" " * (inner + 2))
    if show_header:
        out += [line(heads), " " + "─" * inner + " "]
    out += [line(row) for row in zip(*cells, strict=True)]
    out.append(" " * (inner + 2))
    return out


def _plain_fits(table: Table, options: RenderOptions) -> list[str] | None:
    """:func:`plain_table_lines` for a long table printed without colour, when it fits."""
    if options.color or table.row_count <= PLAIN_TABLE_ROWS:
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
    out = "".join(_TRAILING.sub("", line) + "\n" for line in buf.getvalue().splitlines())
    return no_ci_command(out)
