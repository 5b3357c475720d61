"""Reducing summary-only captures across the ranks of a torch.distributed job.

Every rank serializes its summaries to JSON (no pickling), the byte strings are all-gathered
(sizes first, then padded uint8 tensors: works on gloo and nccl alike), and each rank merges
them in rank order: rank r's data are taken to follow ranks 0..r-1's, so flat indices are shifted
by the earlier ranks' counts and batch indices by their sequence counts. The merged result is
the summary one process would have produced over all the ranks' data in that order.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.hooks import CaptureResult
from rmsnorm_eps.capture.summaries import summary_from_dict, summary_to_dict

__all__ = ["all_gather_bytes", "merge_results", "reduce_across_ranks"]


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


def _encode(result: CaptureResult) -> bytes:
    return json.dumps(
        {
            "sequences": result.sequences,
            "tokens": result.tokens,
            "modules": [
                {
                    "name": m.name,
                    "eps": m.eps,
                    "count": m.count,
                    "calls": m.calls,
                    "summaries": {k: summary_to_dict(s) for k, s in (m.summaries or {}).items()},
                }
                for m in result.modules
            ],
        }
    ).encode("utf-8")


def merge_results(parts: list[CaptureResult]) -> CaptureResult:
    """Merge summary-only captures of consecutive data (same model) into one."""
    if not parts:
        raise CaptureError("nothing to merge")
    if not all(p.summary_only for p in parts):
        raise CaptureError("only summary-only captures can be merged")
    return _merge([json.loads(_encode(p)) for p in parts], parts[0])


def _merge(docs: list[dict[str, Any]], template: CaptureResult) -> CaptureResult:
    names = [m.name for m in template.modules]
    for d in docs:
        if [m["name"] for m in d["modules"]] != names:
            raise CaptureError("ranks hooked different modules; cannot merge their captures")
    modules = []
    for i, base in enumerate(template.modules):
        merged: dict[str, Any] = {}
        seq_offset = 0
        count = calls = 0
        eps = None
        for d in docs:
            m = d["modules"][i]
            if m["eps"] is not None:
                if eps is not None and m["eps"] != eps:
                    raise CaptureError(f"module {base.name!r}: ranks disagree on eps")
                eps = m["eps"]
            count += m["count"]
            calls += m["calls"]
            for stream, sd in m["summaries"].items():
                s = summary_from_dict(sd)
                if stream in merged:
                    merged[stream].merge(s, batch_offset=seq_offset)
                else:
                    s.where = {k: (b + seq_offset, p, h) for k, (b, p, h) in s.where.items()}
                    merged[stream] = s
            seq_offset += d["sequences"]
        modules.append(replace(base, eps=eps, count=count, calls=calls, summaries=merged or None))
    return replace(
        template,
        modules=tuple(modules),
        sequences=sum(d["sequences"] for d in docs),
        tokens=sum(d["tokens"] for d in docs),
    )


def reduce_across_ranks(result: CaptureResult, group: Any = None) -> CaptureResult:
    """All-gather every rank's summary-only capture and merge them (same on every rank).

    Without an initialized process group the result is returned unchanged.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return result
    if not result.summary_only:
        raise CaptureError("distributed reduction needs a summary-only capture")
    docs = [json.loads(b) for b in all_gather_bytes(_encode(result), group)]
    return _merge(docs, result)
