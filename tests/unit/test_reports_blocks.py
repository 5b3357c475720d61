"""reports/blocks.py: the blocks a reporter builds (tables keep their cells, styles and
alignment as given; rendering is tests/unit/test_reports_formats_text.py's)."""

from __future__ import annotations

from rmsnorm_eps.reports.blocks import NamedTable, Table, Text, cell_text, simple_table
from rmsnorm_eps.reports.table import Column


def test_a_table_keeps_columns_rows_and_row_styles_in_order() -> None:
    t = Table(title="t")
    t.add_column("layer")
    t.add_column("q", "right")
    t.add_row("a", "1")
    t.add_row(Text("b", style="red"), "2", style="bold")
    assert t.columns == [Column("layer"), Column("q", "right")]
    assert [tuple(map(cell_text, r)) for r in t.rows] == [("a", "1"), ("b", "2")]
    assert t.styles == [None, "bold"]
    assert t.title == "t" and t.show_header


def test_simple_table_aligns_the_first_column_left_and_the_rest_right() -> None:
    t = simple_table("layer", "count", "min q")
    assert [c.justify for c in t.columns] == ["left", "right", "right"]
    assert [c.header for c in t.columns] == ["layer", "count", "min q"]
    assert t.rows == []


def test_tables_do_not_share_their_lists() -> None:
    a, b = Table(), Table()
    a.add_column("x")
    a.add_row("1")
    assert b.columns == [] and b.rows == [] and b.styles == []


def test_a_named_table_defaults_to_layers_in_its_first_column() -> None:
    n = NamedTable(Table())
    assert (n.noun, n.column) == ("layers", 0)
    assert cell_text("plain") == "plain" and cell_text(Text("t", "red")) == "t"
