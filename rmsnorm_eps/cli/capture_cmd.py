"""``rmsnorm-eps capture``: run texts through a local model and dump q (or v) at every norm."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from rmsnorm_eps.cli._app import EXIT_OK, app, usage_error
from rmsnorm_eps.cli._commands import short_help
from rmsnorm_eps.cli._options import (
    BatchSizeOpt,
    DeprecatedOutOpt,
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
    SplitOpt,
    TextOpt,
    data_output,
)
from rmsnorm_eps.cli._output import summary_line


@app.command(
    "capture",
    short_help=short_help("capture"),
    epilog=(
        "Examples:\n\n"
        '  rmsnorm-eps capture --model ./SmolLM2 --text "Hello there" --save-data q.npz '
        "--config-out smollm2.yaml\n\n"
        "  rmsnorm-eps capture --model DIR --gguf model.gguf --text-file texts.txt "
        "--save-data q.npz\n\n"
        "  rmsnorm-eps capture --model DIR --text-file big.txt --summary-only "
        "--save-data s.json\n\n"
        "  rmsnorm-eps capture --model DIR --device cuda --dtype bf16 --dataset data.parquet "
        "--field text --max-samples 2000 --summary-only --save-data s.json\n\n"
        "  torchrun --nproc-per-node 4 -m rmsnorm_eps capture --model DIR --device cuda "
        "--dataset data.parquet --summary-only --save-data s.json\n\n"
        "  rmsnorm-eps merge s.json s2.json   (summaries of capture runs merge exactly)\n\n"
        "  rmsnorm-eps capture --model DIR --text-file t.txt --allow-random-weights "
        "--save-data q.npz   (a checkpoint without some weights: run on random ones, warned)\n\n"
        "Exit codes: 0 captured, 2 usage or input error (no model, missing extras, bad text, a "
        "checkpoint without some of the model's weights, a text over 8192 tokens)."
    ),
)
def capture(
    ctx: typer.Context,
    model: ModelOpt,
    save_data: Annotated[
        Path | None,
        typer.Option(
            "--save-data",
            help="Dump to write (.npz: q per module, with ::position and ::batch, the sample "
            "index), or with --summary-only the mergeable summary (JSON, read by `rmsnorm-eps "
            "merge`). Under torchrun a dump path needs {rank}: q-rank{rank}.npz.",
            dir_okay=False,
            metavar="FILE",
        ),
    ] = None,
    out: DeprecatedOutOpt = None,
    gguf: GgufOpt = None,
    text: TextOpt = None,
    text_file: Annotated[
        Path | None,
        typer.Option(
            "--text-file",
            help="UTF-8 file: one text per non-empty line, or JSON Lines (.jsonl/.ndjson, or "
            "with --field): the text in field --field (default 'text').",
        ),
    ] = None,
    field: FieldOpt = None,
    dataset: Annotated[
        Path | None,
        typer.Option(
            "--dataset",
            help="Local dataset (extra [datasets]): a .parquet, .arrow, .jsonl, .json or .csv "
            "file, or a save_to_disk directory. Offline.",
        ),
    ] = None,
    split: SplitOpt = "train",
    max_samples: MaxSamplesOpt = None,
    max_tokens: MaxTokensOpt = None,
    device: Annotated[
        str,
        typer.Option(
            "--device",
            help="cpu, cuda (under torchrun: cuda:LOCAL_RANK), cuda:N, mps, or auto "
            "(accelerate's device_map=auto over the visible GPUs; cpu when there is none).",
        ),
    ] = "cpu",
    dtype: ModelDtypeOpt = ModelDtype.float32,
    allow_random_weights: Annotated[
        bool,
        typer.Option(
            "--allow-random-weights",
            help="Run even when the checkpoint lacks some of the model's weights (they stay at "
            "their random initial values, and a warning names them) or holds tensors the "
            "model has no place for (dropped). Without it such a checkpoint is refused.",
        ),
    ] = False,
    config_out: Annotated[
        Path | None,
        typer.Option(
            "--config-out", help="Write the live settings as a YAML config.", dir_okay=False
        ),
    ] = None,
    summary_only: Annotated[
        bool,
        typer.Option(
            "--summary-only",
            help="Keep bounded-memory summaries instead of every q; "
            "prints the ratio report (needs the bound: --delta or --min-ratio).",
        ),
    ] = False,
    delta: Annotated[
        float | None, typer.Option("--delta", help="Bound for --summary-only (default 0.01).")
    ] = None,
    min_ratio: Annotated[
        float | None, typer.Option("--min-ratio", help="Bound as a minimum q/eps.")
    ] = None,
    module: Annotated[
        list[str] | None,
        typer.Option("--module", help="Also hook this module name or glob (repeatable)."),
    ] = None,
    batch_size: BatchSizeOpt = 8,
    sort_by_length: Annotated[
        bool,
        typer.Option(
            "--sort-by-length/--keep-order",
            help="Batch the texts by token count (less padding on datasets of mixed lengths; "
            "ties by input order) or in input order (the default). Dumps map every q to its "
            "text's index either way.",
        ),
    ] = False,
    fmt: FormatOpt = Format.TEXT,
    output: OutputOpt = None,
) -> None:
    """Run texts through a local model (offline) and record, at every norm, what it divides by.

    Each norm module is classified by what it computes (RMSNorm, LayerNorm, gated RMSNorm, L2;
    an unknown kind is listed and never analysed) with its live eps (torch's eps=None
    resolved). Recorded per token (and per head for q/k norms), with its position: q =
    mean(x^2) for an RMSNorm, the variance v = mean((x - mean x)^2) for a LayerNorm. It is
    reduced on the model's device; only the per-vector values come to the host.
    """
    from rmsnorm_eps.analysis import resolve_bound
    from rmsnorm_eps.capture.distributed import init_from_env, job_from_env, rank_device
    from rmsnorm_eps.capture.job import (
        Job,
        close_group,
        finish_capture,
        leave,
        read_texts,
        run_capture,
    )
    from rmsnorm_eps.capture.loading import DTYPES, load_model, resolve_device
    from rmsnorm_eps.capture.output import rank_outputs
    from rmsnorm_eps.cli._app import _debug_enabled
    from rmsnorm_eps.cli._paths import check_outputs, check_outside_model

    out = data_output(save_data, out, "the dump or summary to write")
    inputs: list[tuple[str, Path | None]] = [
        ("--text-file", text_file),
        ("--dataset", dataset),
        ("--model", model),
    ]
    if model.is_dir():  # its config.json, tokenizer and weights are inputs too
        inputs += [("--model", f) for f in sorted(model.iterdir()) if f.is_file()]
    world_size = job_from_env()[1]  # every rank's {rank} file is checked, before anything runs
    outputs = [
        *rank_outputs("--save-data", out, world_size),
        ("--config-out", config_out),
        ("-o/--output", output),
    ]
    check_outputs(inputs, outputs)
    check_outside_model("--model", model, outputs)
    if (delta is not None or min_ratio is not None) and not summary_only:
        raise usage_error("--delta and --min-ratio apply to --summary-only")
    texts = read_texts(text or [], text_file, field, dataset, split, max_samples)
    d_value, ratio = resolve_bound(delta, min_ratio)
    where = resolve_device(rank_device(device))
    rank, world = init_from_env(where)
    if world > 1 and not summary_only and "{rank}" not in str(out):
        raise usage_error("under torchrun each rank writes its own dump: put {rank} in --save-data")
    try:
        loaded = load_model(
            model, gguf, DTYPES[dtype.value], where, allow_random_weights=allow_random_weights
        )
        if rank == 0:
            _tell_load(loaded)
        job = Job(rank, world, summary_only, ratio if summary_only else None)
        ran_at = time.perf_counter()
        run = run_capture(
            loaded,
            texts,
            job,
            module or (),
            max_tokens=max_tokens,
            batch_size=batch_size,
            sort_by_length=sort_by_length,
            progress=lambda n: _progress(n, rank == 0),
        )
        if _debug_enabled(ctx) and rank == 0:  # where the time went: loading vs the forward passes
            summary_line(
                f"timing: load {loaded.load_seconds:.2f} s (config, tokenizer, weights), "
                f"forward {time.perf_counter() - ran_at:.2f} s (tokenize, "
                f"{len(run.order)} text(s) under the hooks)"
            )
        finished = finish_capture(run, loaded, job, d_value, out, config_out)
        if rank == 0:
            _report(finished, out, world, fmt.value, output)
    finally:
        if world > 1:
            close_group()
    if world > 1:
        leave(EXIT_OK)
    raise typer.Exit(EXIT_OK)


def _tell_load(loaded: Any) -> None:
    """The load's lines on stderr: the weights left random (``--allow-random-weights``), then
    its notes (sub-models of the checkpoint the loaded class has no module for)."""
    from rmsnorm_eps.capture.checkpoint import random_weights_line

    if loaded.random_weights:
        summary_line(random_weights_line(loaded.random_weights))
    for line in loaded.notes:
        summary_line(line)


def _report(finished: Any, out: Path, world: int, fmt: str, output: Path | None) -> None:
    """Rank 0's report of a finished capture: the report, the modules never analysed, and
    the summary line."""
    from rmsnorm_eps.cli._output import emit

    emit(finished.report, fmt, output)
    for line in finished.not_analysed:  # unknown kinds: listed, never analysed
        summary_line(line)
    ranks = f" over {world} ranks" if world > 1 else ""
    summary_line(
        f"captured {finished.modules} norm module(s), {finished.sequences} text(s), "
        f"{finished.tokens} tokens{ranks} -> {out}"
    )


@contextmanager
def _progress(total: int, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr (samples, tokens/s, ETA) when stderr is a terminal and
    ``enabled``; else nothing (None)."""
    if not (enabled and sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("capturing"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("samples, {task.fields[rate]} tokens/s"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("capturing", total=total, rate="-")
        start = time.perf_counter()

        def update(samples: int, tokens: int) -> None:
            elapsed = time.perf_counter() - start
            rate = f"{tokens / elapsed:,.0f}" if elapsed > 0 else "-"
            bar.update(task, completed=samples, rate=rate)

        yield update
