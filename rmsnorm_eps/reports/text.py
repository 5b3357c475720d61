"""Text reporter: rich tables for people. Readable without colour (NO_COLOR, pipes, CI logs).

Numbers are rounded for display only (6 significant digits; the bound to 12); every decision
was taken on unrounded values before this module runs.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from rmsnorm_eps.bound import BoundResult, RatioFigures
from rmsnorm_eps.reports import HISTOGRAM_AUTO_LAYERS, RenderOptions, UnsupportedResult

if TYPE_CHECKING:  # analysis imports numpy; `bound` must not pay for it (start-up time)
    from rmsnorm_eps.analysis import LayerResult, RatioReport

__all__ = ["fmt", "histogram_rows", "render", "render_renderables"]

HISTOGRAM_BAR = 40  # characters of the longest bar


def fmt(value: float | None, digits: int = 6) -> str:
    """Format a number for display: ``digits`` significant digits, '-' for None."""
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


def fmt_index(index: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"


def _shard_index(
    index: tuple[int, ...], shard: int | None, shard_index: tuple[int, ...] | None
) -> str:
    """``[i, j]``, or in a merged report ``[i, j] (shard s [i', j])``."""
    if shard is None:
        return fmt_index(index)
    return f"{fmt_index(index)} (shard {shard} {fmt_index(shard_index or ())})"


def render_renderables(parts: list[RenderableType], options: RenderOptions) -> str:
    """Render rich renderables to a string (colour only if ``options.color``)."""
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=options.width,
        color_system="standard" if options.color else None,
        force_terminal=options.color,
        no_color=not options.color,
        highlight=False,
        emoji=False,
        soft_wrap=False,
    )
    for part in parts:
        console.print(part)
    return buf.getvalue()


def _bound_parts(result: BoundResult) -> list[RenderableType]:
    table = Table(box=box.SIMPLE, show_header=False, pad_edge=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("delta (tolerated attenuation loss)", fmt(result.delta, 12))
    table.add_row("A must be >=", fmt(1.0 - result.delta, 12))
    table.add_row("min q/eps", fmt(result.min_ratio, 12))
    if result.eps is not None:
        table.add_row("eps", fmt(result.eps, 12))
        table.add_row("min q (mean square)", fmt(result.min_q, 12))
        table.add_row("min input RMS sqrt(q)", fmt(result.min_rms, 12))
    return [Text("Attenuation bound: A = sqrt(q/(q+eps)) >= 1 - delta"), table]


def _ratio_figures_parts(rows: tuple[RatioFigures, ...]) -> list[RenderableType]:
    with_q = any(r.q is not None for r in rows)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("q/eps", justify="right")
    if with_q:
        table.add_column("q", justify="right")
    table.add_column("A", justify="right")
    table.add_column("1 - A", justify="right")
    for r in rows:
        cells = [fmt(r.ratio)]
        if with_q:
            cells.append(fmt(r.q))
        cells += [f"{r.attenuation:.6f}", fmt(r.loss)]
        table.add_row(*cells)
    return [Text("Attenuation A = sqrt(r/(r+1)) at r = q/eps"), table]


def _eps_source_parts(report: RatioReport) -> list[RenderableType]:
    """ratio --config: one line per (eps, source) with the layers that took it."""
    groups: dict[tuple[float, str], list[str]] = {}
    for layer in report.layers:
        if layer.eps_source is not None:
            groups.setdefault((layer.eps, layer.eps_source), []).append(layer.name)
    lines = []
    for (eps, source), names in groups.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"eps {fmt(eps)} from {source}: {shown}")
    return [Text("\n".join(lines))] if lines else []


def _layer_row(layer: LayerResult) -> list[str]:
    return [
        layer.name,
        fmt(layer.eps),
        str(layer.count),
        str(layer.nonfinite),
        fmt(layer.min_q),
        fmt(layer.min_ratio),
        fmt(layer.min_attenuation),
        str(layer.below_bound),
        f"{100.0 * layer.violation_fraction:.3g}%",
    ]


def histogram_rows(layer: LayerResult, bound: float) -> list[tuple[str, int, str]]:
    """``(label, count, mark)`` per decade of r = q/eps, then q = 0 and NaN/inf when present.

    Decade k holds 10**k <= r < 10**(k+1). ``mark`` is "below bound" when the whole decade is
    below the bound (10**(k+1) <= bound), "<- bound" when the bound falls inside it (some of
    its inputs may pass), else "". Rows between the first and last decade are shown even when
    empty, so bar positions read as a log axis.
    """
    from rmsnorm_eps.summary import decade_edge

    counts = dict(layer.decades)
    rows: list[tuple[str, int, str]] = []
    if layer.zero_count:
        rows.append(("q = 0", layer.zero_count, "below bound"))
    if counts:
        for k in range(min(counts), max(counts) + 1):
            lo, hi = decade_edge(k), decade_edge(k + 1)
            mark = "below bound" if hi <= bound else ("<- bound" if lo < bound else "")
            rows.append((f"1e{k} <= r < 1e{k + 1}", counts.get(k, 0), mark))
    if layer.nonfinite:
        rows.append(("NaN/inf", layer.nonfinite, "violation"))
    return rows


def _histogram(layer: LayerResult, bound: float, color: bool) -> list[RenderableType]:
    """The title line and the table (a table title would wrap at the table's width)."""
    title = Text(f"{layer.name}: inputs per decade of r = q/eps (bound r >= {fmt(bound)})")
    rows = histogram_rows(layer, bound)
    peak = max((c for _, c, _ in rows), default=0)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("r = q/eps")
    table.add_column("count", justify="right")
    table.add_column("", no_wrap=True)
    table.add_column("")
    for label, count, mark in rows:
        n = 0 if count == 0 or peak == 0 else max(1, round(HISTOGRAM_BAR * count / peak))
        style = "red" if color and mark in ("below bound", "violation") else None
        table.add_row(label, str(count), "#" * n, mark, style=style)
    return [title, table]


def _wants_histogram(layer: LayerResult, report: RatioReport, options: RenderOptions) -> bool:
    mode = options.histogram
    if mode == "auto":
        mode = "all" if len(report.layers) <= HISTOGRAM_AUTO_LAYERS else "violating"
    return mode == "all" or (mode == "violating" and layer.violations > 0)


def position_split_parts(
    layers: Sequence[Any], columns: Sequence[tuple[str, Callable[[Any], str]]]
) -> list[RenderableType]:
    """For dumps with token positions: each layer's first token (position 0) next to its other
    tokens, one ``(header, cell)`` column pair per figure. Shared by ratio and compare."""
    split = [ly for ly in layers if ly.first_token is not None]
    if not split:
        return []
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("layer", overflow="fold")
    for side in ("first", "other"):
        for name, _ in columns:
            table.add_column(f"{side}\n{name}", justify="right", no_wrap=True)
    for ly in split:
        cells = [ly.name]
        for part in (ly.first_token, ly.other_tokens):
            cells += [cell(part) for _, cell in columns]
        table.add_row(*cells)
    return [Text("By token position: first token (position 0) | other tokens"), table]


def _position_parts(report: RatioReport) -> list[RenderableType]:
    return position_split_parts(
        report.layers,
        [
            ("n", lambda p: str(p.count)),
            ("min q/eps", lambda p: fmt(p.min_ratio, 4)),
            ("max q", lambda p: fmt(p.max_q, 4)),
            ("viol", lambda p: str(p.violations)),
        ],
    )


def _ratio_parts(report: RatioReport, options: RenderOptions) -> list[RenderableType]:
    parts: list[RenderableType] = []
    kind = "raw activations, q = mean(x^2) over the last axis" if report.raw else "q values"
    parts.append(
        Text(
            f"{report.source} ({kind}): bound A >= {fmt(1 - report.delta, 12)} "
            f"(delta {fmt(report.delta, 12)}) <=> q/eps >= {fmt(report.min_ratio, 12)}"
        )
    )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name, justify in [
        ("layer", "left"),
        ("eps", "right"),
        ("count", "right"),
        ("nonfinite", "right"),
        ("min q", "right"),
        ("min q/eps", "right"),
        ("min A", "right"),
        ("below bound", "right"),
        ("violating", "right"),
    ]:
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for layer in report.layers:
        table.add_row(*_layer_row(layer), style="bold" if layer.violations else None)
    parts.append(table)
    parts.extend(_eps_source_parts(report))
    parts.extend(_position_parts(report))
    for layer in report.layers:
        if _wants_histogram(layer, report, options):
            parts.extend(_histogram(layer, report.min_ratio, options.color))
        if not layer.violations:
            continue
        if layer.worst:  # (--top 0 lists none)
            # The title is a line of its own: a table title wraps at the table's width.
            parts.append(Text(f"{layer.name}: worst {len(layer.worst)} input(s)"))
            worst = Table(box=box.SIMPLE_HEAD, pad_edge=False)
            for name in ("index", "q", "q/eps", "A", "1 - A"):
                worst.add_column(name, justify="left" if name == "index" else "right")
            for w in layer.worst:
                worst.add_row(
                    _shard_index(w.index, w.shard, w.shard_index),
                    fmt(w.q),
                    fmt(w.ratio),
                    fmt(w.attenuation),
                    fmt(w.loss),
                )
            parts.append(worst)
        if layer.nonfinite:
            shown = ", ".join(
                f"{_shard_index(n.index, n.shard, n.shard_index)}={n.value}"
                for n in layer.nonfinite_examples
            )
            parts.append(
                Text(
                    f"{layer.name}: {layer.nonfinite} nonfinite q ({layer.nan_count} NaN, "
                    f"{layer.inf_count} inf), each a violation: {shown}"
                )
            )
    affected = report.layers_affected
    parts.append(
        Text(
            f"Total: {report.violations} violation(s) in {len(affected)} of "
            f"{len(report.layers)} layer(s) ({report.below_bound} below the bound, "
            f"{report.nonfinite} nonfinite) out of {report.count} inputs"
            + (f"; layers affected: {', '.join(affected)}" if affected else "")
        )
    )
    for u in report.skipped:
        parts.append(Text(f"SKIPPED (unreadable, not analysed): {u.name}: {u.problem}"))
    if options.gate is not None:
        verdict = "PASS: " if options.gate.passed else "FAIL: "
        if report.skipped:  # part of the dump was not checked: never a plain PASS
            verdict = f"INCOMPLETE ({len(report.skipped)} layer(s) skipped): " + verdict
        parts.append(Text(verdict + options.gate.reason))
    return parts


def render(result: object, options: RenderOptions) -> str:
    """Render a result as text."""
    if isinstance(result, BoundResult):
        return render_renderables(_bound_parts(result), options)
    if isinstance(result, tuple) and all(isinstance(r, RatioFigures) for r in result):
        return render_renderables(_ratio_figures_parts(result), options)
    analysis = sys.modules.get("rmsnorm_eps.analysis")  # a RatioReport implies it is loaded
    if analysis is not None and isinstance(result, analysis.RatioReport):
        return render_renderables(_ratio_parts(result, options), options)
    from rmsnorm_eps.reports import compare_text

    if compare_text.supports(result):
        return render_renderables(compare_text.parts(result, options), options)

    from rmsnorm_eps.reports.config_report import render_config_text

    config_text = render_config_text(result, options)
    if config_text is not None:
        return config_text

    if type(result).__module__.startswith("rmsnorm_eps.parity"):  # parity and probe results
        from rmsnorm_eps.reports.parity_text import render_parity

        return render_parity(result, options)
    raise UnsupportedResult(f"text format cannot render {type(result).__name__}")
