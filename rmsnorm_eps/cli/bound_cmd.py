"""``rmsnorm-eps bound``: the q/eps needed for a tolerated attenuation, or A at given ratios."""

from __future__ import annotations

from typing import Annotated

import typer

from rmsnorm_eps.cli._app import app, usage_error
from rmsnorm_eps.cli._commands import short_help
from rmsnorm_eps.cli._options import Format, FormatOpt, OutputOpt


def _parse_ratios(text: str) -> list[float]:
    values = []
    for part in text.replace(",", " ").split():
        try:
            values.append(float(part))
        except ValueError:
            raise typer.BadParameter(f"{part!r} is not a number", param_hint="'--ratios'") from None
    if not values:
        raise typer.BadParameter("give at least one ratio", param_hint="'--ratios'")
    return values


@app.command(
    "bound",
    short_help=short_help("bound"),
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps bound --delta 0.01\n\n"
        "  rmsnorm-eps bound --delta 0.01 --eps 1e-6\n\n"
        "  rmsnorm-eps bound --ratio 1\n\n"
        "  rmsnorm-eps bound --table\n\n"
        "  rmsnorm-eps bound --ratios 0.5,2,1000 --eps 1e-5"
    ),
)
def bound(
    delta: Annotated[
        float | None,
        typer.Option(
            "--delta",
            help="Tolerated attenuation loss: A >= 1 - delta (0 < delta < 1).",
            show_default="0.01",
        ),
    ] = None,
    eps: Annotated[
        float | None,
        typer.Option(
            "--eps", help="Epsilon: also print the minimum q and input RMS (or q for ratios)."
        ),
    ] = None,
    ratio: Annotated[
        float | None,
        typer.Option("--ratio", help="Print A and 1 - A at this q/eps instead."),
    ] = None,
    table: Annotated[
        bool,
        typer.Option("--table", help="Print A at q/eps = 0.01, 0.1, 1, 10, 100 (or --ratios)."),
    ] = False,
    ratios: Annotated[
        str | None,
        typer.Option(
            "--ratios", metavar="R[,R...]", help="Comma-separated q/eps values for --table."
        ),
    ] = None,
    fmt: FormatOpt = Format.TEXT,
    output: OutputOpt = None,
) -> None:
    """Minimum q/eps for A = sqrt(q/(q+eps)) >= 1 - delta: (1-delta)^2 / (delta (2-delta)).

    With --eps also the minimum mean square q = eps * min_ratio and the minimum input RMS
    sqrt(q). With --ratio, --table or --ratios: A = sqrt(r/(r+1)) and 1 - A at r = q/eps.
    """
    from rmsnorm_eps.bound import SEED_RATIOS, bound_for_delta, figures_for_ratios
    from rmsnorm_eps.cli._output import emit
    from rmsnorm_eps.cli._paths import check_outputs

    check_outputs([], [("-o/--output", output)])
    wants_ratios = ratio is not None or table or ratios is not None
    if wants_ratios and delta is not None:
        raise usage_error("--delta cannot be combined with --ratio/--table/--ratios")
    if ratio is not None and (table or ratios is not None):
        raise usage_error("give either --ratio or --table/--ratios")
    result: object
    if ratio is not None:
        result = figures_for_ratios([ratio], eps)
    elif wants_ratios:
        result = figures_for_ratios(_parse_ratios(ratios) if ratios else list(SEED_RATIOS), eps)
    else:
        result = bound_for_delta(0.01 if delta is None else delta, eps)
    emit(result, fmt, output)
