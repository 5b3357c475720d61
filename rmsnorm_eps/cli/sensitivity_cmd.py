"""``rmsnorm-eps sensitivity``: what an eps change does to a model's outputs, per norm."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from rmsnorm_eps.cli._app import app, usage_error
from rmsnorm_eps.cli._commands import short_help
from rmsnorm_eps.cli._options import (
    BatchSizeOpt,
    ExitZeroOpt,
    FieldOpt,
    Format,
    FormatOpt,
    GgufOpt,
    MaxSamplesOpt,
    MaxTokensOpt,
    ModelDtype,
    ModelDtypeOpt,
    ModelOpt,
    OutputOpt,
    ReportOpt,
    SplitOpt,
    SummaryOpt,
    TextOpt,
)


@app.command(
    "sensitivity",
    short_help=short_help("sensitivity"),
    epilog=(
        "Examples:\n\n"
        "  rmsnorm-eps sensitivity --model DIR --gguf m.gguf --text-file t.txt --eps 1e-5\n\n"
        "  rmsnorm-eps sensitivity --model DIR --text-file t.txt --eps 1e-5 --per-norm "
        "--exact-top 10\n\n"
        "  rmsnorm-eps sensitivity --model DIR --text-file t.txt --from eps=1e-6 "
        "--to eps=1e-6,placement=outside --per-role\n\n"
        "  rmsnorm-eps sensitivity --model DIR --text-file t.txt --eps 1e-5 --max-kl 1e-3 "
        "--suggest\n\n"
        "KL is KL(base || new) of the next-token distribution, nats, per position class "
        "(position 0 and positions >= 1). The gate checks both classes of each change made "
        "in every norm.\n\n"
        "Exit codes: 0 within the gate (or no gate), 1 --max-kl or --min-top1 exceeded, 2 "
        "usage or input error."
    ),
)
def sensitivity(
    ctx: typer.Context,
    model: ModelOpt,
    gguf: GgufOpt = None,
    eps: Annotated[
        list[float] | None,
        typer.Option("--eps", help="Set every norm's eps to this value (repeatable)."),
    ] = None,
    spec_from: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="SPEC",
            help="Base setting for every norm, as in compare: eps=E[,placement=inside|outside|"
            "clamp|sum][,dim=D][,dtype=float32|float16|bfloat16].",
        ),
    ] = None,
    spec_to: Annotated[
        str | None, typer.Option("--to", metavar="SPEC", help="New setting (SPEC).")
    ] = None,
    per_norm: Annotated[
        bool, typer.Option("--per-norm", help="Also change each norm alone.")
    ] = False,
    per_role: Annotated[
        bool,
        typer.Option(
            "--per-role",
            help="Also change each role alone (input, post-attention, pre/post-feedforward, "
            "q/k, final).",
        ),
    ] = False,
    exact_top: Annotated[
        int | None,
        typer.Option(
            "--exact-top",
            min=1,
            help="With --per-norm: estimate every norm (one forward, --samples backward "
            "passes) and measure only the K largest exactly; the others are marked estimated.",
            metavar="K",
        ),
    ] = None,
    samples: Annotated[
        int,
        typer.Option("--samples", min=1, help="Backward passes of the --exact-top screening."),
    ] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the screening's draws.")] = 0,
    suggest: Annotated[
        bool,
        typer.Option(
            "--suggest",
            help="Sweep eps (decades and half-decades, 1e-3x to 1e3x the configured eps) and "
            "report the largest and smallest eps within --max-kl, for the model and per role.",
        ),
    ] = False,
    max_kl: Annotated[
        float | None,
        typer.Option("--max-kl", min=0.0, help="Gate: mean KL (nats) of either position class."),
    ] = None,
    min_top1: Annotated[
        float | None,
        typer.Option("--min-top1", min=0.0, max=1.0, help="Gate: top-1 agreement of either class."),
    ] = None,
    text: TextOpt = None,
    text_file: Annotated[
        Path | None,
        typer.Option(
            "--text-file",
            help="UTF-8 file: one text per non-empty line, or JSON Lines (with --field).",
        ),
    ] = None,
    field: FieldOpt = None,
    dataset: Annotated[
        Path | None,
        typer.Option("--dataset", help="Local dataset file or save_to_disk directory."),
    ] = None,
    split: SplitOpt = "train",
    max_samples: MaxSamplesOpt = None,
    max_tokens: MaxTokensOpt = None,
    batch_size: BatchSizeOpt = 8,
    device: Annotated[
        str, typer.Option("--device", help="cpu, cuda (under torchrun: cuda:LOCAL_RANK), cuda:N.")
    ] = "cpu",
    dtype: ModelDtypeOpt = ModelDtype.float32,
    exit_zero: ExitZeroOpt = False,
    fmt: FormatOpt = Format.TEXT,
    output: OutputOpt = None,
    report_to: ReportOpt = None,
    summary: SummaryOpt = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar (none off a terminal either).")
    ] = False,
) -> None:
    """Run texts through a causal model as it is and with eps changed, in every norm at once,
    each norm alone (--per-norm) or each role alone (--per-role), and report per position
    class the mean next-token KL(base || new), top-1 agreement, max |delta logit|, last-token
    NMSE and perplexity, beside each norm's min q/eps.
    """
    from rmsnorm_eps.capture.distributed import init_from_env, rank_device
    from rmsnorm_eps.capture.job import close_group, leave, read_texts
    from rmsnorm_eps.capture.loading import DTYPES, load_model, resolve_device
    from rmsnorm_eps.cli._app import _debug_enabled
    from rmsnorm_eps.cli._gate import finish, tail_options
    from rmsnorm_eps.cli._paths import check_outside_model
    from rmsnorm_eps.sensitivity.result import evaluate_gate

    inputs = [("--text-file", text_file), ("--dataset", dataset), ("--model", model)]
    options = tail_options(
        fmt, output, reports=report_to, summary=summary, exit_zero=exit_zero, inputs=inputs
    )
    # -o, --report, --summary: never a file the model folder is loaded from (config.json, ...)
    check_outside_model("--model", model, options.outputs())
    changes = _changes(eps, spec_from, spec_to)
    if exact_top is not None and not per_norm:
        raise usage_error("--exact-top applies to --per-norm")
    if suggest and max_kl is None:
        raise usage_error("--suggest needs --max-kl (the KL a suggested eps must keep)")
    _require_torch()
    texts = read_texts(text or [], text_file, field, dataset, split, max_samples)
    where = resolve_device(rank_device(device))
    rank, world = init_from_env(where)
    from rmsnorm_eps.sensitivity.run import measure

    try:
        loaded = load_model(model, gguf, DTYPES[dtype.value], where)
        _load_notes(loaded, rank)
        with _progress(not quiet and rank == 0) as progress:
            result = measure(
                loaded,
                texts,
                changes,
                per_norm=per_norm,
                per_role=per_role,
                exact_top=exact_top,
                suggest_max_kl=max_kl if suggest else None,
                suggest_min_top1=min_top1 if suggest else None,
                max_tokens=max_tokens,
                batch_size=batch_size,
                samples=samples,
                seed=seed,
                rank=rank,
                world=world,
                progress=progress,
            )
        gate = evaluate_gate(result, max_kl, min_top1)
        result = replace(result, gate=gate)
        p = result.passes
        if _debug_enabled(ctx):
            _debug(p)
        if rank != 0:
            raise typer.Exit(0)
        worst = max((c.all.kl for c in result.changes if c.all.kl is not None), default=None)
        finish(
            result,
            None,  # the gate travels in the result: it is not a violations budget
            options,
            passed=gate.passed,
            message=f"{len(result.changes)} change(s), {result.tokens} tokens; "
            f"max KL {'-' if worst is None else f'{worst:.4g}'} nats; {gate.reason}; "
            f"cost {p.equivalent:.4g} passes (naive {p.naive:.4g})",
        )
    except typer.Exit as done:
        if world > 1:
            leave(int(done.exit_code))
        raise
    finally:
        if world > 1:
            close_group()


def _changes(eps: list[float] | None, spec_from: str | None, spec_to: str | None) -> list[Any]:
    """The changes asked for: one per --eps value, or the --from/--to pair."""
    from rmsnorm_eps.sensitivity.result import Change
    from rmsnorm_eps.sensitivity.swap import spec_of

    if eps and (spec_from or spec_to):
        raise usage_error("give --eps or --from/--to, not both")
    if (spec_from is None) != (spec_to is None):
        raise usage_error("--from and --to go together")
    changes = []
    for value in eps or []:
        spec = spec_of(f"eps={value!r}", "--eps")
        changes.append(Change(f"eps={spec.eps:g}", None, f"eps={spec.eps!r}", True))
    if spec_from is not None and spec_to is not None:
        spec_of(spec_from, "--from")
        spec_of(spec_to, "--to")
        changes.append(Change(f"{spec_from} -> {spec_to}", spec_from, spec_to, False))
    if not changes:
        raise usage_error("give the change: --eps VALUE (repeatable) or --from SPEC --to SPEC")
    return changes


def _load_notes(loaded: Any, rank: int) -> None:
    """Rank 0 tells the load's notes on stderr (sub-models the loaded class has none of)."""
    from rmsnorm_eps.cli._output import summary_line

    for line in loaded.notes if rank == 0 else ():
        summary_line(line)


@contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[float, float], None] | None]:
    """A rich progress bar on stderr (passes of the texts done / planned, ETA) when stderr is
    a terminal and ``enabled``; else nothing (None)."""
    import sys

    if not (enabled and sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("sensitivity"),
        BarColumn(),
        TextColumn("{task.fields[passes]} passes"),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("sensitivity", total=None, passes="-")

        def update(done: float, planned: float) -> None:
            bar.update(task, completed=done, total=planned, passes=f"{done:.1f}/{planned:.1f}")

        yield update


def _require_torch() -> None:
    """sensitivity runs the model: without torch or transformers, name the extra."""
    import importlib.util

    from rmsnorm_eps.errors import MissingExtraError

    for package in ("torch", "transformers"):
        if importlib.util.find_spec(package) is None:
            raise MissingExtraError(package, "torch", "sensitivity")


def _debug(p: Any) -> None:
    """--debug: the pass count on stderr."""
    import sys

    print(
        f"rmsnorm-eps: debug: {p.forward:.4g} forward + {p.backward:.4g} backward passes "
        f"({p.equivalent:.4g} forward-equivalent; naive loop {p.naive:.4g}) over "
        f"{p.batches} batch(es) of {p.layers} layers",
        file=sys.stderr,
    )
