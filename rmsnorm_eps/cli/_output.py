"""Shared CLI plumbing: rendering and writing a report, the job summary, the plot file, the
stderr summary line. The options themselves are declared in :mod:`rmsnorm_eps.cli._options`."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rmsnorm_eps.gate import GateResult
    from rmsnorm_eps.reports.options import RenderOptions


def render_for(
    result: object,
    fmt: str,
    output: Path | None,
    gate: GateResult | None = None,
    histogram: str = "auto",
) -> str:
    """Render ``result`` for ``output`` (None: stdout, colour and width of the terminal;
    colour also with FORCE_COLOR, never in an ``-o`` file: :func:`color_wanted`)."""
    from rmsnorm_eps.reports import RenderOptions, color_wanted

    to_terminal = output is None and sys.stdout.isatty()
    options = RenderOptions(
        color=fmt == "text" and output is None and color_wanted(to_terminal),
        width=shutil.get_terminal_size().columns if to_terminal else None,
        gate=gate,
        histogram=histogram,
    )
    return render_or_usage_error(result, fmt, options)


def write_text(output: Path | None, text: str) -> None:
    """Write a rendered report to ``output`` (atomically) or to stdout."""
    if output is not None:
        from rmsnorm_eps.atomic import atomic_write_text

        atomic_write_text(output, text)
    else:
        from rmsnorm_eps.reports.options import color_forced

        # click strips colour off a terminal unless told: FORCE_COLOR tells it (names in the
        # text are escaped, so the only escape sequences are the report's own styles)
        typer.echo(text, nl=False, color=True if color_forced() else None)


def emit(result: object, fmt: str, output: Path | None) -> None:
    """Render ``result`` and write it to ``output`` (atomic) or stdout."""
    write_text(output, render_for(result, str(getattr(fmt, "value", fmt)), output))


def render_or_usage_error(result: object, fmt: str, options: RenderOptions) -> str:
    """Render; a format that has no rendering for this result is a usage error (exit 2)."""
    from rmsnorm_eps.cli._app import usage_error
    from rmsnorm_eps.reports import UnsupportedResult, render

    try:
        return render(result, fmt, options)
    except UnsupportedResult:
        raise usage_error(f"--format {fmt} is not available for this output") from None


def append_step_summary(result: object, gate: GateResult | None = None) -> None:
    """Append the Markdown report to ``$GITHUB_STEP_SUMMARY`` (never truncating it); when the
    variable is unset, a note on stderr instead."""
    import os

    from rmsnorm_eps.errors import InputFileError
    from rmsnorm_eps.reports import RenderOptions

    target = os.environ.get("GITHUB_STEP_SUMMARY", "")
    if not target:
        summary_line("note: --summary: GITHUB_STEP_SUMMARY is not set; no job summary written")
        return
    text = render_or_usage_error(result, "markdown", RenderOptions(gate=gate))
    path = Path(target)
    try:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
    except OSError as exc:
        raise InputFileError(
            path, f"cannot append the job summary: {exc.strerror or exc}", key=None
        ) from None


def prepare_plot(plot: Path | None) -> str | None:
    """Check a ``--plot`` FILE before any work: its format (png/svg, else a usage error) and
    that matplotlib is installed (else exit 2 naming the extra). None without ``--plot``."""
    if plot is None:
        return None
    from rmsnorm_eps.cli._app import usage_error
    from rmsnorm_eps.plot import plot_format, require_matplotlib

    try:
        fmt = plot_format(str(plot))
    except ValueError as exc:
        raise usage_error(str(exc)) from None
    require_matplotlib()
    return fmt


def summary_line(text: str) -> None:
    """The one-line summary on stderr (inert and bounded: :func:`rmsnorm_eps.escape.message`)."""
    from rmsnorm_eps.escape import message

    typer.echo(f"rmsnorm-eps: {message(text)}", err=True)


def skipped_suffix(skipped: tuple[Any, ...]) -> str:
    """``; skipped N unreadable layer(s): a, b`` for the summary line (empty when none)."""
    if not skipped:
        return ""
    names = ", ".join(u.name for u in skipped[:5]) + (" ..." if len(skipped) > 5 else "")
    return f"; skipped {len(skipped)} unreadable layer(s): {names}"
