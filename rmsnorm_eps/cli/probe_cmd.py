"""``rmsnorm-eps probe``: write a deterministic probe set with float64 reference outputs."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rmsnorm_eps.cli._app import app, usage_error
from rmsnorm_eps.cli._commands import short_help
from rmsnorm_eps.cli._options import (
    DeprecatedOutOpt,
    DtypeChoice,
    Format,
    FormatOpt,
    NormKind,
    OutputOpt,
    data_output,
)

if TYPE_CHECKING:
    import numpy as np

_DTYPES = ("float16", "bfloat16", "float32", "float64")


class GainConvention(str, Enum):
    """``--gain-convention``: how the reference applies the weight."""

    W = "w"
    ONE_PLUS_W = "1+w"


def _read_gain(path: Path, dim: int, what: str = "gain") -> np.ndarray:
    """The weight (or bias) array of a .npy/.npz file (one array of shape (dim,))."""
    import numpy as np

    from rmsnorm_eps.errors import InputFileError
    from rmsnorm_eps.sources.interface import open_sources

    sources = open_sources(path).sources
    if len(sources) != 1:
        raise InputFileError(path, f"holds {len(sources)} arrays; a {what} file holds one")
    src = sources[0]
    if src.shape != (dim,):
        raise InputFileError(path, f"{what} has shape {src.shape}, expected ({dim},)", key=src.key)
    values = np.concatenate([chunk.astype(np.float64) for _, chunk in src.iter_elements(dim)])
    if not bool(np.all(np.isfinite(values))):
        raise InputFileError(path, f"{what} holds NaN or inf", key=src.key)
    return values


@app.command(
    "probe",
    short_help=short_help("probe"),
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps probe --dim 64 --eps 1e-6 --save-data probes.npz\n\n"
        "  rmsnorm-eps probe --dim 2048 --eps 1e-5 --dtype bfloat16 --gain random --seed 1 "
        "--save-data probes.npz\n\n"
        "  rmsnorm-eps probe --dim 640 --eps 1e-6 --gain weight.npy --gain-convention 1+w "
        "--save-data probes.npz\n\n"
        "  rmsnorm-eps probe --dim 768 --eps 1e-5 --norm layer --bias random "
        "--save-data ln-probes.npz  # LayerNorm\n\n"
        "The file holds inputs (n, d) float64 (exactly representable in --dtype), weight (d,), "
        "reference (n, d), category, q and metadata (--norm layer: also bias (d,), and q is the "
        "variance v). Run your implementation on inputs cast to --dtype with that weight (and "
        "bias), save the outputs and run `rmsnorm-eps parity`."
    ),
)
def probe(
    dim: Annotated[int, typer.Option("--dim", "-d", min=1, help="Vector dimension d.")],
    eps: Annotated[float, typer.Option("--eps", help="The configured epsilon (inside the sqrt).")],
    gain: Annotated[
        str,
        typer.Option(
            "--gain",
            help="Weight: ones, random (seeded; extreme channels 30, 0.01, -2) or a .npy/.npz "
            "FILE of shape (d,).",
        ),
    ] = "ones",
    gain_convention: Annotated[
        GainConvention,
        typer.Option("--gain-convention", help="How the reference applies the weight."),
    ] = GainConvention.W,
    dtype: Annotated[
        str,
        typer.Option(
            "--dtype",
            click_type=DtypeChoice(_DTYPES),
            help="The dtype of the data: the probe inputs and the weight are exactly "
            "representable in it. Aliases: bf16, fp16, fp32, fp64...",
        ),
    ] = "float32",
    seed: Annotated[
        int, typer.Option("--seed", min=0, help="Seed of the random probe vectors.")
    ] = 0,
    delta: Annotated[
        float,
        typer.Option(
            "--delta",
            help="The chosen bound A >= 1 - delta: the at-bound probes sit at "
            "q/eps = (1-delta)^2/(delta(2-delta)).",
        ),
    ] = 0.01,
    save_data: Annotated[
        Path | None,
        typer.Option(
            "--save-data",
            metavar="FILE",
            help="The probe file to write (.npz; read by `parity --probes`). Required.",
            dir_okay=False,
        ),
    ] = None,
    out: DeprecatedOutOpt = None,
    fmt: FormatOpt = Format.TEXT,
    output: OutputOpt = None,
    norm: Annotated[
        NormKind,
        typer.Option(
            "--norm",
            help="rms (RMSNorm) or layer (LayerNorm with bias: categories by the variance "
            "v = mean((x - mean x)^2), constant vectors have v = 0 and output the bias).",
        ),
    ] = NormKind.RMS,
    bias: Annotated[
        str,
        typer.Option(
            "--bias",
            help="LayerNorm bias (beta): zeros, random (seeded, 0.1 N(0,1)) or a .npy/.npz FILE "
            "of shape (d,). Only with --norm layer.",
        ),
    ] = "zeros",
) -> None:
    """Probe inputs where eps matters, each with its float64 reference RMSNorm output.

    Categories: zero, tiny (q/eps << 1), near-eps (q/eps 0.1-10), at-bound, ordinary,
    constant, mixed-scale, large (x^2 near the dtype's overflow), gain-extreme.
    """
    from rmsnorm_eps.cli._output import emit, summary_line
    from rmsnorm_eps.cli._paths import check_outputs
    from rmsnorm_eps.parity.probe_file import write_probes
    from rmsnorm_eps.parity.probes import ProbeSummary, make_probes

    data_path = data_output(save_data, out, "the probe file to write")
    gain_file = None if gain in ("ones", "random") else Path(gain)
    bias_file = None if bias in ("zeros", "random") else Path(bias)
    if norm is NormKind.RMS and bias != "zeros":
        raise usage_error("--bias is a LayerNorm's beta: give it with --norm layer")
    check_outputs(
        [("--gain", gain_file), ("--bias", bias_file)],
        [("--save-data", data_path), ("-o/--output", output)],
    )
    weight: str | np.ndarray = gain if gain in ("ones", "random") else _read_gain(Path(gain), dim)
    beta: str | np.ndarray = bias if bias_file is None else _read_gain(bias_file, dim, "bias")
    probes = make_probes(
        dim,
        eps,
        gain=weight,
        dtype=dtype,
        seed=seed,
        gain_convention=gain_convention.value,
        delta=delta,
        norm=norm.value,
        bias=beta,
    )
    from dataclasses import replace

    if weight is not gain:
        probes = replace(probes, gain_kind=f"file:{Path(gain).name}")
    if bias_file is not None:
        probes = replace(probes, bias_kind=f"file:{bias_file.name}")
    write_probes(probes, data_path)
    emit(ProbeSummary(probes, str(data_path)), fmt, output)
    summary_line(f"wrote {probes.count} probes (d={dim}, {dtype}, eps {eps!r}) to {data_path}")
