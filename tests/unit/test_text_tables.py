"""Long tables are laid out without rich (:func:`plain_table_lines`) exactly as rich lays them
out: every text report of the shipped examples renders identically both ways, and a report of
thousands of layers takes time linear in its rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Result
from rich import box
from rich.table import Table
from rich.text import Text

import rmsnorm_eps.reports.formats.text as text_format
from rmsnorm_eps.reports.options import RenderOptions

ROOT = Path(__file__).resolve().parents[2]

REPORTS = [
    ("ratio", "examples/q_dump.npz", "--eps", "1e-5", "--histogram", "all"),
    ("ratio", "examples/ci/q_dump.npz", "--eps", "1e-5", "--histogram", "all", "--top", "0"),
    ("merge", "tests/data/merge/shard0.summary.json", "tests/data/merge/shard1.summary.json"),
    ("compare", "examples/ci/q_dump.npz", "--from", "eps=1e-6", "--to", "eps=1e-4"),
    ("ratio", "examples/acts.npz", "--eps", "1e-5", "--raw", "--norm", "layer"),
    ("compare", "examples/q_dump.npz", "--from", "eps=1e-6", "--to", "eps=1e-5"),
    ("precision", "--eps", "1e-6", "--dtype", "fp16,bf16,fp32"),
    ("bound", "--delta", "0.01", "--eps", "1e-5"),
    ("config", "show", "examples/configs/per-layer.yaml"),
    ("config", "show", "configs/qwen3-8b.yaml"),
    ("defaults",),
]


@pytest.mark.parametrize("args", REPORTS, ids=lambda a: " ".join(a[:2]))
def test_every_table_lays_out_as_rich_does(
    cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    monkeypatch.chdir(ROOT)
    with monkeypatch.context() as m:  # every part laid out by rich
        m.setattr(text_format, "PLAIN_LAYOUT", False)
        rich_out = cli(*args)
    monkeypatch.setattr(text_format, "PLAIN_TABLE_ROWS", 0)
    plain_out = cli(*args)
    assert rich_out.exit_code == plain_out.exit_code
    assert plain_out.stdout == rich_out.stdout


def test_styles_it_does_not_reproduce_go_to_rich() -> None:
    t = Table(box=box.ROUNDED)
    t.add_column("a")
    t.add_row("x")
    assert text_format.plain_table_lines(t) is None
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("a")
    t.add_row(Text("two\nlines"))
    assert text_format.plain_table_lines(t) is None


def test_headers_of_two_lines_and_titles_as_rich() -> None:
    """A header of two lines sits at the bottom of the header row; a title wider than the
    table (which rich folds) is left to rich."""
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("layer")
    t.add_column("first\nmax |change|", justify="right", no_wrap=True)
    t.add_row("模型.L", "0.5")
    t.add_row("x", "")
    want = text_format.render_renderables([t], RenderOptions())
    lines = text_format.plain_table_lines(t)
    assert lines is not None
    assert "".join(x.rstrip() + "\n" for x in lines) == want
    t.title, t.title_justify = "a title much wider than the table it names", "left"
    assert text_format.plain_table_lines(t) is None


def _table(rows: int) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="t", title_justify="left")
    t.add_column("layer")
    t.add_column("eps", justify="right")
    t.add_column("n", justify="center")
    for i in range(rows):
        t.add_row(f"model.layers.{i}.input_layernorm", "1e-05", str(i % 7))
    return t


@pytest.mark.parametrize("width", [None, 200, 60, 30])
def test_wide_characters_and_terminal_widths_match_rich(
    monkeypatch: pytest.MonkeyPatch, width: int | None
) -> None:
    t = _table(3)
    t.add_row("模型.层", "2", "10")
    want = text_format.render_renderables([t], RenderOptions(width=width))
    monkeypatch.setattr(text_format, "PLAIN_TABLE_ROWS", 0)  # 30 columns: too narrow, rich fits
    assert text_format.render_renderables([t], RenderOptions(width=width)) == want


def test_a_table_of_as_many_rows_as_layers_allowed_is_whole() -> None:
    """A table of 4,096 rows (the layer cap) is drawn row by row in order (timed in
    benchmarks/bench_many_layers.py, not here)."""
    out = text_format.render_renderables([_table(4096)], RenderOptions())
    assert out.count("\n") == 4096 + 5
    rows = [line.split()[0] for line in out.splitlines() if "input_layernorm" in line]
    assert rows == [f"model.layers.{i}.input_layernorm" for i in range(4096)]
