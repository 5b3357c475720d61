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

A norm whose input is a weight of the model (a parameter or buffer, or a view of one: the
relative-position embeddings DeBERTa-v2 normalizes) has no token axis, whatever its row count:
it is listed with that reason, not analysed.

Padding tokens (attention mask 0) are dropped. A token's position is its rank among the real
tokens of its sequence (``cumsum(mask) - 1``): position 0 is the first real token. Batch indices
count sequences over all forward calls. A module called k times in one forward pass records
call indices 0..k-1.

The hooks share one state (the call context stack, the pending device results) kept in
:class:`QCapture`; the per-module state lives in ``hook_state``, each call's kind and eps in
``hook_settings``, the host copy, the per-token records and the result assembly in
``hook_records``, and the pure parts beside them (``layout``, ``reduce``, ``classify``,
``records``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from rmsnorm_eps.capture.calls import bind, padded_length, probe_inputs, read_call, takes_argument
from rmsnorm_eps.capture.classify import NormKind
from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.hook_records import copy_to_host, module_record, store
from rmsnorm_eps.capture.hook_settings import call_settings, probe_layout
from rmsnorm_eps.capture.hook_state import CallContext, NormState, PendingQ
from rmsnorm_eps.capture.layout import LayoutAmbiguous, LayoutUnknown, orientation, place, plan
from rmsnorm_eps.capture.modules import find_norm_modules, iter_named
from rmsnorm_eps.capture.records import CaptureResult
from rmsnorm_eps.capture.reduce import reduce_rows

__all__ = ["QCapture"]


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
        if _storage(x) in self._weights:
            raise LayoutUnknown(
                f"layout unknown: module {st.spec.name!r} ({st.spec.class_name}): its input is "
                "a weight of the model (a parameter or buffer), whose rows are no tokens"
            )
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
        layout, evidence = plan(
            lead,
            int(q.shape[-1]),
            strides,
            ctx.bt,
            st.spec,
            st.layout,
            self.head_layout,
            ctx.evidence,
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
