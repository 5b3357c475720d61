"""Pictures of a ratio report: where the inputs sit on the attenuation curve (extra ``[plot]``).

One panel per layer (the worst ``max_layers`` when there are more): the curve
``A(r) = sqrt(r/(r+1))`` against ``r = q/eps`` on a log axis, the data's distribution under it
as one bar per decade ``10**k <= r < 10**(k+1)`` (``LayerResult.decades``), the bound
``r = min_ratio`` as a vertical line and ``A = 1 - delta`` as a horizontal one. NaN, inf and
``q = 0`` cannot sit on a log axis: they are counted in the panel's legend, not plotted.

matplotlib is imported lazily, with the non-interactive Agg canvas (no display needed, no
pyplot global state). Output is deterministic: no date in SVG metadata, fixed SVG id salt.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from rmsnorm_eps.analysis import LayerResult, RatioReport
from rmsnorm_eps.errors import InvalidParameterError, MissingExtraError

__all__ = [
    "PANEL_HEIGHT_IN",
    "PLOT_DPI",
    "PLOT_WIDTH_IN",
    "Plot",
    "plot_format",
    "plot_ratio",
    "require_matplotlib",
    "worst_layers",
]

PLOT_DPI = 100
PLOT_WIDTH_IN = 8.0
PANEL_HEIGHT_IN = 2.6
FORMATS = ("png", "svg")


@dataclass(frozen=True)
class Plot:
    """A rendered figure: its bytes, format, the layers drawn and the size in pixels
    (``PLOT_WIDTH_IN * PLOT_DPI`` by ``n_panels * PANEL_HEIGHT_IN * PLOT_DPI``)."""

    data: bytes
    fmt: str
    layers: tuple[str, ...]
    width_px: int
    height_px: int


def worst_layers(report: RatioReport, max_layers: int) -> tuple[LayerResult, ...]:
    """The ``max_layers`` worst layers in report order: most violations first, then the
    smallest minimum q/eps (layers without a finite q last among equals)."""
    if max_layers < 1:
        raise InvalidParameterError(f"plot layers must be >= 1, got {max_layers}")
    if len(report.layers) <= max_layers:
        return report.layers
    ranked = sorted(
        range(len(report.layers)),
        key=lambda i: (
            -report.layers[i].violations,
            report.layers[i].min_ratio is None,
            report.layers[i].min_ratio if report.layers[i].min_ratio is not None else 0.0,
            i,
        ),
    )
    keep = sorted(ranked[:max_layers])
    return tuple(report.layers[i] for i in keep)


def require_matplotlib() -> None:
    """Raise :class:`MissingExtraError` now (before a long analysis) if matplotlib is absent."""
    _import_matplotlib()


def plot_format(path: str) -> str:
    """``png`` or ``svg`` from a file name's suffix (case-insensitive)."""
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if suffix not in FORMATS:
        raise InvalidParameterError(f"--plot file must end in .png or .svg, got {path!r}")
    return suffix


def _import_matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise MissingExtraError("matplotlib", "plot", "--plot") from None
    return matplotlib


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
        width = left * 9.0
        counts = np.array([c for _, c in layer.decades], dtype=np.int64)
        colors = [
            "#d62728" if 10.0 ** (k + 1) <= bound else ("#ff7f0e" if 10.0**k < bound else "#9e9e9e")
            for k in ks
        ]
        bars.bar(
            left,
            counts,
            width=width,
            align="edge",
            color=colors,
            alpha=0.45,
            edgecolor="#555555",
            linewidth=0.5,
        )
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
        low = "no finite q value"
    ax.set_title(
        f"{layer.name} (eps {layer.eps:.3g}): {layer.count} inputs, {status}; {low}\n"
        f"below bound {layer.below_bound}; NaN {layer.nan_count}, inf {layer.inf_count}, "
        f"q=0 {layer.zero_count} (counted, not plotted)",
        fontsize=8,
        loc="left",
    )
    ax.legend(loc="upper left", fontsize=7, framealpha=0.8)


def plot_ratio(report: RatioReport, fmt: str = "png", max_layers: int = 6) -> Plot:
    """Draw the report (the worst ``max_layers`` layers) as PNG or SVG bytes."""
    if fmt not in FORMATS:
        raise InvalidParameterError(f"plot format must be png or svg, got {fmt!r}")
    layers = worst_layers(report, max_layers)
    matplotlib = _import_matplotlib()
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = max(1, len(layers))
    with matplotlib.rc_context({"svg.hashsalt": "rmsnorm-eps", "svg.fonttype": "none"}):
        fig = Figure(figsize=(PLOT_WIDTH_IN, PANEL_HEIGHT_IN * n), dpi=PLOT_DPI)
        FigureCanvasAgg(fig)
        axes = fig.subplots(n, 1, squeeze=False)[:, 0]
        for ax, layer in zip(axes, layers, strict=True):
            _panel(ax, layer, report, np)
        axes[-1].set_xlabel("q/eps (log scale)", fontsize=8)
        shown = (
            f"{len(layers)} of {len(report.layers)} layers (worst first by violations)"
            if len(layers) < len(report.layers)
            else f"{len(layers)} layer(s)"
        )
        fig.suptitle(f"{report.source}: attenuation by eps, {shown}", fontsize=9)
        fig.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - 0.25 / (PANEL_HEIGHT_IN * n)), h_pad=0.6)
        buf = io.BytesIO()
        metadata = {"Date": None} if fmt == "svg" else {"Software": None}
        fig.savefig(buf, format=fmt, dpi=PLOT_DPI, metadata=metadata)
    return Plot(
        data=buf.getvalue(),
        fmt=fmt,
        layers=tuple(layer.name for layer in layers),
        width_px=round(PLOT_WIDTH_IN * PLOT_DPI),
        height_px=round(PANEL_HEIGHT_IN * n * PLOT_DPI),
    )
