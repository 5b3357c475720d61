"""``rmsnorm-eps parity``: judge an implementation's outputs on a probe set; ``rmsnorm-eps
parity onnx MODEL``: measure every norm of an ONNX graph with onnxruntime (its own options)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from rmsnorm_eps.cli._app import CommandGroup, Typer, app, usage_error
from rmsnorm_eps.cli._commands import short_help
from rmsnorm_eps.cli._options import (
    ExitZeroOpt,
    Format,
    FormatOpt,
    NormKind,
    OutputOpt,
    PlotOpt,
    ReportOpt,
    SummaryOpt,
)


class Rule(str, Enum):
    """``--rule``: how an element's error is judged."""

    TORCH = "torch"
    POLYGRAPHY = "polygraphy"


def _sha256(path: Path) -> str:
    import hashlib

    from rmsnorm_eps.errors import InputFileError

    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    return digest.hexdigest()


parity_app = Typer(cls=CommandGroup, rich_markup_mode=None)
app.add_typer(parity_app, name="parity", short_help=short_help("parity"))


@parity_app.callback(
    invoke_without_command=True,
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps parity --probes probes.npz --actual out.npy\n\n"
        "  rmsnorm-eps parity --probes probes.npz --actual out.safetensors --key y "
        "--record parity.yaml\n\n"
        "  rmsnorm-eps parity --probes probes.npz --actual out.npz --rule polygraphy "
        "--atol 1e-4 --rtol 1e-3\n\n"
        "  rmsnorm-eps parity onnx model.onnx --config config.json  # see `parity onnx --help`"
        "\n\n"
        "Plot: the max abs and rel error per probe category against the tolerance.\n\n"
        "Exit codes: 0 every category passes, 1 some element fails (or is nonfinite), "
        "2 usage or input error. --exit-zero turns 1 into 0, never 2."
    ),
)
def parity(
    ctx: typer.Context,
    probes_path: Annotated[
        Path | None,
        typer.Option(
            "--probes", "-p", help="Probe file from `probe` (with --actual).", dir_okay=False
        ),
    ] = None,
    actual: Annotated[
        Path | None,
        typer.Option(
            "--actual",
            "-a",
            help="Implementation outputs (n, d): .npy, .npz or .safetensors (bfloat16 allowed "
            "there).",
            dir_okay=False,
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", help="Array name inside a .npz/.safetensors file."),
    ] = None,
    rule: Annotated[Rule, typer.Option("--rule", help="Error rule.")] = Rule.TORCH,
    atol: Annotated[
        float | None,
        typer.Option(
            "--atol", help="Absolute tolerance.", show_default="the rule's, per dtype for torch"
        ),
    ] = None,
    rtol: Annotated[
        float | None,
        typer.Option("--rtol", help="Relative tolerance.", show_default="the rule's"),
    ] = None,
    record: Annotated[
        Path | None,
        typer.Option(
            "--record",
            metavar="FILE",
            help="Write the acceptance record (.yaml, .json or .md).",
            dir_okay=False,
        ),
    ] = None,
    record_time: Annotated[
        bool,
        typer.Option(
            "--record-time",
            help="Add the UTC time to the record (off by default: records are byte-identical).",
        ),
    ] = False,
    exit_zero: ExitZeroOpt = False,
    fmt: FormatOpt = Format.TEXT,
    output: OutputOpt = None,
    report_to: ReportOpt = None,
    summary: SummaryOpt = False,
    plot: PlotOpt = None,
    norm: Annotated[
        NormKind | None,
        typer.Option(
            "--norm",
            help="The norm the implementation computes: rms or layer (LayerNorm, reference with "
            "the probe file's bias). Must match the probe file (`probe --norm`).",
            show_default="the probe file's",
        ),
    ] = None,
    onnx_path: Annotated[
        Path | None,
        typer.Option("--onnx", hidden=True, help="Moved: `parity onnx MODEL`."),
    ] = None,
) -> None:
    """Compare outputs with the float64 reference per probe category; infer eps and placement.

    torch rule: pass if |a - r| <= atol + rtol |r|; polygraphy: fail only where both atol and
    rtol are exceeded. NaN never passes; inf only against the same inf.
    """
    from dataclasses import replace

    from rmsnorm_eps.cli._gate import finish, tail_options

    if ctx.invoked_subcommand is not None:
        _refuse_before_subcommand(ctx)
        return
    if onnx_path is not None:
        raise usage_error(f"`parity --onnx {onnx_path}` is now `parity onnx {onnx_path}`")
    if probes_path is None or actual is None:
        raise usage_error("give --probes and --actual (or `parity onnx MODEL`)")
    inputs = [("--probes", probes_path), ("--actual", actual)]
    extra = [("--record", record)]
    options = tail_options(
        fmt,
        output,
        reports=report_to,
        summary=summary,
        plot=plot,
        exit_zero=exit_zero,
        inputs=inputs,
        extra_outputs=extra,
    )
    from rmsnorm_eps.parity.actual import read_actual
    from rmsnorm_eps.parity.api import compare_outputs
    from rmsnorm_eps.parity.probe_file import load_probes
    from rmsnorm_eps.parity.record import record_format, write_record

    if record is not None:
        try:
            record_format(record)
        except ValueError as exc:
            raise usage_error(str(exc)) from None
    probes = load_probes(probes_path)
    if norm is not None and norm.value != probes.norm:
        raise usage_error(
            f"--norm {norm.value}: the probe file (--probes) was made for norm "
            f"{probes.norm}; make probes with `probe --norm {norm.value}`"
        )
    outputs = read_actual(actual, key, expect_shape=(probes.count, probes.dim))
    where = str(actual) if outputs.key is None else f"{actual} [{outputs.key}]"
    result = compare_outputs(
        probes,
        outputs.values,
        output_dtype=outputs.dtype,
        rule=rule.value,
        atol=atol,
        rtol=rtol,
        probe_source=str(probes_path),
        actual_source=where,
    )
    result = replace(result, probe_sha256=_sha256(probes_path), actual_sha256=_sha256(actual))
    if record is not None:
        stamp = None
        if record_time:
            import datetime

            stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        write_record(result, record, stamp)

    def draw(plot_fmt: str) -> bytes:
        from rmsnorm_eps.plot import plot_parity

        return plot_parity(result, plot_fmt).data

    finish(result, None, options, passed=result.passed, draw=draw, message=result.diagnosis)


def _refuse_before_subcommand(ctx: typer.Context) -> None:
    """``parity --probes p onnx m.onnx``: the probe options belong to ``parity`` alone."""
    from click.core import ParameterSource

    given = [
        name for name in ctx.params if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    ]
    if given:
        shown = ", ".join("--" + n.replace("_", "-") for n in given)
        raise usage_error(
            f"{shown}: options of `parity` itself; `parity {ctx.invoked_subcommand}` takes its "
            "own, after its name"
        )


@parity_app.command(
    "onnx",
    short_help="Measure the eps each norm of an ONNX graph runs with in onnxruntime.",
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps parity onnx model.onnx\n\n"
        "  rmsnorm-eps parity onnx model.onnx --config config.json --format json\n\n"
        "  rmsnorm-eps parity onnx model.onnx --optimized-out opt.onnx  "
        "# then: rmsnorm-eps config show opt.onnx\n\n"
        "Each norm runs in a child process with a 30 s wall limit and a 1 GiB address-space "
        "limit; onnxruntime's log never reaches the terminal.\n\n"
        "Exit codes: 0 every norm measured and agreeing, 1 a norm differs, stores no eps or a "
        "schema default, or was not measured (unless --allow-skipped; 0 measured is always 1), "
        "2 usage or input error. --exit-zero turns a differing norm's 1 into 0, never an "
        "unmeasured one's."
    ),
)
def parity_onnx(
    model: Annotated[
        Path,
        typer.Argument(metavar="MODEL", help="The .onnx graph.", dir_okay=False),
    ],
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="The model's config (config.json, YAML, GGUF, .onnx, model directory) whose eps "
            "per norm the effective eps must also match; a YAML pattern that matches no norm is "
            "an error.",
        ),
    ] = None,
    eps_rtol: Annotated[
        float,
        typer.Option(
            "--eps-rtol",
            help="Relative tolerance between the effective and the stored/configured eps.",
        ),
    ] = 0.05,
    optimized_out: Annotated[
        Path | None,
        typer.Option(
            "--optimized-out",
            metavar="FILE",
            help="Save onnxruntime's optimized model there (audit it with `config show`); "
            "refused for a model with external data.",
            dir_okay=False,
        ),
    ] = None,
    allow_skipped: Annotated[
        bool,
        typer.Option(
            "--allow-skipped",
            help="A norm that cannot be measured (listed with the reason) does not fail the "
            "run; 0 norms measured still fails.",
        ),
    ] = False,
    exit_zero: ExitZeroOpt = False,
    fmt: FormatOpt = Format.TEXT,
    output: OutputOpt = None,
    report_to: ReportOpt = None,
    summary: SummaryOpt = False,
) -> None:
    """Measure the eps every norm of an ONNX graph really runs with: each norm's subgraph in
    onnxruntime (CPU, every graph optimization on) on probes made for its stored eps, the
    effective eps and placement fitted to the outputs."""
    from dataclasses import replace

    from rmsnorm_eps.cli._gate import finish, tail_options
    from rmsnorm_eps.config import load_config
    from rmsnorm_eps.parity.onnx_runtime import measure_onnx

    if not 0.0 < eps_rtol < 1.0:
        raise usage_error(f"--eps-rtol must be in (0, 1), got {eps_rtol!r}")
    options = tail_options(
        fmt,
        output,
        reports=report_to,
        summary=summary,
        exit_zero=exit_zero,
        inputs=[("MODEL", model), ("--config", config)],
        extra_outputs=[("--optimized-out", optimized_out)],
    )
    cfg = load_config(config) if config is not None else None
    result = measure_onnx(
        model,
        config=cfg,
        rel_tol=eps_rtol,
        optimized_out=optimized_out,
        allow_skipped=allow_skipped,
    )
    message = (
        f"{len(result.norms)} norm(s) measured, {result.findings} differ, "
        f"{len(result.skipped)} skipped"
    )
    if result.skipped:
        names = ", ".join(s.name for s in result.skipped[:5])
        more = " ..." if len(result.skipped) > 5 else ""
        allowed = " (allowed)" if allow_skipped else " (--allow-skipped accepts them)"
        message += f": {names}{more}{allowed}"
    if not result.norms or (result.skipped and not allow_skipped):
        options = replace(options, exit_zero=False)  # unmeasured norms: never exit 0
    finish(result, None, options, passed=result.passed, message=message)
