"""--plot: a valid PNG/SVG of the expected size; NaN counted, not plotted; missing extra."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.analysis import analyze_dump
from rmsnorm_eps.errors import InvalidParameterError, MissingExtraError
from rmsnorm_eps.plot import plot_format, plot_ratio, worst_layers
from tests.helpers import png_size

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ci" / "q_dump.npz"


def test_png_of_expected_size() -> None:
    rep = analyze_dump(EXAMPLE, 1e-5)
    plot = plot_ratio(rep, "png")
    assert plot.layers == ("layers.0.attn_norm", "layers.0.ffn_norm", "output_norm")
    assert png_size(plot.data) == (800, 780) == (plot.width_px, plot.height_px)
    assert plot_ratio(rep, "png").data == plot.data  # deterministic


def test_nan_counted_not_plotted(write_npz: Callable[..., Path]) -> None:
    q = np.array([np.nan, np.inf, 0.0, 1e-7, 1e-3, np.nan], np.float32)
    rep = analyze_dump(write_npz(a=q, b=np.array([np.nan], np.float64)), 1e-5)
    svg = plot_ratio(rep, "svg").data.decode("utf-8")
    assert svg.lstrip().startswith("<?xml") and "</svg>" in svg
    assert "NaN 2, inf 1, zero vectors (q=0) 1 (counted, not plotted)" in svg
    assert "no positive finite q value" in svg  # layer b has only a NaN
    assert png_size(plot_ratio(rep, "png").data) == (800, 520)


def test_worst_layers_choice(write_npz: Callable[..., Path]) -> None:
    path = write_npz(
        a=np.array([1.0]), b=np.array([1e-9, 1e-9]), c=np.array([1e-8]), d=np.array([2.0])
    )
    rep = analyze_dump(path, 1e-6)
    assert [layer.name for layer in worst_layers(rep, 2)] == ["b", "c"]
    assert [layer.name for layer in worst_layers(rep, 3)] == ["a", "b", "c"]  # dump order
    assert png_size(plot_ratio(rep, "png", max_layers=2).data) == (800, 520)
    with pytest.raises(InvalidParameterError):
        worst_layers(rep, 0)


def test_plot_format_from_suffix() -> None:
    assert plot_format("a/b.PNG") == "png" and plot_format("x.svg") == "svg"
    for bad in ("plot.pdf", "plot"):
        with pytest.raises(InvalidParameterError):
            plot_format(bad)


def test_cli_plot(cli: Callable[..., Any], tmp_path: Path) -> None:
    out = tmp_path / "ratio.png"
    res = cli(
        "ratio",
        "--eps",
        "1e-5",
        "--q-file",
        str(EXAMPLE),
        "--plot",
        str(out),
        "--plot-layers",
        "1",
        "-f",
        "json",
    )
    assert res.exit_code == 1
    assert png_size(out.read_bytes()) == (800, 260)


def test_cli_plot_bad_suffix(cli: Callable[..., Any], tmp_path: Path) -> None:
    res = cli("ratio", "--eps", "1e-5", "--q-file", str(EXAMPLE), "--plot", str(tmp_path / "x.pdf"))
    assert res.exit_code == 2 and "must end in .png or .svg" in res.stderr
    assert res.stdout == ""  # refused before any analysis


def test_missing_matplotlib(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real_import = builtins.__import__

    def fake_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    rep = analyze_dump(EXAMPLE, 1e-5)
    with pytest.raises(MissingExtraError, match=r"the \[plot\] extra"):
        plot_ratio(rep)
    res = cli("ratio", "--eps", "1e-5", "--q-file", str(EXAMPLE), "--plot", str(tmp_path / "x.png"))
    assert res.exit_code == 2
    assert (
        "--plot needs the 'matplotlib' package: install the [plot] extra from the rmsnorm-eps "
        "clone: pip install -e '.[plot]'"
    ) in res.stderr
    assert not (tmp_path / "x.png").exists()
