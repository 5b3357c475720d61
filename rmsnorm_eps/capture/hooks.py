"""Forward hooks that record q = mean(x**2) per token at every RMSNorm-like module of a model.

Usage::

    with QCapture(model) as cap:
        model(input_ids=ids, attention_mask=mask)   # any number of forward calls
    result = cap.result()                            # frozen CaptureResult

A pre-hook on the model itself reads ``input_ids`` (or ``inputs_embeds``) and a 2-D
``attention_mask`` from each call, so every norm knows the batch size B, the sequence length T
and which tokens are padding. A pre-hook on each norm module computes, from the module's input
x, ``q = mean(x**2)`` over the normalized trailing axes on x's own device (:func:`device_q`:
float64, or float32 with a per-vector scale), whatever the activation dtype, and keeps it
there; after each forward pass of the model, the pending q of every module are copied to the
host at once (one copy per device) and stored. Only these B·T·H values leave the device.
Inputs may be:

* ``[B, T, D]`` (a token norm), or ``[B*T, D]``;
* ``[B, T, H, D]`` or ``[B, H, T, D]`` (per-head q/k norms over head_dim D; the layout is the one
  whose T axis matches the call's sequence length; when H == T both match and ``head_layout``
  decides, default ``"bthd"``, the layout Hugging Face models normalize in), or ``[B*T*H, D]``.

Padding tokens (attention mask 0) are dropped. A token's position is its rank among the real
tokens of its sequence (``cumsum(mask) - 1``): position 0 is the first real token. Batch indices
count sequences over all forward calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rmsnorm_eps.analysis import PositionSplit, ratio_position_split
from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.modules import (
    NormModule,
    find_norm_modules,
    iter_named,
    resolve_eps,
    weight_stats,
)
from rmsnorm_eps.summary import LayerAccumulator

__all__ = ["CaptureResult", "ModuleRecord", "QCapture"]


@dataclass(frozen=True)
class ModuleRecord:
    """What was captured at one module.

    ``eps`` is the live epsilon (None if the module never ran); ``dim`` the number of elements
    each q averages; ``heads`` the number of q values per token (1 for token norms).
    Full mode: ``q`` (float64), ``position``, ``batch``, ``head`` (int64), all of length
    ``count``. Summary mode: ``summaries`` maps "all", "first" (position 0) and "other"
    (positions > 0) to the analyzer's :class:`LayerAccumulator` over the q values the dump would
    store (float32); every index in them is the value's index in the dump's array.
    """

    name: str
    class_name: str
    kind: str
    eps: float | None
    eps_source: str | None
    dim: int | None
    input_dtype: str | None
    gain: str
    weight: dict[str, float] | None
    weight_dtype: str | None
    layout: str | None
    heads: int
    calls: int
    count: int
    q: np.ndarray | None = None
    position: np.ndarray | None = None
    batch: np.ndarray | None = None
    head: np.ndarray | None = None
    summaries: dict[str, LayerAccumulator] | None = None


@dataclass(frozen=True)
class CaptureResult:
    """All modules' records, in the model's module order (``top_k``: worst inputs kept per
    summary)."""

    modules: tuple[ModuleRecord, ...]
    sequences: int
    tokens: int
    summary_only: bool
    q_dtype: str
    min_ratio: float | None
    top_k: int = 5


@dataclass
class _State:
    spec: NormModule
    module: Any
    eps: float | None = None
    eps_source: str | None = None
    dim: int | None = None
    input_dtype: str | None = None
    layout: str | None = None
    heads: int = 1
    calls: int = 0
    count: int = 0
    q: list[np.ndarray] = field(default_factory=list)
    position: list[np.ndarray] = field(default_factory=list)
    batch: list[np.ndarray] = field(default_factory=list)
    head: list[np.ndarray] = field(default_factory=list)
    pending: list[Any] = field(default_factory=list)  # q [B, T, H] on the device, not stored yet
    summary: LayerAccumulator | None = None
    split: PositionSplit[LayerAccumulator] | None = None


class QCapture:
    """Context manager hooking every RMSNorm-like module of ``model`` (see the module docstring).

    ``names``: extra module names or globs to hook. ``summary_only``: keep only the streaming
    summaries (bounded memory); it needs the bound, ``min_ratio`` (q/eps), which the summaries
    count against. ``q_dtype``: 'float64' (default) or 'float32'. ``top_k``: worst inputs kept
    per summary. ``head_layout``: 'bthd' or 'bhtd', used only when a 4-D input is ambiguous.
    """

    def __init__(
        self,
        model: Any,
        *,
        names: Sequence[str] = (),
        summary_only: bool = False,
        min_ratio: float | None = None,
        top_k: int = 5,
        q_dtype: str = "float64",
        head_layout: str = "bthd",
    ) -> None:
        if q_dtype not in ("float32", "float64"):
            raise CaptureError(f"q_dtype must be float32 or float64, got {q_dtype!r}")
        if head_layout not in ("bthd", "bhtd"):
            raise CaptureError(f"head_layout must be bthd or bhtd, got {head_layout!r}")
        if summary_only and (min_ratio is None or not min_ratio > 0 or math.isinf(min_ratio)):
            raise CaptureError("summary_only needs a finite min_ratio > 0 (the q/eps bound)")
        self.model = model
        self.summary_only = summary_only
        self.min_ratio = min_ratio
        self.top_k = top_k
        self.q_dtype = q_dtype
        self.head_layout = head_layout
        specs = find_norm_modules(model, names)
        if not specs:
            raise CaptureError(
                "the model has no RMSNorm-like module (torch.nn.RMSNorm, a class named *RMSNorm* "
                "with eps/variance_epsilon, T5LayerNorm); name the modules to hook explicitly"
            )
        self._states = [_State(spec, module) for spec, module in iter_named(model, specs)]
        self._handles: list[Any] = []
        self._mask: Any = None  # bool [B, T] of the current call, or None
        self._bt: tuple[int, int] | None = None
        self._sequences = 0
        self._tokens = 0

    # ------------------------------------------------------------------ context
    def __enter__(self) -> QCapture:
        self._handles.append(self.model.register_forward_pre_hook(self._root_pre, with_kwargs=True))
        self._handles.append(self.model.register_forward_hook(self._root_post))
        for st in self._states:
            self._handles.append(
                st.module.register_forward_pre_hook(self._make_hook(st), with_kwargs=True)
            )
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    # ------------------------------------------------------------------ root hooks
    def _root_pre(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        import torch

        self._flush()  # calls made outside a hooked forward of the model itself

        ids = kwargs.get("input_ids")
        if ids is None and args and isinstance(args[0], torch.Tensor):
            ids = args[0]
        embeds = kwargs.get("inputs_embeds")
        shape = None
        if isinstance(ids, torch.Tensor) and ids.ndim == 2:
            shape = (int(ids.shape[0]), int(ids.shape[1]))
        elif isinstance(embeds, torch.Tensor) and embeds.ndim == 3:
            shape = (int(embeds.shape[0]), int(embeds.shape[1]))
        mask = kwargs.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.ndim == 2:
            if shape is not None and tuple(mask.shape) != shape:
                raise CaptureError(
                    f"attention_mask shape {tuple(mask.shape)} does not match the input {shape}"
                )
            shape = (int(mask.shape[0]), int(mask.shape[1]))
            self._mask = mask.detach().to("cpu").bool()
        elif shape is not None:
            self._mask = torch.ones(shape, dtype=torch.bool)
        else:
            self._mask = None
        self._bt = shape

    def _root_post(self, module: Any, args: Any, output: Any) -> None:
        self._flush()
        if self._mask is not None:
            self._sequences += int(self._mask.shape[0])
            self._tokens += int(self._mask.sum())
        self._mask = None
        self._bt = None

    # ------------------------------------------------------------------ norm hooks
    def _make_hook(self, st: _State) -> Any:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            x = args[0] if args else next(iter(kwargs.values()), None)
            self._record(st, x)

        return hook

    def _record(self, st: _State, x: Any) -> None:
        import torch

        spec = st.spec
        if not isinstance(x, torch.Tensor) or x.ndim <= spec.norm_ndim:
            raise CaptureError(f"module {spec.name!r}: input is not a tensor with token axes")
        dtype_name = str(x.dtype).removeprefix("torch.")
        eps, source = resolve_eps(st.module, spec, dtype_name)
        if st.eps is not None and eps != st.eps:
            raise CaptureError(
                f"module {spec.name!r}: epsilon changed between calls ({st.eps!r} -> {eps!r})"
            )
        st.eps, st.eps_source, st.input_dtype = eps, source, dtype_name
        axes = tuple(range(-spec.norm_ndim, 0))
        st.dim = math.prod(int(n) for n in x.shape[x.ndim - spec.norm_ndim :])
        with torch.no_grad():
            q = device_q(x.detach(), axes, self.q_dtype)  # stays on x's device
        q_bth, layout = self._arrange(q, spec)
        if st.layout is not None and st.layout != layout:
            raise CaptureError(
                f"module {spec.name!r}: input layout changed ({st.layout} -> {layout})"
            )
        st.layout, st.heads = layout, int(q_bth.shape[2])
        st.pending.append(q_bth)  # stored on the host by _flush, once per forward pass

    # ------------------------------------------------------------------ device -> host
    def _flush(self) -> None:
        """Move every pending per-vector q to the host (one copy per device, not one per hook
        call: no host synchronization inside the forward pass) and store it with the current
        call's mask."""
        import torch

        pending = [(st, q) for st in self._states for q in st.pending]
        if not pending:
            return
        for st in self._states:
            st.pending = []
        by_device: dict[Any, list[int]] = {}
        for i, (_, q) in enumerate(pending):
            by_device.setdefault(q.device, []).append(i)
        host: list[Any] = [None] * len(pending)
        for device, idx in by_device.items():
            # q comes in float64 (s**2 * mean in device_q), except on mps, which has no float64
            dt = torch.float32 if device.type == "mps" else torch.float64
            flat = torch.cat([pending[i][1].reshape(-1).to(dtype=dt) for i in idx])
            values = flat.cpu().to(dtype=torch.float64)  # the one device -> host copy
            for i, part in zip(idx, values.split([pending[i][1].numel() for i in idx])):
                host[i] = part.reshape(pending[i][1].shape)
        for (st, _), q_bth in zip(pending, host):
            self._store(st, q_bth)

    def _store(self, st: _State, q_bth: Any) -> None:
        """Keep (or fold) the real tokens' q of one call, q_bth [B, T, H] on the host."""
        import torch

        batch_n, seq_t, heads = (int(n) for n in q_bth.shape)
        mask = (
            self._mask if self._mask is not None else torch.ones((batch_n, seq_t), dtype=torch.bool)
        )
        pos_all = torch.cumsum(mask.to(torch.int64), dim=1) - 1
        b_idx, t_idx = torch.nonzero(mask, as_tuple=True)
        qv = q_bth[b_idx, t_idx].reshape(-1).numpy().astype(np.float64)
        batch = np.repeat((b_idx + self._sequences).numpy().astype(np.int64), heads)
        position = np.repeat(pos_all[b_idx, t_idx].numpy().astype(np.int64), heads)
        head = np.tile(np.arange(heads, dtype=np.int64), int(b_idx.numel()))
        st.calls += 1
        st.count += int(qv.size)
        if self.summary_only:
            self._fold(st, qv, position)
        else:
            st.q.append(qv)
            st.batch.append(batch)
            st.position.append(position)
            st.head.append(head)

    def _fold(self, st: _State, q: np.ndarray, position: np.ndarray) -> None:
        """Fold the q values exactly as the dump stores them (float32), so that a summary equals
        ``ratio`` on the dump; the first/other split is ``ratio``'s own."""
        assert st.eps is not None and self.min_ratio is not None
        if st.summary is None or st.split is None:
            st.summary = LayerAccumulator(st.eps, self.min_ratio, self.top_k)
            st.split = ratio_position_split(st.eps, self.min_ratio, self.top_k)
        stored = q.astype(np.float32)
        start = st.summary.count
        st.summary.update(stored, start)
        st.split.update(stored, start, position == 0)

    def _arrange(self, q: Any, spec: NormModule) -> tuple[Any, str]:
        """Reshape the per-vector q to [B, T, H] and name the layout found."""
        lead = tuple(int(n) for n in q.shape)
        bt = self._bt
        where = f"module {spec.name!r}: input of shape {lead} + normalized axes"
        if bt is None:
            if len(lead) == 2:
                return q.unsqueeze(-1), "tokens [B, T, D]"
            if len(lead) == 3:
                if self.head_layout == "bhtd":
                    return q.transpose(1, 2), "heads [B, H, T, D]"
                return q, "heads [B, T, H, D]"
            raise CaptureError(
                f"{where}: the batch and sequence axes are unknown (call the model with "
                "input_ids or inputs_embeds as keyword arguments)"
            )
        b, t = bt
        if len(lead) == 2 and lead == (b, t):
            return q.unsqueeze(-1), "tokens [B, T, D]"
        if len(lead) == 1 and b * t > 0 and lead[0] % (b * t) == 0:
            h = lead[0] // (b * t)
            if h == 1:
                return q.reshape(b, t, 1), "tokens [B*T, D]"
            return q.reshape(b, t, h), "heads [B*T*H, D]"
        if len(lead) == 3 and lead[0] == b:
            bthd, bhtd = lead[1] == t, lead[2] == t
            if bthd and bhtd:
                bthd = self.head_layout == "bthd"
            if bthd:
                return q, "heads [B, T, H, D]"
            if bhtd:
                return q.transpose(1, 2), "heads [B, H, T, D]"
        raise CaptureError(f"{where} does not match the call's batch {b} and sequence length {t}")

    # ------------------------------------------------------------------ result
    def result(self) -> CaptureResult:
        """Freeze what was captured so far."""
        self._flush()  # calls made outside a hooked forward of the model itself
        records = []
        for st in self._states:
            ws = weight_stats(st.module)
            w = getattr(st.module, "weight", None)
            wdt = str(w.dtype).removeprefix("torch.") if w is not None else None
            full = not self.summary_only
            records.append(
                ModuleRecord(
                    name=st.spec.name,
                    class_name=st.spec.class_name,
                    kind=st.spec.kind,
                    eps=st.eps,
                    eps_source=st.eps_source,
                    dim=st.dim,
                    input_dtype=st.input_dtype,
                    gain=st.spec.gain,
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
                )
            )
        return CaptureResult(
            modules=tuple(records),
            sequences=self._sequences,
            tokens=self._tokens,
            summary_only=self.summary_only,
            q_dtype=self.q_dtype,
            min_ratio=self.min_ratio,
            top_k=self.top_k,
        )


def _summaries(st: _State) -> dict[str, LayerAccumulator] | None:
    """Copies of a module's accumulators (capturing may go on after :meth:`QCapture.result`)."""
    if st.summary is None or st.split is None:
        return None
    from copy import deepcopy

    first, other = st.split.results()
    return {"all": deepcopy(st.summary), "first": first, "other": other}


def device_q(x: Any, axes: tuple[int, ...], q_dtype: str = "float64") -> Any:
    """q = mean(x**2) over ``axes``, computed on ``x``'s own device (only q leaves it).

    float64 (where the device has it: not mps): exact to float64 rounding for every float input.
    float32: with the per-vector scale s = max|x|, q = s**2 * mean((x/s)**2), so that no square
    overflows (|x| > 1.8e19) or underflows (|x| < 1e-19) in float32; s**2 is formed in float64
    (float32 on mps), and s == 0 gives q = 0.
    """
    import torch

    if q_dtype == "float64" and x.device.type != "mps":
        # ||x||_2 accumulated in float64, squared: sum(x**2) to float64 rounding
        n = math.prod(int(x.shape[a]) for a in axes)
        norm = torch.linalg.vector_norm(x, ord=2, dim=axes, dtype=torch.float64)
        return norm.square_().div_(n)
    xf = x.to(dtype=torch.float32)
    s = xf.abs().amax(dim=axes, keepdim=True)
    scaled = xf / torch.where(s > 0, s, torch.ones_like(s))
    ms = (scaled * scaled).mean(dim=axes)
    wide = torch.float32 if x.device.type == "mps" else torch.float64
    s_out = s.reshape(ms.shape).to(dtype=wide)
    return s_out * s_out * ms.to(dtype=wide)


def _cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    if not parts:
        return np.empty(0, dtype)
    return np.concatenate(parts).astype(dtype, copy=False)
