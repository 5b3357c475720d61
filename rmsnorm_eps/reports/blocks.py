"""The blocks of a text report: :class:`Text` (lines of running text), :class:`Table` (a
header-ruled table, built with ``add_column``/``add_row``) and :class:`NamedTable` (a table
whose column holds names from an input). A command's reporter builds a list of them;
:func:`rmsnorm_eps.reports.formats.text.render_blocks` writes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from rmsnorm_eps.reports.table import Column, Justify

__all__ = ["Block", "Cell", "NamedTable", "Table", "Text", "cell_text", "simple_table"]


@dataclass(frozen=True)
class Text:
    """Lines of running text (``\\n`` between them), in ``style`` (words of
    ``reports.formats.text._SGR``, such as ``"bold"`` or ``"bold red"``) on a colour terminal."""

    text: str
    style: str | None = None


Cell: TypeAlias = "str | Text"


@dataclass
class Table:
    """A header-ruled table (rich's ``box.SIMPLE_HEAD``, no padding at its edges) being built:
    :meth:`add_column` for each column, then :meth:`add_row`; ``title`` is a line above it."""

    title: str | None = None
    show_header: bool = True
    columns: list[Column] = field(default_factory=list)
    rows: list[tuple[Cell, ...]] = field(default_factory=list)
    styles: list[str | None] = field(default_factory=list)

    def add_column(self, header: str, justify: Justify = "left") -> None:
        """A column under ``header`` (``\\n`` between its lines), its cells aligned by
        ``justify``."""
        self.columns.append(Column(header, justify))

    def add_row(self, *row: Cell, style: str | None = None) -> None:
        """A row of one cell per column, in ``style`` on a colour terminal."""
        self.rows.append(row)
        self.styles.append(style)


@dataclass(frozen=True)
class NamedTable:
    """A table whose column ``column`` holds names from an input (layers, modules, patterns):
    on a narrow terminal those names are shortened by the fitting rule. ``noun`` names them in
    the ``NOUN under PREFIX`` line."""

    table: Table
    noun: str = "layers"
    column: int = 0


Block: TypeAlias = "Text | Table | NamedTable"


def simple_table(*columns: str) -> Table:
    """A header-ruled table: the first column left-aligned, the others right-aligned."""
    t = Table()
    for i, name in enumerate(columns):
        t.add_column(name, "left" if i == 0 else "right")
    return t


def cell_text(cell: Cell) -> str:
    """A cell's characters."""
    return cell.text if isinstance(cell, Text) else cell
