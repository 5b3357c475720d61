"""``rmsnorm-eps ratio``: q/eps and A for every input of a dump, per layer; a CI gate."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rmsnorm_eps.cli._app import app, usage_error
from rmsnorm_eps.cli._commands import short_help
from rmsnorm_eps.cli._dump import (
    ChunkBytesOpt,
    ColumnOpt,
    DumpArg,
    DumpDtypeOpt,
    QFileOpt,
    RawOpt,
    dump_reading,
    one_dump,
    report_warnings,
    with_raw_hint,
)
from rmsnorm_eps.cli._options import (
    AllowUnmatchedOpt,
    ExitZeroSkipOpt,
    Format,
    FormatOpt,
    Histogram,
    MaxFractionOpt,
    MaxLayersOpt,
    MaxViolationsOpt,
    MinRatioOpt,
    NormOpt,
    OutputOpt,
    PlotLayersOpt,
    PlotOpt,
    ReportOpt,
    SkipUnreadableOpt,
    StrictOpt,
    SummaryOpt,
    TopOpt,
    ZeroIsViolationOpt,
)
from rmsnorm_eps.sources.interface import MAX_LAYERS

if TYPE_CHECKING:
    from rmsnorm_eps.analysis import RatioReport


class KernelOpt(str, Enum):
    """``--kernel``: what sums 16-bit raw rows (``rmsnorm_eps.kernel_choice.KERNELS``)."""

    AUTO = "auto"
    NUMPY = "numpy"
    NUMBA = "numba"


@app.command(
    "ratio",
    short_help=short_help("ratio"),
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps ratio acts.npy --eps 1e-6\n\n"
        "  rmsnorm-eps ratio examples/q_dump.npz --eps 1e-5 --delta 0.01 --top 3\n\n"
        "  rmsnorm-eps ratio x.npz --eps 1e-5 --raw --format json -o report.json\n\n"
        "  rmsnorm-eps ratio q.npz --eps 1e-5 --max-fraction 0.001  # allow 0.1%\n\n"
        "  rmsnorm-eps ratio q.npz --eps 1e-5 --format github --report json=r.json "
        "--report sarif=r.sarif --summary --plot ratio.png\n\n"
        "  rmsnorm-eps ratio q.npz --config configs/qwen3-8b.yaml  # eps per layer\n\n"
        "  rmsnorm-eps ratio q.npz --config config.json --fallback-eps 1e-6  # eps missing\n\n"
        "  rmsnorm-eps ratio rank0.npy --eps 1e-5 --raw --save-summary s0.json\n\n"
        "  rmsnorm-eps ratio x_bf16.npy --eps 1e-5 --raw --dtype bf16\n\n"
        "  rmsnorm-eps ratio x.npz --eps 1e-5 --raw --norm layer  # LayerNorm: v/eps\n\n"
        "  rmsnorm-eps ratio x_f16.npy --eps 1e-5 --raw --kernel numba  # the [fast] extra\n\n"
        "Plot: A against q/eps with the data's distribution, per layer.\n\n"
        "Exit codes: 0 no violation (or within budget), 1 violations or nonfinite values, "
        "2 usage or input error. --exit-zero turns 1 into 0, never 2."
    ),
)
def ratio(
    dump: DumpArg = None,
    q_file: QFileOpt = None,
    eps: Annotated[
        float | None,
        typer.Option(
            "--eps",
            help="Epsilon used by the model (every layer). Not with --config (the config gives "
            "each layer its eps; set a layer's eps in a YAML config's layers: entry).",
        ),
    ] = None,
    fallback_eps: Annotated[
        float | None,
        typer.Option(
            "--fallback-eps",
            help="With --config: the eps of the layers the config does not cover or whose eps "
            "is missing (each such layer's eps source says so).",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="Model config (YAML, HF config.json or GGUF): eps per layer by matching dump "
            "layer names to its layer globs.",
            dir_okay=False,
        ),
    ] = None,
    raw: RawOpt = False,
    norm: NormOpt = None,
    delta: Annotated[
        float | None,
        typer.Option(
            "--delta",
            help="Tolerated attenuation loss: violation when A < 1 - delta "
            "(0.01: q/eps >= 49.2512562814).",
            show_default="0.01",
        ),
    ] = None,
    min_ratio: MinRatioOpt = None,
    top: TopOpt = 5,
    max_violations: MaxViolationsOpt = None,
    max_fraction: MaxFractionOpt = None,
    exit_zero: ExitZeroSkipOpt = False,
    fmt: FormatOpt = Format.TEXT,
    output: OutputOpt = None,
    report_to: ReportOpt = None,
    summary: SummaryOpt = False,
    plot: PlotOpt = None,
    plot_layers: PlotLayersOpt = 6,
    histogram: Annotated[
        Histogram,
        typer.Option(
            "--histogram",
            help="Text format: per-layer histograms of q/eps decades for all, violating or none "
            "of the layers; auto = all up to 8 layers, else violating.",
        ),
    ] = Histogram.AUTO,
    chunk_bytes: ChunkBytesOpt = None,
    save_summary: Annotated[
        Path | None,
        typer.Option(
            "--save-summary",
            dir_okay=False,
            metavar="FILE",
            help="Also write a mergeable JSON summary of this dump (see `rmsnorm-eps merge`).",
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            min=1,
            help="Threads reading and computing chunks (more than 1: parallel positioned reads).",
            show_default="2 when a second CPU is free, else 1",
        ),
    ] = None,
    dtype: DumpDtypeOpt = None,
    column: ColumnOpt = None,
    skip_unreadable: SkipUnreadableOpt = False,
    max_layers: MaxLayersOpt = MAX_LAYERS,
    allow_unmatched: AllowUnmatchedOpt = False,
    strict: StrictOpt = False,
    zero_is_violation: ZeroIsViolationOpt = False,
    kernel: Annotated[
        KernelOpt,
        typer.Option(
            "--kernel",
            help="What sums float16/bfloat16 --raw rows: numpy, or numba (the [fast] extra: "
            "compiled, about float32's speed, ~0.1 s start-up once cached); auto = numba for "
            "float16 dumps from 512 MiB and bfloat16 ones from 1 GiB when it is installed. "
            "Reports are identical.",
        ),
    ] = KernelOpt.AUTO,
) -> None:
    """Report, per layer, the inputs whose q/eps is below the bound for A >= 1 - delta.

    A = sqrt(q/(q+eps)) is the attenuation eps applies to an input with mean square q.
    For a LayerNorm (--norm layer, or norm: layer in --config) every figure is of the variance
    v = mean((x - mean x)^2) instead of q.
    An input violates when q/eps < (1-delta)^2/(delta(2-delta)); exactly at the bound passes.
    NaN and inf q values are counted and listed, and each is a violation. A zero vector
    (q = 0: output 0 under any eps) is counted apart, not a violation (--zero-is-violation).
    """
    from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
    from rmsnorm_eps.cli._gate import finish, tail_options

    q_path = one_dump(dump, q_file)
    options = tail_options(
        fmt,
        output,
        reports=report_to,
        summary=summary,
        plot=plot,
        exit_zero=exit_zero,
        histogram=histogram,
        inputs=[("the dump", q_path), ("--config", config)],
        extra_outputs=[("--save-summary", save_summary)],
    )
    layer_eps = _eps_option(eps, config, fallback_eps)
    if eps is None and config is None:
        raise usage_error("give --eps (the epsilon of the model's RMSNorm) or --config")
    if delta is not None and min_ratio is not None:
        raise usage_error("give either --delta or --min-ratio, not both")
    reading = dump_reading(
        raw=raw,
        top=top,
        chunk_bytes=chunk_bytes,
        skip_unreadable=skip_unreadable,
        dtype=dtype,
        column=column,
        config=config,
        norm=norm,
        threads=threads,
        max_layers=max_layers,
        allow_unmatched=allow_unmatched,
    )
    from rmsnorm_eps import kernel_choice

    kernel_choice.check(kernel.value)
    try:
        with kernel_choice.using(kernel.value, kernel_choice.dump_bytes(q_path)):
            report = analyze_dump(
                q_path,
                layer_eps,
                delta=delta,
                min_ratio=min_ratio,
                reading=reading,
                zero_is_violation=zero_is_violation,
            )
    except Exception as exc:
        raise with_raw_hint(exc, raw, dtype) from None
    report_warnings(report.warnings, strict)
    gate = evaluate_gate(report, max_violations, max_fraction)
    if save_summary is not None:
        from rmsnorm_eps.merge import write_summary

        write_summary(report, save_summary)

    from rmsnorm_eps.reports.commands.ratio import quantity_label, zero_part

    qv = quantity_label(report.layers)
    budget = "" if max_violations is None and max_fraction is None else f"; {gate.reason}"
    finish(
        report,
        gate,
        options,
        passed=gate.passed,
        skipped=report.skipped,
        draw=lambda plot_fmt: _draw(report, plot_fmt, plot_layers),
        message=f"{report.violations} violation(s) ({report.below_bound} below {qv}/eps "
        f"{report.min_ratio:.12g}, {report.nonfinite} nonfinite"
        f"{zero_part(report)}) in "
        f"{len(report.layers_affected)} of {len(report.layers)} layer(s), "
        f"{report.count} inputs{budget}",
    )


def _eps_option(eps: float | None, config: Path | None, fallback: float | None) -> float | None:
    """The one eps given to the analysis: ``--eps``, or ``--fallback-eps`` with ``--config``.

    ``--eps`` with ``--config`` is refused: the config gives each layer its eps, so a single
    ``--eps`` would either be silently unused (every layer covered) or apply to some layers only.
    """
    if config is None:
        if fallback is not None:
            raise usage_error("--fallback-eps needs --config (without one, give --eps)")
        return eps
    if eps is not None:
        raise usage_error(
            "--eps and --config are exclusive: the config gives each layer its eps; to change a "
            'layer\'s eps, set it in a YAML config (layers: {"*.q_norm": {eps: 1e-6}}), or give '
            "--fallback-eps for the layers the config leaves without one"
        )
    return fallback


def _draw(report: RatioReport, plot_fmt: str, layers: int) -> bytes:
    """The --plot figure; rmsnorm_eps.plot is imported only when one is asked for."""
    from rmsnorm_eps.plot import plot_ratio

    return plot_ratio(report, plot_fmt, layers).data
