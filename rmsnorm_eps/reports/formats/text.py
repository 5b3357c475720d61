"""Text reports for people: blocks of text and tables, written without rich unless colour or
a narrow terminal needs it. Numbers are rounded for display only; every decision was taken on
unrounded values.

A command's text report is a list of blocks (:mod:`rmsnorm_eps.reports.blocks`: ``Text``,
``Table``, ``NamedTable``). :func:`render_blocks` writes each block with the plain table writer
(:func:`rmsnorm_eps.reports.table.table_lines`: the layout of every table in the reports)
when it is printed without colour and fits; rich (:mod:`rmsnorm_eps.reports.formats.rich_text`,
imported only then) lays out what is coloured, and what a narrow terminal must fold: a table
fitted by the rule of :mod:`rmsnorm_eps.reports.table` or shown one block per row, a word
longer than the line shortened in the middle. Both give the same bytes where both apply
(tests/unit/test_reports_formats_text.py), except that rich trims the spaces around a
cell's text and the plain writer keeps them (a name is shown as it is written).

Width (docs/reports.md, "Text reports at any width"): not a terminal (``RenderOptions.width``
is None: ``-o FILE``, ``--report``, a pipe), no line is wrapped and no name is shortened; a
terminal of W columns, no number and no word is split across lines. No line ends with spaces.
Names from an input are escaped (:func:`rmsnorm_eps.escape.visible`) before they get here; text
is never read as markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rmsnorm_eps.escape import no_ci_command
from rmsnorm_eps.reports.blocks import Block, NamedTable, Table, Text, cell_text
from rmsnorm_eps.reports.options import RenderOptions
from rmsnorm_eps.reports.table import cells, table_lines

__all__ = ["fmt_index", "plain_lines", "render_blocks", "strip_trailing_spaces"]

#: One colour code at the very end of a line.
_CLOSING_CODE = re.compile(r"\x1b\[[0-9;]*m$")


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


def _text_lines(block: Text, width: int | None) -> list[str] | None:
    """``block``'s lines as rich prints them, or None where rich would change them (a control
    character, which it drops, or a tab, which it expands; a line wider than ``width``)."""
    lines = block.text.split("\n")
    if not all(line.isprintable() for line in lines):
        return None
    if width is not None and any(cells(line) > width for line in lines):
        return None
    return lines


def _table_lines(table: Table, width: int | None) -> list[str] | None:
    """``table``'s lines by the plain table writer, or None where it does not lay the table
    out as rich would (no column, a lone empty one, a cell of several lines, a title wider
    than the table) or it is wider than ``width``."""
    body = [[cell_text(c) for c in row] for row in table.rows]
    if not table.columns or any("\n" in v for row in body for v in row):
        return None
    if len(table.columns) == 1:  # rich rules one cell under a column with nothing in it
        heads = table.columns[0].header.split("\n") if table.show_header else []
        if not any(cells(v) for v in [*heads, *(row[0] for row in body)]):
            return None
    lines = table_lines(table.columns, body, None, table.show_header)
    if table.title is not None:
        if "\n" in table.title or cells(table.title) > cells(lines[0]):
            return None  # rich folds a title at the table's width
        lines = [table.title, *lines]
    if width is not None and max(cells(x.rstrip()) for x in lines) > width:
        return None
    return lines


def plain_lines(block: Block, width: int | None) -> list[str] | None:
    """The lines of ``block`` without colour (trailing spaces left in), or None when rich
    must lay it out."""
    if isinstance(block, Text):
        return _text_lines(block, width)
    return _table_lines(block.table if isinstance(block, NamedTable) else block, width)


def render_blocks(blocks: Sequence[Block], options: RenderOptions) -> str:
    """The text of ``blocks`` (colour only if ``options.color``), fitted to ``options.width``
    (None: not a terminal, no wrapping); no line ends with spaces."""
    out: list[str] = []
    for block in blocks:
        lines = None if options.color else plain_lines(block, options.width)
        if lines is not None:
            out.append("".join(f"{x}\n" for x in lines))
            continue
        from rmsnorm_eps.reports.formats.rich_text import render

        if options.color:  # one console for the whole report
            out = [render(blocks, options)]
            break
        out.append(render([block], options))
    text = "".join(strip_trailing_spaces(line) + "\n" for line in "".join(out).splitlines())
    return no_ci_command(text)
