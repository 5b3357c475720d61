"""The quantity a norm divides by, reduced per vector on the activation's own device.

For a vector a of n elements (the normalized axes, or one group of them):

* ``rms`` / ``gated-rms``: q = mean(a**2) = (1/n) * sum(a_i**2)
* ``layer``: v = mean((a - mean(a))**2), the biased variance (two passes: the mean first, then
  the squares of the differences, so no cancellation)
* ``l2``: q = sum(a**2)

where a = x, except for a gated norm that gates before normalizing: a = x * f(g) (f: the gate
function, silu unless told), and for a norm that scales its input by its gain before
normalizing: a = G * x (``scale`` = G), multiplied in float32 (float64 for a float64 x) and
rounded to x's dtype, as the module holds it before it normalizes (MuseSpark's
``InputScaledRMSNorm``: ``(x.float() * (1 + w).float()).type_as(x)``).

On the CPU the reduction runs in float64. On an accelerator it runs in float32 on rows scaled by
m = max|a| (q = mean((a/m)**2) * m**2), so neither the squares overflow (|x| up to 1e19) nor
underflow (|x| down to 1e-30); only the result, one number per vector, is widened to float64
(where the device has float64; MPS has not and keeps float32). Only these B*T*H numbers leave
the device.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["GATE_FNS", "NORM_KINDS", "reduce_rows"]

#: the gate functions a gated norm may apply (classify.GATES fits the same)
GATE_FNS = ("silu", "sigmoid", "gelu", "gelu_tanh", "relu", "tanh")

#: The norm kinds whose quantity :func:`reduce_rows` computes.
NORM_KINDS = ("rms", "layer", "gated-rms", "l2")


def _compute_dtype(device: Any, compute: str | None) -> Any:
    import torch

    if compute is not None:
        if compute not in ("float32", "float64"):
            raise ValueError(f"compute must be float32 or float64, got {compute!r}")
        return getattr(torch, compute)
    return torch.float64 if device.type == "cpu" else torch.float32


def reduce_rows(
    x: Any,
    kind: str,
    *,
    ndim: int = 1,
    group_size: int | None = None,
    gate: Any = None,
    compute: str | None = None,
    gate_fn: str = "silu",
    scale: Any = None,
) -> Any:
    """q per vector of ``x`` (see the module docstring), on ``x``'s device.

    ``ndim``: trailing axes normalized together. ``group_size``: the normalized elements are
    split into consecutive groups of this size, one q each (a gated norm's groups). The result
    has shape ``x.shape[:-ndim] + (groups,)`` (groups = 1 when ungrouped), dtype float64
    (float32 on a device without float64). ``compute`` forces the reduction's dtype ('float32':
    the scaled accelerator path; default: float64 on the CPU, float32 elsewhere). ``gate_fn``:
    one of :data:`GATE_FNS`; ``scale``: a tensor of the normalized shape multiplying x first.
    ``gate``: the gate tensor of a gated norm that gates before normalizing (a = x * f(g)); a
    norm that gates after normalizing divides by the q of x itself: pass no gate.
    """
    import torch

    if kind not in NORM_KINDS:
        raise ValueError(f"unknown norm kind {kind!r}")
    if gate_fn not in GATE_FNS:
        raise ValueError(f"unknown gate function {gate_fn!r}")
    lead = tuple(int(n) for n in x.shape[: x.ndim - ndim])
    width = math.prod(int(n) for n in x.shape[x.ndim - ndim :])
    size = group_size if group_size else width
    if size <= 0 or width % size:
        raise ValueError(f"group size {size} does not divide the normalized width {width}")
    dtype = _compute_dtype(x.device, compute)
    with torch.no_grad():
        a = x.detach().to(dtype)
        if scale is not None:
            wide = torch.promote_types(x.dtype, torch.float32)
            g = scale.detach().to(device=x.device, dtype=wide)
            a = (x.detach().to(wide) * g).to(x.dtype).to(dtype)
        a = a.reshape(*lead, width // size, size)
        if kind == "gated-rms" and gate is not None:
            g = gate.detach().reshape(*lead, width // size, size).to(dtype)
            a = a * _gate(g, gate_fn)
        if dtype == torch.float64:
            return _reduce(a, kind)
        m = a.abs().amax(dim=-1, keepdim=True)
        ok = torch.isfinite(m) & (m > 0)
        m = torch.where(ok, m, torch.ones_like(m))
        q = _reduce(a / m, kind)
        wide = torch.float32 if x.device.type == "mps" else torch.float64
        return q.to(wide) * m.squeeze(-1).to(wide).square()


def _gate(g: Any, name: str) -> Any:
    import torch

    f = torch.nn.functional
    if name == "silu":
        return f.silu(g)
    if name == "sigmoid":
        return torch.sigmoid(g)
    if name in ("gelu", "gelu_tanh"):
        return f.gelu(g, approximate="tanh" if name == "gelu_tanh" else "none")
    if name == "relu":
        return f.relu(g)
    return torch.tanh(g)


def _reduce(a: Any, kind: str) -> Any:
    if kind == "layer":
        mu = a.mean(dim=-1, keepdim=True)
        return (a - mu).square().mean(dim=-1)
    if kind == "l2":
        return a.square().sum(dim=-1)
    return a.square().mean(dim=-1)
