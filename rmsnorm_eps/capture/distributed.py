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
from rmsnorm_eps.merge import merge_summaries, summary_document, summary_from_document

__all__ = ["all_gather_bytes", "reduce_across_ranks", "write_reduced_summary"]


def all_gather_bytes(data: bytes, group: Any = None) -> list[bytes]:
    """Every rank's ``data``, in rank order."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size(group)
    size = torch.tensor([len(data)], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    longest = max(int(s.item()) for s in sizes)
    mine = torch.zeros(longest, dtype=torch.uint8)
    if data:
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    bufs = [torch.zeros(longest, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(bufs, mine, group=group)
    return [bytes(b[: int(s.item())].numpy().tobytes()) for b, s in zip(bufs, sizes, strict=True)]


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
        summary_from_document(json.loads(b), f"rank{r}")
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
