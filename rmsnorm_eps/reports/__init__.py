"""Reporters: one class per command (``reports/commands/<command>.py``), one module per output
format (``reports/formats/<format>.py``, which know no command).

``render(result, fmt, options)`` finds the result's reporter (:mod:`.registry`: the result's
type names its command) and the format's writer, which calls the reporter's role for it
(:mod:`.interface`): ``text``, ``document`` (json), or ``checks`` (the format-neutral
:class:`~rmsnorm_eps.reports.checks.CheckReport` that markdown, github, junit and sarif
render). The report is built whole and returned as one string. Everything is imported on
first use (the CLI must start fast).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmsnorm_eps.reports.options import (
    CHECK_FORMATS,
    HISTOGRAM_AUTO_LAYERS,
    HISTOGRAM_CHOICES,
    Format,
    RenderOptions,
    UnsupportedResult,
    color_wanted,
)
from rmsnorm_eps.reports.registry import supported_formats

if TYPE_CHECKING:
    from rmsnorm_eps.gate import GateResult
    from rmsnorm_eps.reports.checks import CheckReport

__all__ = [
    "FORMATS",
    "HISTOGRAM_AUTO_LAYERS",
    "HISTOGRAM_CHOICES",
    "Format",
    "RenderOptions",
    "UnsupportedResult",
    "check_report",
    "color_wanted",
    "render",
    "supported_formats",
]

#: ``--format`` name -> the module of that format.
FORMATS: dict[str, str] = {f.value: f"rmsnorm_eps.reports.formats.{f.value}" for f in Format}


def render(result: object, fmt: Format | str, options: RenderOptions | None = None) -> str:
    """``result`` in format ``fmt`` (a :class:`Format` or its name), as one string.

    Raises :class:`UnsupportedResult` when the result's command does not serve ``fmt``, and
    ValueError for a name that is no format.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    fmt = Format(fmt)
    from rmsnorm_eps.reports.checks import CheckReport
    from rmsnorm_eps.reports.registry import CHECK_WRITERS, WRITERS, reporter_for

    if isinstance(result, CheckReport):  # already format-neutral
        if fmt not in CHECK_FORMATS:
            raise UnsupportedResult(f"{fmt.value} format cannot render a check report")
        return CHECK_WRITERS[fmt](result)
    return WRITERS[fmt](reporter_for(result, options), result)


def check_report(result: object, gate: GateResult | None = None) -> CheckReport:
    """The :class:`~rmsnorm_eps.reports.checks.CheckReport` of ``result`` (unchanged when it
    already is one), built by its command's reporter."""
    from rmsnorm_eps.reports.checks import CheckReport
    from rmsnorm_eps.reports.interface import ChecksRole
    from rmsnorm_eps.reports.registry import reporter_for

    if isinstance(result, CheckReport):
        return result
    reporter = reporter_for(result, RenderOptions(gate=gate))
    if not isinstance(reporter, ChecksRole):
        raise UnsupportedResult(f"no check report for {type(result).__name__}")
    return reporter.checks(result)
