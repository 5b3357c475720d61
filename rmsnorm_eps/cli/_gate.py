"""The gate tail shared by every gating command (ratio, compare, merge, parity, capture).

A command parses its options into one frozen :class:`TailOptions` (before any work: a bad
``--plot`` or ``--report`` is a usage error, an output that would overwrite an input is refused),
computes its result, then hands it to :func:`finish`, which does the rest in one order for all:

1. render the ``--format`` report and every ``--report FORMAT=PATH`` (a format the result does
   not support is a usage error, before anything is written);
2. write them (stdout or ``-o``, atomically), append ``--summary``, draw ``--plot``;
3. print ``PASS|FAIL|INCOMPLETE: <counts>`` on stderr;
4. exit: 1 when layers were skipped (whatever ``--exit-zero`` says: part of the input was not
   checked), else 1 when the check failed unless ``--exit-zero``, else 0.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from rmsnorm_eps.cli._app import EXIT_FINDINGS, EXIT_OK, usage_error
from rmsnorm_eps.cli._options import Format, parse_report_specs
from rmsnorm_eps.cli._output import (
    append_step_summary,
    prepare_plot,
    render_for,
    skipped_suffix,
    summary_line,
    write_text,
)
from rmsnorm_eps.cli._paths import Named, check_outputs

if TYPE_CHECKING:
    from rmsnorm_eps.gate import GateResult

__all__ = ["TailOptions", "finish", "tail_options"]


@dataclass(frozen=True)
class TailOptions:
    """Everything the tail needs, parsed and checked once, before the analysis runs."""

    fmt: Format
    output: Path | None
    reports: tuple[tuple[Format, Path], ...]
    summary: bool
    plot: Path | None
    plot_fmt: str | None
    exit_zero: bool
    histogram: str = "auto"

    def outputs(self) -> list[Named]:
        """Every file the tail writes, labelled as the user spelled it."""
        named: list[Named] = [("-o/--output", self.output)]
        named += [(f"--report {fmt.value}=", path) for fmt, path in self.reports]
        named.append(("--plot", self.plot))
        target = os.environ.get("GITHUB_STEP_SUMMARY", "") if self.summary else ""
        if target:
            named.append(("--summary (GITHUB_STEP_SUMMARY)", Path(target)))
        return named


def tail_options(
    fmt: Format,
    output: Path | None,
    *,
    reports: list[str] | None = None,
    summary: bool = False,
    plot: Path | None = None,
    exit_zero: bool = False,
    histogram: str = "auto",
    inputs: Sequence[Named] = (),
    extra_outputs: Sequence[Named] = (),
) -> TailOptions:
    """Parse the tail's options into :class:`TailOptions`; refuse (exit 2, nothing written) an
    output that is one of ``inputs`` or another output (``extra_outputs``: the command's own,
    e.g. ``--save-summary``)."""
    options = TailOptions(
        fmt=Format(fmt),
        output=output,
        reports=parse_report_specs(reports),
        summary=summary,
        plot=plot,
        plot_fmt=prepare_plot(plot),
        exit_zero=exit_zero,
        histogram=str(getattr(histogram, "value", histogram)),
    )
    for label, path in [*options.outputs(), *extra_outputs]:
        if path is not None and Path(path).is_dir():  # found now, not after stdout is written
            raise usage_error(f"{label.rstrip('=')} {path} is a directory; give a file")
    check_outputs(inputs, [*options.outputs(), *extra_outputs])
    return options


def finish(
    result: object,
    gate: GateResult | None,
    options: TailOptions,
    *,
    passed: bool,
    message: str,
    skipped: tuple[Any, ...] = (),
    draw: Callable[[str], bytes] | None = None,
    verdict: bool = True,
) -> NoReturn:
    """Write every report of ``result``, the summary line, and exit (see the module doc).

    ``message`` is the counts part of the summary line (prefixed by the verdict unless it
    already starts with it); ``draw(plot_format)`` returns the ``--plot`` figure's bytes.
    ``verdict=False`` (a command that records rather than judges, e.g. ``capture``) prints
    ``message`` alone; skipped layers still make it INCOMPLETE and exit 1.
    """
    main = render_for(result, options.fmt.value, options.output, gate, options.histogram)
    extra = [
        (path, render_for(result, fmt.value, path, gate, options.histogram))
        for fmt, path in options.reports
    ]
    write_text(options.output, main)
    for path, text in extra:
        write_text(path, text)
    if options.summary:
        append_step_summary(result, gate)
    if options.plot is not None and options.plot_fmt is not None and draw is not None:
        from rmsnorm_eps.atomic import atomic_write_bytes

        atomic_write_bytes(options.plot, draw(options.plot_fmt))
    word = "INCOMPLETE" if skipped else "PASS" if passed else "FAIL"
    line = message if message.startswith(word) or not (verdict or skipped) else f"{word}: {message}"
    summary_line(line + skipped_suffix(skipped))
    if skipped:  # never 0, whatever --exit-zero says: part of the input was not checked
        raise typer.Exit(EXIT_FINDINGS)
    if not passed and not options.exit_zero:
        raise typer.Exit(EXIT_FINDINGS)
    raise typer.Exit(EXIT_OK)
