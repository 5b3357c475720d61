"""Reducing summary-only captures across the ranks of a torch.distributed job.

Every rank turns its capture into the mergeable summary document
(:func:`rmsnorm_eps.merge.summary_document` of :func:`rmsnorm_eps.capture.report.summary_report`,
plain JSON, no pickling); the byte strings are all-gathered (sizes first, then padded uint8
tensors: works on gloo and nccl alike) and every rank merges them in rank order with
:func:`rmsnorm_eps.merge.merge_reports`: rank r's q values are taken to follow ranks 0..r-1's,
exactly as ``rmsnorm-eps merge`` combines summary files. The result is the report one process
would have produced over all the ranks' data in that order; rank 0 writes it
(:func:`rmsnorm_eps.merge.write_summary`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from rmsnorm_eps.analysis import RatioReport
from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.merge import merge_summaries, summary_document, summary_from_document
from rmsnorm_eps.merge.summary_format import parse_summary_json

__all__ = [
    "all_gather_bytes",
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


def all_gather_bytes(data: bytes, group: Any = None) -> list[bytes]:
    """Every rank's ``data``, in rank order."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size(group)
    # nccl moves CUDA tensors only; gloo moves host tensors
    dev = (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend(group) == "nccl"
        else torch.device("cpu")
    )
    size = torch.tensor([len(data)], dtype=torch.int64, device=dev)
    sizes = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    longest = max(int(s.item()) for s in sizes)
    mine = torch.zeros(max(longest, 1), dtype=torch.uint8)
    if data:
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    mine = mine.to(dev)
    bufs = [torch.zeros(max(longest, 1), dtype=torch.uint8, device=dev) for _ in range(world)]
    dist.all_gather(bufs, mine, group=group)
    return [
        bytes(b[: int(s.item())].cpu().numpy().tobytes()) for b, s in zip(bufs, sizes, strict=True)
    ]


def reduce_across_ranks(report: RatioReport, group: Any = None) -> RatioReport:
    """All-gather every rank's summary report (see the module docstring) and merge them in rank
    order (the same on every rank; shards are labelled ``rank0``, ``rank1``, ...).

    Without an initialized process group the report is returned unchanged.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return report
    mine = json.dumps(summary_document(report), allow_nan=False).encode("utf-8")
    shards = [
        summary_from_document(parse_summary_json(b), f"rank{r}")
        for r, b in enumerate(all_gather_bytes(mine, group))
    ]
    return merge_summaries(shards)


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
    distributed = dist.is_available() and dist.is_initialized()
    if not distributed or dist.get_rank(group) == 0:
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

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        mine = b""
        if report is not None:
            mine = json.dumps(summary_document(report), allow_nan=False).encode("utf-8")
        payloads = all_gather_bytes(mine, group)
        shards = [
            summary_from_document(parse_summary_json(b), f"rank{r}")
            for r, b in enumerate(payloads)
            if b
        ]
        if not shards:
            raise CaptureError("no rank captured anything")
        report = _unsharded(merge_summaries(shards))
    elif report is None:
        raise CaptureError("no norm module saw a token: nothing was captured")
    return replace(report, source=source, shards=())


def _unsharded(report: RatioReport) -> RatioReport:
    """The report without shard labels on its listed inputs (their indices are already the
    indices of the whole concatenation)."""
    from dataclasses import replace

    from rmsnorm_eps.analysis import LayerResult

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
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return list(values)
    gathered = [json.loads(b) for b in all_gather_bytes(json.dumps(values).encode(), group)]
    return [sum(col) for col in zip(*gathered, strict=True)]


def reduce_capture_documents(doc: dict[str, Any] | None, group: Any = None) -> dict[str, Any]:
    """The capture document (:func:`rmsnorm_eps.capture.report.capture_document`) of the whole
    job from every rank's (None for a rank that ran no sample): sequences, tokens, per-module
    calls and counts summed, min q/eps the smallest; the facts of each module taken from the
    first rank where it ran. Outside a process group, ``doc`` itself."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        if doc is None:
            raise CaptureError("no norm module saw a token: nothing was captured")
        return doc
    mine = json.dumps(doc, allow_nan=False).encode("utf-8") if doc is not None else b""
    docs = [json.loads(b) for b in all_gather_bytes(mine, group) if b]
    if not docs:
        raise CaptureError("no rank captured anything")
    whole = dict(docs[0])
    whole["sequences"] = sum(d["sequences"] for d in docs)
    whole["tokens"] = sum(d["tokens"] for d in docs)
    modules = []
    for i, m in enumerate(docs[0]["modules"]):
        parts = [d["modules"][i] for d in docs]
        ran = [p for p in parts if p["count"]]
        merged = dict(ran[0] if ran else m)
        merged["calls"] = sum(p["calls"] for p in parts)
        merged["count"] = sum(p["count"] for p in parts)
        ratios = [p["min_ratio"] for p in parts if p["min_ratio"] is not None]
        merged["min_ratio"] = min(ratios) if ratios else None
        modules.append(merged)
    whole["modules"] = modules
    return whole
