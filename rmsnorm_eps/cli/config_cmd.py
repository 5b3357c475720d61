"""``rmsnorm-eps config show|diff``: resolved norm settings with provenance; compare two configs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rmsnorm_eps.cli._app import EXIT_FINDINGS, EXIT_OK, Typer, app
from rmsnorm_eps.cli._commands import short_help
from rmsnorm_eps.cli._options import ExitZeroOpt, Format, FormatOpt, OutputOpt, SummaryOpt

if TYPE_CHECKING:
    from rmsnorm_eps.cli._paths import Named
    from rmsnorm_eps.config.model import NormConfig


def _load(file: Path) -> tuple[NormConfig, list[Named]]:
    """The config of ``file`` and the files it reads besides itself (an .onnx model's
    external data files: an output must never replace one of them)."""
    if file.suffix.lower() == ".onnx" and not file.is_dir():
        from rmsnorm_eps.config.onnx_graph import read_onnx_config_and_files

        config, files = read_onnx_config_and_files(file)
        return config, [(f"external data of {file}", p) for p in files]
    from rmsnorm_eps.config import load_config

    return load_config(file), []


config_app = Typer(
    help="Model normalization configs (our YAML, Hugging Face config.json, GGUF metadata): "
    "every resolved value with where it came from.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(
    config_app,
    name="config",
    short_help=short_help("config"),
)


@config_app.command(
    "show",
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps config show configs/llama-3-8b.yaml\n\n"
        "  rmsnorm-eps config show config.json --format json\n\n"
        "  rmsnorm-eps config show model.gguf   # metadata only, tensor data are not read\n\n"
        "  rmsnorm-eps config show model.onnx   # every norm of the graph, eps as stored"
    ),
)
def show(
    file: Annotated[
        Path,
        typer.Argument(
            help="YAML (our schema), JSON (HF config.json, Meta params.json), GGUF or .onnx "
            "file, or a model directory (its config.json, else its single .gguf). An .onnx "
            "file lists every norm of the graph; exit 1 when one has no eps, uses its op's "
            "schema default or has an eps unlike its siblings.",
            dir_okay=True,
            show_default=False,
        ),
    ],
    fmt: FormatOpt = Format.TEXT,
    output: OutputOpt = None,
) -> None:
    """Show every norm's resolved eps, placement, gain, reduction dtype, dim and norm type,
    each with its provenance (file and key, framework default, derived, or missing)."""
    from rmsnorm_eps.cli._output import emit, summary_line
    from rmsnorm_eps.cli._paths import check_outputs

    check_outputs([("config", file)], [("-o/--output", output)])
    config, data_files = _load(file)
    check_outputs([("config", file), *data_files], [("-o/--output", output)])
    emit(config, fmt, output)
    eps = config.defaults.eps
    if config.kind == "onnx":
        from rmsnorm_eps.config.onnx_graph import onnx_findings

        findings = onnx_findings(config)
        summary_line(f"{config.path}: {len(config.entries)} norm(s); {len(findings)} finding(s)")
        if findings:  # a norm without eps, a schema default used, one unlike its siblings
            raise typer.Exit(EXIT_FINDINGS)
        return
    summary_line(
        f"{config.path}: {len(config.entries)} layer pattern(s); default eps "
        f"{eps.value if eps.value is not None else eps.provenance.kind}"
    )


@config_app.command(
    "diff",
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps config diff config.json model.gguf\n\n"
        "  rmsnorm-eps config diff train.yaml serve.yaml --format json\n\n"
        "Exit codes: 0 equivalent, 1 eps (relative tolerance 1e-6), placement, gain or norm "
        "type differ (or cannot be compared because one is missing), 2 unreadable input, an "
        "ONNX graph without any norm, or a YAML pattern that matches no norm of the graph. "
        "--exit-zero turns 1 into 0."
    ),
)
def diff(
    a: Annotated[
        Path,
        typer.Argument(
            help="First config (YAML, JSON, GGUF or model directory).",
            dir_okay=True,
            show_default=False,
        ),
    ],
    b: Annotated[Path, typer.Argument(help="Second config.", dir_okay=True, show_default=False)],
    exit_zero: ExitZeroOpt = False,
    fmt: FormatOpt = Format.TEXT,
    output: OutputOpt = None,
    summary: SummaryOpt = False,
) -> None:
    """Compare two configs norm by norm; one line per difference.

    eps a and b agree when |a - b| <= 1e-6 * max(|a|, |b|) (absorbs GGUF's float32 storage).
    Differences in gain_baked, reduction dtype, weight-after-cast and dim are reported as notes.
    """
    from rmsnorm_eps.cli._output import append_step_summary, emit, summary_line
    from rmsnorm_eps.cli._paths import check_outputs
    from rmsnorm_eps.config import diff_configs

    summary_file = os.environ.get("GITHUB_STEP_SUMMARY", "") if summary else ""
    outputs: list[Named] = [
        ("-o/--output", output),
        ("--summary", Path(summary_file) if summary_file else None),
    ]
    check_outputs([("config", a), ("config", b)], outputs)
    (ca, files_a), (cb, files_b) = _load(a), _load(b)
    check_outputs([("config", a), ("config", b), *files_a, *files_b], outputs)
    if "onnx" in (ca.kind, cb.kind):
        from rmsnorm_eps.config.resolve import diff_by_names

        result = diff_by_names(ca, cb)  # compared on the graph's norms
    else:
        result = diff_configs(ca, cb)
    emit(result, fmt, output)
    if summary:
        append_step_summary(result)
    n = len(result.significant)
    notes = len(result.differences) - n
    summary_line(
        ("EQUIVALENT" if result.equivalent else f"DIFFERENT: {n} difference(s)")
        + f", {notes} note(s)"
    )
    if not result.equivalent and not exit_zero:
        raise typer.Exit(EXIT_FINDINGS)
    raise typer.Exit(EXIT_OK)
