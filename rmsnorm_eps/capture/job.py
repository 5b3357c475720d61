"""One capture run, from the texts to the files written: what ``rmsnorm-eps capture`` and
``rmsnorm-eps sensitivity`` do between parsing their options and printing their report.

* :func:`read_texts`: the texts of the one source given (``--text``, ``--text-file`` or
  ``--dataset``);
* :func:`run_capture`: tokenize, plan the batches
  (:func:`~rmsnorm_eps.capture.inputs.plan_batches`), run this rank's share
  (:func:`~rmsnorm_eps.capture.inputs.shard_batches`) under the hooks;
* :func:`finish_capture`: write this rank's dump (or rank 0's summary) and the config, reduce
  over the ranks, and hand back what rank 0 reports;
* :func:`close_group` / :func:`leave`: the end of a torchrun job.

Nothing here prints: the results are frozen objects the command reports.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from rmsnorm_eps.capture.errors import CaptureError

__all__ = [
    "CaptureRun",
    "Finished",
    "Job",
    "close_group",
    "finish_capture",
    "leave",
    "read_texts",
    "run_capture",
    "with_sample_indices",
]


def read_texts(
    texts: Sequence[str],
    text_file: Path | None,
    field: str | None,
    dataset: Path | None,
    split: str,
    max_samples: int | None,
) -> tuple[str, ...]:
    """The texts of the one source given (``--text``, ``--text-file`` or ``--dataset``), at
    most ``max_samples`` of them; :class:`CaptureError` when none or several are given, or
    ``field`` without a file or dataset."""
    from rmsnorm_eps.capture.inputs import check_texts, read_dataset, read_text_file

    given = [
        n for n, v in (("--text", texts), ("--text-file", text_file), ("--dataset", dataset)) if v
    ]
    if len(given) > 1:
        raise CaptureError(f"give one input: {' or '.join(given)}, not both")
    if not given:
        raise CaptureError(
            'give the input: --text "..." (repeatable), --text-file F or --dataset PATH'
        )
    if field is not None and text_file is None and dataset is None:
        raise CaptureError("--field applies to --text-file (JSON Lines) and --dataset")
    if dataset is not None:
        return read_dataset(dataset, split=split, field=field or "text", max_samples=max_samples)
    out = read_text_file(text_file, field) if text_file is not None else check_texts(texts)
    return out[:max_samples] if max_samples is not None else out


def close_group() -> None:
    """Under torchrun: end the process group (also after an error)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def leave(code: int) -> NoReturn:
    """Under torchrun, once every file is written: end the group, flush, and leave at once
    with ``code``. gloo's worker threads can abort the interpreter's own shutdown ("terminate
    called without an active exception", SIGABRT) after a successful run, which torchrun
    would report as a failure."""
    close_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@dataclass(frozen=True)
class Job:
    """This process's place in the job and the capture mode."""

    rank: int
    world: int
    summary_only: bool
    min_ratio: float | None


@dataclass(frozen=True)
class CaptureRun:
    """What this rank captured (:class:`~rmsnorm_eps.capture.records.CaptureResult`) and the
    sample index of each sequence it ran, in run order."""

    result: Any
    order: tuple[int, ...]


def run_capture(
    loaded: Any,
    texts: Sequence[str],
    job: Job,
    modules: Sequence[str] = (),
    *,
    max_tokens: int | None = None,
    batch_size: int = 8,
    sort_by_length: bool = False,
    progress: Callable[[int], AbstractContextManager[Callable[[int, int], None] | None]]
    | None = None,
) -> CaptureRun:
    """Tokenize every text, plan the batches, run this rank's share under the hooks
    (:class:`~rmsnorm_eps.capture.hooks.QCapture`, also hooking ``modules``).
    ``progress(n)`` is entered with the number of samples this rank runs; the callback it
    gives (or None) is called as ``update(samples, tokens)`` after each batch."""
    from rmsnorm_eps.capture.hooks import QCapture
    from rmsnorm_eps.capture.inputs import plan_batches, run_batches, shard_batches, tokenize
    from rmsnorm_eps.capture.loading import input_device

    ids = tokenize(loaded.tokenizer, texts, max_tokens)
    plan = plan_batches([len(r) for r in ids], batch_size, sort_by_length)
    mine = shard_batches(plan, job.rank, job.world)
    order = tuple(i for b in mine for i in b.samples)
    pad = loaded.tokenizer.pad_token_id
    bar = progress(len(order)) if progress is not None else nullcontext(None)
    with (
        QCapture(
            loaded.model, names=modules, summary_only=job.summary_only, min_ratio=job.min_ratio
        ) as cap,
        bar as update,
    ):
        run_batches(
            loaded.model,
            ids,
            mine,
            pad_id=int(pad if pad is not None else 0),
            device=input_device(loaded.model),
            progress=update,
            family=loaded.family,
        )
    return CaptureRun(cap.result(), order)


def with_sample_indices(result: Any, order: Sequence[int]) -> Any:
    """The capture with each ``::batch`` value (the sequence's rank in run order) replaced by
    the index of its text in the input."""
    import numpy as np

    lookup = np.asarray(order, dtype=np.int64)
    modules = tuple(
        replace(m, batch=lookup[m.batch]) if m.batch is not None and m.batch.size else m
        for m in result.modules
    )
    return replace(result, modules=modules)


@dataclass(frozen=True)
class Finished:
    """What rank 0 reports once the files are written: the report (the mergeable summary's
    :class:`~rmsnorm_eps.merge.SummaryReport`, or a
    :class:`~rmsnorm_eps.capture.report.CaptureReport`; None on the other ranks), the
    modules of an unknown kind (one line each, never analysed), and the totals over the
    ranks: modules that saw a token, sequences, tokens."""

    report: Any | None
    not_analysed: tuple[str, ...]
    modules: int
    sequences: int
    tokens: int


def finish_capture(
    run: CaptureRun,
    loaded: Any,
    job: Job,
    d_value: float,
    out: Path,
    config_out: Path | None,
) -> Finished:
    """Write this rank's files (the dump at its rank's path; or, on rank 0, the summary
    ``rmsnorm-eps merge`` reads) and rank 0's ``config_out``, reduced over the ranks."""
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
    from rmsnorm_eps.merge import write_summary

    result = run.result
    ran = any(m.count for m in result.modules)
    lead = job.rank == 0
    report: Any = None
    notes: tuple[str, ...] = ()
    if job.summary_only:
        mine = summary_report(result, d_value, str(out)) if ran else None
        reduced = reduce_summary(mine, str(out))
        if lead:
            write_summary(reduced, out)
            report = reduced
            notes = tuple(not_analysed(result))
    else:
        result = with_sample_indices(result, run.order)
        if ran:
            write_dump(result, rank_path(out, job.rank))
        outputs = {"dump": str(out), "config": str(config_out) if config_out else None}
        doc = reduce_capture_documents(
            capture_document(result, loaded.name, outputs) if ran else None
        )
        if lead:
            report = CaptureReport(result, loaded.name, outputs, document=doc)
    if lead and config_out is not None:
        write_config(result, config_out, loaded.name, loaded.source)
    ran_modules = [1 if m.count else 0 for m in result.modules]
    totals = sum_across_ranks([result.sequences, result.tokens, *ran_modules])
    return Finished(report, notes, sum(1 for n in totals[2:] if n), totals[0], totals[1])
