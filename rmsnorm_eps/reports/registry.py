"""Which reporter serves a result, and which writer a format: two dicts, imported only when used.

Every result type names its command in a class attribute ``command`` (``RatioReport.command
== "ratio"``); :func:`command_of` reads it, :data:`REPORTERS` maps the name to its reporter
class (``"<module of reports.commands>:<class>"``, resolved by :func:`reporter_class`, so
nothing is imported until a result is rendered and the CLI starts fast), and :data:`WRITERS`
maps each :class:`~rmsnorm_eps.reports.options.Format` to the function that writes it from
the reporter's roles (:mod:`rmsnorm_eps.reports.interface`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from rmsnorm_eps.reports.interface import (
    ChecksRole,
    DocumentRole,
    MarkdownRole,
    Reporter,
    TextRole,
    formats_of,
)
from rmsnorm_eps.reports.options import Format, RenderOptions, UnsupportedResult

if TYPE_CHECKING:
    from rmsnorm_eps.reports.checks import CheckReport

__all__ = [
    "CHECK_WRITERS",
    "REPORTERS",
    "WRITERS",
    "command_of",
    "reporter_class",
    "reporter_for",
    "supported_formats",
]

#: Command name (a result's ``command``) -> ``"<module>:<class>"`` in ``reports.commands``.
REPORTERS: Mapping[str, str] = {
    "ratio": "ratio:RatioReporter",
    "merge": "ratio:RatioReporter",
    "bound": "bound:BoundReporter",
    "compare": "compare:CompareReporter",
    "precision": "precision:PrecisionReporter",
    "parity": "parity:ParityReporter",
    "parity onnx": "parity_onnx:OnnxParityReporter",
    "probe": "probe:ProbeReporter",
    "config show": "config_show:ConfigShowReporter",
    "config diff": "config_diff:ConfigDiffReporter",
    "defaults": "defaults:DefaultsReporter",
    "capture": "capture:CaptureReporter",
    "sensitivity": "sensitivity:SensitivityReporter",
}


def command_of(result: object) -> str:
    """The command that reports ``result``: its type's ``command`` attribute.

    A tuple of results (``bound --ratios``) is reported by its items' command. A ratio report
    of shards (``merge``) is the one case where the instance decides: ``RatioReport`` is the
    result of both ``ratio`` and ``merge``, and a non-empty ``shards`` makes it a merge.
    """
    kind = type(result[0]) if isinstance(result, tuple) and result else type(result)
    name = getattr(kind, "command", None)
    if not isinstance(name, str) or name not in REPORTERS:
        raise UnsupportedResult(f"no reporter for {type(result).__name__}")
    if name == "ratio" and bool(getattr(result, "shards", None)):
        return "merge"
    return name


def reporter_class(command: str) -> type[Reporter]:
    """The command's reporter class (its module imported on first use)."""
    try:
        module, _, name = REPORTERS[command].partition(":")
    except KeyError:
        raise KeyError(f"unknown command {command!r}; known: {', '.join(REPORTERS)}") from None
    cls = vars(importlib.import_module(f"rmsnorm_eps.reports.commands.{module}"))[name]
    if not (isinstance(cls, type) and issubclass(cls, Reporter)):
        raise TypeError(f"{REPORTERS[command]} is not a Reporter")
    return cls


def reporter_for(result: object, options: RenderOptions | None = None) -> Reporter:
    """The reporter of ``result``'s command, made with ``options``."""
    return reporter_class(command_of(result))(options)


def supported_formats(command: str) -> frozenset[str]:
    """The ``--format`` names ``command`` serves (for the CLI to check before any work)."""
    return frozenset(f.value for f in formats_of(reporter_class(command)))


def _refused(reporter: Reporter, fmt: Format) -> UnsupportedResult:
    return UnsupportedResult(f"{fmt.value} format is not available for {type(reporter).__name__}")


def _text(reporter: Reporter, result: object) -> str:
    if not isinstance(reporter, TextRole):
        raise _refused(reporter, Format.TEXT)
    return reporter.text(result)


def _json(reporter: Reporter, result: object) -> str:
    if not isinstance(reporter, DocumentRole):
        raise _refused(reporter, Format.JSON)
    from rmsnorm_eps.reports.formats.json import render_document

    return render_document(reporter.document(result))


def _markdown_checks(report: CheckReport) -> str:
    from rmsnorm_eps.reports.formats.markdown import render_checks

    return render_checks(report)


def _github_checks(report: CheckReport) -> str:
    from rmsnorm_eps.reports.formats.github import render_checks

    return render_checks(report)


def _junit_checks(report: CheckReport) -> str:
    from rmsnorm_eps.reports.formats.junit import render_checks

    return render_checks(report)


def _sarif_checks(report: CheckReport) -> str:
    from rmsnorm_eps.reports.formats.sarif import render_checks

    return render_checks(report)


#: Check format -> the writer of a :class:`~rmsnorm_eps.reports.checks.CheckReport` in it.
CHECK_WRITERS: Mapping[Format, Callable[[CheckReport], str]] = {
    Format.MARKDOWN: _markdown_checks,
    Format.GITHUB: _github_checks,
    Format.JUNIT: _junit_checks,
    Format.SARIF: _sarif_checks,
}


def _checks(fmt: Format) -> Callable[[Reporter, object], str]:
    def write(reporter: Reporter, result: object) -> str:
        if fmt is Format.MARKDOWN and isinstance(reporter, MarkdownRole):
            return reporter.markdown(result)
        if not isinstance(reporter, ChecksRole):
            raise _refused(reporter, fmt)
        return CHECK_WRITERS[fmt](reporter.checks(result))

    return write


#: Format -> the writer of a result in it, from its reporter's roles.
WRITERS: Mapping[Format, Callable[[Reporter, object], str]] = {
    Format.TEXT: _text,
    Format.JSON: _json,
    **{fmt: _checks(fmt) for fmt in CHECK_WRITERS},
}
