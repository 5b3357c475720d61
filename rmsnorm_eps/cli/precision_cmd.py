"""``rmsnorm-eps precision``: eps as stored in float16/bfloat16/float32, absorption, q range."""

from __future__ import annotations

from pathlib import Path

import typer

from rmsnorm_eps.cli._app import EXIT_FINDINGS, EXIT_OK, app
from rmsnorm_eps.cli._output import (
    append_step_summary,
    check_format,
    emit,
    exit_zero_option,
    format_option,
    output_option,
    summary_line,
    summary_option,
)

_DTYPES = ("float16", "bfloat16", "float32")


@app.command(
    "precision",
    short_help="eps as stored in float16/bfloat16/float32, absorption, range of q.",
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps precision --eps 1e-6\n\n"
        "  rmsnorm-eps precision --eps 1e-8 --dtype float16\n\n"
        "Exit codes: 0 eps usable in every dtype shown, 1 eps rounds to zero (or overflows) "
        "in one of them, 2 usage error. --exit-zero turns 1 into 0."
    ),
)
def precision(
    eps: float = typer.Option(..., "--eps", help="Epsilon (as written in the config)."),
    dtype: list[str] = typer.Option(
        None, "--dtype", help="float16, bfloat16 or float32 (repeatable; default all three)."
    ),
    exit_zero: bool = exit_zero_option("when eps vanishes"),
    fmt: str = format_option(),
    output: Path = output_option(),
    summary: bool = summary_option(),
) -> None:
    """eps rounded to each dtype; the q above which fl(q + eps) == q; the range of q.

    With p significand bits and stored eps = m 2^F, q + eps absorbs eps for every q >= 2^(F+p+1)
    (from 2^(F+p) on for even q when eps is a power of two), checked by adding in the dtype.
    """
    from rmsnorm_eps.compare.precision import precision_report

    check_format(fmt)
    names: list[str] = []
    for d in dtype or []:
        if d not in _DTYPES:
            raise typer.BadParameter(
                f"{d!r} is not one of {', '.join(_DTYPES)}", param_hint="'--dtype'"
            )
        if d not in names:
            names.append(d)
    report = precision_report(eps, tuple(names) or None)
    emit(report, fmt, output)
    if summary:
        append_step_summary(report)
    gone = report.vanishing
    if gone:
        summary_line(f"FAIL: eps {eps:g} vanishes (rounds to 0 or inf) in {', '.join(gone)}")
        if not exit_zero:
            raise typer.Exit(EXIT_FINDINGS)
    else:
        summary_line(f"PASS: eps {eps:g} is nonzero and finite in {len(report.rows)} dtype(s)")
    raise typer.Exit(EXIT_OK)
