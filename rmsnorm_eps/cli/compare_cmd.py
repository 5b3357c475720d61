"""``rmsnorm-eps compare``: what a change of eps (value, placement, precision, scale) does to
every input of a dump; a CI gate like ``ratio``."""

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
    skip_unreadable_option,
    skipped_suffix,
    summary_line,
    summary_option,
    top_option,
    write_plot,
)


@app.command(
    "compare",
    short_help="What another eps, placement, precision or input scale does to every input.",
    epilog=(
        "SPEC: eps=E[,placement=inside|outside|clamp|sum][,dim=D][,dtype=float32|float16|"
        "bfloat16], framework=NAME[,dtype=T] (a row of `rmsnorm-eps defaults`: torch, hf-llama, "
        "flax, keras, mlx, onnx, vllm, ...) or config (per-layer settings from --config FILE, "
        "matched by layer name as in ratio --config).\n\n"
        "Examples:\n\n"
        "  rmsnorm-eps compare --q-file examples/q_dump.npz --from eps=1e-6 --to eps=1e-5\n\n"
        "  rmsnorm-eps compare -q q.npz --from eps=1e-5 --to framework=torch,dtype=bfloat16\n\n"
        "  rmsnorm-eps compare -q q.npz --from eps=1e-6 --to eps=1e-6,placement=outside\n\n"
        "  rmsnorm-eps compare -q q.npz --from eps=1e-5 --to eps=1e-5 --scale 0.1\n\n"
        "  rmsnorm-eps compare -q q.npz --from config --config configs/llama-3-8b.yaml "
        "--to eps=1e-6\n\n"
        "Exit codes: 0 no input moves by more than the tolerance (or within budget), 1 inputs "
        "moved or nonfinite values, 2 usage or input error. --exit-zero turns 1 into 0, never 2."
    ),
)
def compare(
    q_file: Path = typer.Option(
        ...,
        "--q-file",
        "-q",
        help=".npy (one layer) or .npz (one array per layer) of q values, "
        "or of activations with --raw.",
    ),
    spec_from: str = typer.Option(..., "--from", help="The current setting (SPEC)."),
    spec_to: str = typer.Option(..., "--to", help="The new setting (SPEC)."),
    config: Path = typer.Option(
        None,
        "--config",
        "-c",
        help="Model config (YAML, HF config.json or GGUF) for --from/--to config: eps, "
        "placement, dim (sum) and reduction dtype per layer, by matching dump layer names "
        "to its layer globs.",
        dir_okay=False,
    ),
    raw: bool = typer.Option(
        False,
        "--raw",
        help="Arrays hold activations x of shape (..., d); q = mean(x^2) over "
        "the last axis is computed here.",
    ),
    tolerance: float = typer.Option(
        0.01,
        "--tolerance",
        "-t",
        min=0.0,
        help="An input moves when |y_to/y_from - 1| > tolerance (equal passes).",
    ),
    scale: float = typer.Option(
        1.0,
        "--scale",
        help="The --to side sees inputs c*x (q*c^2); for eps inside the root this equals eps/c^2.",
    ),
    top: int = top_option(),
    max_violations: int = max_violations_option(),
    max_fraction: float = max_fraction_option(),
    exit_zero: bool = exit_zero_option("when inputs move"),
    fmt: str = format_option(),
    output: Path = output_option(),
    summary: bool = summary_option(),
    plot: Path = plot_option(
        "the largest |change| per decade of q/eps_from, per layer, with the tolerance marked"
    ),
    plot_layers: int = typer.Option(
        6, "--plot-layers", min=1, help="Panels in --plot: the worst N layers."
    ),
    chunk_bytes: int = typer.Option(
        None, "--chunk-bytes", min=1, hidden=True, help="Bytes read per chunk (testing)."
    ),
    skip_unreadable: bool = skip_unreadable_option(),
) -> None:
    """Per input, factor = y_to/y_from = den_from(q)/den_to(q); report |factor - 1| per layer.

    den is sqrt(q+eps) (inside), sqrt(q)+eps (outside), max(sqrt(q), eps) (clamp) or
    sqrt(q+eps/d) (sum), optionally with eps and q+eps rounded to float32/float16/bfloat16.
    An input moves when |factor - 1| > tolerance; NaN/inf q and nonfinite factors are
    violations too.
    """
    from rmsnorm_eps.analysis import evaluate_gate
    from rmsnorm_eps.compare.analysis import compare_dump
    from rmsnorm_eps.compare.spec import EpsSpec, LayerSpecs, is_config_spec, parse_spec
    from rmsnorm_eps.dumps import DEFAULT_CHUNK_BYTES

    check_format(fmt)
    plot_fmt = prepare_plot(plot)
    wants_config = [o for o, t in (("--from", spec_from), ("--to", spec_to)) if is_config_spec(t)]
    if wants_config and config is None:
        raise usage_error(f"{wants_config[0]} config needs --config FILE (the model config)")
    if len(wants_config) == 2:
        raise usage_error("--from config and --to config would both read --config: give one SPEC")
    if config is not None and not wants_config:
        raise usage_error("--config is used by --from config or --to config; give one of them")
    sides: list[EpsSpec | LayerSpecs] = []
    for option, text in (("--from", spec_from), ("--to", spec_to)):
        if is_config_spec(text):
            from rmsnorm_eps.compare.spec import specs_from_config
            from rmsnorm_eps.config import load_config
            from rmsnorm_eps.dumps import open_dump

            names = [src.name for src in open_dump(q_file)]
            sides.append(specs_from_config(load_config(config), names, option))
        else:
            sides.append(parse_spec(text, option))
    a, b = sides
    report = compare_dump(
        q_file,
        a,
        b,
        tolerance=tolerance,
        scale=scale,
        raw=raw,
        top_k=top,
        chunk_bytes=chunk_bytes or DEFAULT_CHUNK_BYTES,
        skip_unreadable=skip_unreadable,
    )
    gate = evaluate_gate(report, max_violations, max_fraction)
    emit(report, fmt, output, gate)
    if summary:
        append_step_summary(report, gate)
    if plot is not None and plot_fmt is not None:
        from rmsnorm_eps.plot import plot_compare

        write_plot(plot, plot_compare(report, plot_fmt, plot_layers).data)
    verdict = "INCOMPLETE" if report.skipped else "PASS" if gate.passed else "FAIL"
    worst = report.max_abs_change
    summary_line(
        f"{verdict}: {report.violations} violation(s) ({report.moved} moved by more than "
        f"{report.tolerance:g}, {report.nonfinite} nonfinite) in "
        f"{len(report.layers_affected)} of {len(report.layers)} layer(s), {report.count} "
        f"inputs; max |change| {'-' if worst is None else f'{worst:.6g}'}"
        + ("" if max_violations is None and max_fraction is None else f"; {gate.reason}")
        + skipped_suffix(report.skipped)
    )
    if report.skipped:  # never 0, whatever --exit-zero says: part of the dump was not checked
        raise typer.Exit(EXIT_FINDINGS)
    if not gate.passed and not exit_zero:
        raise typer.Exit(EXIT_FINDINGS)
    raise typer.Exit(EXIT_OK)
