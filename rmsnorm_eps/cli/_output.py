"""Shared CLI plumbing: choosing a format, writing the report, the stderr summary line."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import typer

FORMAT_HELP = "Output format: text (tables for people) or json (versioned, for CI)."


def format_option(default: str = "text") -> Any:
    """The ``--format`` option; RMSNORM_EPS_FORMAT sets its default."""
    return typer.Option(
        default, "--format", "-f", envvar="RMSNORM_EPS_FORMAT", help=FORMAT_HELP,
        show_default=True,
    )


def output_option() -> Any:
    return typer.Option(
        None, "--output", "-o", help="Write the report to FILE (atomically) instead of stdout.",
        dir_okay=False,
    )


def check_format(fmt: str) -> str:
    from rmsnorm_eps.reports import FORMATS

    if fmt not in FORMATS:
        raise typer.BadParameter(
            f"{fmt!r} is not one of {', '.join(sorted(FORMATS))}", param_hint="'--format'"
        )
    return fmt


def emit(result: object, fmt: str, output: Path | None, gate: Any = None) -> None:
    """Render ``result`` and write it to ``output`` (atomic) or stdout."""
    from rmsnorm_eps.reports import RenderOptions, color_wanted, render

    to_terminal = output is None and sys.stdout.isatty()
    options = RenderOptions(
        color=fmt == "text" and color_wanted(to_terminal),
        width=(shutil.get_terminal_size().columns if to_terminal else 200),
        gate=gate,
    )
    text = render(result, fmt, options)
    if output is not None:
        from rmsnorm_eps.atomic import atomic_write_text

        atomic_write_text(output, text)
    else:
        typer.echo(text, nl=False)


def summary_line(text: str) -> None:
    """The one-line summary on stderr."""
    typer.echo(f"rmsnorm-eps: {text}", err=True)
