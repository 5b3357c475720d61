"""``rmsnorm-eps precision``: eps as stored in float16/bfloat16/float32, absorption, q range."""

from __future__ import annotations

from typing import Annotated

import typer

from rmsnorm_eps.cli._app import app
from rmsnorm_eps.cli._commands import short_help
from rmsnorm_eps.cli._options import (
    DtypeChoice,
    ExitZeroOpt,
    Format,
    FormatOpt,
    NormKind,
    OutputOpt,
    ReportOpt,
    SummaryOpt,
)

_DTYPES = ("float16", "bfloat16", "float32")


@app.command(
    "precision",
    short_help=short_help("precision"),
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps precision --eps 1e-6\n\n"
        "  rmsnorm-eps precision --eps 1e-8 --dtype float16\n\n"
        "  rmsnorm-eps precision --eps 1e-6 --dtype bf16,fp16\n\n"
        "  rmsnorm-eps precision --eps 1e-5 --norm layer  # LayerNorm: v + eps\n\n"
        "Exit codes: 0 eps usable in every dtype shown, 1 eps rounds to zero (or overflows) "
        "in one of them, 2 usage error. --exit-zero turns 1 into 0."
    ),
)
def precision(
    eps: Annotated[float, typer.Option("--eps", help="Epsilon (as written in the config).")],
    dtype: Annotated[
        list[str] | None,
        typer.Option(
            "--dtype",
            click_type=DtypeChoice(_DTYPES, many=True),
            help="The dtypes of the data to check eps in: a comma list or repeated (bf16,fp16; "
            "aliases bf16, fp16, fp32...).",
            show_default="all three",
        ),
    ] = None,
    exit_zero: ExitZeroOpt = False,
    fmt: FormatOpt = Format.TEXT,
    output: OutputOpt = None,
    report_to: ReportOpt = None,
    summary: SummaryOpt = False,
    norm: Annotated[
        NormKind,
        typer.Option(
            "--norm",
            help="The norm eps belongs to: rms (the figures are of q = mean(x^2)) or layer "
            "(LayerNorm: of the variance v = mean((x - mean x)^2); eps is stored and absorbed "
            "the same way).",
        ),
    ] = NormKind.RMS,
) -> None:
    """eps rounded to each dtype; the q above which fl(q + eps) == q; the range of q.

    With p significand bits and stored eps = m 2^F, q + eps absorbs eps for every q >= 2^(F+p+1)
    (from 2^(F+p) on for even q when eps is a power of two), checked by adding in the dtype.
    """
    from rmsnorm_eps.cli._gate import finish, tail_options
    from rmsnorm_eps.compare.precision import precision_report

    options = tail_options(fmt, output, reports=report_to, summary=summary, exit_zero=exit_zero)
    names = tuple(dict.fromkeys(d for listed in dtype or [] for d in listed.split(",")))
    report = precision_report(eps, names or None, norm.value)
    gone = report.vanishing
    finish(
        report,
        None,
        options,
        passed=not gone,
        message=f"eps {eps:g} vanishes (rounds to 0 or inf) in {', '.join(gone)}"
        if gone
        else f"eps {eps:g} is nonzero and finite in {len(report.rows)} dtype(s)",
    )
