"""The command-line vocabulary shared by every command: closed choices as Enums, the dtype
spellings, and the options that several commands declare the same way.

Every option is an ``Annotated[T, typer.Option(...)]`` alias declared once here, so ``--format``,
``--output``, ``--report``, ``--summary``, ``--plot``, the budgets and ``--skip-unreadable``
read and show the same in every command. Nothing here imports numpy: ``--help`` stays fast.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import click
import typer

from rmsnorm_eps.dtypes import DTYPE_ALIASES, canonical_dtype
from rmsnorm_eps.reports.options import Format


class Histogram(str, Enum):
    """``--histogram``: which layers get a q/eps decade histogram in the text report
    (``reports.HISTOGRAM_CHOICES``)."""

    AUTO = "auto"
    ALL = "all"
    VIOLATING = "violating"
    NONE = "none"


class NormKind(str, Enum):
    """``--norm``: the norm a plain dump comes from. ``rms``: its figures are of
    q = mean(x^2); ``layer`` (LayerNorm): of the variance v = mean((x - mean x)^2), on which eps
    acts exactly as on q. With ``--config``, a layer whose entry sets ``norm`` keeps it."""

    RMS = "rms"
    LAYER = "layer"


NormOpt = Annotated[
    NormKind | None,
    typer.Option(
        "--norm",
        help="Norm of the dump's layers: rms (q = mean(x^2)) or layer (LayerNorm: the variance "
        "v = mean((x - mean x)^2); --raw computes it). A --config entry's norm wins.",
        show_default="rms",
    ),
]


class DtypeChoice(click.ParamType):
    """A dtype among ``choices`` in any spelling of :data:`DTYPE_ALIASES`, converted to numpy's
    name; with ``many`` a comma-separated list (``bf16,fp16`` becomes ``bfloat16,float16``)."""

    name = "dtype"

    def __init__(self, choices: tuple[str, ...], many: bool = False) -> None:
        self.choices = choices
        self.many = many

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return f"[{'|'.join(self.choices)}]" + ("[,...]" if self.many else "")

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[Any]:
        """Tab completion: the accepted names and their aliases that start with what is typed
        (after the last comma with ``many``)."""
        from click.shell_completion import CompletionItem

        head, _, last = incomplete.rpartition(",") if self.many else ("", "", incomplete)
        prefix = f"{head}," if head else ""
        names = [a for a, n in DTYPE_ALIASES.items() if n in self.choices]
        return [CompletionItem(prefix + a) for a in names if a.startswith(last.lower())]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            self.fail(f"{value!r} is not a dtype", param, ctx)
        parts = value.split(",") if self.many else [value]
        try:
            names = [canonical_dtype(p, self.choices) for p in parts]
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return ",".join(names)


def complete_framework(incomplete: str) -> list[str]:
    """Tab completion of ``--framework``: the rows and groups of the framework defaults table."""
    from rmsnorm_eps.config.defaults_table import FRAMEWORK_DEFAULTS

    names = dict.fromkeys(
        [r.name for r in FRAMEWORK_DEFAULTS] + [r.framework for r in FRAMEWORK_DEFAULTS]
    )
    return [n for n in names if n.startswith(incomplete)]


def parse_report_specs(values: list[str] | None) -> tuple[tuple[Format, Path], ...]:
    """``--report FORMAT=PATH`` values as ``(Format, Path)`` pairs; a bad one is a usage error."""
    choices = "|".join(f.value for f in Format)
    specs = []
    for value in values or []:
        fmt, sep, path = value.partition("=")
        if not sep or not path:
            raise typer.BadParameter(
                f"{value!r} is not FORMAT=PATH (FORMAT one of {choices})", param_hint="'--report'"
            )
        try:
            specs.append((Format(fmt.strip().lower()), Path(path)))
        except ValueError:
            raise typer.BadParameter(
                f"{fmt!r} is not a format (one of {choices})", param_hint="'--report'"
            ) from None
    return tuple(specs)


FORMAT_HELP = (
    "Report format: text (tables for people), json (versioned, schema in the package), markdown "
    "(PR comment / job summary), github (workflow-command annotations), junit (XML), sarif "
    "(2.1.0). Default from RMSNORM_EPS_FORMAT."
)

FormatOpt = Annotated[
    Format,
    typer.Option("--format", "-f", envvar="RMSNORM_EPS_FORMAT", help=FORMAT_HELP),
]
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Write the report to FILE (atomically) instead of stdout.",
        dir_okay=False,
        metavar="FILE",
    ),
]
ReportOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--report",
        metavar="FORMAT=PATH",
        help="Also write the report in FORMAT to PATH (atomically), from the same analysis; "
        "repeatable (--report json=r.json --report sarif=r.sarif). The --format report still "
        "goes to stdout or --output.",
        show_default=False,
    ),
]
SummaryOpt = Annotated[
    bool,
    typer.Option(
        "--summary",
        help="Also append a Markdown report to the file named by GITHUB_STEP_SUMMARY (GitHub "
        "Actions job summary); ignored with a note when unset.",
    ),
]
PlotOpt = Annotated[
    Path | None,
    typer.Option(
        "--plot",
        help="Also draw the report's figure (see the command's description) to FILE.png or "
        "FILE.svg (needs the [plot] extra).",
        dir_okay=False,
        metavar="FILE",
    ),
]
PlotLayersOpt = Annotated[
    int,
    typer.Option(
        "--plot-layers",
        min=1,
        help="Panels in --plot: the worst N layers (by violations, then smallest margin), "
        "shown in dump order.",
    ),
]
MaxLayersOpt = Annotated[
    int,
    typer.Option(
        "--max-layers",
        min=1,
        metavar="N",
        help="Refuse a dump of more than N layers (exit 2) before reading its data; "
        "companions such as <layer>::position are not counted.",
    ),
]


class ModelDtype(str, Enum):
    """``--dtype`` of ``capture`` and ``sensitivity``: the model's dtype (fp32, bf16, fp16 are
    aliases)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


#: Options that ``capture`` and ``sensitivity`` load the model and read their texts with,
#: declared once.
ModelOpt = Annotated[Path, typer.Option("--model", help="Local Hugging Face model directory.")]
GgufOpt = Annotated[
    str | None, typer.Option("--gguf", help="GGUF file name inside --model to load.")
]
ModelDtypeOpt = Annotated[
    ModelDtype, typer.Option("--dtype", help="Model dtype.", case_sensitive=False)
]
BatchSizeOpt = Annotated[int, typer.Option("--batch-size", min=1, help="Texts per forward pass.")]
TextOpt = Annotated[list[str] | None, typer.Option("--text", help="A text to run (repeatable).")]
FieldOpt = Annotated[
    str | None,
    typer.Option("--field", help="JSON Lines key or dataset column holding the text."),
]
SplitOpt = Annotated[
    str, typer.Option("--split", help="Split of a save_to_disk dataset directory.")
]
MaxSamplesOpt = Annotated[
    int | None, typer.Option("--max-samples", min=1, help="Run only the first N texts.")
]
MaxTokensOpt = Annotated[
    int | None, typer.Option("--max-tokens", min=1, help="Truncate each text to N tokens.")
]
AllowUnmatchedOpt = Annotated[
    bool,
    typer.Option(
        "--allow-unmatched",
        help="Accept a --config layer pattern that matches no layer of the dump (by default "
        "an error naming it: a typo would leave every layer on the defaults).",
    ),
]
StrictOpt = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Treat the input warnings (a q array shaped like activations without --raw, a "
        "1-D array with --raw) as errors: exit 2 instead of a warning line on stderr.",
    ),
]
ZeroIsViolationOpt = Annotated[
    bool,
    typer.Option(
        "--zero-is-violation",
        help="Count every zero vector (q = 0 exactly, e.g. a padding row) as a violation. By "
        "default zero vectors are counted apart: their output is 0 under any eps.",
    ),
]
MinRatioOpt = Annotated[
    float | None,
    typer.Option("--min-ratio", help="Give the bound as a minimum q/eps instead of --delta."),
]
TopOpt = Annotated[int, typer.Option("--top", "-k", min=0, help="Worst inputs listed per layer.")]
MaxViolationsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-violations",
        min=0,
        help="Allowed number of violations before exit 1.",
        show_default="0",
    ),
]
MaxFractionOpt = Annotated[
    float | None,
    typer.Option(
        "--max-fraction",
        min=0.0,
        max=1.0,
        help="Allowed fraction of violating inputs (of all inputs) before exit 1.",
        show_default="0",
    ),
]
SkipUnreadableOpt = Annotated[
    bool,
    typer.Option(
        "--skip-unreadable",
        help="Analyse the layers that can be read and list the others (name and problem) in "
        "the report, instead of failing with exit 2. The exit code is then 1 at least, even "
        "with --exit-zero: part of the input was not checked.",
    ),
]
#: ``--out``: the deprecated spelling of ``--save-data`` (hidden; see :func:`data_output`).
DeprecatedOutOpt = Annotated[
    Path | None,
    typer.Option("--out", hidden=True, dir_okay=False, help="Deprecated spelling of --save-data."),
]


def data_output(save_data: Path | None, out: Path | None, what: str) -> Path:
    """The data file of ``probe``/``capture``: ``--save-data FILE`` (data) is named apart from
    ``-o/--output`` (the report). ``--out``, its old spelling, still works and prints one
    warning line on stderr; giving both, or neither, is a usage error (``what`` names the
    file in that message)."""
    from rmsnorm_eps.cli._app import usage_error

    if save_data is not None and out is not None:
        raise usage_error("give --save-data once (--out is its deprecated spelling)")
    if out is not None:
        typer.echo(
            "rmsnorm-eps: warning: --out is deprecated, use --save-data "
            "(-o/--output is the report)",
            err=True,
        )
        return out
    if save_data is None:
        raise usage_error(f"give --save-data FILE ({what})")
    return save_data


ExitZeroOpt = Annotated[
    bool,
    typer.Option("--exit-zero", help="Exit 0 even when the check fails (never hides exit 2)."),
]
#: ``--exit-zero`` of the commands that also take ``--skip-unreadable``.
ExitZeroSkipOpt = Annotated[
    bool,
    typer.Option(
        "--exit-zero",
        help="Exit 0 even when the check fails (never hides exit 2, nor the exit 1 of "
        "--skip-unreadable).",
    ),
]
