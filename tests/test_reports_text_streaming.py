"""The text reports of ratio, compare and merge are written in chunks while they are made
(``text_chunks``): each chunk is whole lines, and joined they are exactly the report rich lays
out (the golden files; rich's own layout of every part, :data:`text.PLAIN_LAYOUT` off) for
hostile and wide names, token positions, eps sources, skipped layers, widths and colour. A
report of 50,000 layers is rendered in bounded memory."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Result
from rich import box
from rich.table import Table

import rmsnorm_eps.reports.formats.text as text_format
from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.compare.analysis import compare_dump
from rmsnorm_eps.compare.spec import parse_spec
from rmsnorm_eps.config import load_config
from rmsnorm_eps.merge.combine import merge_summaries
from rmsnorm_eps.reports import RenderOptions, render_chunks
from rmsnorm_eps.reports.commands import compare as compare_report
from rmsnorm_eps.reports.commands import ratio as ratio_report
from rmsnorm_eps.reports.formats.text import RowTable, render_renderables
from rmsnorm_eps.reports.lazy import Lazy
from tests import test_reports_golden as golden

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"

#: Names from an input: wide (CJK), markup, CI commands, control codes, spaces, very long.
NAMES = (
    "model.layers.0.input_layernorm",
    "model.layers.0.self_attn.q_norm",
    "模型.层.0.归一化",
    "[/x] [link=https://e.x]bold[/link]",
    ":",  # "NAME: ..." would start a line with "::"
    "##[group]x",
    "tab\there",
    "esc\x1b[31mred",
    "ünïcödé\u200bzero-width",
    "trailing  ",
    "model.language_model.layers.12.post_attention_layernorm." + "x" * 90,
)
WIDTHS = (None, 60, 80, 120)


def _hostile_dump(path: Path) -> Path:
    rng = np.random.default_rng(7)
    arrays: dict[str, np.ndarray] = {}
    for i, name in enumerate(NAMES):
        q = rng.lognormal(-6.0 if i % 2 else -2.0, 2.0, size=(3, 8)).astype(np.float32)
        if i == 2:
            q[1, 1] = np.nan
        if i == 4:
            q[0, 0] = np.inf
        arrays[name] = q
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def _positions_dump(path: Path) -> Path:
    q = np.array([8e-7, 5e-2, 6e-2, 7e-6, 3e-4, 4e-2, 5e-2, 6e-2], dtype=np.float32)
    pos = np.tile(np.arange(4, dtype=np.int64), 2)
    arrays = {
        "模型.L": q,
        "模型.L::position": pos,
        ":": q * 3,
        "#[x]": q * 5,
        "#[x]::position": pos,
    }
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def _config_dump(path: Path) -> Path:
    kinds = ("input_layernorm", "self_attn.q_norm")
    arrays = {
        f"model.layers.{i}.{k}": np.full(4, 1e-4 * (i + 1), dtype=np.float32)
        for i in range(7)
        for k in kinds
    }
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def _reports(tmp: Path) -> dict[str, Any]:
    hostile = _hostile_dump(tmp / "hostile.npz")
    positions = _positions_dump(tmp / "positions.npz")
    configured = _config_dump(tmp / "configured.npz")
    config = load_config(ROOT / "examples" / "configs" / "per-layer.yaml")
    e6, e5 = parse_spec("eps=1e-6"), parse_spec("eps=1e-5")
    skip = ROOT / "tests" / "data" / "skip" / "mixed.npz"
    shards = [ROOT / "tests" / "data" / "merge" / f"shard{i}.summary.json" for i in (0, 1)]
    return {
        "ratio-hostile": analyze_dump(hostile, 1e-5, top_k=3),
        "ratio-positions": analyze_dump(positions, 1e-5),
        "ratio-config": analyze_dump(configured, None, config=config),
        "ratio-skipped": analyze_dump(skip, 1e-5, skip_unreadable=True),
        "merge": merge_summaries(shards, top_k=3),
        "compare-hostile": compare_dump(hostile, e6, e5, top_k=2),
        "compare-positions": compare_dump(positions, e6, e5),
        "compare-config": compare_dump(configured, "config", e5, config=config),
        "compare-skipped": compare_dump(skip, e6, e5, skip_unreadable=True),
    }


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _reports(tmp_path_factory.mktemp("streaming"))


def _chunks(result: Any, options: RenderOptions) -> list[str]:
    chunks = list(render_chunks(result, "text", options))
    assert chunks, "no output"
    assert all(c.endswith("\n") for c in chunks), "a chunk ends inside a line"
    return chunks


def _by_rich(monkeypatch: pytest.MonkeyPatch, result: Any, options: RenderOptions) -> str:
    """The same report with every part laid out by rich (the layout before chunks)."""
    with monkeypatch.context() as m:
        m.setattr(text_format, "PLAIN_LAYOUT", False)
        m.setattr(text_format, "PLAIN_TABLE_ROWS", 10**9)
        return "".join(render_chunks(result, "text", options))


CASES = (
    "ratio-hostile",
    "ratio-positions",
    "ratio-config",
    "ratio-skipped",
    "merge",
    "compare-hostile",
    "compare-positions",
    "compare-config",
    "compare-skipped",
)


@pytest.mark.parametrize("color", [False, True], ids=["plain", "colour"])
@pytest.mark.parametrize("width", WIDTHS, ids=str)
@pytest.mark.parametrize("case", CASES)
def test_chunks_are_whole_lines_and_join_to_rich_layout(
    reports: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    width: int | None,
    color: bool,
) -> None:
    result = reports[case]
    gate = evaluate_gate(result, 2)
    options = RenderOptions(color=color, width=width, histogram="all", gate=gate)
    chunks = _chunks(result, options)
    joined = "".join(chunks)
    assert joined == _by_rich(monkeypatch, result, options)
    module = compare_report if case.startswith("compare") else ratio_report
    assert module.text(result, options) == joined
    assert all(line == line.rstrip(" ") for line in joined.split("\n"))


def test_the_parts_that_grow_with_layers_are_in_the_report(reports: dict[str, Any]) -> None:
    """What this file renders is what the reports are about (so the comparisons above compare
    something): eps sources with ``and N more``, the position table, skipped layers, the
    per-layer lines of a config side, histograms, and hostile names escaped."""
    text = "".join(_chunks(reports["ratio-config"], RenderOptions()))
    assert "from examples/configs/per-layer.yaml" in text or "per-layer.yaml" in text
    assert "and 3 more" in text
    text = "".join(_chunks(reports["ratio-positions"], RenderOptions(histogram="all")))
    assert "By token position" in text and "first" in text and "模型.L" in text
    text = "".join(_chunks(reports["ratio-skipped"], RenderOptions()))
    assert "SKIPPED (unreadable, not analysed)" in text
    text = "".join(_chunks(reports["compare-config"], RenderOptions()))
    assert "for 7 layer(s)" in text and "and 3 more" in text
    text = "".join(_chunks(reports["ratio-hostile"], RenderOptions(histogram="all")))
    assert "inputs per decade" in text and "模型.层.0.归一化" in text
    assert "\x1b" not in text and "\t" not in text
    assert not any(line.startswith("::") for line in text.splitlines())


#: The golden cases whose text report is streamed (their arguments: the golden test's own).
GOLDEN_CASES = {name: golden.CASES[name][0] for name in ("ratio", "compare", "merge")}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_text_both_ways(
    cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The golden text reports, streamed and laid out by rich alike."""
    monkeypatch.chdir(ROOT)
    want = (GOLDEN / f"{name}.txt").read_text(encoding="utf-8")
    assert cli(*GOLDEN_CASES[name]).stdout == want
    monkeypatch.setattr(text_format, "PLAIN_LAYOUT", False)
    assert cli(*GOLDEN_CASES[name]).stdout == want


# ----------------------------------------------------------------------------- tables
def _row_table(
    heads: tuple[tuple[str, str, bool], ...], rows: list[list[str]], noun: str | None
) -> RowTable:
    cells = [(r, "bold" if i % 2 else None) for i, r in enumerate(rows)]
    return RowTable(heads, lambda: cells, noun)


TABLES: dict[str, RowTable] = {
    "histogram": _row_table(
        (
            ("r = q/eps", "left", False),
            ("count", "right", False),
            ("", "left", True),
            ("", "left", False),
        ),
        [["1e0 <= r < 1e1", "3", "#" * 40, ""], ["q = 0", "0", "", ""]],
        None,
    ),
    "empty": _row_table((("index", "left", False), ("q", "right", False)), [], None),
    "two-line headers": _row_table(
        (
            ("layer", "left", False),
            ("first\nn", "right", True),
            ("other\nmax |change|", "right", True),
        ),
        [["模型.层", "3", "0.5"], ["x" * 70, "12", "1e-05"]],
        "layers",
    ),
    "names": _row_table(
        (("layer", "left", False), ("eps", "right", False), ("n", "center", False)),
        [[f"model.layers.{i}.input_layernorm", "1e-05", str(i)] for i in range(12)]
        + [["模型.层.ü", "1e-06", "100"]],
        "layers",
    ),
}


def _rich_table(t: RowTable) -> Any:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for header, justify, no_wrap in t.columns:
        table.add_column(header, justify=justify, no_wrap=no_wrap)  # type: ignore[arg-type]
    for cells, style in t.rows():
        table.add_row(*cells, style=style)
    return table if t.noun is None else text_format.NamedTable(table, t.noun, t.column)


@pytest.mark.parametrize("color", [False, True], ids=["plain", "colour"])
@pytest.mark.parametrize("width", (*WIDTHS, 30), ids=str)
@pytest.mark.parametrize("name", sorted(TABLES))
def test_row_tables_lay_out_as_rich(name: str, width: int | None, color: bool) -> None:
    """A :class:`RowTable` is laid out without rich exactly as rich lays out the same table
    (and fitted by rich where it does not fit or colour is wanted)."""
    t = TABLES[name]
    options = RenderOptions(width=width, color=color)
    chunks = list(text_format.render_chunks([t], options))
    assert all(c.endswith("\n") for c in chunks)
    assert "".join(chunks) == render_renderables([_rich_table(t)], options)


# ----------------------------------------------------------------------------- memory
def _many_layers(tmp: Path, n: int) -> Any:
    """A report of ``n`` layers (all violating, with worst inputs) whose layers are made on
    each iteration, so the report itself holds nothing per layer but its list of names."""
    np.savez(tmp / "one.npz", base=np.array([1e-7, 2e-6, 3e-4], dtype=np.float32))
    one = analyze_dump(tmp / "one.npz", 1e-5, top_k=3)
    base = one.layers[0]
    names = tuple(f"model.layers.{i}.self_attn.q_norm" for i in range(n))
    layers: Lazy[Any] = Lazy(n, lambda: (replace(base, name=x) for x in names))
    return replace(one, layers=layers)


@pytest.mark.slow
def test_fifty_thousand_layers_in_bounded_memory(tmp_path: Path) -> None:
    """50,000 layers, each with its worst-input table (~23 million characters): the chunks
    are written as they come. Measured (tracemalloc peak while rendering; the report made
    before, its layers made on each pass): 11.5 MiB streamed, with or without histograms.
    The whole-string rendering before chunks held every rich part and the text: 39 MiB at
    5,000 layers (74 MiB with histograms), growing with the layers (~390 MiB at 50,000)."""
    n = 50_000
    report = _many_layers(tmp_path, n)
    options = RenderOptions(histogram="none")
    tracemalloc.start()
    try:
        lines = size = 0
        for chunk in ratio_report.text_chunks(report, options):
            assert chunk.endswith("\n")
            lines += chunk.count("\n")
            size += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines > 8 * n and size > 400 * n
    assert peak < 24 * 2**20, f"rendering peaked at {peak / 2**20:.1f} MiB"


# ------------------------------------------------ long tables on a terminal (fit_table's rule)
def _long_table(n: int, suffix: str = "", cjk: bool = False) -> RowTable:
    """A layers table of ``n`` rows; names share a prefix, some long, some wide (CJK)."""
    columns = (
        ("layer", "left", False),
        ("eps", "right", False),
        ("count", "right", False),
        ("min q/eps", "right", False),
        ("violating", "right", False),
    )

    def rows() -> Any:
        for i in range(n):
            name = f"model.decoder.layers.{i}.self_attention_block.input_layernorm"
            name += suffix * (i % 3) + ("层" * (i % 4) if cjk else "")
            yield [name, "1e-05", str(7 * i), f"{i / 3:.6g}", f"{i % 100}%"], None

    return RowTable(columns, rows)


@pytest.mark.parametrize("width", [30, 40, 60, 80, 100, 120, 200], ids=str)
@pytest.mark.parametrize(
    "shape", [(250, "", False), (300, "_and_a_much_longer_suffix", False), (220, "_x", True)]
)
def test_long_table_on_a_terminal_is_fitted_as_rich_fits_it(
    monkeypatch: pytest.MonkeyPatch, width: int, shape: tuple[int, str, bool]
) -> None:
    """A table of more than 200 rows on a terminal that is too narrow for it is fitted by
    fit_table's rule (prefix, then middle ellipsis, then blocks) without a rich table of every
    row, and the lines are exactly rich's."""
    used: list[int] = []
    fitted = text_format._fitted_row_table
    monkeypatch.setattr(
        text_format,
        "_fitted_row_table",
        lambda *a: used.append(1) or fitted(*a),  # type: ignore[func-returns-value]
    )
    options = RenderOptions(width=width, color=False)
    ours = render_renderables([_long_table(*shape)], options)
    monkeypatch.setattr(text_format, "PLAIN_LAYOUT", False)
    assert ours == render_renderables([_long_table(*shape)], options)
    if width < 120:
        assert used


def test_long_table_on_a_colour_terminal_holds_bounded_memory() -> None:
    """5,000 rows on a colour terminal of 80 columns: a few MiB (the rows are laid out without
    colour, a row at a time), where rich's table of every row takes about 16 MiB."""
    tracemalloc.start()
    try:
        size = sum(
            len(c)
            for c in text_format.render_chunks(
                [_long_table(5000)], RenderOptions(width=80, color=True)
            )
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert size > 300_000
    assert peak < 6 * 2**20, f"{peak / 2**20:.1f} MiB"
