"""``rmsnorm-eps compare``: what a change of eps (value, placement, precision, scale) does to
every input of a dump; a CI gate like ``ratio``."""

from __future__ import annotations

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
    MaxFractionOpt,
    MaxLayersOpt,
    MaxViolationsOpt,
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
    from rmsnorm_eps.compare.analysis import CompareReport


@app.command(
    "compare",
    short_help=short_help("compare"),
    epilog=(
        "SPEC: eps=E[,placement=P][,dim=D][,dtype=T] with P one of inside|outside|clamp|sum "
        "and T one of float32|float16|bfloat16 (or fp32, fp16, bf16); "
        "framework=NAME[,dtype=T] (a row of `rmsnorm-eps defaults`: torch, hf-llama, "
        "flax, keras, mlx, onnx, vllm, ...) or config (per-layer settings from --config FILE, "
        "matched by layer name as in ratio --config).\n\n"
        "Examples:\n\n"
        "  rmsnorm-eps compare examples/q_dump.npz --from eps=1e-6 --to eps=1e-5\n\n"
        "  rmsnorm-eps compare q.npz --from eps=1e-5 --to framework=torch,dtype=bfloat16\n\n"
        "  rmsnorm-eps compare q.npz --from eps=1e-6 --to eps=1e-6,placement=outside\n\n"
        "  rmsnorm-eps compare q.npz --from eps=1e-5 --to eps=1e-5 --scale 0.1\n\n"
        "  rmsnorm-eps compare q.npz --from config --config configs/llama-3-8b.yaml "
        "--to eps=1e-6\n\n"
        "  rmsnorm-eps compare x.npz --raw --norm layer --from eps=1e-5 --to eps=1e-6  "
        "# LayerNorm: v = mean((x - mean x)^2) in place of q\n\n"
        "Plot: the largest |change| per decade of q/eps_from, per layer, with the tolerance "
        "marked.\n\n"
        "Exit codes: 0 no input moves by more than the tolerance (or within budget), 1 inputs "
        "moved or nonfinite values, 2 usage or input error. --exit-zero turns 1 into 0, never 2."
    ),
)
def compare(
    spec_from: Annotated[
        str, typer.Option("--from", metavar="SPEC", help="The current setting (SPEC).")
    ],
    spec_to: Annotated[str, typer.Option("--to", metavar="SPEC", help="The new setting (SPEC).")],
    dump: DumpArg = None,
    q_file: QFileOpt = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="Model config (YAML, HF config.json or GGUF) for --from/--to config: eps, "
            "placement, dim (sum) and reduction dtype per layer, by matching dump layer names "
            "to its layer globs.",
            dir_okay=False,
        ),
    ] = None,
    raw: RawOpt = False,
    norm: NormOpt = None,
    tolerance: Annotated[
        float,
        typer.Option(
            "--tolerance",
            "-t",
            min=0.0,
            help="An input moves when |y_to/y_from - 1| > tolerance (equal passes).",
        ),
    ] = 0.01,
    scale: Annotated[
        float,
        typer.Option(
            "--scale",
            help="The --to side sees inputs c*x (q*c^2); for eps inside the root this equals "
            "eps/c^2.",
        ),
    ] = 1.0,
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
    chunk_bytes: ChunkBytesOpt = None,
    dtype: DumpDtypeOpt = None,
    column: ColumnOpt = None,
    skip_unreadable: SkipUnreadableOpt = False,
    max_layers: MaxLayersOpt = MAX_LAYERS,
    allow_unmatched: AllowUnmatchedOpt = False,
    strict: StrictOpt = False,
    zero_is_violation: ZeroIsViolationOpt = False,
) -> None:
    """Per input, factor = y_to/y_from = den_from(q)/den_to(q); report |factor - 1| per layer.

    den is sqrt(q+eps) (inside), sqrt(q)+eps (outside), max(sqrt(q), eps) (clamp) or
    sqrt(q+eps/d) (sum), optionally with eps and q+eps rounded to float32/float16/bfloat16.
    An input moves when |factor - 1| > tolerance; NaN/inf q and nonfinite factors are
    violations too.
    """
    from rmsnorm_eps.cli._gate import finish, tail_options
    from rmsnorm_eps.compare.analysis import compare_dump
    from rmsnorm_eps.compare.spec import is_config_spec
    from rmsnorm_eps.gate import evaluate_gate

    q_path = one_dump(dump, q_file)
    options = tail_options(
        fmt,
        output,
        reports=report_to,
        summary=summary,
        plot=plot,
        exit_zero=exit_zero,
        inputs=[("the dump", q_path), ("--config", config)],
    )
    wants_config = [o for o, t in (("--from", spec_from), ("--to", spec_to)) if is_config_spec(t)]
    if wants_config and config is None:
        raise usage_error(f"{wants_config[0]} config needs --config FILE (the model config)")
    if len(wants_config) == 2:
        raise usage_error("--from config and --to config would both read --config: give one SPEC")
    if config is not None and not wants_config:
        raise usage_error("--config is used by --from config or --to config; give one of them")
    reading = dump_reading(
        raw=raw,
        top=top,
        chunk_bytes=chunk_bytes,
        skip_unreadable=skip_unreadable,
        dtype=dtype,
        column=column,
        config=config,
        norm=norm,
        max_layers=max_layers,
        allow_unmatched=allow_unmatched,
    )
    try:
        report = compare_dump(
            q_path,
            spec_from,
            spec_to,
            tolerance=tolerance,
            scale=scale,
            reading=reading,
            zero_is_violation=zero_is_violation,
        )
    except Exception as exc:
        raise with_raw_hint(exc, raw, dtype) from None
    report_warnings(report.warnings, strict)
    gate = evaluate_gate(report, max_violations, max_fraction)

    from rmsnorm_eps.reports.commands.ratio import zero_part

    worst = report.max_abs_change
    budget = "" if max_violations is None and max_fraction is None else f"; {gate.reason}"
    finish(
        report,
        gate,
        options,
        passed=gate.passed,
        skipped=report.skipped,
        draw=lambda plot_fmt: _draw(report, plot_fmt, plot_layers),
        message=f"{report.violations} violation(s) ({report.moved} moved by more than "
        f"{report.tolerance:g}, {report.nonfinite} nonfinite{zero_part(report)}) in "
        f"{len(report.layers_affected)} of {len(report.layers)} layer(s), {report.count} "
        f"inputs; max |change| {'-' if worst is None else f'{worst:.6g}'}{budget}",
    )


def _draw(report: CompareReport, plot_fmt: str, layers: int) -> bytes:
    """The --plot figure; rmsnorm_eps.plot is imported only when one is asked for."""
    from rmsnorm_eps.plot import plot_compare

    return plot_compare(report, plot_fmt, layers).data
