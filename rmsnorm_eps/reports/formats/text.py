"""Text reports for people: blocks of running text and header-ruled tables, written by one
writer, without rich; ANSI styles only on a colour terminal. Numbers are rounded for display
only; every decision was taken on unrounded values.

A command's text report is a list of blocks (:mod:`rmsnorm_eps.reports.blocks`: ``Text``,
``Table``, ``NamedTable``); :func:`render_blocks` writes them. Tables are laid out by
:func:`rmsnorm_eps.reports.table.table_lines` (rich's ``box.SIMPLE_HEAD`` without padding at
the edges, as the reports have always looked); a cell of several lines takes as many lines,
its lines at the top.

The fitting rule, for a terminal of W columns (docs/reports.md, "Text reports at any width";
``RenderOptions.width`` None, not a terminal, means no line is wrapped and no name is
shortened):

* Running text is wrapped between words at W (a line breaks before a word that would pass W;
  the spaces where it breaks are dropped); a word longer than W is first shortened in the
  middle (``head…tail``), so no word and no number is ever split.
* A table is shown as it is when its longest line, without the spaces at its end, takes at
  most W cells. Otherwise, for a table of names (``NamedTable``),
  :func:`rmsnorm_eps.reports.table.fit_names` drops the names' shared prefix, then shortens
  them in the middle, measuring the table by its full width (edge spaces included); if it
  still does not fit, or it holds no names, it is shown one block per row: the first cell on
  a line, then ``  header: value`` pairs packed on lines of W - 2 cells (a pair is never split
  between lines, only between its words if it is longer than a line).
* A title is wrapped at the table's width, a word longer than that cut into pieces.

Colour (``RenderOptions.color``) adds styles, never moves a character: a row's style on each
of its cells (and the padding between them), the header in bold, a table's title in italic,
a text block's style on each of its lines. Control characters BEL, BS, VT, FF and CR are
dropped from running text and tabs expanded to 8-column stops. No line ends with spaces.
Names from an input are escaped (:func:`rmsnorm_eps.escape.visible`) before they get here;
text is never read as markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import pairwise

from rmsnorm_eps.escape import no_ci_command
from rmsnorm_eps.reports.blocks import Block, NamedTable, Table, Text, cell_text
from rmsnorm_eps.reports.options import RenderOptions
from rmsnorm_eps.reports.table import (
    Column,
    cells,
    ellipsize,
    fit_names,
    justify,
    shorten_names,
)

__all__ = ["fmt_index", "render_blocks", "strip_trailing_spaces", "wrap"]

#: One colour code at the very end of a line.
_CLOSING_CODE = re.compile(r"\x1b\[[0-9;]*m$")
#: A word and the spaces around it, as running text is divided between lines.
_WORD = re.compile(r"\s*\S+\s*")
#: Control characters a terminal would act on: dropped from running text.
_DROPPED = {c: None for c in (7, 8, 11, 12, 13)}
#: SGR parameters of the styles the reports use (attributes first, then the colour).
_SGR = {
    "bold": "1",
    "dim": "2",
    "italic": "3",
    "underline": "4",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
}
_RESET = "\x1b[0m"


def fmt_index(index: tuple[int, ...]) -> str:
    """``[i, j]``."""
    return "[" + ", ".join(str(i) for i in index) + "]"


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


# ----------------------------------------------------------------------------- styles
class _Styler:
    """Wraps text in the SGR codes of a style name (``"bold red"``), or not at all."""

    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, *styles: str | None) -> str:
        if not self.color:
            return text
        words = [w for s in styles if s for w in s.split()]
        unknown = [w for w in words if w not in _SGR]
        if unknown:  # a reporter's mistake, not an input's: never silently unstyled
            raise ValueError(f"unknown text style {unknown[0]!r}; known: {', '.join(_SGR)}")
        codes = sorted({_SGR[w] for w in words}, key=int)
        return f"\x1b[{';'.join(codes)}m{text}{_RESET}" if codes else text


# ----------------------------------------------------------------------------- running text
def _chop(word: str, width: int) -> list[str]:
    """``word`` cut into pieces of at most ``width`` cells (at least one character each)."""
    pieces, piece, used = [], "", 0
    for ch in word:
        n = cells(ch)
        if piece and used + n > width:
            pieces.append(piece)
            piece, used = "", 0
        piece += ch
        used += n
    return [*pieces, piece]


def wrap(line: str, width: int) -> list[str]:
    """``line`` (no ``\\n``) divided into lines of at most ``width`` cells between words: a
    line breaks before a word that would pass ``width`` (its trailing spaces may); a word
    longer than ``width`` is cut into pieces of ``width`` cells."""
    breaks: list[int] = []
    offset = 0
    for m in _WORD.finditer(line):
        start, word = m.start(), m.group(0)
        size = cells(word.rstrip())
        if width - offset >= size:
            offset += cells(word)
        elif size > width:
            pieces = _chop(word, width)
            for piece in pieces[:-1]:
                if start:
                    breaks.append(start)
                start += len(piece)
            if start:
                breaks.append(start)
            offset = cells(pieces[-1])
        elif offset and start:
            breaks.append(start)
            offset = cells(word)
    bounds = [0, *breaks, len(line)]
    return [line[a:b] for a, b in pairwise(bounds)]


def _fit_words(text: str, width: int) -> str:
    """``text`` with every word longer than ``width`` shortened in the middle."""
    if all(cells(w) <= width for w in text.split()):
        return text
    return "\n".join(
        " ".join(ellipsize(w, width) for w in line.split(" ")) for line in text.split("\n")
    )


def _running(text: str, width: int | None, fit: bool = True) -> list[str]:
    """The lines of running ``text`` at ``width`` (None: as they are)."""
    text = text.translate(_DROPPED)
    if width is not None and fit:
        text = _fit_words(text, width)
    out: list[str] = []
    for line in text.split("\n"):
        line = line.expandtabs(8) if "\t" in line else line
        out += [line] if width is None else wrap(line, width)
    return out


# ----------------------------------------------------------------------------- tables
def _widths(table: Table, body: Sequence[Sequence[str]]) -> list[int]:
    """Each column's width: its widest line of a cell (and of its header, if shown)."""
    out = []
    for i, column in enumerate(table.columns):
        parts = [line for row in body for line in row[i].split("\n")]
        if table.show_header:
            parts += column.header.split("\n")
        out.append(max(map(cells, parts), default=0))
    if len(out) == 1 and table.show_header and out[0] == 0:
        out[0] = 1  # an empty lone column is ruled over one cell, as it always was
    return out


def _full_width(widths: Sequence[int]) -> int:
    """The table's width, the space at each edge included."""
    return sum(widths) + 3 * (len(widths) - 1) + 2


def _row_lines(
    row: Sequence[str],
    widths: Sequence[int],
    columns: Sequence[Column],
    style: str | None,
    cell_styles: Sequence[str | None],
    paint: _Styler,
) -> list[str]:
    """A row of cells (``\\n`` inside a cell: more lines, top-aligned) as lines."""
    split = [cell.split("\n") for cell in row]
    height = max((len(s) for s in split), default=1)
    gap = paint(" ", style) + " " + paint(" ", style)
    out = []
    for k in range(height):
        values = [s[k] if k < len(s) else "" for s in split]
        shown = [justify(v, w, c.justify) for v, w, c in zip(values, widths, columns, strict=True)]
        if paint.color and (style is not None or any(cell_styles)):
            shown = [paint(v, style, own) for v, own in zip(shown, cell_styles, strict=True)]
            out.append(" " + gap.join(shown) + " ")
        else:
            out.append(" " + "   ".join(shown) + " ")
    return out


def _table_lines(
    table: Table, paint: _Styler, shown: dict[str, str] | None = None, column: int = 0
) -> list[str]:
    """``table`` (its ``column`` showing ``shown[name]`` for each name) with its title."""
    body = [[cell_text(c) for c in row] for row in table.rows]
    if shown is not None:
        for row in body:
            row[column] = shown.get(row[column], row[column])
    widths = _widths(table, body)
    full = _full_width(widths)
    out = [paint(x, "italic") for x in _running(table.title, full, False)] if table.title else []
    inner = full - 2
    out.append(" " * full)
    if table.show_header:
        heads = [c.header.split("\n") for c in table.columns]
        height = max(len(h) for h in heads)
        padded = [[""] * (height - len(h)) + h for h in heads]
        for k in range(height):
            values = [p[k] for p in padded]
            out += _row_lines(values, widths, table.columns, "bold", [None] * len(values), paint)
        out.append(" " + "─" * inner + " ")
    for row, style, raw in zip(body, table.styles, table.rows, strict=True):
        own = [c.style if isinstance(c, Text) else None for c in raw]
        out += _row_lines(row, widths, table.columns, style, own, paint)
    out.append(" " * full)
    return out


def _measure(table: Table, shown: dict[str, str], column: int) -> int:
    body = [[cell_text(c) for c in row] for row in table.rows]
    for row in body:
        row[column] = shown.get(row[column], row[column])
    return _full_width(_widths(table, body))


def _header(column: Column) -> str:
    return " ".join(column.header.split())


def _compact(
    table: Table, width: int, paint: _Styler, names: dict[str, str], named: bool = False
) -> list[str]:
    """One block per row (the fitting rule, module docstring): the first cell, then
    ``  header: value`` pairs; the first column's header is a line of its own above the
    blocks unless the column holds names (``named``); a blank line after the blocks."""
    out: list[str] = []
    if table.title is not None:
        out += [paint(x) for x in _running(table.title, width, False)]
    columns = table.columns
    if columns and table.show_header and not named and _header(columns[0]):
        out += _running(ellipsize(_header(columns[0]), width), width, False)
    inner = max(width - 2, 1)  # the pairs are indented by two spaces
    for row, style in zip(table.rows, table.styles, strict=True):
        first = cell_text(row[0])
        lead = names.get(first, ellipsize(first, width))
        out += [paint(x, style) for x in _running(lead, width, False)]
        lines: list[str] = []
        for column, cell in zip(columns[1:], row[1:], strict=True):
            value = " ".join(cell_text(cell).split("\n"))
            head = _header(column) if table.show_header else ""
            if not value and not head:
                continue
            pair = f"{head}: {value}" if head else value
            if lines and cells(lines[-1]) + 2 + cells(pair) <= inner:
                lines[-1] += "  " + pair
            else:
                lines.append(pair)
        if lines:
            out += ["  " + paint(x, style) for x in _running("\n".join(lines), inner)]
    return [*out, ""]


def _fitted(block: Table | NamedTable, width: int | None, paint: _Styler) -> list[str]:
    """A table block by the fitting rule (module docstring)."""
    table = block.table if isinstance(block, NamedTable) else block
    if not table.columns:
        return [""]
    lines = _table_lines(table, paint)
    if width is None:
        return lines
    plain = lines if not paint.color else _table_lines(table, _Styler(False))
    if max(cells(x.rstrip()) for x in plain) <= width:
        return lines
    untitled = Table(None, table.show_header, table.columns, table.rows, table.styles)
    if _full_width(_widths(untitled, [[cell_text(c) for c in r] for r in table.rows])) <= width:
        return lines  # only its title was too wide: that is wrapped at the table's width
    if not isinstance(block, NamedTable):
        return _compact(table, width, paint, {})
    column = block.column
    full = [cell_text(row[column]) for row in table.rows]
    fit = fit_names(
        full,
        _header(table.columns[column]),
        lambda shown: _measure(untitled, shown, column),
        width,
        block.noun,
    )
    lead = [x for line in fit.lead for x in _running(line, width, False)]
    if lead and table.title is not None:  # the title first, then the line about the names
        lead = [*_running(table.title, width, False), *lead]
        table = untitled
    if fit.fits:
        return [*lead, *_table_lines(table, paint, fit.shown, column)]
    if column != 0:
        return _compact(table, width, paint, {})
    short = shorten_names(fit.shown.values(), width)
    names = {n: short[s] for n, s in fit.shown.items()}
    return [*lead, *_compact(table, width, paint, names, True)]


def _block_lines(block: Block, options: RenderOptions, paint: _Styler) -> list[str]:
    if isinstance(block, Text):
        return [paint(x, block.style) for x in _running(block.text, options.width)]
    return _fitted(block, options.width, paint)


def render_blocks(blocks: Sequence[Block], options: RenderOptions) -> str:
    """The text of ``blocks`` (ANSI styles only if ``options.color``), fitted to
    ``options.width`` by the rule of this module (None: not a terminal, no wrapping); no line
    ends with spaces."""
    paint = _Styler(options.color)
    lines = [x for block in blocks for x in _block_lines(block, options, paint)]
    text = "".join(strip_trailing_spaces(line) + "\n" for line in lines)
    return no_ci_command(text)
