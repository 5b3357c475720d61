"""``rmsnorm-eps capture``: run texts through a local model and dump q (or v) at every norm."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, NoReturn

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


def _read_texts(
    texts: list[str],
    text_file: Path | None,
    field: str | None,
    dataset: Path | None,
    split: str,
    max_samples: int | None,
) -> tuple[str, ...]:
    """The texts of the one source given (``--text``, ``--text-file`` or ``--dataset``), at
    most ``max_samples`` of them."""
    from rmsnorm_eps.capture.inputs import check_texts, read_dataset, read_text_file

    given = [
        n for n, v in (("--text", texts), ("--text-file", text_file), ("--dataset", dataset)) if v
    ]
    if len(given) > 1:
        raise usage_error(f"give one input: {' or '.join(given)}, not both")
    if not given:
        raise usage_error(
            'give the input: --text "..." (repeatable), --text-file F or --dataset PATH'
        )
    if field is not None and text_file is None and dataset is None:
        raise usage_error("--field applies to --text-file (JSON Lines) and --dataset")
    if dataset is not None:
        return read_dataset(dataset, split=split, field=field or "text", max_samples=max_samples)
    out = read_text_file(text_file, field) if text_file is not None else check_texts(texts)
    return out[:max_samples] if max_samples is not None else out


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
        "Exit codes: 0 captured, 2 usage or input error (no model, missing extras, bad text)."
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
    from rmsnorm_eps.capture.checkpoint import random_weights_line
    from rmsnorm_eps.capture.distributed import init_from_env, job_from_env, rank_device
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
    texts = _read_texts(text or [], text_file, field, dataset, split, max_samples)
    d_value, ratio = resolve_bound(delta, min_ratio)
    where = resolve_device(rank_device(device))
    rank, world = init_from_env(where)
    if world > 1 and not summary_only and "{rank}" not in str(out):
        raise usage_error("under torchrun each rank writes its own dump: put {rank} in --save-data")
    try:
        loaded = load_model(
            model, gguf, DTYPES[dtype.value], where, allow_random_weights=allow_random_weights
        )
        if loaded.random_weights and rank == 0:
            summary_line(random_weights_line(loaded.random_weights))
        job = _Job(rank, world, summary_only, ratio if summary_only else None)
        ran_at = time.perf_counter()
        result, order = _capture(
            loaded, texts, job, module or (), max_tokens, batch_size, sort_by_length
        )
        if _debug_enabled(ctx) and rank == 0:  # where the time went: loading vs the forward passes
            summary_line(
                f"timing: load {loaded.load_seconds:.2f} s (config, tokenizer, weights), "
                f"forward {time.perf_counter() - ran_at:.2f} s (tokenize, "
                f"{len(order)} text(s) under the hooks)"
            )
        _report(result, order, loaded, job, d_value, out, config_out, fmt.value, output)
    finally:
        if world > 1:
            _close_group()
    if world > 1:
        _leave(EXIT_OK)
    raise typer.Exit(EXIT_OK)


def _close_group() -> None:
    """Under torchrun: end the process group (also after an error)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _leave(code: int) -> NoReturn:
    """Under torchrun, once every file is written: end the group, flush, and leave at once
    with ``code``. gloo's worker threads can abort the interpreter's own shutdown ("terminate
    called without an active exception", SIGABRT) after a successful run, which torchrun
    would report as a failure."""
    import os

    _close_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@dataclass(frozen=True)
class _Job:
    """This process's place in the job and the capture mode."""

    rank: int
    world: int
    summary_only: bool
    min_ratio: float | None


def _capture(
    loaded: Any,
    texts: tuple[str, ...],
    job: _Job,
    modules: Sequence[str],
    max_tokens: int | None,
    batch_size: int,
    sort_by_length: bool,
) -> tuple[Any, list[int]]:
    """Tokenize every text, plan the batches, run this rank's share under the hooks; returns
    the capture and the sample index of each sequence it ran, in run order."""
    from rmsnorm_eps.capture.hooks import QCapture
    from rmsnorm_eps.capture.inputs import plan_batches, run_batches, shard_batches, tokenize
    from rmsnorm_eps.capture.loading import input_device

    ids = tokenize(loaded.tokenizer, texts, max_tokens)
    plan = plan_batches([len(r) for r in ids], batch_size, sort_by_length)
    mine = shard_batches(plan, job.rank, job.world)
    order = [i for b in mine for i in b.samples]
    pad = loaded.tokenizer.pad_token_id
    with (
        QCapture(
            loaded.model, names=modules, summary_only=job.summary_only, min_ratio=job.min_ratio
        ) as cap,
        _progress(len(order), job.rank == 0) as progress,
    ):
        run_batches(
            loaded.model,
            ids,
            mine,
            pad_id=int(pad if pad is not None else 0),
            device=input_device(loaded.model),
            progress=progress,
            family=loaded.family,
        )
    return cap.result(), order


def _report(
    result: Any,
    order: list[int],
    loaded: Any,
    job: _Job,
    d_value: float,
    out: Path,
    config_out: Path | None,
    fmt: str,
    output: Path | None,
) -> None:
    """Write this rank's files, reduce over the ranks, and print the report from rank 0."""
    from rmsnorm_eps.capture.distributed import (
        reduce_capture_documents,
        reduce_summary,
        sum_across_ranks,
    )
    from rmsnorm_eps.capture.output import rank_path, write_config, write_dump
    from rmsnorm_eps.capture.report import (
        CaptureReport,
        capture_document,
        not_analysed,
        summary_report,
    )
    from rmsnorm_eps.cli._output import emit
    from rmsnorm_eps.merge import write_summary

    ran = any(m.count for m in result.modules)
    lead = job.rank == 0
    if job.summary_only:
        mine = summary_report(result, d_value, str(out)) if ran else None
        report = reduce_summary(mine, str(out))
        if lead:
            write_summary(report, out)  # the summary `rmsnorm-eps merge` reads
            emit(report, fmt, output)
            for line in not_analysed(result):  # unknown kinds: listed, never analysed
                summary_line(line)
    else:
        result = _with_sample_indices(result, order)
        path = rank_path(out, job.rank)
        if ran:
            write_dump(result, path)
        outputs = {"dump": str(out), "config": str(config_out) if config_out else None}
        doc = reduce_capture_documents(
            capture_document(result, loaded.name, outputs) if ran else None
        )
        if lead:
            emit(CaptureReport(result, loaded.name, outputs, document=doc), fmt, output)
    if lead and config_out is not None:
        write_config(result, config_out, loaded.name, loaded.source)
    ran_modules = [1 if m.count else 0 for m in result.modules]
    totals = sum_across_ranks([result.sequences, result.tokens, *ran_modules])
    if lead:
        count = sum(1 for n in totals[2:] if n)
        ranks = f" over {job.world} ranks" if job.world > 1 else ""
        summary_line(
            f"captured {count} norm module(s), {totals[0]} text(s), "
            f"{totals[1]} tokens{ranks} -> {out}"
        )


def _with_sample_indices(result: Any, order: list[int]) -> Any:
    """The capture with each ``::batch`` value (the sequence's rank in run order) replaced by
    the index of its text in the input."""
    import numpy as np

    lookup = np.asarray(order, dtype=np.int64)
    modules = tuple(
        replace(m, batch=lookup[m.batch]) if m.batch is not None and m.batch.size else m
        for m in result.modules
    )
    return replace(result, modules=modules)


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
