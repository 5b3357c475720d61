"""plot.py: the figure's data, not its pixels. ``plot_ratio`` is drawn with ``_save``
replaced by a recorder, so each panel's artists can be read: the curve is A(r) =
sqrt(r/(r+1)) (checked against math.sqrt), the bars are the report's decade counts at
[10**k, 10**(k+1)), the vertical line is the bound q/eps and the horizontal one 1 - delta.
``worst_layers``' ranking and ``plot_format``'s refusals are checked with their messages."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import rmsnorm_eps.plot as plot_mod
from rmsnorm_eps import check
from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.plot import plot_format, plot_ratio, worst_layers


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []

    def record(fig: Any, fmt: str) -> bytes:
        seen.append(fig)
        return b"figure"

    monkeypatch.setattr(plot_mod, "_save", record)
    return seen


def _report(layers: dict[str, np.ndarray], eps: float = 1e-5) -> Any:
    return check(layers, eps).report


def test_panel_data(figures: list[Any]) -> None:
    q = np.array([2e-7, 1e-3, 2e-3, 5e-2, np.nan, 0.0])  # q/eps: 0.02, 100, 200, 5000
    rep = _report({"layers.0": q})
    plot = plot_ratio(rep, "svg")
    assert plot.data == b"figure" and plot.layers == ("layers.0",)
    assert (plot.width_px, plot.height_px) == (800, 260)
    (fig,) = figures
    ax = next(a for a in fig.axes if a.get_lines())
    curve, vline, hline = ax.get_lines()
    r, a = curve.get_xdata(), curve.get_ydata()
    for i in (0, 123, 399):
        assert a[i] == pytest.approx(math.sqrt(r[i] / (r[i] + 1.0)), rel=1e-12)
    assert list(vline.get_xdata()) == [rep.min_ratio] * 2
    assert rep.min_ratio == pytest.approx(0.99**2 / (1 - 0.99**2), rel=1e-12)
    assert list(hline.get_ydata()) == [pytest.approx(0.99)] * 2
    bars = next(a for a in fig.axes if a.patches)
    got = sorted(
        (round(math.log10(p.get_x())), p.get_height(), p.get_width()) for p in bars.patches
    )
    assert [(k, h) for k, h, _ in got] == [(-2, 1), (2, 2), (3, 1)]
    for k, _, w in got:
        assert w == pytest.approx(9.0 * 10.0**k)  # the bar spans [10**k, 10**(k+1))
    colors = {round(math.log10(p.get_x())): p.get_facecolor()[:3] for p in bars.patches}
    assert colors[-2] != colors[3]  # below the bound: another colour than above it
    title = ax.get_title(loc="left")
    # the zero vector is counted apart (output 0 under any eps), not a violation
    assert "layers.0 (eps 1e-05): 6 inputs, 2 violation(s)" in title
    assert "NaN 1, inf 0, zero vectors (q=0) 1 (counted, not plotted)" in title
    assert "min q/eps 0.02 (A 0.14)\nbelow bound 1;" in title  # the smallest q > 0


def test_worst_layers_rank_and_limit() -> None:
    rep = _report(
        {
            "a": np.array([1.0]),
            "b": np.array([1e-9, 1e-9]),
            "c": np.array([1e-8]),
            "d": np.array([np.nan]),
        },
        eps=1e-6,
    )
    # violations: a 0, b 2, c 1, d 1 (nonfinite, no finite q: after c)
    assert [x.name for x in worst_layers(rep, 1)] == ["b"]
    assert [x.name for x in worst_layers(rep, 2)] == ["b", "c"]
    assert [x.name for x in worst_layers(rep, 3)] == ["b", "c", "d"]
    assert worst_layers(rep, 4) == rep.layers
    with pytest.raises(InvalidParameterError, match="plot layers must be >= 1, got 0"):
        worst_layers(rep, 0)


def test_plot_ratio_shows_the_worst_layers(figures: list[Any]) -> None:
    rep = _report({"a": np.array([1.0]), "b": np.array([1e-9]), "c": np.array([1e-8])}, eps=1e-6)
    plot = plot_ratio(rep, "png", max_layers=2)
    assert plot.layers == ("b", "c") and plot.height_px == 520
    assert "2 of 3 layers (worst first by violations)" in figures[0].texts[0].get_text()
    with pytest.raises(InvalidParameterError, match="plot format must be png or svg, got 'gif'"):
        plot_ratio(rep, "gif")


def test_plot_format() -> None:
    assert plot_format("out/Q.PNG") == "png" and plot_format("a.b.svg") == "svg"
    for bad in ("plot.gif", "plot", "png"):
        with pytest.raises(
            InvalidParameterError, match=f"--plot file must end in .png or .svg, got '{bad}'"
        ):
            plot_format(bad)
