"""The dump argument of ``ratio`` and ``compare``: ``DUMP`` positional or ``-q/--q-file``, and
the ``--raw`` hint when a negative "q" is really an activation."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rmsnorm_eps.cli._options import DtypeChoice

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rmsnorm_eps.dumps import DumpReading
    from rmsnorm_eps.sources.intent import InputWarning

DumpArg = Annotated[
    Path | None,
    typer.Argument(
        metavar="[DUMP]",
        help="The dump: .npy (one layer), .npz, .safetensors or torch.save .pt/.pth (one array "
        "per layer), or .csv/.tsv (one column per layer), of q values, or of activations "
        "with --raw.",
        show_default=False,
    ),
]
QFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--q-file",
        "-q",
        metavar="DUMP",
        help="The dump, as an option (same as the DUMP argument; give one of them).",
    ),
]
RawOpt = Annotated[
    bool,
    typer.Option(
        "--raw",
        help="Arrays hold activations x of shape (..., d); q = mean(x^2) over the last axis is "
        "computed here.",
    ),
]
DumpDtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--dtype",
        click_type=DtypeChoice(("bfloat16",)),
        help="The dtype of the data, when the arrays hold its bit patterns (uint16 or V2 arrays "
        "of bfloat16 bits). Aliases: bf16.",
        show_default="the array's own",
    ),
]
ColumnOpt = Annotated[
    str | None,
    typer.Option(
        "--column",
        metavar="NAME|INDEX",
        help="CSV/TSV dumps: analyse only this column: digits are its 0-based index, "
        "name:NAME its header name (needed for a name made of digits), other text a header "
        "name.",
        show_default="every column",
    ),
]

ChunkBytesOpt = Annotated[
    int | None,
    typer.Option("--chunk-bytes", min=1, hidden=True, help="Bytes read per chunk (testing)."),
]

#: A last axis at least this long, in a dump refused for a negative q, is probably the hidden
#: dimension of activations: the error then suggests --raw.
HIDDEN_DIM_MIN = 64


def one_dump(dump: Path | None, q_file: Path | None) -> Path:
    """The dump, given once: as the DUMP argument or as ``-q/--q-file``."""
    from rmsnorm_eps.cli._app import usage_error

    if dump is not None and q_file is not None:
        raise usage_error("give the dump once: as the DUMP argument or as -q/--q-file")
    path = dump if dump is not None else q_file
    if path is None:
        raise usage_error(
            "give the dump: DUMP or -q/--q-file DUMP (a .npy or .npz file of q, or of x with --raw)"
        )
    return path


def with_raw_hint(exc: Exception, raw: bool, dtype: str | None = None) -> Exception:
    """``exc`` with a ``--raw`` suggestion appended when it reports a negative q in an array
    whose last axis looks like a hidden dimension (>= 64 entries): activations have both
    signs, a mean of squares never does. Otherwise ``exc`` unchanged."""
    from rmsnorm_eps.errors import InputFileError

    if raw or not isinstance(exc, InputFileError) or not exc.problem.startswith("negative q"):
        return exc
    try:
        from rmsnorm_eps.sources.interface import open_sources

        sources = open_sources(exc.path, dtype).sources
        shapes = [src.shape for src in sources if src.key == exc.key]
    except Exception:  # the hint is optional: never hide the first error behind a second one
        return exc
    if not shapes or not shapes[0] or shapes[0][-1] < HIDDEN_DIM_MIN:
        return exc
    hint = (
        f"; its last axis has {shapes[0][-1]} entries: if the arrays hold activations x of "
        "shape (..., d) rather than q, add --raw"
    )
    return InputFileError(exc.path, exc.problem + hint, key=exc.key)


def report_warnings(warnings: Sequence[InputWarning], strict: bool) -> None:
    """Print each input warning as one ``rmsnorm-eps: warning:`` line on stderr; with
    ``--strict``, the first one is the error instead (exit 2, nothing else written)."""
    from rmsnorm_eps.cli._app import fail
    from rmsnorm_eps.escape import message

    if strict and warnings:
        more = f" ({len(warnings) - 1} more such layer(s))" if len(warnings) > 1 else ""
        fail(f"{warnings[0].message}{more} (--strict)")
    for warning in warnings:
        typer.echo(f"rmsnorm-eps: warning: {message(warning.message)}", err=True)


def dump_reading(
    *,
    raw: bool,
    top: int,
    chunk_bytes: int | None,
    skip_unreadable: bool,
    dtype: str | None,
    column: str | None,
    config: Path | None,
    norm: Any,
    threads: int | None = None,
    max_layers: int | None = None,
    allow_unmatched: bool = False,
) -> DumpReading:
    """How ``ratio`` and ``compare`` read the dump (``--raw``, ``--dtype``, ``--column``,
    ``--skip-unreadable``, ``--norm``, ``--threads``, ``--max-layers``), the worst inputs kept,
    and the ``--config`` file loaded (the library matches its layers): one object, passed whole."""
    from rmsnorm_eps.dumps import DumpReading
    from rmsnorm_eps.sources.interface import MAX_LAYERS
    from rmsnorm_eps.sources.raw import DEFAULT_CHUNK_BYTES

    loaded = None
    if config is not None:
        from rmsnorm_eps.config import load_config

        loaded = load_config(config)
    return DumpReading(
        raw=raw,
        top_k=top,
        chunk_bytes=chunk_bytes or DEFAULT_CHUNK_BYTES,
        threads=threads,
        skip_unreadable=skip_unreadable,
        dtype=dtype,
        column=column,
        config=loaded,
        norm=norm.value if norm is not None else "rms",
        max_layers=MAX_LAYERS if max_layers is None else max_layers,
        allow_unmatched=allow_unmatched,
    )
