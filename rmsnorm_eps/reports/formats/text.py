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

Why one module of ~650 lines: the text format is one piece. Rich's rendering, the fitting
rule and the plain layout that reproduces rich byte for byte (and decides when it may) are
tested against each other and change together.

A table of more than :data:`PLAIN_TABLE_ROWS` rows (thousands of layers) is written without
rich when no colour is wanted: :func:`plain_table_lines` lays it out exactly as rich would
(a test renders tables both ways), in time linear in its cells.

Reports of many layers (``ratio``, ``compare``, ``merge``) are written by
:func:`render_chunks` while they are made: their parts come from a generator, and their
tables are :class:`RowTable` (columns and a re-iterable source of rows, never a rich table of
every row). Without colour a :class:`RowTable` is laid out in two passes over its rows (the
widths, then the lines), exactly as rich would lay it out; so memory holds one row at a time
and a report of 100,000 layers, each with its own small tables, takes seconds. On a terminal
(colour, a width), a table of at most :data:`PLAIN_TABLE_ROWS` rows that wants colour or
does not fit is made into a rich table and fitted as above; a longer one is fitted by the
same rule (:func:`_fitted_row_table`: the same lines rich gives, a test checks) without a
rich table of every row, and without colour;
a file or a pipe (``width`` None, no colour) is always written in bounded memory. Running
text is written as it is, without rich, when no colour is wanted and the output is not a
terminal or every line fits (what rich prints for it, except that rich would fold a line of
a million columns, such as ``layers affected: ...`` of 100,000 layers: never wrapped, as
above).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from typing import cast

from rich import box
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

from rmsnorm_eps.chunks import line_chunks
from rmsnorm_eps.escape import no_ci_command
from rmsnorm_eps.reports.options import RenderOptions

__all__ = [
    "ELLIPSIS",
    "MIN_NAME",
    "NamedTable",
    "RowTable",
    "common_prefix",
    "ellipsize",
    "fit_table",
    "fmt",
    "fmt_index",
    "plain_table_lines",
    "render_chunks",
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
#: Without colour, :class:`RowTable` parts are laid out without rich when that layout fits,
#: and running text is written as it is when the output is not a terminal (tests set False
#: to compare with rich's own output).
PLAIN_LAYOUT = True
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


def _cells(text: str) -> int:
    """Terminal cells of ``text`` (:func:`rich.cells.cell_len`; printable ASCII: its length)."""
    return len(text) if text.isascii() and text.isprintable() else cell_len(text)


def _justify(text: str, width: int, how: str) -> str:
    gap = width - _cells(text)
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


#: Characters rich does not show as they are in a cell (tabs are expanded, control codes
#: removed): a row holding one is laid out by rich.
_UNPLAIN = re.compile(r"[\t\x07\x08\x0b\x0c\r\n]")


def _plain_widths(
    heads: Sequence[str], rows: Iterable[Sequence[str]], show_header: bool = True
) -> list[int] | None:
    """Each column's width (its widest cell, or header line, in terminal cells), or None when
    a cell has more than one line or a character rich would not show as it is."""
    widths = [max(cell_len(x) for x in h.split("\n")) if show_header else 0 for h in heads]
    for row in rows:
        for i, value in enumerate(row):
            if value.isascii() and value.isprintable():  # (no tab, no control code)
                n = len(value)
            elif _UNPLAIN.search(value):
                return None
            else:
                n = cell_len(value)
            if n > widths[i]:
                widths[i] = n
    return widths


def _plain_inner(widths: Sequence[int]) -> int:
    """Characters of a line between its two edge spaces (cells, paddings and separators)."""
    return sum(widths) + 3 * len(widths) - 3


class _PlainLayout:
    """Lines of a header-ruled table (box SIMPLE_HEAD or SIMPLE, ``pad_edge=False``) as rich
    prints them without colour: trailing spaces left in. Each line is ``" " + cells + " "``,
    cells justified to their column's width and separated by `` | `` without the bar (three
    spaces); a header of several lines sits at the bottom of the header row, as in rich."""

    def __init__(self, heads: Sequence[str], hows: Sequence[str], widths: Sequence[int]) -> None:
        self.heads, self.hows, self.widths = heads, hows, widths
        self.inner = _plain_inner(widths)

    def line(self, values: Sequence[str]) -> str:
        """One row: each value justified in its column."""
        cells = [
            _justify(v, w, how) for v, w, how in zip(values, self.widths, self.hows, strict=True)
        ]
        return " " + "   ".join(cells) + " "

    def blank(self) -> str:
        """The empty line above and below the table."""
        return " " * (self.inner + 2)

    def header(self) -> list[str]:
        """The header's lines (bottom-aligned), then its rule."""
        split = [h.split("\n") for h in self.heads]
        height = max((len(x) for x in split), default=1)
        padded = [[""] * (height - len(x)) + x for x in split]
        lines = [self.line([p[k] for p in padded]) for k in range(height)]
        return [*lines, " " + "─" * self.inner + " "]


def plain_table_lines(table: Table) -> list[str] | None:
    """The lines rich prints for ``table`` without colour, trailing spaces left in, or None
    for a table whose style this does not reproduce (then rich lays it out).

    Reproduced: box SIMPLE_HEAD or SIMPLE with its edges, ``pad_edge=False``, padding (0, 1),
    a left-justified title no wider than the table, one-line cells, no footer, no column
    widths set. Each column is as wide as its widest cell (in terminal cells); columns are
    separated by a space between two paddings; the header (its lines at the bottom of the
    header row) is ruled with ``─`` across the cells, paddings and separators.
    """
    if not _reproducible(table):
        return None
    columns = table.columns
    cells = [[_plain(c) for c in col.cells] for col in columns]
    heads = [_plain(c.header) for c in columns]
    rows = list(zip(*cells, strict=True))
    show_header = table.show_header
    widths = _plain_widths(heads, rows, show_header)
    if widths is None or any(_UNPLAIN.search(h.replace("\n", "")) for h in heads):
        return None
    hows = [c.justify if c.justify in ("right", "center") else "left" for c in columns]
    layout = _PlainLayout(heads, hows, widths)
    out: list[str] = []
    if table.title is not None:
        title = _plain(table.title)
        if "\n" in title or cell_len(title) > layout.inner + 2:
            return None  # rich folds a title at the table's width
        out.append(title)
    out.append(layout.blank())
    if show_header:
        out += layout.header()
    out += [layout.line(row) for row in rows]
    out.append(layout.blank())
    return out


def _plain_fits(table: Table, options: RenderOptions) -> list[str] | None:
    """:func:`plain_table_lines` for a long table printed without colour, when it fits."""
    if options.color or table.row_count <= PLAIN_TABLE_ROWS:
        return None
    lines = plain_table_lines(_copy(table))
    if lines is None or options.width is None:
        return lines
    return lines if max(cell_len(x) for x in lines) <= options.width else None


@dataclass(frozen=True)
class RowTable:
    """A header-ruled table (box SIMPLE_HEAD, ``pad_edge=False``) given by its columns and a
    source of its rows, called anew for each pass over them, so that a table of 100,000 rows
    is never held (see the module docstring).

    ``columns``: ``(header, justify, no_wrap)`` each (a header may have several lines);
    ``rows()``: ``(cells, style)`` per row, ``style`` a rich style or None; ``noun``: what
    column ``column`` names (shortened on a narrow terminal, :func:`fit_table`), None when the
    table holds no names from an input."""

    columns: tuple[tuple[str, str, bool], ...]
    rows: Callable[[], Iterable[tuple[Sequence[str], str | None]]]
    noun: str | None = "layers"
    column: int = 0

    def table(self) -> Table:
        """The same table as a rich :class:`~rich.table.Table` (every row held)."""
        t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for header, justify, no_wrap in self.columns:
            t.add_column(header, justify=justify, no_wrap=no_wrap)  # type: ignore[arg-type]
        for cells, style in self.rows():
            t.add_row(*cells, style=style)
        return t

    def plain_lines(self, width: int | None) -> Iterator[str] | None:
        """Its lines without colour (two passes over the rows), or None when rich must lay it
        out: a cell rich would not show as it is, or wider than ``width`` (None: unbounded)."""
        heads = [h for h, _, _ in self.columns]
        widths = _plain_widths(heads, (cells for cells, _ in self.rows()))
        if widths is None or any(_UNPLAIN.search(h.replace("\n", "")) for h in heads):
            return None
        layout = _PlainLayout(heads, [j for _, j, _ in self.columns], widths)
        if width is not None and layout.inner + 2 > width:
            return None
        return self._lines(layout)

    def _lines(self, layout: _PlainLayout) -> Iterator[str]:
        yield layout.blank()
        yield from layout.header()
        for cells, _ in self.rows():
            yield layout.line(cells)
        yield layout.blank()


def _fit_text(part: Text, width: int) -> Text:
    """``part`` with every word longer than ``width`` shortened in the middle (rich wraps
    running text between words, so no word is then split)."""
    plain = part.plain
    if all(cell_len(w) <= width for w in plain.split()):
        return part
    lines = [" ".join(ellipsize(w, width) for w in line.split(" ")) for line in plain.split("\n")]
    return Text("\n".join(lines), style=part.style)


def _console(buf: io.StringIO, options: RenderOptions) -> Console:
    return Console(
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


def _strip(line: str) -> str:
    """``line`` without the spaces at its end (before any colour codes that close it)."""
    return _TRAILING.sub("", line) if "\x1b" in line else line.rstrip(" ")


def _finish(rendered: str) -> str:
    """Whole lines of rendered output: no line ending with spaces, no CI command."""
    return no_ci_command("".join(_strip(line) + "\n" for line in rendered.splitlines()))


def _row_table_lines(part: RowTable, options: RenderOptions) -> Iterator[str] | None:
    """A :class:`RowTable` laid out without rich, in pieces of whole lines, or None when rich
    must lay it out (colour, a cell rich would change, or too wide for the terminal)."""
    plain = None if options.color or not PLAIN_LAYOUT else part.plain_lines(options.width)
    if plain is None:
        return None

    def pieces(lines: Iterator[str]) -> Iterator[str]:
        batch: list[str] = []
        for line in lines:
            batch.append(line)
            if len(batch) >= 1024:
                yield "\n".join(batch) + "\n"
                batch = []
        if batch:
            yield "\n".join(batch) + "\n"

    return pieces(plain)


def _fitted_row_table(part: RowTable, console: Console, width: int) -> Iterator[str] | None:
    """A :class:`RowTable` of more than :data:`PLAIN_TABLE_ROWS` rows on a terminal of
    ``width`` columns, fitted by :func:`fit_table`'s rule (drop the shared prefix, shorten
    names in the middle, then one block per row) without a rich table of every row: the rows
    are laid out plainly, or made into blocks a few hundred rows at a time; without colour
    (the rows' styles are dropped). None for a smaller table, one without a name column, or
    cells rich would not show as they are: then rich lays it out as before."""
    if part.noun is None:
        return None
    names = [cells[part.column] for cells, _ in part.rows()]
    layout = _name_layout(part) if len(names) > PLAIN_TABLE_ROWS else None
    if layout is None:
        return None
    shown, lead, plain = _fit_names(names, layout, width, part.noun, part.column)
    if plain.inner + 2 <= width:
        return _fitted_lines(part, plain, shown, lead)
    if part.column != 0:
        return None
    short = shorten_names(shown.values(), width)  # (3) one block per row
    return _row_blocks(part, console, width, {n: short[v] for n, v in shown.items()}, lead)


def _name_layout(part: RowTable) -> Callable[[dict[str, str]], _PlainLayout] | None:
    """For a :class:`RowTable` whose cells rich shows as they are: the plain layout of its
    rows with each name shown as a mapping says; else None."""
    heads = [h for h, _, _ in part.columns]
    widths = _plain_widths(heads, (cells for cells, _ in part.rows()))
    if widths is None:
        return None
    if any(_UNPLAIN.search(h.replace("\n", "")) for h in heads):
        return None
    hows = [j if j in ("right", "center") else "left" for _, j, _ in part.columns]
    col = part.column
    head = max(cell_len(x) for x in heads[col].split("\n"))

    def layout(shown: dict[str, str]) -> _PlainLayout:
        fitted = list(widths)
        fitted[col] = max([head, *(cell_len(x) for x in shown.values())])
        return _PlainLayout(heads, hows, fitted)

    return layout


def _fit_names(
    names: list[str],
    layout: Callable[[dict[str, str]], _PlainLayout],
    width: int,
    noun: str,
    col: int,
) -> tuple[dict[str, str], list[str], _PlainLayout]:
    """Steps (1) and (2) of :func:`fit_table`'s rule: each name -> what is shown, the lines
    before the table (``NOUN under PREFIX``) and the layout (which may still not fit)."""
    shown = {n: n for n in names}
    lead: list[str] = []
    plain = layout(shown)
    if plain.inner + 2 > width:
        prefix = common_prefix(names)
        if prefix:  # (1) drop the prefix every name shares
            lead = [f"{noun} under {ellipsize(prefix, width - len(noun) - 7)}\n"]
            shown = {n: n[len(prefix) :] for n in names}
            plain = layout(shown)
    if plain.inner + 2 > width:  # (2) shorten in the middle
        budget = width - (plain.inner + 2 - plain.widths[col])
        if budget >= MIN_NAME:
            short = shorten_names(shown.values(), budget)
            shown = {n: short[v] for n, v in shown.items()}
            plain = layout(shown)
    return shown, lead, plain


def _fitted_lines(
    part: RowTable, plain: _PlainLayout, shown: dict[str, str], lead: list[str]
) -> Iterator[str]:
    """The rows of ``part`` laid out by ``plain``, each name as ``shown``."""
    yield from lead
    col = part.column
    batch = [plain.blank(), *plain.header()]
    for cells, _ in part.rows():
        row = list(cells)
        row[col] = shown[row[col]]
        batch.append(plain.line(row))
        if len(batch) >= 1024:
            yield "\n".join(batch) + "\n"
            batch = []
    batch.append(plain.blank())
    yield "\n".join(batch) + "\n"


def _row_blocks(
    part: RowTable, console: Console, width: int, shown: dict[str, str], lead: list[str]
) -> Iterator[str]:
    """:func:`_compact`'s blocks for the rows of ``part``, a few hundred rows at a time (a rich
    table of those rows only); the blank line after the blocks once, at the end."""
    yield from lead
    rows = iter(part.rows())
    while True:
        batch = [cells for cells, _ in islice(rows, 256)]
        if not batch:
            break
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for header, justify, no_wrap in part.columns:
            table.add_column(header, justify=justify, no_wrap=no_wrap)  # type: ignore[arg-type]
        for cells in batch:
            table.add_row(*cells)
        buf = io.StringIO()
        console.file = buf
        for piece in _compact(table, width, shown, named=True)[:-1]:
            console.print(piece)
        yield buf.getvalue()
    yield "\n"


def _as_it_is(part: Text, options: RenderOptions) -> bool:
    """Whether rich would print ``part`` as it is (no colour; no tab or control code; not a
    terminal, or every line fits): then it is written without rich."""
    if options.color or not PLAIN_LAYOUT:
        return False
    if part.justify is not None or part.overflow is not None or part.end != "\n":
        return False
    if _UNPLAIN.search(part.plain.replace("\n", "")):
        return False
    width = options.width
    return width is None or all(_cells(x) <= width for x in part.plain.split("\n"))


def _part_text(part: object, console: Console, options: RenderOptions) -> Iterator[str]:
    """The rendered output of one part, in pieces of whole lines (trailing spaces left in);
    ``console`` prints into a new buffer for each part."""
    if isinstance(part, RowTable):
        lines = _row_table_lines(part, options)
        if lines is None and options.width is not None and PLAIN_LAYOUT:
            lines = _fitted_row_table(part, console, options.width)
        if lines is not None:
            yield from lines
            return
        part = (
            part.table() if part.noun is None else NamedTable(part.table(), part.noun, part.column)
        )
    if isinstance(part, Text) and _as_it_is(part, options):
        # what rich prints for it, never wrapped (not even a line of 100,000 names)
        yield part.plain + "\n"
        return
    buf = io.StringIO()
    console.file = buf
    table = part.table if isinstance(part, NamedTable) else part
    plain_table = _plain_fits(table, options) if isinstance(table, Table) else None
    if plain_table is not None:  # thousands of rows: rich's layout, without rich's cost
        yield "".join(f"{x}\n" for x in plain_table)
        return
    if isinstance(part, NamedTable):
        shown = fit_table(part.table, console, options.width, part.noun, part.column)
    elif isinstance(part, Table):
        shown = fit_table(part, console, options.width)
    elif isinstance(part, Text) and options.width is not None:
        shown = [_fit_text(part, options.width)]
    else:
        shown = [cast(RenderableType, part)]
    for piece in shown:
        console.print(piece)
    yield buf.getvalue()


def render_chunks(parts: Iterable[object], options: RenderOptions) -> Iterator[str]:
    """:func:`render_renderables` as chunks of whole lines (each ends with a newline), made
    while ``parts`` (rich renderables and :class:`RowTable`) are taken one by one: a report of
    100,000 layers is written without ever being held. Joined, exactly
    :func:`render_renderables`'s string."""
    console = _console(io.StringIO(), options)

    def pieces() -> Iterator[str]:
        for part in parts:
            for piece in _part_text(part, console, options):
                if piece:
                    yield _finish(piece)

    return line_chunks(pieces())


def render_renderables(parts: Iterable[object], options: RenderOptions) -> str:
    """Render rich renderables (and :class:`RowTable`) to a string (colour only if
    ``options.color``), fitted to ``options.width`` (None: not a terminal, no wrapping); no
    line ends with spaces."""
    return "".join(render_chunks(parts, options))
