"""``rmsnorm-eps parity``: judge an implementation's outputs on a probe set."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from rmsnorm_eps.cli._app import app, usage_error
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


@app.command(
    "parity",
    short_help="Check an implementation's outputs on probes; infer its eps; write a record.",
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps parity --probes probes.npz --actual out.npy\n\n"
        "  rmsnorm-eps parity --probes probes.npz --actual out.safetensors --key y "
        "--record parity.yaml\n\n"
        "  rmsnorm-eps parity --probes probes.npz --actual out.npz --rule polygraphy "
        "--atol 1e-4 --rtol 1e-3\n\n"
        "Plot: the max abs and rel error per probe category against the tolerance.\n\n"
        "Exit codes: 0 every category passes, 1 some element fails (or is nonfinite), "
        "2 usage or input error. --exit-zero turns 1 into 0, never 2."
    ),
)
def parity(
    probes_path: Annotated[
        Path, typer.Option("--probes", "-p", help="Probe file from `probe`.", dir_okay=False)
    ],
    actual: Annotated[
        Path,
        typer.Option(
            "--actual",
            "-a",
            help="Implementation outputs (n, d): .npy, .npz or .safetensors (bfloat16 allowed "
            "there).",
            dir_okay=False,
        ),
    ],
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
) -> None:
    """Compare outputs with the float64 reference per probe category; infer eps and placement.

    torch rule: pass if |a - r| <= atol + rtol |r|; polygraphy: fail only where both atol and
    rtol are exceeded. NaN never passes; inf only against the same inf.
    """
    from dataclasses import replace

    from rmsnorm_eps.cli._gate import finish, tail_options
    from rmsnorm_eps.parity.actual import read_actual
    from rmsnorm_eps.parity.api import compare_outputs
    from rmsnorm_eps.parity.probes import load_probes
    from rmsnorm_eps.parity.record import record_format, write_record

    options = tail_options(
        fmt,
        output,
        reports=report_to,
        summary=summary,
        plot=plot,
        exit_zero=exit_zero,
        inputs=[("--probes", probes_path), ("--actual", actual)],
        extra_outputs=[("--record", record)],
    )
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
