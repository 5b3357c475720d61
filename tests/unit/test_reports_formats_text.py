"""reports/formats/text.py: the one text writer. Its output for the blocks below, at every
width, is byte for byte what tests/golden/widths/blocks.json holds: written by the two-renderer
format it replaced (plain writer, rich where a block needed it), except colour codes around
an empty cell, grouped differently (the same characters once the codes are removed). rich's
console is never imported."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmsnorm_eps.reports.blocks import NamedTable, Table, Text
from rmsnorm_eps.reports.formats import text
from rmsnorm_eps.reports.formats.text import render_blocks
from rmsnorm_eps.reports.options import RenderOptions
from rmsnorm_eps.reports.table import cells, table_lines

WIDTHS = [None, 200, 80, 40, 12]
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "widths" / "blocks.json"
_CODE = re.compile(r"\x1b\[[0-9;]*m")


def _plain(coloured: str) -> str:
    """``coloured`` without its colour codes, and without the spaces they left at line ends."""
    return "".join(x.rstrip(" ") + "\n" for x in _CODE.sub("", coloured).splitlines())


def _table(title: str | None = None, show_header: bool = True) -> Table:
    t = Table(title=title, show_header=show_header)
    t.add_column("layer")
    t.add_column("min q/eps", "right")
    t.add_column("two\nlines", "center")
    t.add_row("model.layers.0.input_layernorm", "49.2513", "x")
    t.add_row("漢字.norm", "1e-05", "longer cell", style="bold")
    t.add_row(Text("styled", style="red"), "", "-")
    return t


CASES: list[list[text.Block]] = [
    [Text("one line")],
    [Text("a\nb\n")],
    [Text("")],
    [Text("  indented, then trailing spaces   ")],
    [_table()],
    [_table(title="a title")],
    [_table(show_header=False)],
    [Table()],
    [NamedTable(_table(), noun="layers")],
    [Text("title"), NamedTable(_table()), Text("Total: 3\n")],
]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_blocks_are_what_the_two_renderers_wrote(case: int, width: int | None) -> None:
    golden = json.loads(GOLDEN.read_text("utf-8"))
    assert render_blocks(CASES[case], RenderOptions(width=width)) == golden[f"{case}.{width}.plain"]
    coloured = render_blocks(CASES[case], RenderOptions(width=width, color=True))
    assert _plain(coloured) == _plain(golden[f"{case}.{width}.color"])


_cell = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=12
)


@settings(max_examples=60, deadline=None)
@given(
    heads=st.lists(_cell, min_size=1, max_size=4),
    rows=st.lists(st.lists(_cell, min_size=4, max_size=4), max_size=5),
    justify=st.sampled_from(["left", "right", "center"]),
    width=st.sampled_from([None, 60, 20]),
)
def test_any_table_fits_and_colour_moves_no_character(
    heads: list[str], rows: list[list[str]], justify: str, width: int | None
) -> None:
    t = Table()
    for h in heads:
        t.add_column(h, justify)  # type: ignore[arg-type]
    for i, r in enumerate(rows):
        t.add_row(*r[: len(heads)], style="bold" if i % 2 else None)
    plain = render_blocks([t], RenderOptions(width=width))
    assert _plain(render_blocks([t], RenderOptions(width=width, color=True))) == plain
    assert all(not x.endswith(" ") for x in plain.splitlines())
    lone_empty = len(heads) == 1 and not any(cells(v) for v in [heads[0], *(r[0] for r in rows)])
    if width is None and not lone_empty:  # a file: every cell whole, on one line of the table
        lines = table_lines(t.columns, [list(map(text.cell_text, r)) for r in t.rows])
        assert plain == "".join(x.rstrip(" ") + "\n" for x in lines)
    elif width is not None and all(
        cells(w) <= width - 2 for r in rows for v in r for w in v.split()
    ):
        assert max(map(cells, plain.splitlines()), default=0) <= width


def test_running_text_wraps_between_words_and_shortens_a_word_too_long() -> None:
    assert text.wrap("aa bb cc", 5) == ["aa bb ", "cc"]  # a space may pass the width
    assert text.wrap("abcdefg", 3) == ["abc", "def", "g"]  # (only titles: words are shortened)
    out = render_blocks([Text("x" * 30 + "y")], RenderOptions(width=20))
    assert out.strip().startswith("x") and out.strip().endswith("y") and "…" in out
    assert render_blocks([Text("tab\there\x07")], RenderOptions()) == "tab     here\n"


def test_colour_only_when_asked_and_markup_never_read() -> None:
    coloured = render_blocks([_table(), Text("[bold]x[/bold]", "red")], RenderOptions(color=True))
    assert "\x1b[1m" in coloured and "\x1b[31m[bold]x[/bold]\x1b[0m" in coloured
    assert "\x1b" not in render_blocks([_table()], RenderOptions())


def test_an_unknown_style_is_an_error_not_plain_text() -> None:
    with pytest.raises(ValueError, match="unknown text style 'blink'"):
        render_blocks([Text("x", "bold blink")], RenderOptions(color=True))
    assert render_blocks([Text("x", "bold blink")], RenderOptions()) == "x\n"


def _layers(n: int) -> Table:
    t = Table()
    t.add_column("layer")
    t.add_column("min q/eps", "right")
    for i in range(n):
        t.add_row(f"model.layers.{i}.post_attention_layernorm", f"{49.25 * (i + 1):g}")
    return t


def test_a_narrow_terminal_drops_the_shared_prefix_and_says_so() -> None:
    out = render_blocks([NamedTable(_layers(3))], RenderOptions(width=40))
    assert "layers under model.layers." in out
    assert "0.post_attention_layernorm" in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 40


def test_narrower_still_names_are_shortened_in_the_middle_and_stay_distinct() -> None:
    out = render_blocks([NamedTable(_layers(12))], RenderOptions(width=30))
    shown = [line.split()[0] for line in out.splitlines() if "…" in line]
    assert len(shown) == 12 and len(set(shown)) == 12
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 30


def test_too_narrow_for_a_table_is_one_block_per_row() -> None:
    t = Table()
    for h in ("a", "b", "c", "d"):
        t.add_column(h, "right")
    t.add_row("1" * 8, "2" * 8, "3" * 8, "4" * 8)
    out = render_blocks([t], RenderOptions(width=16))
    assert "11111111" in out and "b: 22222222" in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 16


def test_ratio_off_a_terminal_does_not_import_rich_console(tmp_path: Path) -> None:
    """Nor the plot module, without --plot."""
    path = tmp_path / "q.npy"
    np.save(path, np.array([1e-7, 1.0, 2.0]))
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['rmsnorm-eps', 'ratio', '--eps', '1e-5', '--q-file', {str(path)!r}]\n"
        "try:\n    runpy.run_module('rmsnorm_eps', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m in ('rich.console', 'rich.table', "
        "'rmsnorm_eps.plot')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "min q/eps" in out
    assert out.strip().splitlines()[-1] == "[]"
