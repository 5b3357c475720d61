"""``rmsnorm-eps defaults``: the framework default-eps table, or the one resolved number."""

from __future__ import annotations

from typing import Annotated

import typer

from rmsnorm_eps.cli._app import app
from rmsnorm_eps.cli._commands import short_help
from rmsnorm_eps.cli._options import DtypeChoice, Format, FormatOpt, OutputOpt, complete_framework


@app.command(
    "defaults",
    short_help=short_help("defaults"),
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps defaults\n\n"
        "  rmsnorm-eps defaults --framework torch --dtype bfloat16\n\n"
        "  rmsnorm-eps defaults --framework torch --dtype float16 --torch-version 2.5"
    ),
)
def defaults(
    framework: Annotated[
        str | None,
        typer.Option(
            "--framework",
            autocompletion=complete_framework,
            help="One row by name (torch, hf-llama, hf-mistral, hf-gemma, hf-olmo2, hf-t5, "
            "meta-llama, llama.cpp, flax, keras, mlx, apex, apex-functional, "
            "transformer-engine, onnx, torchtune, vllm, tensorrt-llm, flashinfer: the names "
            "compare's framework=NAME takes) or a framework's rows (transformers, apex).",
            show_default="every row",
        ),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            click_type=DtypeChoice(("float16", "bfloat16", "float32", "float64")),
            help="The dtype of the data (the norm's input): resolves torch's eps=None. "
            "Aliases: bf16, fp16, fp32, fp64...",
        ),
    ] = None,
    torch_version: Annotated[
        str | None,
        typer.Option(
            "--torch-version",
            help="torch version (e.g. 2.5): before 2.7 eps=None used the input dtype's own "
            "machine eps.",
            show_default="current",
        ),
    ] = None,
    fmt: FormatOpt = Format.TEXT,
    output: OutputOpt = None,
) -> None:
    """Default eps of each framework's RMSNorm, with its source.

    torch eps=None is the machine epsilon 2**-p of the compute type: 1.1920929e-07 (float32's)
    for float16, bfloat16 and float32 inputs in current torch.
    """
    from rmsnorm_eps.cli._output import emit
    from rmsnorm_eps.cli._paths import check_outputs
    from rmsnorm_eps.config.defaults import framework_defaults

    check_outputs([], [("-o/--output", output)])
    emit(framework_defaults(framework, dtype, torch_version), fmt, output)
