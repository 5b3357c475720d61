"""Reporters: one module per output format behind one interface, chosen by name.

A reporter module defines ``render(result, options) -> str`` for the result objects it
supports (raising :class:`UnsupportedResult` otherwise). ``FORMATS`` maps the ``--format``
names to modules, imported only when used (the CLI must start fast).

``text`` and ``json`` render each result type directly (``text.py``, ``document.py``); the CI
formats ``markdown``, ``github``, ``junit`` and ``sarif`` render the format-neutral
:class:`~rmsnorm_eps.reports.checks.CheckReport` that an adapter in ``checks.ADAPTERS`` builds
from the result, so a new command gets all four with one adapter.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FORMATS",
    "HISTOGRAM_AUTO_LAYERS",
    "HISTOGRAM_CHOICES",
    "RenderOptions",
    "UnsupportedResult",
    "render",
]

FORMATS: dict[str, str] = {
    "text": "rmsnorm_eps.reports.text",
    "json": "rmsnorm_eps.reports.json_report",
    "markdown": "rmsnorm_eps.reports.markdown",
    "github": "rmsnorm_eps.reports.github",
    "junit": "rmsnorm_eps.reports.junit",
    "sarif": "rmsnorm_eps.reports.sarif",
}


class UnsupportedResult(TypeError):
    """The chosen format has no rendering for this kind of result."""


@dataclass(frozen=True)
class RenderOptions:
    """Presentation choices; they never change a number, only how it is shown."""

    color: bool = False
    width: int = 200  # rich tables take only the width they need
    gate: Any = None  # GateResult for commands that gate
    #: text: per-layer histograms of log10(q/eps): "auto" (every layer when there are at
    #: most HISTOGRAM_AUTO_LAYERS, else the layers with violations), "all", "violating", "none"
    histogram: str = "auto"


HISTOGRAM_CHOICES = ("auto", "all", "violating", "none")
HISTOGRAM_AUTO_LAYERS = 8


def color_wanted(stream_isatty: bool) -> bool:
    """Colour only on a terminal and only when NO_COLOR is unset (https://no-color.org)."""
    return stream_isatty and not os.environ.get("NO_COLOR")


def render(result: object, fmt: str, options: RenderOptions | None = None) -> str:
    """Render ``result`` in format ``fmt`` (a key of :data:`FORMATS`)."""
    try:
        module = importlib.import_module(FORMATS[fmt])
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}") from None
    text: str = module.render(result, options or RenderOptions())
    return text
