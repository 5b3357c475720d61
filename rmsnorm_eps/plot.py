"""Pictures of reports (extra ``[plot]``): ratio, compare and parity.

``ratio``: where the inputs sit on the attenuation curve.

One panel per layer (the worst ``max_layers`` when there are more): the curve
``A(r) = sqrt(r/(r+1))`` against ``r = q/eps`` on a log axis, the data's distribution under it
as one bar per decade ``10**k <= r < 10**(k+1)`` (``LayerResult.decades``), the bound
``r = min_ratio`` as a vertical line and ``A = 1 - delta`` as a horizontal one. NaN, inf and
``q = 0`` cannot sit on a log axis: they are counted in the panel's legend, not plotted.

``compare`` (:func:`plot_compare`): per layer, the largest ``|change| = |y_to/y_from - 1|``
in each decade of ``q/eps_from`` as bars over the exact ``|factor - 1|`` curve, with the
tolerance as a horizontal line. ``parity`` (:func:`plot_parity`): per probe category, the
largest absolute and relative error against atol and rtol.

matplotlib is imported lazily, with the non-interactive Agg canvas (no display needed, no
pyplot global state). Names and paths from the input are labels through
:func:`rmsnorm_eps.escape.plot_label` (literal text, never mathtext), and nothing matplotlib
warns or logs while drawing reaches stderr. Output is deterministic: no date in SVG metadata,
fixed SVG id salt.

Why one module of ~460 lines: every figure shares the lazy matplotlib setup, the literal-label
rule and the deterministic output; splitting per command would copy that setup.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from rmsnorm_eps.analysis import RatioReport
from rmsnorm_eps.errors import InvalidParameterError, MissingExtraError
from rmsnorm_eps.escape import plot_label
from rmsnorm_eps.layer_record import LayerResult

if TYPE_CHECKING:
    from rmsnorm_eps.compare.analysis import CompareLayer, CompareReport
    from rmsnorm_eps.parity.api import ParityResult

__all__ = [
    "PANEL_HEIGHT_IN",
    "PLOT_DPI",
    "PLOT_WIDTH_IN",
    "Plot",
    "plot_compare",
    "plot_format",
    "plot_parity",
    "plot_ratio",
    "require_matplotlib",
    "worst_compare_layers",
    "worst_layers",
]

PLOT_DPI = 100
PLOT_WIDTH_IN = 8.0
PANEL_HEIGHT_IN = 2.6
FORMATS = ("png", "svg")
T = TypeVar("T")


@dataclass(frozen=True)
class Plot:
    """A rendered figure: its bytes, format, the layers drawn and the size in pixels
    (``PLOT_WIDTH_IN * PLOT_DPI`` by ``n_panels * PANEL_HEIGHT_IN * PLOT_DPI``)."""

    data: bytes
    fmt: str
    layers: tuple[str, ...]
    width_px: int
    height_px: int


def _worst(
    layers: tuple[T, ...], max_layers: int, key: Callable[[T], tuple[Any, ...]]
) -> tuple[T, ...]:
    """The ``max_layers`` layers of smallest ``key`` (ties: the earlier), in report order."""
    if max_layers < 1:
        raise InvalidParameterError(f"plot layers must be >= 1, got {max_layers}")
    if len(layers) <= max_layers:
        return layers
    ranked = sorted(range(len(layers)), key=lambda i: (*key(layers[i]), i))
    return tuple(layers[i] for i in sorted(ranked[:max_layers]))


def worst_layers(report: RatioReport, max_layers: int) -> tuple[LayerResult, ...]:
    """The ``max_layers`` worst layers in report order: most violations first, then the
    smallest minimum q/eps (layers without a finite q last among equals)."""

    def key(layer: LayerResult) -> tuple[Any, ...]:
        low = layer.min_ratio
        return (-layer.violations, low is None, low if low is not None else 0.0)

    return _worst(report.layers, max_layers, key)


def require_matplotlib() -> Any:
    """The ``matplotlib`` module; :class:`MissingExtraError` when it is absent (called before a
    long analysis too, so the error comes first)."""
    try:
        import matplotlib
    except ImportError:
        raise MissingExtraError("matplotlib", "plot", "--plot") from None
    return matplotlib


def plot_format(path: str) -> str:
    """``png`` or ``svg`` from a file name's suffix (case-insensitive)."""
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if suffix not in FORMATS:
        raise InvalidParameterError(f"--plot file must end in .png or .svg, got {path!r}")
    return suffix


def _panel(ax: Any, layer: LayerResult, report: RatioReport, np: Any) -> None:
    from rmsnorm_eps import numerics

    bound = report.min_ratio
    ks = [k for k, _ in layer.decades]
    b_k = int(np.floor(np.log10(bound)))
    lo = min([*ks, b_k]) - 1
    hi = max([*ks, b_k]) + 2
    r = np.logspace(lo, hi, 400, dtype=np.float64)
    a = np.asarray(numerics.attenuation(r), dtype=np.float64)
    bars = ax.twinx()
    ax.set_zorder(bars.get_zorder() + 1)  # curve above the bars
    ax.patch.set_visible(False)
    if layer.decades:
        left = np.array([10.0**k for k in ks], dtype=np.float64)
        counts = np.array([c for _, c in layer.decades], dtype=np.int64)
        colors = [
            "#d62728" if 10.0 ** (k + 1) <= bound else ("#ff7f0e" if 10.0**k < bound else "#9e9e9e")
            for k in ks
        ]
        _decade_bars(bars, left, counts, colors)
        bars.set_ylim(0, counts.max() * 1.15)
    bars.set_ylabel("inputs per decade", fontsize=7)
    bars.tick_params(labelsize=7)
    ax.plot(r, a, color="#1f77b4", linewidth=1.6, label="A = sqrt(r/(r+1))")
    ax.axvline(
        bound, color="#d62728", linestyle="--", linewidth=1.0, label=f"bound q/eps = {bound:.6g}"
    )
    ax.axhline(
        1.0 - report.delta,
        color="#d62728",
        linestyle=":",
        linewidth=0.8,
        label=f"A = 1 - delta = {1.0 - report.delta:.6g}",
    )
    ax.set_xscale("log")
    ax.set_xlim(10.0**lo, 10.0**hi)
    ax.set_ylim(0.0, 1.05)
    ax.set_ylabel("A", fontsize=8)
    ax.tick_params(labelsize=7)
    status = f"{layer.violations} violation(s)" if layer.violations else "no violation"
    if layer.min_ratio is not None:
        low = f"min q/eps {layer.min_ratio:.4g} (A {layer.min_attenuation:.4g})"
    else:
        low = "no positive finite q value"
    ax.set_title(
        f"{plot_label(layer.name)} (eps {layer.eps:.3g}): {layer.count} inputs, {status}; {low}\n"
        f"below bound {layer.below_bound}; NaN {layer.nan_count}, inf {layer.inf_count}, "
        f"zero vectors (q=0) {layer.zero_count} (counted, not plotted)",
        fontsize=8,
        loc="left",
    )
    ax.legend(loc="upper left", fontsize=7, framealpha=0.8)


def _figure(fmt: str, n: int, draw: Callable[[Any, Any, Any], None]) -> bytes:
    """``n`` stacked panels filled by ``draw(fig, axes, np)``, as PNG or SVG bytes: fixed size
    per panel, deterministic output (no dates, fixed SVG hash salt), matplotlib kept quiet."""
    if fmt not in FORMATS:
        raise InvalidParameterError(f"plot format must be png or svg, got {fmt!r}")
    matplotlib = require_matplotlib()
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with _quiet(), matplotlib.rc_context({"svg.hashsalt": "rmsnorm-eps", "svg.fonttype": "none"}):
        fig = Figure(figsize=(PLOT_WIDTH_IN, PANEL_HEIGHT_IN * n), dpi=PLOT_DPI)
        FigureCanvasAgg(fig)
        draw(fig, fig.subplots(n, 1, squeeze=False)[:, 0], np)
        return _save(fig, fmt)


def _save(fig: Any, fmt: str) -> bytes:
    buf = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else {"Software": None}
    fig.savefig(buf, format=fmt, dpi=PLOT_DPI, metadata=metadata)
    return buf.getvalue()


def _plot(data: bytes, fmt: str, names: Sequence[str], n: int) -> Plot:
    width, height = round(PLOT_WIDTH_IN * PLOT_DPI), round(PANEL_HEIGHT_IN * n * PLOT_DPI)
    return Plot(data=data, fmt=fmt, layers=tuple(names), width_px=width, height_px=height)


def _decade_bars(ax: Any, left: Any, heights: Any, colors: list[str], **extra: Any) -> None:
    """One bar per decade ``[10**k, 10**(k+1))`` (``left`` = ``10**k``) on a log x axis."""
    bars = {"align": "edge", "alpha": 0.45, "edgecolor": "#555555", "linewidth": 0.5}
    ax.bar(left, heights, width=left * 9.0, color=colors, **bars, **extra)


def _note(ax: Any, text: str, xy: tuple[float, float]) -> None:
    """A small label just above the point ``xy`` (a bar's top)."""
    ax.annotate(text, xy, textcoords="offset points", xytext=(0, 2), ha="center", fontsize=6)


def _layer_panels(
    fmt: str,
    layers: Sequence[Any],
    draw_panel: Callable[[Any, Any, Any], None],
    xlabel: str,
    title: str,
) -> Plot:
    """One panel per layer, stacked (``draw_panel(ax, layer, np)`` fills each; no layer at
    all: one empty panel)."""
    n = max(1, len(layers))

    def draw(fig: Any, axes: Any, np: Any) -> None:
        for ax, layer in zip(axes, layers):
            draw_panel(ax, layer, np)
        axes[-1].set_xlabel(xlabel, fontsize=8)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - 0.25 / (PANEL_HEIGHT_IN * n)), h_pad=0.6)

    return _plot(_figure(fmt, n, draw), fmt, [layer.name for layer in layers], n)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Nothing from matplotlib reaches stderr while a figure is drawn: no warnings (a glyph
    missing from the font for a character of a name) and no log records below CRITICAL."""
    import logging
    import warnings

    logger = logging.getLogger("matplotlib")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _shown(layers: Sequence[Any], of: Sequence[Any], how: str) -> str:
    if len(layers) < len(of):
        return f"{len(layers)} of {len(of)} layers{how}"
    return f"{len(layers)} layer(s)"


def plot_ratio(report: RatioReport, fmt: str = "png", max_layers: int = 6) -> Plot:
    """Draw the report (the worst ``max_layers`` layers) as PNG or SVG bytes."""
    layers = worst_layers(report, max_layers)
    shown = _shown(layers, report.layers, " (worst first by violations)")
    return _layer_panels(
        fmt,
        layers,
        lambda ax, layer, np: _panel(ax, layer, report, np),
        "q/eps (log scale)",
        f"{plot_label(report.source)}: attenuation by eps, {shown}",
    )


# ----------------------------------------------------------------------------- compare


def _log_floor(values: list[float], anchor: float) -> float:
    """A lower y limit for a log axis: one decade below the smallest positive value shown."""
    import math

    positive = [v for v in values if v > 0 and math.isfinite(v)] + ([anchor] if anchor > 0 else [])
    low = min(positive) if positive else 1e-16
    return float(10.0 ** (math.floor(math.log10(low)) - 1))


def worst_compare_layers(report: CompareReport, max_layers: int) -> tuple[CompareLayer, ...]:
    """The ``max_layers`` worst layers of a compare report, in report order: most violations
    first, then the largest max |change| (layers without a finite factor last)."""

    def key(layer: CompareLayer) -> tuple[Any, ...]:
        change = layer.max_abs_change
        return (-layer.violations, change is None, -(change or 0.0))

    return _worst(report.layers, max_layers, key)


def _compare_panel(ax: Any, layer: CompareLayer, report: CompareReport, np: Any) -> None:
    from rmsnorm_eps.compare.factor import factor as compute_factor

    tol = report.tolerance
    # each layer's own settings (they differ per layer with --from/--to config)
    spec_from, spec_to = layer.spec_from, layer.spec_to
    ks = [d.decade for d in layer.decades]
    lo = (min(ks) - 1) if ks else -2
    hi = (max(ks) + 2) if ks else 4
    r = np.logspace(lo, hi, 400, dtype=np.float64)
    with np.errstate(all="ignore"):
        curve = np.abs(compute_factor(r * spec_from.eps, spec_from, spec_to, report.scale) - 1.0)
    heights = [d.max_abs_change for d in layer.decades]
    floor = _log_floor([*heights, *curve[np.isfinite(curve)].tolist()], tol)
    ax.plot(
        r,
        np.where(np.isfinite(curve) & (curve > floor), curve, np.nan),
        color="#1f77b4",
        linewidth=1.4,
        label="|y_to/y_from - 1| at q = r eps_from",
    )
    if layer.decades:
        left = np.array([10.0**k for k in ks], dtype=np.float64)
        tops = np.array([max(h, floor) for h in heights], dtype=np.float64)
        colors = ["#d62728" if d.moved else "#9e9e9e" for d in layer.decades]
        _decade_bars(
            ax,
            left,
            tops - floor,
            colors,
            bottom=floor,
            label="max |change| per decade (red: some moved)",
        )
        for x0, top, d in zip(left, tops, layer.decades, strict=True):
            _note(ax, f"{d.moved}/{d.count}", (x0 * 3.0, top))
    ax.axhline(tol, color="#d62728", linestyle="--", linewidth=1.0, label=f"tolerance {tol:.6g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(10.0**lo, 10.0**hi)
    top = max([tol, *[h for h in heights if np.isfinite(h)]])
    ax.set_ylim(floor, top * 20.0)
    ax.set_ylabel("|change|", fontsize=8)
    ax.tick_params(labelsize=7)
    status = f"{layer.violations} violation(s)" if layer.violations else "no violation"
    worst = "-" if layer.max_abs_change is None else f"{layer.max_abs_change:.4g}"
    ax.set_title(
        f"{plot_label(layer.name)}: {layer.count} inputs, {status}; moved {layer.moved}, "
        f"max |change| {worst}\nNaN {layer.nan_count}, inf {layer.inf_count}, nonfinite factor "
        f"{layer.nonfinite_factor}, zero vectors (q=0) {layer.zero_count} (counted, not plotted); "
        "bars: moved/count",
        fontsize=8,
        loc="left",
    )
    ax.legend(loc="upper right", fontsize=6, framealpha=0.8)


def plot_compare(report: CompareReport, fmt: str = "png", max_layers: int = 6) -> Plot:
    """Draw a compare report: per layer, the largest |change| per decade of q/eps_from as
    bars, the exact |factor - 1| curve of the two settings and the tolerance line."""
    layers = worst_compare_layers(report, max_layers)
    shown = _shown(layers, report.layers, "")
    return _layer_panels(
        fmt,
        layers,
        lambda ax, layer, np: _compare_panel(ax, layer, report, np),
        "q/eps_from (log scale)",
        f"{plot_label(report.source)}: {plot_label(report.spec_from.describe())} -> "
        f"{plot_label(report.spec_to.describe())}, {shown}",
    )


# ----------------------------------------------------------------------------- parity
def _error_panel(
    ax: Any,
    x: Any,
    cats: Sequence[Any],
    colors: list[str],
    panel: tuple[str, list[float | None], float, str],
    names: list[str],
    np: Any,
) -> None:
    """One parity panel: per category the largest error as a bar on a log axis (a note for
    no finite error, 0, NaN or inf), the limit (atol or rtol) as a dashed line."""
    label, values, limit, limit_name = panel
    floor = _log_floor([v for v in values if v is not None], limit)
    tops = np.array([floor if v is None else max(v, floor) for v in values], np.float64)
    ax.bar(x, tops - floor, bottom=floor, color=colors, alpha=0.6, edgecolor="#555555")
    for i, (c, v) in enumerate(zip(cats, values, strict=True)):
        note = "no finite" if v is None else ("0" if v == 0 else "")
        if c.nan or c.inf:
            note = (note + f" NaN {c.nan} inf {c.inf}").strip()
        if note:
            _note(ax, note, (float(x[i]), float(tops[i])))
    ax.axhline(
        limit,
        color="#d62728",
        linestyle="--",
        linewidth=1.0,
        label=f"{limit_name} {limit:.3g}",
    )
    ax.set_yscale("log")
    ax.set_ylim(floor, max([limit, *[v for v in values if v is not None]]) * 20.0)
    ax.set_ylabel(label, fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels([plot_label(n) for n in names], fontsize=7)
    ax.tick_params(labelsize=7)
    ax.legend(loc="upper right", fontsize=7, framealpha=0.8)


def plot_parity(result: ParityResult, fmt: str = "png") -> Plot:
    """Draw a parity result: two panels, the max absolute and the max relative error per
    probe category (log axis; red bars for failing categories) with atol and rtol marked."""
    cats = result.categories
    tol = result.tolerance
    names = [c.name for c in cats]
    colors = ["#9e9e9e" if c.passed else "#d62728" for c in cats]
    panels = (
        ("max |a - r|", [c.max_abs_error for c in cats], tol.atol, "atol"),
        ("max |a - r|/|r|", [c.max_rel_error for c in cats], tol.rtol, "rtol"),
    )

    inferred = "-" if result.inference.eps is None else f"{result.inference.eps:.4g}"

    def draw(fig: Any, axes: Any, np: Any) -> None:
        x = np.arange(len(cats), dtype=np.float64)
        for ax, panel in zip(axes, panels, strict=True):
            _error_panel(ax, x, cats, colors, panel, names, np)
        axes[0].set_title(
            f"{plot_label(result.actual_source)} vs float64 reference, rule {tol.rule}: "
            f"{tol.formula()}\n"
            f"red: failing category ({len(result.failing_categories)} of {len(cats)}); "
            f"inferred eps {inferred} (configured {result.probes.eps:.4g})",
            fontsize=8,
            loc="left",
        )
        fig.tight_layout(h_pad=0.6)

    return _plot(_figure(fmt, 2, draw), fmt, names, 2)
