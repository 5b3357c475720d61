"""``rmsnorm-eps parity``: judge an implementation's outputs on a probe set."""

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
    output_option,
    plot_option,
    prepare_plot,
    summary_line,
    summary_option,
    write_plot,
)


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
        "Exit codes: 0 every category passes, 1 some element fails (or is nonfinite), "
        "2 usage or input error. --exit-zero turns 1 into 0, never 2."
    ),
)
def parity(
    probes_path: Path = typer.Option(
        ..., "--probes", "-p", help="Probe file from `probe`.", dir_okay=False
    ),
    actual: Path = typer.Option(
        ...,
        "--actual",
        "-a",
        help="Implementation outputs (n, d): .npy, .npz or .safetensors (bfloat16 allowed there).",
        dir_okay=False,
    ),
    key: str = typer.Option(None, "--key", help="Array name inside a .npz/.safetensors file."),
    rule: str = typer.Option("torch", "--rule", help="Error rule: torch or polygraphy."),
    atol: float = typer.Option(
        None, "--atol", help="Absolute tolerance (default: the rule's, per dtype for torch)."
    ),
    rtol: float = typer.Option(None, "--rtol", help="Relative tolerance (default: the rule's)."),
    record: Path = typer.Option(
        None, "--record", help="Write the acceptance record (.yaml, .json or .md).", dir_okay=False
    ),
    record_time: bool = typer.Option(
        False,
        "--record-time",
        help="Add the UTC time to the record (off by default: records are byte-identical).",
    ),
    exit_zero: bool = exit_zero_option("on a failed verdict"),
    fmt: str = format_option(),
    output: Path = output_option(),
    summary: bool = summary_option(),
    plot: Path = plot_option("the max abs and rel error per probe category against the tolerance"),
) -> None:
    """Compare outputs with the float64 reference per probe category; infer eps and placement.

    torch rule: pass if |a - r| <= atol + rtol |r|; polygraphy: fail only where both atol and
    rtol are exceeded. NaN never passes; inf only against the same inf.
    """
    from dataclasses import replace

    from rmsnorm_eps.parity.actual import read_actual
    from rmsnorm_eps.parity.api import compare_outputs
    from rmsnorm_eps.parity.probes import load_probes
    from rmsnorm_eps.parity.record import record_format, write_record

    check_format(fmt)
    plot_fmt = prepare_plot(plot)
    if rule not in ("torch", "polygraphy"):
        raise usage_error(f"--rule must be torch or polygraphy, got {rule!r}")
    if record is not None:
        try:
            record_format(record)
        except ValueError as exc:
            raise usage_error(str(exc)) from None
    probes = load_probes(probes_path)
    outputs = read_actual(actual, key, expect_shape=(probes.count, probes.dim))
    where = str(actual) if outputs.key is None else f"{actual} [{outputs.key}]"
    result = compare_outputs(
        probes,
        outputs.values,
        output_dtype=outputs.dtype,
        rule=rule,
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
    emit(result, fmt, output)
    if summary:
        append_step_summary(result)
    if plot is not None and plot_fmt is not None:
        from rmsnorm_eps.plot import plot_parity

        write_plot(plot, plot_parity(result, plot_fmt).data)
    summary_line(result.diagnosis)
    if not result.passed and not exit_zero:
        raise typer.Exit(EXIT_FINDINGS)
    raise typer.Exit(EXIT_OK)
