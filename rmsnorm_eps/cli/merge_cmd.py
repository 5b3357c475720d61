"""``rmsnorm-eps merge``: combine shard summaries into the report of the concatenated data."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rmsnorm_eps.cli._app import app, usage_error
from rmsnorm_eps.cli._commands import short_help
from rmsnorm_eps.cli._options import (
    ExitZeroOpt,
    Format,
    FormatOpt,
    MaxFractionOpt,
    MaxViolationsOpt,
    MinRatioOpt,
    OutputOpt,
    PlotLayersOpt,
    PlotOpt,
    ReportOpt,
    SummaryOpt,
    ZeroIsViolationOpt,
)

if TYPE_CHECKING:
    from rmsnorm_eps.analysis import RatioReport


@app.command(
    "merge",
    short_help=short_help("merge"),
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps ratio rank0.npy --eps 1e-5 --raw --save-summary s0.json\n\n"
        "  rmsnorm-eps ratio rank1.npy --eps 1e-5 --raw --save-summary s1.json\n\n"
        "  rmsnorm-eps merge s0.json s1.json --format json -o report.json\n\n"
        "A different --delta than the shards' is accepted only where the summaries determine "
        "the count below it exactly (otherwise exit 2: rerun ratio on the shard).\n\n"
        "Plot: A against q/eps with the data's distribution, per layer.\n\n"
        "Exit codes: 0 no violation (or within budget), 1 violations or nonfinite values, "
        "2 usage or input error. --exit-zero turns 1 into 0, never 2."
    ),
)
def merge(
    summaries: Annotated[
        list[Path],
        typer.Argument(
            help="Summaries written by `ratio --save-summary` or `capture --summary-only`, in "
            "shard order (axis 0).",
            dir_okay=False,
            show_default=False,
        ),
    ],
    delta: Annotated[
        float | None,
        typer.Option("--delta", help="Bound for the merged report.", show_default="the shards'"),
    ] = None,
    min_ratio: MinRatioOpt = None,
    top: Annotated[
        int | None,
        typer.Option(
            "--top",
            "-k",
            min=0,
            help="Worst inputs listed per layer (at most what the shards kept).",
            show_default="what the shards kept",
        ),
    ] = None,
    max_violations: MaxViolationsOpt = None,
    max_fraction: MaxFractionOpt = None,
    exit_zero: ExitZeroOpt = False,
    fmt: FormatOpt = Format.TEXT,
    output: OutputOpt = None,
    report_to: ReportOpt = None,
    summary: SummaryOpt = False,
    plot: PlotOpt = None,
    plot_layers: PlotLayersOpt = 6,
    zero_is_violation: ZeroIsViolationOpt = False,
) -> None:
    """Merge per-shard summaries into exactly the report of the shards concatenated along axis 0.

    Counts, minima, nonfinite counts and decade histograms add up; the worst inputs are the
    smallest q over all shards (ties: earlier shard and index first), each listed with its
    shard and its index inside the shard.
    """
    from rmsnorm_eps.cli._gate import finish, tail_options
    from rmsnorm_eps.gate import evaluate_gate
    from rmsnorm_eps.merge import merge_summaries

    options = tail_options(
        fmt,
        output,
        reports=report_to,
        summary=summary,
        plot=plot,
        exit_zero=exit_zero,
        inputs=[("summary", path) for path in summaries],
    )
    if delta is not None and min_ratio is not None:
        raise usage_error("give either --delta or --min-ratio, not both")
    paths: list[str | os.PathLike[str]] = list(summaries)
    report = merge_summaries(
        paths,
        delta=delta,
        min_ratio=min_ratio,
        top_k=top,
        zero_is_violation=zero_is_violation,
    )
    gate = evaluate_gate(report, max_violations, max_fraction)

    from rmsnorm_eps.reports.commands.ratio import zero_part

    budget = "" if max_violations is None and max_fraction is None else f"; {gate.reason}"
    finish(
        report,
        gate,
        options,
        passed=gate.passed,
        draw=lambda plot_fmt: _draw(report, plot_fmt, plot_layers),
        message=f"{report.violations} violation(s) ({report.below_bound} below q/eps "
        f"{report.min_ratio:.12g}, {report.nonfinite} nonfinite{zero_part(report)}) in "
        f"{len(report.layers_affected)} of {len(report.layers)} layer(s), "
        f"{report.count} inputs from {len(report.shards)} shard(s){budget}",
    )


def _draw(report: RatioReport, plot_fmt: str, layers: int) -> bytes:
    """The --plot figure; rmsnorm_eps.plot is imported only when one is asked for."""
    from rmsnorm_eps.plot import plot_ratio

    return plot_ratio(report, plot_fmt, layers).data
