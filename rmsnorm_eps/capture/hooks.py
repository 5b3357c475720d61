"""Forward hooks that record, per token, the quantity each norm module of a model divides by.

Usage::

    with QCapture(model) as cap:
        model(input_ids=ids, attention_mask=mask)   # any number of forward calls
    result = cap.result()                            # frozen CaptureResult

Every candidate module (:func:`rmsnorm_eps.capture.modules.find_norm_modules`) is classified on
its first call (:mod:`rmsnorm_eps.capture.classify`); then, per call, a pre-hook reduces its
input to the quantity it divides by, on the input's device
(:func:`rmsnorm_eps.capture.reduce.reduce_rows`); only these numbers are copied to the host, once
per forward pass. A pre-hook on the model (and on the encoder and decoder stacks of an
encoder-decoder model) reads B, T and the padding mask of each call
(:mod:`rmsnorm_eps.capture.calls`); one on the input embeddings sees the length the model pads
its ids to. Each module's layout is read from evidence (:mod:`rmsnorm_eps.capture.layout`), if
need be from a probe: a rerun of the forward pass with one sequence fewer (B == T) or one token
shorter (T == H). A module of unknown kind or layout, or that fails in any other way, is listed
with the reason and not analysed; the capture goes on.

A norm whose input is a weight of the model (a parameter or buffer, or a view of one) has no
token axis, whatever its sizes (:func:`rmsnorm_eps.capture.layout.plan`).

Padding tokens (attention mask 0) are dropped. A token's position is its rank among the real
tokens of its sequence (``cumsum(mask) - 1``): position 0 is the first real token. Batch indices
count sequences over all forward calls. A module called k times in one forward pass records
call indices 0..k-1.

The module reads top down: the mutable state the hooks share (:class:`NormState` per hooked
module, :class:`CallContext` per stack call, :class:`PendingQ` per module call still on the
device); each call's settings (:func:`call_settings`: the kind, classified on the module's first
call over the trailing axes it normalizes, then the live eps of every call, checked against
earlier calls; :func:`probe_layout` in a probe rerun); the host copy and the per-token records
(:func:`copy_to_host`, :func:`store`, :func:`module_record`); then :class:`QCapture`, which
holds the call context stack and the pending device results. The pure parts live beside it
(``layout``, ``reduce``, ``classify``, ``calls``, ``records``).

Host copy and records: one device -> host copy per device per forward pass (the pending q of
every module call concatenated on their device first, in float64; float32 on mps, which has no
float64); per call, the real tokens' q (padding, attention mask 0, dropped), with each token's
batch index, its position, its head and its call index; or, with ``summary_only``, folded into
streaming summaries exactly as the dump stores q (float32).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import suppress
from copy import deepcopy
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from rmsnorm_eps.analysis import ratio_position_split
from rmsnorm_eps.capture.calls import bind, padded_length, probe_inputs, read_call, takes_argument
from rmsnorm_eps.capture.classify import NormKind, classify_module
from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.layout import LayoutAmbiguous, LayoutUnknown, orientation, place, plan
from rmsnorm_eps.capture.modules import (
    NormModule,
    find_norm_modules,
    iter_named,
    resolve_torch_default_eps,
    weight_stats,
)
from rmsnorm_eps.capture.records import CaptureResult, ModuleRecord
from rmsnorm_eps.capture.reduce import reduce_rows
from rmsnorm_eps.engine import PositionSplit
from rmsnorm_eps.summary import LayerAccumulator, Quantity

__all__ = [
    "CallContext",
    "NormState",
    "PendingQ",
    "QCapture",
    "call_settings",
    "copy_to_host",
    "module_record",
    "probe_layout",
    "store",
]


# ------------------------------------------------------------------ shared state
@dataclass
class NormState:
    """What one hooked norm module has recorded so far (see the module docstring)."""

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
    call: list[np.ndarray] = field(default_factory=list)
    summary: LayerAccumulator | None = None
    split: PositionSplit[LayerAccumulator] | None = None
    kind: NormKind | None = None
    inner_ndim: int = 1
    max_calls: int = 0
    skipped: str | None = None  # why the module is listed, not analysed (layout unknown, ...)
    weight_input: bool = False  # its input is a weight of the model (or a view of one)


@dataclass(frozen=True)
class CallContext:
    """What the innermost hooked stack (the model, or its encoder or decoder) was called with.

    ``ids``: its input ids (on their device) when it got them; ``evidence`` holds what the
    input embeddings and the model's layers saw in this call (``padded``: the length the model
    padded its input to; ``prefix``: the prompt vectors it put before the ids).
    """

    bt: tuple[int, int] | None
    mask: Any  # bool [B, T] on the host, or None
    ids: Any = None
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PendingQ:
    """One module call's q, still on the device, arranged [B, T, H] (or, while ``probe`` names
    the probe that may tell its layout, as the module computed it: lead axes + groups;
    ``probe`` 'evidence': a q on its own axis, placed when the forward pass has ended)."""

    state: NormState
    q: Any
    mask: Any
    offset: int
    call: int
    probe: str | None = None
    ctx: CallContext | None = None
    strides: tuple[int, ...] = ()


# ------------------------------------------------------------------ settings of a call
def probe_layout(st: NormState, x: Any, ctx: CallContext) -> None:
    """In a probe rerun: the layout this call's shape tells, when it tells one."""
    import torch

    if st.layout is not None or st.skipped is not None or st.kind is None or st.weight_input:
        return
    if not isinstance(x, torch.Tensor) or x.ndim <= st.inner_ndim:
        return
    if st.kind.channels_first:
        x = x.movedim(1, -1)
    k = st.inner_ndim
    width = math.prod(int(n) for n in x.shape[x.ndim - k :])
    groups = width // st.kind.group_size if st.kind.group_size else 1
    lead = tuple(int(n) for n in x.shape[: x.ndim - k])
    strides = tuple(int(v) for v in x.stride()[: x.ndim - k])
    try:
        layout, evidence = plan(
            lead,
            groups,
            strides,
            ctx.bt,
            st.spec,
            None,
            None,
            ctx.evidence,
        )
    except LayoutUnknown:
        return
    if evidence:
        st.layout = layout


def _inner_ndim(st: NormState, x: Any) -> int:
    """Trailing axes of x a probe must keep: the normalized shape, or the weight's shape, or
    the trailing axes whose elements a flat weight covers (xLSTM's multi-head LayerNorm takes
    [B, T, NH, DH] with a weight of NH * DH: its forward needs both axes)."""
    import torch

    shape = getattr(st.module, "normalized_shape", None)
    if isinstance(shape, tuple | list) and len(shape) > 1:
        return len(shape)
    w = getattr(st.module, "weight", None)
    if not isinstance(w, torch.Tensor) or w.ndim >= x.ndim:
        return max(st.spec.norm_ndim, 1)
    if w.ndim > 1 and tuple(x.shape[x.ndim - w.ndim :]) == tuple(w.shape):
        return int(w.ndim)
    if w.ndim == 1 and int(x.shape[-1]) != w.numel():
        for k in range(2, x.ndim - 1):  # at least one lead axis stays
            if math.prod(int(n) for n in x.shape[x.ndim - k :]) == w.numel():
                return k
    return max(st.spec.norm_ndim, 1)


def _classify(st: NormState, x: Any, gate: Any, gate_kw: str | None) -> NormKind:
    st.inner_ndim = _inner_ndim(st, x)
    inner = tuple(int(n) for n in x.shape[x.ndim - st.inner_ndim :])
    gate_pos = gate is not None and gate_kw is None
    classify = partial(classify_module, st.module, gate_kw=gate_kw, gate_pos=gate_pos)
    nk = classify(inner)
    if nk.norm == "unknown" and x.ndim == 3 and st.inner_ndim == 1 and int(x.shape[1]) > 1:
        cf = classify((int(x.shape[1]),), channels_first=True)
        if cf.norm != "unknown":  # a [B, C, T] input normalized over its channels
            return cf
    return nk


def _live_eps(st: NormState, nk: NormKind, dtype_name: str) -> tuple[float, str]:
    """The eps this call uses: the attribute's current value when the probe matched it."""
    spec = st.spec
    if spec.kind == "torch.nn.RMSNorm" and getattr(st.module, "eps", None) is None:
        eps = resolve_torch_default_eps(dtype_name)
        return eps, f"torch.nn.RMSNorm eps=None: torch's default for {dtype_name} input"
    assert nk.eps is not None and nk.eps_source is not None
    if nk.eps_source.startswith("attribute "):
        attr = nk.eps_source.removeprefix("attribute ")
        value = getattr(st.module, attr, None)
        try:
            eps = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise CaptureError(
                f"module {spec.name!r} ({spec.class_name}): {attr} = {value!r} is not a number"
            ) from None
        if not (eps >= 0.0 and math.isfinite(eps)):
            raise CaptureError(f"module {spec.name!r}: {attr} = {eps!r} is not >= 0")
        return eps, nk.eps_source
    return nk.eps, nk.eps_source


def call_settings(st: NormState, x: Any, gate: Any, gate_kw: str | None) -> NormKind | None:
    """The module's kind (classified on its first call) and this call's live eps, checked
    against earlier calls; None for a module of unknown kind."""
    spec = st.spec
    if st.kind is None:
        st.kind = _classify(st, x, gate, gate_kw)
    nk = st.kind
    if nk.norm == "unknown":
        return None
    if nk.norm == "gated-rms" and nk.gate_before and gate is None:
        raise CaptureError(
            f"module {spec.name!r} ({spec.class_name}): a gated norm called without its gate"
        )
    if nk.inputs == 1 and gate is not None and tuple(gate.shape) != tuple(x.shape):
        raise CaptureError(f"module {spec.name!r}: gate shape differs from the input's")
    dtype_name = str(x.dtype).removeprefix("torch.")
    eps, source = _live_eps(st, nk, dtype_name)
    if st.eps is not None and eps != st.eps:
        raise CaptureError(
            f"module {spec.name!r}: epsilon changed between calls ({st.eps!r} -> {eps!r})"
        )
    st.eps, st.eps_source, st.input_dtype = eps, source, dtype_name
    return nk


# ------------------------------------------------------------------ host copy and records
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

    first, other = st.split.results()
    return {"all": deepcopy(st.summary), "first": first, "other": other}


def _cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    if not parts:
        return np.empty(0, dtype)
    return np.concatenate(parts).astype(dtype, copy=False)


# ------------------------------------------------------------------ the capture
class QCapture:
    """Context manager hooking every candidate norm module of ``model`` (see the module
    docstring).

    ``names``: extra module names or globs to hook. ``summary_only``: keep only the streaming
    summaries (bounded memory); it needs the bound, ``min_ratio`` (q/eps), which the summaries
    count against. ``q_dtype``: 'float64' (default) or 'float32', the dtype q is kept in on the
    host. ``top_k``: worst inputs kept per summary. ``head_layout``: 'bthd' or 'bhtd' forces
    the layout of a 4-D input whose layout neither its sizes, an earlier call nor its strides
    determine (None: a probe rerun decides, else the module is listed, not analysed).
    ``probe``: False never reruns the model (a module whose layout is ambiguous and not known
    from an earlier call is then listed, not analysed).
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
        head_layout: str | None = None,
        probe: bool = True,
    ) -> None:
        if q_dtype not in ("float32", "float64"):
            raise CaptureError(f"q_dtype must be float32 or float64, got {q_dtype!r}")
        if head_layout not in (None, "bthd", "bhtd"):
            raise CaptureError(f"head_layout must be bthd or bhtd, got {head_layout!r}")
        if summary_only and (min_ratio is None or not min_ratio > 0 or math.isinf(min_ratio)):
            raise CaptureError("summary_only needs a finite min_ratio > 0 (the q/eps bound)")
        self.model = model
        self.summary_only = summary_only
        self.min_ratio = min_ratio
        self.top_k = top_k
        self.q_dtype = q_dtype
        self.head_layout = head_layout
        self.probe = probe
        specs = find_norm_modules(model, names)
        if not specs:
            raise CaptureError(
                "the model has no norm module (torch.nn.RMSNorm/LayerNorm, a class named *Norm*, "
                "a module with eps/variance_epsilon/epsilon); name the modules to hook explicitly"
            )
        self._states = [NormState(spec, module) for spec, module in iter_named(model, specs)]
        self._handles: list[Any] = []
        self._stack: list[CallContext] = []
        self._pending: list[PendingQ] = []
        self._calls: dict[int, int] = {}
        self._sequences = 0
        self._tokens = 0
        self._root_args: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self._root_named: dict[str, Any] = {}
        self._probing: str | None = None  # the probe rerun in progress ('batch', 'length')
        self._weights = _weight_storages(model)

    # ------------------------------------------------------------------ context
    def _stacks(self) -> list[tuple[str, Any]]:
        """The encoder and decoder of an encoder-decoder model (they see different inputs)."""
        config = getattr(self.model, "config", None)
        if not getattr(config, "is_encoder_decoder", False):
            return []
        found: list[tuple[str, Any]] = []
        for role, getter in (("encoder", "get_encoder"), ("decoder", "get_decoder")):
            fn = getattr(self.model, getter, None)
            try:
                sub = fn() if callable(fn) else None
            except (AttributeError, NotImplementedError):
                sub = None
            if sub is not None and sub is not self.model and all(sub is not f for _, f in found):
                found.append((role, sub))
        return found

    def __enter__(self) -> QCapture:
        self._handles.append(self.model.register_forward_pre_hook(self._root_pre, with_kwargs=True))
        self._handles.append(self.model.register_forward_hook(self._root_post))
        for role, sub in self._stacks():
            self._handles.append(
                sub.register_forward_pre_hook(self._make_stack_pre(role), with_kwargs=True)
            )
            self._handles.append(sub.register_forward_hook(self._stack_post))
        embed = _input_embeddings(self.model)
        if embed is not None:
            self._handles.append(embed.register_forward_pre_hook(self._embed_pre))
        hooked = {id(self.model), *(id(sub) for _, sub in self._stacks())}
        hooked |= {id(st.module) for st in self._states}
        for _, sub in self.model.named_modules():
            if id(sub) not in hooked and takes_argument(sub, "attention_mask"):
                self._handles.append(
                    sub.register_forward_pre_hook(self._mask_pre, with_kwargs=True)
                )
        for st in self._states:
            self._handles.append(
                st.module.register_forward_pre_hook(self._make_hook(st), with_kwargs=True)
            )
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._stack.clear()
        self._flush()

    # ------------------------------------------------------------------ root hooks
    def _read(self, module: Any, args: Any, kwargs: dict[str, Any], role: str) -> CallContext:
        """B, T, the padding mask and the ids of a model (or stack) call (capture.calls)."""
        import torch

        root = self._root_named if role != "model" else None
        call = read_call(module, args, kwargs, role=role, root=root)
        mask = call.mask
        if mask is None and call.bt is not None:
            mask = torch.ones(call.bt, dtype=torch.bool)
        return CallContext(call.bt, mask, call.ids)

    def _root_pre(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._stack = [self._read(module, args, kwargs, "model")]
        if self._probing is not None:  # a layout probe: only the shapes are looked at
            return
        self._root_args = (args, kwargs)
        self._root_named = bind(module, args, kwargs)
        self._calls = {}
        self._pending = []  # left by a forward pass that raised: not recorded

    def _root_post(self, module: Any, args: Any, output: Any) -> None:
        if self._probing is not None:
            self._stack = []
            return
        ctx = self._stack[0] if self._stack else CallContext(None, None)
        self._probe_layouts(ctx)
        self._flush()
        if ctx.mask is not None:
            self._sequences += int(ctx.mask.shape[0])
            self._tokens += int(ctx.mask.sum())
        self._stack = []
        self._root_args, self._root_named = None, {}

    def _make_stack_pre(self, role: str) -> Any:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            ctx = self._read(module, args, kwargs, role)
            if ctx.bt is None and self._stack:
                ctx = self._stack[-1]
            self._stack.append(ctx)

        return hook

    def _stack_post(self, module: Any, args: Any, output: Any) -> None:
        if len(self._stack) > 1:
            self._stack.pop()

    def _embed_pre(self, module: Any, args: tuple[Any, ...]) -> None:
        """Evidence from the input embeddings: the length the model padded its ids to."""
        import torch

        if not self._stack or not args or not isinstance(args[0], torch.Tensor):
            return
        ctx, emb = self._stack[-1], args[0]
        ids = ctx.ids
        if ctx.bt is None or not isinstance(ids, torch.Tensor) or emb.ndim != 2:
            return
        b, t = ctx.bt
        n = int(emb.shape[1])
        same = int(emb.shape[0]) == b and n > t and tuple(ids.shape) == (b, t)
        if not same or emb.device != ids.device:
            return
        head, tail = torch.equal(emb[:, :t], ids), torch.equal(emb[:, n - t :], ids)
        if head and not tail:  # the ids followed by pad ids
            ctx.evidence["padded"] = n
        elif tail and not head:  # prompt ids, then the ids
            ctx.evidence["prefix"] = n - t

    def _mask_pre(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Evidence from a layer's ``attention_mask`` [B, L], L > T: the model padded its input
        to L when the mask's real tokens are exactly the call's, followed by padding."""
        if not self._stack or "padded" in self._stack[-1].evidence:
            return
        ctx = self._stack[-1]
        mask = bind(module, args, kwargs).get("attention_mask")
        if ctx.bt is not None and ctx.mask is not None:
            found = padded_length(mask, ctx.mask)
            if found is not None:
                ctx.evidence["padded"] = found

    def _probe_layouts(self, ctx: CallContext) -> None:
        """Rerun the forward pass with one sequence fewer (or one token shorter) when a module's
        layout was ambiguous in this one and no earlier call told it (capture.layout)."""
        import torch

        for probe in ("batch", "length"):
            waiting = [p for p in self._pending if p.probe == probe and p.state.layout is None]
            if not waiting or self._root_args is None or ctx.bt is None:
                continue
            cut = probe_inputs(*self._root_args, ctx.bt, probe)
            if cut is None:
                continue
            saved = self._stack
            self._probing = probe
            try:  # a probe that fails tells nothing: the modules stay unknown
                with suppress(Exception), torch.no_grad():
                    self.model(*cut[0], **cut[1])
            finally:
                self._probing = None
                self._stack = saved

    # ------------------------------------------------------------------ norm hooks
    def _make_hook(self, st: NormState) -> Any:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            import torch

            x = args[0] if args else kwargs.get("hidden_states")
            if x is None:
                x = next((v for v in kwargs.values() if isinstance(v, torch.Tensor)), None)
            gate, gate_kw = None, None
            if len(args) > 1 and isinstance(args[1], torch.Tensor):
                gate = args[1]
            elif isinstance(kwargs.get("gate"), torch.Tensor):
                gate, gate_kw = kwargs["gate"], "gate"
            if self._probing is not None:
                probe_layout(st, x, self._stack[-1] if self._stack else CallContext(None, None))
                return
            if st.skipped is not None:
                st.calls += 1
                return
            try:
                self._record(st, x, gate, gate_kw)
            except CaptureError as exc:  # this module is listed, not analysed; the rest go on
                self._skip(st, str(exc))

        return hook

    def _skip(self, st: NormState, reason: str) -> None:
        """List the module with ``reason``, never analysed: what it recorded is dropped."""
        st.skipped = reason
        st.q, st.position, st.batch, st.head, st.call = [], [], [], [], []
        st.count, st.summary, st.split = 0, None, None
        self._pending = [p for p in self._pending if p.state is not st]

    def _record(self, st: NormState, x: Any, gate: Any, gate_kw: str | None) -> None:
        """One call of a norm module: its settings, then its q, pending until the forward
        pass ends."""
        import torch

        spec = st.spec
        if not isinstance(x, torch.Tensor) or x.ndim <= spec.norm_ndim:
            raise CaptureError(f"module {spec.name!r}: input is not a tensor with token axes")
        ctx = self._stack[-1] if self._stack else CallContext(None, None)
        st.calls += 1
        nk = call_settings(st, x, gate, gate_kw)
        # q and k normalized in one call: one call index each
        tensors = [(x, None), (gate, None)] if nk is not None and nk.inputs == 2 else [(x, gate)]
        for t, g in tensors:
            call = self._calls.get(id(st), 0)
            self._calls[id(st)] = call + 1
            st.max_calls = max(st.max_calls, call + 1)
            if nk is not None:  # else unknown kind: listed, never analysed
                self._pending.append(self._quantity(st, nk, t, g, ctx, call))
        if not self._stack:  # not inside a model call: nothing to wait for
            self._flush()

    def _quantity(
        self, st: NormState, nk: NormKind, x: Any, gate: Any, ctx: CallContext, call: int
    ) -> PendingQ:
        """What the module divides by, per vector, on x's device, arranged [B, T, H] (or
        waiting for a probe when its layout is ambiguous)."""

        k = st.inner_ndim
        st.weight_input = st.weight_input or _storage(x) in self._weights
        if nk.channels_first:  # [B, C, T]: the normalized axis 1 goes last
            x = x.movedim(1, -1)
            gate = gate.movedim(1, -1) if gate is not None else None
        st.dim = nk.group_size or math.prod(int(n) for n in x.shape[x.ndim - k :])
        scale = None
        if nk.input_scale is not None:
            w = st.module.weight.detach().to(device=x.device)  # 1 + w in w's dtype, as the module
            scale = (1.0 + w if nk.input_scale == "1+w" else w).reshape(x.shape[x.ndim - k :])
        q = reduce_rows(
            x,
            nk.norm,
            ndim=k,
            group_size=nk.group_size,
            gate=gate if nk.gate_before else None,  # gated after: q is x's own
            gate_fn=nk.gate_fn,
            scale=scale,
        )
        strides = tuple(int(v) for v in x.stride()[: x.ndim - k])
        try:
            return self._placed(st, q, strides, ctx, call)
        except LayoutAmbiguous as exc:
            if self.probe and self._stack and self._root_args is not None:
                return PendingQ(st, q, None, self._sequences, call, exc.probe, ctx, strides)
            raise

    def _placed(
        self,
        st: NormState,
        q: Any,
        strides: tuple[int, ...],
        ctx: CallContext,
        call: int,
        final: bool = False,
    ) -> PendingQ:
        """The pending record of a q whose layout the evidence tells (capture.layout). A q on
        its own axis waits (unless ``final``) for the end of the forward pass: a later layer's
        mask may show that axis to be the model's padded length (LED normalizes its padded
        embeddings before any layer runs)."""
        import torch

        lead = tuple(int(n) for n in q.shape[:-1])
        told = {**ctx.evidence, "weight_input": 1} if st.weight_input else ctx.evidence
        layout, evidence = plan(
            lead, int(q.shape[-1]), strides, ctx.bt, st.spec, st.layout, self.head_layout, told
        )
        if "[B, L" in layout and not final and self._stack:
            return PendingQ(st, q, None, self._sequences, call, "evidence", ctx, strides)
        if st.layout is not None and orientation(st.layout) != orientation(layout):
            raise LayoutUnknown(
                f"layout unknown: module {st.spec.name!r}: input layout changed "
                f"({st.layout} -> {layout})"
            )
        if evidence and st.layout is None:
            st.layout = layout
        q_bth = place(q, layout, ctx.bt)
        st.heads = max(st.heads, int(q_bth.shape[2]))
        b_n, l_n = int(q_bth.shape[0]), int(q_bth.shape[1])
        mask = ctx.mask
        if mask is None or "[B, L" in layout:
            mask = torch.ones((b_n, l_n), dtype=torch.bool)
        elif "[B, P+T" in layout:  # the model's prompt vectors before the call's tokens
            head = torch.zeros((b_n, l_n - int(mask.shape[1])), dtype=torch.bool)
            mask = torch.cat([head, mask], dim=1)
        elif l_n > int(mask.shape[1]):  # the model's own padding after the call's tokens
            tail = torch.zeros((b_n, l_n - int(mask.shape[1])), dtype=torch.bool)
            mask = torch.cat([mask, tail], dim=1)
        return PendingQ(st, q_bth, mask, self._sequences, call)

    def _resolve(self, p: PendingQ) -> PendingQ | None:
        """A pending q whose layout waited for a probe or for the forward pass's evidence:
        placed, or its module skipped."""
        assert p.ctx is not None
        try:
            return self._placed(p.state, p.q, p.strides, p.ctx, p.call, final=True)
        except CaptureError as exc:
            self._skip(p.state, str(exc))
            return None

    def _flush(self) -> None:
        """Copy the pending q values to the host (one number per vector) and store them.

        One device -> host copy per device per forward pass (the pending q of every module
        call are concatenated on their device first), not one per hook call: the forward pass
        runs without a host synchronization inside it.
        """
        pending, self._pending = self._pending, []
        placed = [
            self._resolve(p) if p.probe is not None else p
            for p in pending
            if p.state.skipped is None
        ]
        # resolving one call may skip its module, whose calls placed before it are dropped too
        pending = [p for p in placed if p is not None and p.state.skipped is None]
        if not pending:
            return
        for p, q_host in zip(pending, copy_to_host(pending), strict=True):
            store(
                p,
                q_host,
                q_dtype=self.q_dtype,
                summary_only=self.summary_only,
                min_ratio=self.min_ratio,
                top_k=self.top_k,
            )

    # ------------------------------------------------------------------ result
    def result(self) -> CaptureResult:
        """Freeze what was captured so far."""
        self._flush()
        return CaptureResult(
            modules=tuple(module_record(st, self.summary_only) for st in self._states),
            sequences=self._sequences,
            tokens=self._tokens,
            summary_only=self.summary_only,
            q_dtype=self.q_dtype,
            min_ratio=self.min_ratio,
            top_k=self.top_k,
        )


def _storage(t: Any) -> int:
    """Where a tensor's data lies (0: nowhere, a meta tensor)."""
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return 0


def _weight_storages(model: Any) -> frozenset[int]:
    """The storages of the model's parameters and buffers: a norm input that is one (or a
    view of one) holds weights, not token activations."""
    tensors = [*model.parameters(), *model.buffers()]
    return frozenset(ptr for t in tensors if (ptr := _storage(t)) != 0)


def _input_embeddings(model: Any) -> Any:
    """The model's input embedding module (its ids tell the length the model pads to)."""
    fn = getattr(model, "get_input_embeddings", None)
    try:
        emb = fn() if callable(fn) else None
    except (AttributeError, NotImplementedError, TypeError):
        return None
    return emb if hasattr(emb, "register_forward_pre_hook") else None
