"""What :class:`~rmsnorm_eps.capture.hooks.QCapture` keeps of each norm module call, and the
frozen records it assembles from that.

:func:`copy_to_host`: one device -> host copy per device per forward pass (the pending q of
every module call concatenated on their device first, in float64; float32 on mps, which has no
float64). :func:`store`: the real tokens' q of one call (padding, attention mask 0, dropped),
with each token's batch index, its position (its rank among the real tokens of its sequence,
``cumsum(mask) - 1``), its head and its call index; or, with ``summary_only``, folded into
streaming summaries exactly as the dump stores q (float32). :func:`module_record`: a module's
:class:`~rmsnorm_eps.capture.records.ModuleRecord`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rmsnorm_eps.analysis import ratio_position_split
from rmsnorm_eps.capture.hook_state import NormState, PendingQ
from rmsnorm_eps.capture.modules import weight_stats
from rmsnorm_eps.capture.records import ModuleRecord
from rmsnorm_eps.summary import LayerAccumulator, Quantity

__all__ = ["copy_to_host", "module_record", "store"]


def copy_to_host(pending: list[PendingQ]) -> list[Any]:
    """The q of each pending call on the host (float64 tensors, each of its own shape)."""
    import torch

    by_device: dict[Any, list[int]] = {}
    for i, p in enumerate(pending):
        by_device.setdefault(p.q.device, []).append(i)
    host: list[Any] = [None] * len(pending)
    for device, idx in by_device.items():
        wide = torch.float32 if device.type == "mps" else torch.float64  # mps: no float64
        flat = torch.cat([pending[i].q.detach().reshape(-1).to(dtype=wide) for i in idx])
        values = flat.to("cpu").to(dtype=torch.float64)  # the one copy for this device
        parts = values.split([pending[i].q.numel() for i in idx])
        for i, part in zip(idx, parts, strict=True):
            host[i] = part.reshape(pending[i].q.shape)
    return host


def store(
    p: PendingQ,
    q_host: Any,
    *,
    q_dtype: str,
    summary_only: bool,
    min_ratio: float | None,
    top_k: int,
) -> None:
    """Keep (or fold) the real tokens' q of one module call (``q_host`` [B, T, H])."""
    import torch

    st = p.state
    heads = int(q_host.shape[2])
    pos_all = torch.cumsum(p.mask.to(torch.int64), dim=1) - 1
    b_idx, t_idx = torch.nonzero(p.mask, as_tuple=True)
    qv = q_host[b_idx, t_idx].reshape(-1).numpy().astype(np.float64)
    if q_dtype == "float32":
        qv = qv.astype(np.float32).astype(np.float64)
    n = int(b_idx.numel())
    batch = np.repeat((b_idx + p.offset).numpy().astype(np.int64), heads)
    position = np.repeat(pos_all[b_idx, t_idx].numpy().astype(np.int64), heads)
    head = np.tile(np.arange(heads, dtype=np.int64), n)
    st.count += int(qv.size)
    if summary_only:
        _fold(st, qv, position, min_ratio, top_k)
    else:
        st.q.append(qv)
        st.batch.append(batch)
        st.position.append(position)
        st.head.append(head)
        st.call.append(np.full(qv.size, p.call, dtype=np.int64))


def _fold(
    st: NormState, q: np.ndarray, position: np.ndarray, min_ratio: float | None, top_k: int
) -> None:
    """Fold the q values exactly as the dump stores them (float32), so that a summary equals
    ``ratio`` on the dump; the first/other split is ``ratio``'s own."""
    assert st.eps is not None and min_ratio is not None
    if st.summary is None or st.split is None:
        # a LayerNorm divides by its variance v: the summary says so (merge reports v)
        quantity: Quantity = "v" if st.kind is not None and st.kind.norm == "layer" else "q"
        st.summary = LayerAccumulator(st.eps, min_ratio, top_k, quantity)
        st.split = ratio_position_split(st.eps, min_ratio, top_k, quantity)
    stored = q.astype(np.float32)
    start = st.summary.count
    st.summary.update(stored, start)
    st.split.update(stored, start, position == 0)


def module_record(st: NormState, summary_only: bool) -> ModuleRecord:
    """The frozen record of what one module captured so far."""
    ws = weight_stats(st.module)
    w = getattr(st.module, "weight", None)
    wdt = str(w.dtype).removeprefix("torch.") if w is not None else None
    full = not summary_only
    nk = st.kind
    return ModuleRecord(
        name=st.spec.name,
        class_name=st.spec.class_name,
        kind=st.spec.kind,
        eps=st.eps,
        eps_source=st.eps_source,
        dim=st.dim,
        input_dtype=st.input_dtype,
        gain=nk.gain if nk is not None and nk.norm != "unknown" else st.spec.gain,
        weight=ws,
        weight_dtype=wdt,
        layout=st.layout,
        heads=st.heads,
        calls=st.calls,
        count=st.count,
        q=_cat(st.q, np.float64) if full else None,
        position=_cat(st.position, np.int64) if full else None,
        batch=_cat(st.batch, np.int64) if full else None,
        head=_cat(st.head, np.int64) if full else None,
        summaries=_summaries(st),
        max_calls=st.max_calls,
        call=_cat(st.call, np.int64) if full else None,
        **_kind_fields(st),
    )


def _kind_fields(st: NormState) -> dict[str, Any]:
    """A record's fields from the module's kind; a skipped module is 'unknown' with why."""
    nk = st.kind
    if nk is None:
        skipped = st.skipped is not None
        return {"norm": "unknown" if skipped else None, "reason": _why(st) if skipped else None}
    fields: dict[str, Any] = {
        "norm": nk.norm,
        "reason": nk.reason,
        "bias": nk.bias,
        "group_size": nk.group_size,
        "gate_before": nk.gate_before,
        "gate_fn": nk.gate_fn if nk.norm == "gated-rms" else None,
        "input_scale": nk.input_scale,
        "eps_rule": nk.eps_rule,
        "inputs": nk.inputs,
        "channels_first": nk.channels_first,
    }
    if st.skipped is not None:
        fields |= {"norm": "unknown", "reason": _why(st)}
    return fields


def _why(st: NormState) -> str:
    """Why a skipped module is not analysed (with the kind it was found to be)."""
    norm = st.kind.norm if st.kind is not None else "unknown"
    found = f" ({norm} norm)" if norm != "unknown" else ""
    return f"not analysed{found}: {st.skipped}"


def _summaries(st: NormState) -> dict[str, LayerAccumulator] | None:
    """Copies of a module's accumulators (capturing may go on after :meth:`QCapture.result`)."""
    if st.summary is None or st.split is None:
        return None
    from copy import deepcopy

    first, other = st.split.results()
    return {"all": deepcopy(st.summary), "first": first, "other": other}


def _cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    if not parts:
        return np.empty(0, dtype)
    return np.concatenate(parts).astype(dtype, copy=False)
