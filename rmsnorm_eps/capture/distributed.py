"""Reducing summary-only captures across the ranks of a torch.distributed job.

Every rank turns its capture into the mergeable summary document
(:func:`rmsnorm_eps.merge.summary_document` of :func:`rmsnorm_eps.capture.report.summary_report`,
plain JSON, no pickling); the ranks broadcast their byte strings in turn (size first, then a
uint8 tensor: works on gloo and nccl alike) and every rank folds them, one at a time, in rank
order with
:func:`rmsnorm_eps.merge.merge_reports`: rank r's q values are taken to follow ranks 0..r-1's,
exactly as ``rmsnorm-eps merge`` combines summary files. The result is the report one process
would have produced over all the ranks' data in that order; rank 0 writes it
(:func:`rmsnorm_eps.merge.write_summary`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from rmsnorm_eps.analysis import RatioReport
from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.merge import merge_summaries, summary_document, summary_from_document
from rmsnorm_eps.merge.summary_format import ShardSummary, parse_summary_json

__all__ = [
    "bytes_in_turn",
    "init_from_env",
    "job_from_env",
    "reduce_across_ranks",
    "reduce_capture_documents",
    "reduce_summary",
    "sum_across_ranks",
    "write_reduced_summary",
]


def init_from_env(device: str) -> tuple[int, int]:
    """Join the torch.distributed job described by the environment (``env://``: RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as torchrun sets them on every node, under SLURM
    too) when WORLD_SIZE > 1, with nccl when this rank runs on CUDA, else gloo; returns
    (rank, world size), (0, 1) outside a job."""
    import torch.distributed as dist

    world = job_from_env()[1]
    if world <= 1:
        return 0, 1
    if not dist.is_available():
        raise CaptureError("WORLD_SIZE > 1 but this torch has no torch.distributed")
    if not dist.is_initialized():
        backend = "nccl" if device.startswith(("cuda", "auto")) else "gloo"
        if device.startswith("cuda:"):
            import torch

            torch.cuda.set_device(int(device[5:]))  # nccl's collectives run on this GPU
        dist.init_process_group(backend=backend, init_method="env://")
    return dist.get_rank(), dist.get_world_size()


#: Largest WORLD_SIZE accepted (every rank's output path is checked before the run).
WORLD_MAX = 1 << 16


def job_from_env() -> tuple[int, int]:
    """``(RANK, WORLD_SIZE)`` from the environment, checked before any process group is
    joined (a rank outside the world would wait for its peers forever): integers,
    ``WORLD_SIZE >= 1``, ``0 <= RANK < WORLD_SIZE``, RANK given when WORLD_SIZE > 1, and then
    MASTER_ADDR and MASTER_PORT (``env://``). ``(0, 1)`` outside a job."""
    world = _env_int("WORLD_SIZE", 1)
    if not 1 <= world <= WORLD_MAX:
        raise CaptureError(f"environment variable WORLD_SIZE={world} must be from 1 to {WORLD_MAX}")
    if world > 1 and os.environ.get("RANK", "") == "":
        raise CaptureError(
            f"WORLD_SIZE={world} but RANK is not set: launch with torchrun, or set RANK "
            f"(0 to {world - 1}) on every process"
        )
    rank = _env_int("RANK", 0)
    if not 0 <= rank < world:
        raise CaptureError(
            f"environment variable RANK={rank} is outside 0 to {world - 1} (WORLD_SIZE={world})"
        )
    if world > 1:
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if os.environ.get(name, "") == "":
                raise CaptureError(
                    f"WORLD_SIZE={world} but {name} is not set: launch with torchrun, or set "
                    "MASTER_ADDR and MASTER_PORT on every process"
                )
        port = _env_int("MASTER_PORT", 0)
        if not 1 <= port <= 65535:
            raise CaptureError(f"environment variable MASTER_PORT={port} is not a port")
    local = _env_int("LOCAL_RANK", 0)
    if local < 0:
        raise CaptureError(f"environment variable LOCAL_RANK={local} is negative")
    return rank, world


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    text = raw.strip()
    if not (text.isascii() and text.lstrip("+-").isdecimal()) or len(text) > 18:
        raise CaptureError(f"environment variable {name}={raw[:20]!r} is not an integer")
    return int(text)


def rank_device(device: str) -> str:
    """The device of this rank: ``cuda`` means ``cuda:LOCAL_RANK`` in a distributed job (one GPU
    per process, as torchrun --nproc-per-node launches them); anything else is kept."""
    if device == "cuda" and _env_int("WORLD_SIZE", 1) > 1:
        return f"cuda:{_env_int('LOCAL_RANK', 0)}"
    return device


def _transfer_device(group: Any) -> Any:
    """Where collectives move tensors: nccl moves CUDA tensors only, gloo host tensors."""
    import torch
    import torch.distributed as dist

    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def bytes_in_turn(data: bytes, group: Any = None) -> Iterator[bytes]:
    """Every rank's ``data``, in rank order, one rank at a time: rank r broadcasts its length,
    then its bytes, and every rank gets them before rank r + 1 sends. Memory is one rank's
    bytes at a time, whatever the number of ranks (a gather would hold them all). Every rank
    must consume the iterator to its end, in step: each item is a collective call."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size(group)
    me = dist.get_rank(group)
    dev = _transfer_device(group)
    for r in range(world):
        src = r if group is None else dist.get_global_rank(group, r)
        size = torch.tensor([len(data) if r == me else 0], dtype=torch.int64, device=dev)
        dist.broadcast(size, src=src, group=group)
        n = int(size.item())
        if r == me and n:
            buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(dev)
        else:
            buf = torch.zeros(max(n, 1), dtype=torch.uint8, device=dev)
        dist.broadcast(buf, src=src, group=group)
        yield data if r == me else bytes(buf[:n].cpu().numpy().tobytes())
        del buf


def _shards(payloads: Iterator[bytes]) -> Iterator[ShardSummary]:
    """The ranks' summary documents as shards ``rank0``, ``rank1``, ... (an empty payload: a
    rank that ran no sample, skipped), parsed one at a time."""
    for r, b in enumerate(payloads):
        if b:
            yield summary_from_document(parse_summary_json(b), f"rank{r}")


def _in_job() -> bool:
    """Whether a torch.distributed process group is initialized."""
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def _summary_bytes(report: RatioReport) -> bytes:
    return json.dumps(summary_document(report), allow_nan=False).encode("utf-8")


def reduce_across_ranks(report: RatioReport, group: Any = None) -> RatioReport:
    """All-gather every rank's summary report (see the module docstring) and merge them in rank
    order (the same on every rank; shards are labelled ``rank0``, ``rank1``, ...).

    Without an initialized process group the report is returned unchanged.
    """
    if not _in_job():
        return report
    return merge_summaries(_shards(bytes_in_turn(_summary_bytes(report), group)))


def write_reduced_summary(
    report: RatioReport, path: str | os.PathLike[str], group: Any = None
) -> RatioReport:
    """Reduce ``report`` across the ranks (:func:`reduce_across_ranks`) and write the one merged
    summary file from rank 0 only; every rank gets the merged report back.

    Without an initialized process group this simply writes ``report``: the same call works in
    a single process and in a distributed job.
    """
    import torch.distributed as dist

    from rmsnorm_eps.merge import write_summary

    merged = reduce_across_ranks(report, group)
    if not _in_job() or dist.get_rank(group) == 0:
        write_summary(merged, path)
    return merged


def reduce_summary(report: RatioReport | None, source: str, group: Any = None) -> RatioReport:
    """The summary report of the whole job, on every rank: the ranks' reports (None for a rank
    that ran no sample) merged in rank order, then labelled ``source`` like a one-process
    report (no shard labels), so that rank r's values follow ranks 0..r-1's. When the ranks ran
    the contiguous runs of one batch plan (:func:`rmsnorm_eps.capture.inputs.shard_batches`),
    this is exactly the report of one process running every batch.

    Without an initialized process group the report itself (relabelled) is returned.
    """
    from dataclasses import replace

    if _in_job():
        mine = _summary_bytes(report) if report is not None else b""
        folded: list[str] = []

        def shards() -> Iterator[ShardSummary]:
            for shard in _shards(bytes_in_turn(mine, group)):
                folded.append(shard.source)
                yield shard
                del shard  # folded by now: not held while the next rank's bytes arrive

        try:
            merged = merge_summaries(shards())
        except InvalidParameterError:
            if folded:
                raise
            # every rank sees the same payloads: all stop here alike
            raise CaptureError("no rank captured anything") from None
        report = _unsharded(merged)
    elif report is None:
        raise CaptureError("no norm module saw a token: nothing was captured")
    return replace(report, source=source, shards=())


def _unsharded(report: RatioReport) -> RatioReport:
    """The report without shard labels on its listed inputs (their indices are already the
    indices of the whole concatenation)."""
    from dataclasses import replace

    from rmsnorm_eps.layer_record import LayerResult

    def bare(layer: LayerResult | None) -> LayerResult | None:
        if layer is None:
            return None
        return replace(
            layer,
            worst=tuple(replace(w, shard=None, shard_index=None) for w in layer.worst),
            nonfinite_examples=tuple(
                replace(n, shard=None, shard_index=None) for n in layer.nonfinite_examples
            ),
            first_token=bare(layer.first_token),
            other_tokens=bare(layer.other_tokens),
        )

    layers = tuple(bare(layer) for layer in report.layers)
    return replace(report, layers=tuple(ly for ly in layers if ly is not None))


def sum_across_ranks(values: list[int], group: Any = None) -> list[int]:
    """Element-wise sum of every rank's integer list (the list itself outside a job)."""
    if not _in_job():
        return list(values)
    total = [0] * len(values)
    for payload in bytes_in_turn(json.dumps(values).encode(), group):
        total = [a + b for a, b in zip(total, json.loads(payload), strict=True)]
    return total


def reduce_capture_documents(doc: dict[str, Any] | None, group: Any = None) -> dict[str, Any]:
    """The capture document (:func:`rmsnorm_eps.capture.report.capture_document`) of the whole
    job from every rank's (None for a rank that ran no sample): sequences, tokens, per-module
    calls and counts summed, min q/eps the smallest; the facts of each module taken from the
    first rank where it ran. Outside a process group, ``doc`` itself."""
    if not _in_job():
        if doc is None:
            raise CaptureError("no norm module saw a token: nothing was captured")
        return doc
    mine = json.dumps(doc, allow_nan=False).encode("utf-8") if doc is not None else b""
    whole: dict[str, Any] | None = None
    for payload in bytes_in_turn(mine, group):  # one rank's document at a time
        if not payload:
            continue
        part = json.loads(payload)
        if whole is None:
            whole = dict(part)
            whole["modules"] = [dict(m) for m in part["modules"]]
            continue
        whole["sequences"] += part["sequences"]
        whole["tokens"] += part["tokens"]
        for i, p in enumerate(part["modules"]):
            whole["modules"][i] = _fold_module(whole["modules"][i], p)
    if whole is None:
        raise CaptureError("no rank captured anything")
    return whole


def _fold_module(acc: dict[str, Any], p: dict[str, Any]) -> dict[str, Any]:
    """One module's entry of the job from the ranks folded so far (``acc``) and the next
    rank's (``p``): calls and counts summed, the smallest min q/eps, the facts of the first
    rank where the module ran."""
    out = dict(p) if not acc["count"] and p["count"] else dict(acc)
    out["calls"] = acc["calls"] + p["calls"]
    out["count"] = acc["count"] + p["count"]
    ratios = [r for r in (acc["min_ratio"], p["min_ratio"]) if r is not None]
    out["min_ratio"] = min(ratios) if ratios else None
    return out
