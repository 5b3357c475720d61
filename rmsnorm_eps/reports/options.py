"""What every reporter shares and nothing else: presentation options and the one error.

A leaf module (it imports nothing from the package but a type), so command and format modules can
import it without going through :mod:`rmsnorm_eps.reports`, which imports them lazily.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rmsnorm_eps.gate import GateResult

__all__ = [
    "CHECK_FORMATS",
    "HISTOGRAM_AUTO_LAYERS",
    "HISTOGRAM_CHOICES",
    "Format",
    "RenderOptions",
    "UnsupportedResult",
    "color_forced",
    "color_wanted",
]


class UnsupportedResult(TypeError):
    """The chosen format has no rendering for this kind of result."""


class Format(str, Enum):
    """``--format``: the report's format (``reports.registry.WRITERS`` maps each to its writer;
    the CLI offers exactly these, in this order)."""

    TEXT = "text"
    JSON = "json"
    MARKDOWN = "markdown"
    GITHUB = "github"
    JUNIT = "junit"
    SARIF = "sarif"


#: The formats that render a command's :class:`~rmsnorm_eps.reports.checks.CheckReport`.
CHECK_FORMATS = frozenset({Format.MARKDOWN, Format.GITHUB, Format.JUNIT, Format.SARIF})


@dataclass(frozen=True)
class RenderOptions:
    """Presentation choices; they never change a number, only how it is shown."""

    color: bool = False
    #: text: the terminal's columns; None when the output is not a terminal (a file, a pipe):
    #: then nothing is wrapped or shortened
    width: int | None = None
    #: the verdict of a gating command (``ratio``, ``compare``, ``merge``); None for the others
    gate: GateResult | None = None
    #: text: per-layer histograms of log10(q/eps): "auto" (every layer when there are at
    #: most HISTOGRAM_AUTO_LAYERS, else the layers with violations), "all", "violating", "none"
    histogram: str = "auto"


HISTOGRAM_CHOICES = ("auto", "all", "violating", "none")
HISTOGRAM_AUTO_LAYERS = 8


def color_wanted(stream_isatty: bool) -> bool:
    """Colour on a terminal, or anywhere when ``FORCE_COLOR`` is set and not empty
    (https://force-color.org: CI logs); never when ``NO_COLOR`` is set and not empty
    (https://no-color.org), which wins over ``FORCE_COLOR``: an opt-out always holds."""
    return (stream_isatty and not os.environ.get("NO_COLOR")) or color_forced()


def color_forced() -> bool:
    """``FORCE_COLOR`` set and not empty, ``NO_COLOR`` not (see :func:`color_wanted`)."""
    return bool(os.environ.get("FORCE_COLOR")) and not os.environ.get("NO_COLOR")
