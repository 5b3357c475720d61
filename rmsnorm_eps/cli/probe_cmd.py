"""``rmsnorm-eps probe``: write a deterministic probe set with float64 reference outputs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rmsnorm_eps.cli._app import app, usage_error
from rmsnorm_eps.cli._output import check_format, emit, format_option, output_option, summary_line

if TYPE_CHECKING:
    import numpy as np

_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _read_gain(path: Path, dim: int) -> np.ndarray:
    """The weight array of a .npy/.npz file (one array of shape (dim,))."""
    import numpy as np

    from rmsnorm_eps.dumps import open_dump
    from rmsnorm_eps.errors import InputFileError

    sources = open_dump(path)
    if len(sources) != 1:
        raise InputFileError(path, f"holds {len(sources)} arrays; a gain file holds one")
    src = sources[0]
    if src.shape != (dim,):
        raise InputFileError(path, f"gain has shape {src.shape}, expected ({dim},)", key=src.key)
    values = np.concatenate([chunk.astype(np.float64) for _, chunk in src.iter_elements(dim)])
    if not bool(np.all(np.isfinite(values))):
        raise InputFileError(path, "gain holds NaN or inf", key=src.key)
    return values


@app.command(
    "probe",
    short_help="Write probe inputs where eps matters, with float64 reference outputs.",
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps probe --dim 64 --eps 1e-6 --out probes.npz\n\n"
        "  rmsnorm-eps probe --dim 2048 --eps 1e-5 --dtype bfloat16 --gain random --seed 1 "
        "--out probes.npz\n\n"
        "  rmsnorm-eps probe --dim 640 --eps 1e-6 --gain weight.npy --gain-convention 1+w "
        "--out probes.npz\n\n"
        "The file holds inputs (n, d) float64 (exactly representable in --dtype), weight (d,), "
        "reference (n, d), category, q and metadata. Run your implementation on inputs cast "
        "to --dtype with that weight, save the outputs and run `rmsnorm-eps parity`."
    ),
)
def probe(
    dim: int = typer.Option(..., "--dim", "-d", min=1, help="Vector dimension d."),
    eps: float = typer.Option(..., "--eps", help="The configured epsilon (inside the sqrt)."),
    gain: str = typer.Option(
        "ones",
        "--gain",
        help="Weight: ones, random (seeded; extreme channels 30, 0.01, -2) "
        "or a .npy/.npz FILE of shape (d,).",
    ),
    gain_convention: str = typer.Option(
        "w", "--gain-convention", help="How the reference applies the weight: w or 1+w."
    ),
    dtype: str = typer.Option(
        "float32", "--dtype", help="Input and weight dtype: float16, bfloat16, float32, float64."
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the random probe vectors."),
    delta: float = typer.Option(
        0.01,
        "--delta",
        help="The chosen bound A >= 1 - delta: the at-bound probes sit at "
        "q/eps = (1-delta)^2/(delta(2-delta)).",
    ),
    out: Path = typer.Option(..., "--out", help="Probe file to write (.npz).", dir_okay=False),
    fmt: str = format_option(),
    output: Path = output_option(),
) -> None:
    """Probe inputs where eps matters, each with its float64 reference RMSNorm output.

    Categories: zero, tiny (q/eps << 1), near-eps (q/eps 0.1-10), at-bound, ordinary,
    constant, mixed-scale, large (x^2 near the dtype's overflow), gain-extreme.
    """
    from rmsnorm_eps.parity.probes import ProbeSummary, make_probes, write_probes

    check_format(fmt)
    if dtype not in _DTYPES:
        raise usage_error(f"--dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    if gain_convention not in ("w", "1+w"):
        raise usage_error(f"--gain-convention must be w or 1+w, got {gain_convention!r}")
    weight: str | np.ndarray = gain if gain in ("ones", "random") else _read_gain(Path(gain), dim)
    probes = make_probes(
        dim,
        eps,
        gain=weight,
        dtype=dtype,
        seed=seed,
        gain_convention=gain_convention,
        delta=delta,
    )
    if weight is not gain:
        from dataclasses import replace

        probes = replace(probes, gain_kind=f"file:{Path(gain).name}")
    write_probes(probes, out)
    emit(ProbeSummary(probes, str(out)), fmt, output)
    summary_line(f"wrote {probes.count} probes (d={dim}, {dtype}, eps {eps!r}) to {out}")
