"""``rmsnorm-eps defaults``: the framework default-eps table, or the one resolved number."""

from __future__ import annotations

from pathlib import Path

import typer

from rmsnorm_eps.cli._app import app
from rmsnorm_eps.cli._output import check_format, emit, format_option, output_option


@app.command(
    "defaults",
    short_help="Default eps of each framework's RMSNorm, with its source.",
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps defaults\n\n"
        "  rmsnorm-eps defaults --framework torch --dtype bfloat16\n\n"
        "  rmsnorm-eps defaults --framework torch --dtype float16 --torch-version 2.5"
    ),
)
def defaults(
    framework: str = typer.Option(
        None,
        "--framework",
        help="One row by name (torch, hf-llama, hf-mistral, hf-gemma, hf-olmo2, hf-t5, "
        "meta-llama, llama.cpp, flax, keras, mlx, apex, apex-functional, transformer-engine, "
        "onnx, torchtune, vllm, tensorrt-llm, flashinfer: the names compare's "
        "framework=NAME takes) or a framework's rows (transformers, apex).",
    ),
    dtype: str = typer.Option(
        None,
        "--dtype",
        help="Input dtype (float16, bfloat16, float32, float64): resolves torch's eps=None.",
    ),
    torch_version: str = typer.Option(
        None,
        "--torch-version",
        help="torch version (e.g. 2.5): before 2.7 eps=None used the "
        "input dtype's own machine eps.",
    ),
    fmt: str = format_option(),
    output: Path = output_option(),
) -> None:
    """Default eps of each framework's RMSNorm, with its source.

    torch eps=None is the machine epsilon 2**-p of the compute type: 1.1920929e-07 (float32's)
    for float16, bfloat16 and float32 inputs in current torch.
    """
    from rmsnorm_eps.config.defaults import framework_defaults

    check_format(fmt)
    emit(framework_defaults(framework, dtype, torch_version), fmt, output)
