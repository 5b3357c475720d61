"""reports/formats/rich_text.py: what rich lays out: colour, and tables folded to a narrow
terminal by the fitting rule (shared prefix dropped, names shortened in the middle, or one
block per row)."""

from __future__ import annotations

from rmsnorm_eps.reports.blocks import NamedTable, Table, Text
from rmsnorm_eps.reports.formats.rich_text import render
from rmsnorm_eps.reports.options import RenderOptions


def _layers(n: int) -> Table:
    t = Table()
    t.add_column("layer")
    t.add_column("min q/eps", "right")
    for i in range(n):
        t.add_row(f"model.layers.{i}.post_attention_layernorm", f"{49.25 * (i + 1):g}")
    return t


def test_a_narrow_terminal_drops_the_shared_prefix_and_says_so() -> None:
    out = render([NamedTable(_layers(3))], RenderOptions(width=40))
    assert "layers under model.layers." in out
    assert "0.post_attention_layernorm" in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 40


def test_narrower_still_names_are_shortened_in_the_middle_and_stay_distinct() -> None:
    out = render([NamedTable(_layers(12))], RenderOptions(width=30))
    shown = [line.split()[0] for line in out.splitlines() if "…" in line]
    assert len(shown) == 12 and len(set(shown)) == 12
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 30


def test_too_narrow_for_a_table_is_one_block_per_row() -> None:
    t = Table()
    for h in ("a", "b", "c", "d"):
        t.add_column(h, "right")
    t.add_row("1" * 8, "2" * 8, "3" * 8, "4" * 8)
    out = render([t], RenderOptions(width=16))
    assert "11111111" in out and "b: 22222222" in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 16


def test_colour_codes_only_when_asked_and_markup_never_read() -> None:
    blocks = [Text("[bold]not markup[/bold]", style="red")]
    coloured = render(blocks, RenderOptions(color=True))
    assert "\x1b[31m" in coloured and "[bold]not markup[/bold]" in coloured
    plain = render(blocks, RenderOptions())
    assert plain == "[bold]not markup[/bold]\n"


def test_a_long_word_is_shortened_in_the_middle_on_a_terminal() -> None:
    out = render([Text("x" * 30 + "y")], RenderOptions(width=20))
    assert out.strip().startswith("x") and out.strip().endswith("y") and "…" in out
    assert len(out.strip()) <= 20
