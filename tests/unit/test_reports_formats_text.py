"""reports/formats/text.py: the blocks of a text report are written by the plain table writer
byte for byte as rich lays them out, wherever the plain path applies (no colour, and the block
fits the width); rich is imported only for colour or for what a narrow terminal folds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rmsnorm_eps.reports.blocks import NamedTable, Table, Text
from rmsnorm_eps.reports.formats import text
from rmsnorm_eps.reports.formats.rich_text import render as rich_render
from rmsnorm_eps.reports.formats.text import render_blocks
from rmsnorm_eps.reports.options import RenderOptions
from rmsnorm_eps.reports.table import cells, table_lines

WIDTHS = [None, 200, 80, 40, 12]


def _via_rich(blocks: list[text.Block], options: RenderOptions) -> str:
    """What render_blocks gives when rich lays out every block."""
    raw = rich_render(blocks, options)
    out = "".join(text.strip_trailing_spaces(x) + "\n" for x in raw.splitlines())
    from rmsnorm_eps.escape import no_ci_command

    return no_ci_command(out)


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
def test_plain_blocks_are_what_rich_renders(case: int, width: int | None) -> None:
    options = RenderOptions(width=width)
    assert render_blocks(CASES[case], options) == _via_rich(CASES[case], options)


# (a cell's own leading or trailing spaces are kept by the plain writer; rich trims them)
_cell = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=12
).map(str.strip)


@settings(max_examples=60, deadline=None)
@given(
    heads=st.lists(_cell, min_size=1, max_size=4),
    rows=st.lists(st.lists(_cell, min_size=4, max_size=4), max_size=5),
    justify=st.sampled_from(["left", "right", "center"]),
    width=st.sampled_from([None, 60, 20]),
)
def test_any_table_of_one_line_cells(
    heads: list[str], rows: list[list[str]], justify: str, width: int | None
) -> None:
    t = Table()
    for h in heads:
        t.add_column(h, justify)  # type: ignore[arg-type]
    for r in rows:
        t.add_row(*r[: len(heads)])
    if width is not None and t.columns:
        lines = table_lines(t.columns, [list(map(text.cell_text, r)) for r in t.rows])
        stripped, full = (max(cells(f(x)) for x in lines) for f in (str.rstrip, str))
        # a table whose last spaces alone pass the width fits for the plain writer (its lines
        # end without spaces), not for rich, which folds it
        assume(not stripped <= width < full)
    options = RenderOptions(width=width)
    assert render_blocks([t], options) == _via_rich([t], options)


def test_what_rich_must_lay_out_goes_to_rich() -> None:
    assert text.plain_lines(Text("tab\there"), None) is None  # rich expands tabs
    assert text.plain_lines(Text("x" * 50), 40) is None  # a word wider than the terminal
    wide = _table(title="a title far wider than the table it is the title of, so rich folds it")
    assert text.plain_lines(wide, None) is None
    assert text.plain_lines(_table(), 30) is None  # fitted on a narrow terminal
    assert text.plain_lines(_table(), None) is not None


def test_colour_is_rich_and_plain_text_is_not() -> None:
    coloured = render_blocks([_table()], RenderOptions(color=True))
    assert "\x1b[1m" in coloured  # the bold row
    assert "\x1b" not in render_blocks([_table()], RenderOptions())


def _ratio_report_text(
    path: Path, width: int | None, force_rich: bool, monkeypatch: pytest.MonkeyPatch
) -> str:
    from rmsnorm_eps.analysis import analyze_dump
    from rmsnorm_eps.reports import render

    report = analyze_dump(path, 1e-5)
    with monkeypatch.context() as m:
        if force_rich:
            m.setattr(text, "plain_lines", lambda block, width: None)
        return render(report, "text", RenderOptions(width=width))


@pytest.mark.parametrize("width", [None, 120, 40])
def test_a_ratio_report_is_the_same_either_way(
    tmp_path: Path, width: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "q.npz"
    q = np.array([1e-7, 4e-5, 1e-3, 0.0, 2.0, np.nan], np.float64)
    np.savez(path, **{"model.layers.0.input_layernorm": q, "model.layers.1.post_norm": q * 3})
    plain = _ratio_report_text(path, width, False, monkeypatch)
    assert plain == _ratio_report_text(path, width, True, monkeypatch)
    assert "min q/eps" in plain and "nonfinite" in plain


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
