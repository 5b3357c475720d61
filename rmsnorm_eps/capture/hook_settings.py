"""The settings of one norm module call, read by :class:`~rmsnorm_eps.capture.hooks.QCapture`.

On a module's first call its kind is classified on a probe
(:func:`rmsnorm_eps.capture.classify.classify_module`), over the trailing axes it normalizes
(its normalized shape, or its weight's shape); a 3-D input [B, C, T] of a module that is
unknown over its last axis is tried normalized over its channels. Each call then reads the live
eps (the attribute's current value when the probe matched it; torch's default for
``torch.nn.RMSNorm(eps=None)``) and checks it against earlier calls. In a probe rerun, the
shape of a call may tell a module's layout (:func:`rmsnorm_eps.capture.layout.plan`).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from rmsnorm_eps.capture.classify import NormKind, classify_module
from rmsnorm_eps.capture.errors import CaptureError
from rmsnorm_eps.capture.hook_state import CallContext, NormState
from rmsnorm_eps.capture.layout import LayoutUnknown, plan
from rmsnorm_eps.capture.modules import resolve_torch_default_eps

__all__ = ["call_settings", "probe_layout"]


def probe_layout(st: NormState, x: Any, ctx: CallContext) -> None:
    """In a probe rerun: the layout this call's shape tells, when it tells one."""
    import torch

    if st.layout is not None or st.skipped is not None or st.kind is None:
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
