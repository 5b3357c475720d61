"""``rmsnorm-eps ratio``: q/eps and A for every input of a dump, per layer; a CI gate."""

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
    skip_unreadable_option,
    skipped_suffix,
    summary_line,
    summary_option,
    top_option,
)


@app.command(
    "ratio",
    short_help="Per layer, the inputs whose q/eps is below the bound (the CI gate).",
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps ratio --eps 1e-6 --q-file acts.npy\n\n"
        "  rmsnorm-eps ratio --eps 1e-5 --q-file examples/q_dump.npz --delta 0.01 --top 3\n\n"
        "  rmsnorm-eps ratio --eps 1e-5 --q-file x.npz --raw --format json -o report.json\n\n"
        "  rmsnorm-eps ratio --eps 1e-5 --q-file q.npz --max-fraction 0.001  # allow 0.1%\n\n"
        "  rmsnorm-eps ratio --eps 1e-5 --q-file q.npz --format github --summary "
        "--plot ratio.png\n\n"
        "  rmsnorm-eps ratio --config configs/qwen3-8b.yaml --q-file q.npz  # eps per layer\n\n"
        "  rmsnorm-eps ratio --eps 1e-5 --q-file rank0.npy --raw --save-summary s0.json\n\n"
        "  rmsnorm-eps ratio --eps 1e-5 --q-file x_bf16.npy --raw --dtype bfloat16\n\n"
        "Exit codes: 0 no violation (or within budget), 1 violations or nonfinite values, "
        "2 usage or input error. --exit-zero turns 1 into 0, never 2."
    ),
)
def ratio(
    q_file: Path = typer.Option(
        ...,
        "--q-file",
        "-q",
        help=".npy (one layer) or .npz (one array per layer) of q values, "
        "or of activations with --raw.",
        dir_okay=True,
    ),
    eps: float = typer.Option(
        None,
        "--eps",
        help="Epsilon used by the model (every layer); with --config, the "
        "explicit fallback for layers the config does not cover or whose eps is missing.",
    ),
    config: Path = typer.Option(
        None,
        "--config",
        "-c",
        help="Model config (YAML, HF config.json or GGUF): eps per "
        "layer by matching dump layer names to its layer globs.",
        dir_okay=False,
    ),
    raw: bool = typer.Option(
        False,
        "--raw",
        help="Arrays hold activations x of shape (..., d); q = mean(x^2) over "
        "the last axis is computed here.",
    ),
    delta: float = typer.Option(
        None,
        "--delta",
        help="Tolerated attenuation loss: violation when A < 1 - delta. "
        "Default 0.01 (q/eps >= 49.2512562814).",
    ),
    min_ratio: float = typer.Option(
        None, "--min-ratio", help="Give the bound as a minimum q/eps instead of --delta."
    ),
    top: int = top_option(),
    max_violations: int = max_violations_option(),
    max_fraction: float = max_fraction_option(),
    exit_zero: bool = exit_zero_option("when violations are found"),
    fmt: str = format_option(),
    output: Path = output_option(),
    summary: bool = summary_option(),
    plot: Path = plot_option(),
    plot_layers: int = typer.Option(
        6,
        "--plot-layers",
        min=1,
        help="Panels in --plot: the worst N layers (by violations, "
        "then smallest q/eps), shown in dump order.",
    ),
    histogram: str = typer.Option(
        "auto",
        "--histogram",
        help="Text format: per-layer histograms of q/eps decades for "
        "all, violating or none of the layers; auto = all up to 8 layers, else violating.",
    ),
    chunk_bytes: int = typer.Option(
        None, "--chunk-bytes", min=1, hidden=True, help="Bytes read per chunk (testing)."
    ),
    save_summary: Path = typer.Option(
        None,
        "--save-summary",
        dir_okay=False,
        help="Also write a mergeable JSON summary of this dump (see `rmsnorm-eps merge`).",
    ),
    threads: int = typer.Option(
        None,
        "--threads",
        min=1,
        help="Threads reading and computing chunks (default 2, or 1 on a single CPU).",
    ),
    dtype: str = typer.Option(
        None,
        "--dtype",
        help="Read uint16 (or V2) arrays as the bit patterns of this dtype: bfloat16.",
    ),
    skip_unreadable: bool = skip_unreadable_option(),
) -> None:
    """Report, per layer, the inputs whose q/eps is below the bound for A >= 1 - delta.

    A = sqrt(q/(q+eps)) is the attenuation eps applies to an input with mean square q.
    An input violates when q/eps < (1-delta)^2/(delta(2-delta)); exactly at the bound passes.
    NaN and inf q values are counted and listed, and each is a violation.
    """
    from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
    from rmsnorm_eps.dumps import DEFAULT_CHUNK_BYTES
    from rmsnorm_eps.reports import HISTOGRAM_CHOICES

    check_format(fmt)
    if histogram not in HISTOGRAM_CHOICES:
        raise typer.BadParameter(
            f"{histogram!r} is not one of {', '.join(HISTOGRAM_CHOICES)}",
            param_hint="'--histogram'",
        )
    plot_fmt = None
    if plot is not None:
        from rmsnorm_eps.plot import plot_format, require_matplotlib

        try:
            plot_fmt = plot_format(str(plot))
        except ValueError as exc:
            raise usage_error(str(exc)) from None
        require_matplotlib()
    if eps is None and config is None:
        raise usage_error("give --eps (the epsilon of the model's RMSNorm) or --config")
    if delta is not None and min_ratio is not None:
        raise usage_error("give either --delta or --min-ratio, not both")
    if dtype is not None and dtype != "bfloat16":
        raise usage_error(f"--dtype must be bfloat16, got {dtype!r}")
    layer_eps: float | dict[str, float] = eps
    eps_sources: dict[str, str] | None = None
    if config is not None:
        from rmsnorm_eps.config import eps_for_layers, load_config
        from rmsnorm_eps.dumps import open_dump, open_dump_lenient

        names = [
            src.name
            for src in (
                open_dump_lenient(q_file, dtype)[0] if skip_unreadable else open_dump(q_file, dtype)
            )
        ]
        assigned = eps_for_layers(load_config(config), names, fallback=eps)
        layer_eps, eps_sources = assigned.eps, assigned.provenance
    report = analyze_dump(
        q_file,
        layer_eps,
        delta=delta,
        min_ratio=min_ratio,
        raw=raw,
        top_k=top,
        chunk_bytes=chunk_bytes or DEFAULT_CHUNK_BYTES,
        threads=threads,
        dtype=dtype,
        eps_sources=eps_sources,
        skip_unreadable=skip_unreadable,
    )
    gate = evaluate_gate(report, max_violations, max_fraction)
    if save_summary is not None:
        from rmsnorm_eps.merge import write_summary

        write_summary(report, save_summary)
    emit(report, fmt, output, gate, histogram=histogram)
    if summary:
        append_step_summary(report, gate)
    if plot is not None and plot_fmt is not None:
        from rmsnorm_eps.atomic import atomic_write_bytes
        from rmsnorm_eps.plot import plot_ratio

        drawn = plot_ratio(report, plot_fmt, plot_layers)
        atomic_write_bytes(plot, drawn.data)
    verdict = "INCOMPLETE" if report.skipped else "PASS" if gate.passed else "FAIL"
    budget = "" if max_violations is None and max_fraction is None else f"; {gate.reason}"
    summary_line(
        f"{verdict}: {report.violations} violation(s) ({report.below_bound} below q/eps "
        f"{report.min_ratio:.12g}, {report.nonfinite} nonfinite) in "
        f"{len(report.layers_affected)} of {len(report.layers)} layer(s), "
        f"{report.count} inputs{budget}{skipped_suffix(report.skipped)}"
    )
    if report.skipped:  # never 0, whatever --exit-zero says: part of the dump was not checked
        raise typer.Exit(EXIT_FINDINGS)
    if not gate.passed and not exit_zero:
        raise typer.Exit(EXIT_FINDINGS)
    raise typer.Exit(EXIT_OK)
