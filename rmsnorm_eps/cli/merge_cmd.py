"""``rmsnorm-eps merge``: combine shard summaries into the report of the concatenated data."""

from __future__ import annotations

from pathlib import Path

import typer

from rmsnorm_eps.cli._app import EXIT_FINDINGS, EXIT_OK, app, usage_error
from rmsnorm_eps.cli._output import (
    append_step_summary,
    check_format,
    emit,
    exit_zero_option,
    format_option,
    max_fraction_option,
    max_violations_option,
    output_option,
    plot_option,
    prepare_plot,
    summary_line,
    summary_option,
    write_plot,
)


@app.command(
    "merge",
    short_help="Merge per-shard summaries into exactly the report of the concatenated data.",
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps ratio --eps 1e-5 -q rank0.npy --raw --save-summary s0.json\n\n"
        "  rmsnorm-eps ratio --eps 1e-5 -q rank1.npy --raw --save-summary s1.json\n\n"
        "  rmsnorm-eps merge s0.json s1.json --format json -o report.json\n\n"
        "A different --delta than the shards' is accepted only where the summaries determine "
        "the count below it exactly (otherwise exit 2: rerun ratio on the shard).\n\n"
        "Exit codes: 0 no violation (or within budget), 1 violations or nonfinite values, "
        "2 usage or input error. --exit-zero turns 1 into 0, never 2."
    ),
)
def merge(
    summaries: list[Path] = typer.Argument(
        ...,
        help="Summaries written by `ratio --save-summary` or `capture --summary-only`, in "
        "shard order (axis 0).",
        dir_okay=False,
    ),
    delta: float = typer.Option(
        None, "--delta", help="Bound for the merged report (default: the shards' own)."
    ),
    min_ratio: float = typer.Option(
        None, "--min-ratio", help="Give the bound as a minimum q/eps instead of --delta."
    ),
    top: int = typer.Option(
        None,
        "--top",
        "-k",
        min=0,
        help="Worst inputs listed per layer (default and maximum: what the shards kept).",
    ),
    max_violations: int = max_violations_option(),
    max_fraction: float = max_fraction_option(),
    exit_zero: bool = exit_zero_option("when violations are found"),
    fmt: str = format_option(),
    output: Path = output_option(),
    summary: bool = summary_option(),
    plot: Path = plot_option(),
    plot_layers: int = typer.Option(
        6, "--plot-layers", min=1, help="Panels in --plot: the worst N layers."
    ),
) -> None:
    """Merge per-shard summaries into exactly the report of the shards concatenated along axis 0.

    Counts, minima, nonfinite counts and decade histograms add up; the worst inputs are the
    smallest q over all shards (ties: earlier shard and index first), each listed with its
    shard and its index inside the shard.
    """
    from rmsnorm_eps.analysis import evaluate_gate
    from rmsnorm_eps.merge import merge_summaries

    check_format(fmt)
    plot_fmt = prepare_plot(plot)
    if delta is not None and min_ratio is not None:
        raise usage_error("give either --delta or --min-ratio, not both")
    report = merge_summaries(list(summaries), delta=delta, min_ratio=min_ratio, top_k=top)
    gate = evaluate_gate(report, max_violations, max_fraction)
    emit(report, fmt, output, gate)
    if summary:
        append_step_summary(report, gate)
    if plot is not None and plot_fmt is not None:
        from rmsnorm_eps.plot import plot_ratio

        write_plot(plot, plot_ratio(report, plot_fmt, plot_layers).data)
    verdict = "PASS" if gate.passed else "FAIL"
    summary_line(
        f"{verdict}: {report.violations} violation(s) ({report.below_bound} below q/eps "
        f"{report.min_ratio:.12g}, {report.nonfinite} nonfinite) in "
        f"{len(report.layers_affected)} of {len(report.layers)} layer(s), "
        f"{report.count} inputs from {len(report.shards)} shard(s); {gate.reason}"
    )
    if not gate.passed and not exit_zero:
        raise typer.Exit(EXIT_FINDINGS)
    raise typer.Exit(EXIT_OK)
