"""Changing the eps of a norm module for the length of a ``with`` block.

Two ways, both undone on exit:

* :func:`set_eps` (``--eps V``): the module's eps attribute (``eps``, ``variance_epsilon``,
  ``epsilon``: the one the capture's classification matched to what the module computes) is set
  to V, so the module's own forward (its dtype rules included) runs with it. A module whose eps
  is no attribute (a hard-coded constant, solved from its output) gets the replacement forward
  below with ``eps=V`` inside the root, computed in float32.
* :func:`replace_forward` (``--from``/``--to`` SPECs): the module's forward becomes the formula
  the capture classified it as, under the SPEC's eps, placement and precision. With x the input
  upcast to float32 (float64 when the SPEC's dtype is float64), G the gain (w, 1 + w or 1) and
  beta the bias:

  - rms:       y = G * x / den(q),              q = mean(x**2)
  - layer:     y = G * (x - mean x) / den(v) + beta,   v = mean((x - mean x)**2)
  - l2:        y = G * x / den(q),              q = sum(x**2)
  - gated-rms: a = x * silu(g) (gate first) or a = x; y = G * a / den(q) (* silu(g) when the
    gate comes after), q = mean(a**2) per group;

  den(q) is sqrt(q + eps) (inside), sqrt(q) + eps (outside), max(sqrt(q), eps) (clamp) or
  sqrt(q + eps/d) (sum); with a SPEC dtype T (float32, float16, bfloat16) eps is stored in T
  and q + eps (sqrt(q) + eps outside) is formed in T, as :mod:`rmsnorm_eps.compare.factor`
  models it. y is cast back to the input's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from rmsnorm_eps.capture.records import ModuleRecord
from rmsnorm_eps.compare.spec import EpsSpec, parse_spec
from rmsnorm_eps.sensitivity.result import Change

__all__ = ["applied", "eps_attr_of", "replace_forward", "set_eps", "spec_of"]


def eps_attr_of(module: Any, record: ModuleRecord) -> str | None:
    """The attribute holding the module's live eps, as the capture found it (None: none)."""
    source = record.eps_source or ""
    if source.startswith("attribute "):
        return source.removeprefix("attribute ")
    if record.kind == "torch.nn.RMSNorm" and hasattr(module, "eps"):
        return "eps"  # eps=None: torch's default, replaceable by a number
    return None


@contextmanager
def set_eps(module: Any, record: ModuleRecord, eps: float) -> Iterator[None]:
    """The module's eps attribute set to ``eps`` (or, without one, the replacement forward
    with eps inside the root in float32), restored on exit."""
    attr = eps_attr_of(module, record)
    if attr is None:
        spec = EpsSpec(text=f"eps={eps:g}", eps=eps, dtype="float32")
        with replace_forward(module, record, spec):
            yield
        return
    old = getattr(module, attr)
    setattr(module, attr, eps)
    try:
        yield
    finally:
        setattr(module, attr, old)


def _den(q: Any, spec: EpsSpec, dim: int) -> Any:
    """den(q) for the SPEC's placement and precision (q in the compute dtype)."""
    import torch

    cdt = q.dtype
    if spec.dtype in ("float32", "float16", "bfloat16") and cdt != getattr(torch, spec.dtype):
        t = getattr(torch, spec.dtype)
        e = torch.tensor(spec.eps, dtype=torch.float64).to(t)
        qt = q.to(t)
        if spec.placement == "inside":
            return torch.sqrt((qt + e).to(cdt))
        if spec.placement == "outside":
            return (torch.sqrt(qt.to(cdt)).to(t) + e).to(cdt)
        if spec.placement == "clamp":
            return torch.maximum(torch.sqrt(qt.to(cdt)), e.to(cdt))
        d = spec.dim or dim
        return torch.sqrt((((qt * d) + e) / d).to(cdt))
    eps = spec.eps
    if spec.placement == "inside":
        return torch.sqrt(q + eps)
    if spec.placement == "outside":
        return torch.sqrt(q) + eps
    if spec.placement == "clamp":
        return torch.clamp(torch.sqrt(q), min=eps)
    d = spec.dim or dim
    return torch.sqrt(q + eps / d)


def _normalized_axes(module: Any) -> int:
    """How many trailing axes one q averages over: a ``torch.nn.LayerNorm``/``RMSNorm``'s
    normalized_shape, else the last axis (a gated norm's groups are cut from it)."""
    shape = getattr(module, "normalized_shape", None)
    if isinstance(shape, tuple | list) and len(shape) > 1:
        return len(shape)
    return 1


def _formula(module: Any, record: ModuleRecord, spec: EpsSpec) -> Any:
    """The replacement forward (see the module docstring)."""
    import torch

    norm = record.norm or "rms"
    gain = record.gain

    def forward(x: Any, *args: Any, **kwargs: Any) -> Any:
        gate = args[0] if args and isinstance(args[0], torch.Tensor) else kwargs.get("gate")
        cdt = torch.float64 if spec.dtype == "float64" else torch.float32
        h = x.to(cdt)
        axes = _normalized_axes(module)
        lead = tuple(h.shape[: h.ndim - axes])
        width = math.prod(int(n) for n in h.shape[h.ndim - axes :])
        silu = None
        if norm == "gated-rms" and isinstance(gate, torch.Tensor):
            silu = torch.nn.functional.silu(gate.to(cdt)).reshape(*lead, width)
        a = h.reshape(*lead, width)
        if silu is not None and record.gate_before:
            a = a * silu
        size = record.group_size or width
        g = a.reshape(*lead, width // size, size)
        if norm == "layer":
            g = g - g.mean(dim=-1, keepdim=True)
            q = (g * g).mean(dim=-1, keepdim=True)
        elif norm == "l2":
            q = (g * g).sum(dim=-1, keepdim=True)
        else:
            q = (g * g).mean(dim=-1, keepdim=True)
        y = (g / _den(q, spec, size)).reshape(*lead, width)
        if silu is not None and not record.gate_before:
            y = y * silu
        weight = getattr(module, "weight", None)
        if gain != "none" and isinstance(weight, torch.Tensor):
            w = weight.to(cdt).reshape(width)
            y = y * (1.0 + w if gain == "1+w" else w)
        bias = getattr(module, "bias", None)
        if record.bias and isinstance(bias, torch.Tensor):
            y = y + bias.to(cdt).reshape(width)
        return y.reshape(x.shape).to(x.dtype)

    return forward


def _unlike_the_formula(record: ModuleRecord) -> str | None:
    """Why the module computes something the replacement formula would not, or None."""
    if record.gate_fn not in (None, "silu"):
        return f"its gate is {record.gate_fn}, not silu"
    if record.input_scale is not None:
        return f"it scales its input by {record.input_scale} before normalizing"
    if record.eps_rule != "add":
        return f"its eps rule is {record.eps_rule}, not an added eps"
    if record.inputs != 1:
        return f"it normalizes {record.inputs} inputs in one call"
    if record.channels_first:
        return "it normalizes the channels of [B, C, T]"
    return None


@contextmanager
def replace_forward(module: Any, record: ModuleRecord, spec: EpsSpec) -> Iterator[None]:
    """The module's forward replaced by the SPEC's formula, restored on exit."""
    from rmsnorm_eps.capture.errors import CaptureError

    if record.norm not in ("rms", "layer", "gated-rms", "l2"):
        raise CaptureError(
            f"module {record.name!r}: a {record.norm or 'never run'} norm has no formula to "
            "replace its forward with"
        )
    unlike = _unlike_the_formula(record)
    if unlike is not None:
        raise CaptureError(
            f"module {record.name!r}: {unlike}; the replacement formula (a SPEC with placement "
            "or precision) covers x*silu(gate), an added eps and one [..., d] input only: "
            "give --eps to change its eps attribute instead"
        )
    had = "forward" in module.__dict__
    old = module.__dict__.get("forward")
    module.forward = _formula(module, record, spec)
    try:
        yield
    finally:
        if had:
            module.forward = old
        else:
            del module.forward


def spec_of(text: str, option: str) -> EpsSpec:
    """A ``--from``/``--to`` SPEC (``framework=`` and ``config`` are refused: a model's
    norms are changed by value)."""
    from rmsnorm_eps.errors import InvalidParameterError

    spec = parse_spec(text, option)
    if spec.framework is not None:
        raise InvalidParameterError(f"{option} {text!r}: give eps=, not framework=")
    return spec


@contextmanager
def applied(
    change: Change,
    side: str,
    targets: Sequence[tuple[Any, ModuleRecord]],
) -> Iterator[None]:
    """``change``'s ``side`` ('base' or 'to') in every (module, record) of ``targets``.

    The base side of an ``--eps`` change is the model as it is: nothing is done."""
    with ExitStack() as stack:
        if change.attribute:
            if side == "to":
                eps = spec_of(change.to, "--eps").eps
                for module, record in targets:
                    stack.enter_context(set_eps(module, record, eps))
        else:
            text = change.to if side == "to" else change.base
            assert text is not None
            spec = spec_of(text, "--to" if side == "to" else "--from")
            for module, record in targets:
                stack.enter_context(replace_forward(module, record, spec))
        yield
