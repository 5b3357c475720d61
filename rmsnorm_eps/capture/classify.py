"""What a norm module computes, found by running it once on a probe.

A copy of the module gets seeded random weights (uniform in [0.5, 1.5]) and biases (uniform in
[-0.5, 0.5]), so that the gain conventions w, 1 + w and none give different outputs whatever
the stored weights are; it is run (``forward``, no hooks) in float32 on a probe of n rows whose
scales span 1e-12 to 10, with a non-zero mean (so that RMSNorm and LayerNorm differ), and on a
random gate when the real call passes one. Its output y is matched against each formula, with
G the gain (w, 1 + w or 1), beta the bias (or 0), s = 1/sqrt(q + eps) per vector:

* ``rms``:   y = G * x * s,          q = mean(x**2)
* ``layer``: y = G * (x - mean(x)) * s + beta,   q = v = mean((x - mean(x))**2)
* ``l2``:    y = G * x * s,          q = sum(x**2)
* ``gated-rms``, gate before: y = G * a * s with a = x * silu(g), q = mean(a**2) per group;
  gate after: y = G * x * s * silu(g), q = mean(x**2) per group (every divisor of the width is
  tried as the group size).

For the first formula that fits every row (relative residual below 1e-3), s is solved per vector
by least squares and eps = 1/s**2 - q; the row with the smallest q (1e-24, far below any eps)
fixes eps to float32 precision, and every other row must agree with it. When the module has an
eps attribute (``eps``, ``variance_epsilon``, ``epsilon``) that agrees within 1e-5, that exact
value is the live eps; otherwise the solved value is (rounded to three significant digits when
that is within 2e-6: a hard-coded ``eps=1e-5`` is reported as 1e-05). Nothing fits: ``unknown``,
with the reason.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["EPS_ATTRS", "NormKind", "classify_module", "eps_attribute"]

#: Attributes a norm keeps its epsilon in.
EPS_ATTRS = ("eps", "variance_epsilon", "epsilon")

_SCALES = np.array([1e-12, 1e-8, 1e-5, 1e-3, 1e-2, 0.1, 1.0, 3.0, 10.0], dtype=np.float64)
_FIT_TOL = 1e-3
_EPS_TOL = 1e-5


@dataclass(frozen=True)
class NormKind:
    """A module's computation: ``norm`` is 'rms', 'layer', 'gated-rms', 'l2' or 'unknown'.

    ``gain``: 'w', '1+w' or 'none'; ``bias``: LayerNorm adds beta; ``group_size``: elements per
    q (None: the whole normalized width); ``gate_before``: a gated norm multiplies by silu(gate)
    before normalizing (else after); ``eps`` with ``eps_source``; ``reason`` why unknown.
    """

    norm: str
    gain: str = "none"
    bias: bool = False
    group_size: int | None = None
    gate_before: bool | None = None
    eps: float | None = None
    eps_source: str | None = None
    reason: str | None = None


def eps_attribute(module: Any) -> tuple[str, float] | None:
    """The module's eps attribute and its value, when it holds a finite number >= 0."""
    for attr in EPS_ATTRS:
        value = getattr(module, attr, None)
        if value is None or isinstance(value, bool):
            continue
        try:
            eps = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(eps) and eps >= 0:
            return attr, eps
    return None


def _probe_copy(module: Any) -> Any:
    import torch

    try:
        dup = copy.deepcopy(module)
    except Exception:  # an uncopyable module is probed as it is
        return module, False
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in dup.named_parameters(recurse=False):
            if not p.is_floating_point() or p.device.type == "meta":
                continue
            low, high = (-0.5, 0.5) if "bias" in name else (0.5, 1.5)
            vals = torch.rand(p.shape, generator=gen, dtype=torch.float64) * (high - low) + low
            p.data = vals.to(device=p.device, dtype=torch.float32)
    return dup, True


def _silu(g: np.ndarray) -> np.ndarray:
    return g / (1.0 + np.exp(-g))


def _snap(eps: float) -> float:
    if eps <= 0:
        return 0.0
    for digits in (1, 2, 3):
        nice = float(f"{eps:.{digits - 1}e}")
        for cand in (nice, float(np.float32(nice))):
            if abs(cand - eps) <= 2e-6 * eps:
                return cand
    return eps


def _solve(y: np.ndarray, num: np.ndarray, q: np.ndarray, beta: np.ndarray) -> float | None:
    """eps for y = num * s + beta with s = 1/sqrt(q + eps) per vector (rows, then groups, then
    the vector's elements on the last axis), or None when the rows do not fit.

    Vectors whose ``num * s`` is lost in the rounding of a bias (below 1% of |y|) cannot be
    checked and are left out; at least three must remain.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        target = y - beta
        if not np.all(np.isfinite(target)):
            return None
        scale = np.abs(target).max(axis=-1)
        usable = scale >= 1e-2 * np.abs(y).max(axis=-1)
        if int(usable.sum()) < 3:
            return None
        target, num, q, scale = target[usable], num[usable], q[usable], scale[usable]
        den = np.sum(num * num, axis=-1)
        if np.any(den <= 0):
            return None
        s = np.sum(target * num, axis=-1) / den
        resid = np.abs(target - s[..., None] * num).max(axis=-1)
        if not np.all(resid <= _FIT_TOL * np.maximum(scale, 1e-300)) or np.any(s <= 0):
            return None
        inv = 1.0 / (s * s)
        k = int(np.argmin(q))
        eps = float(inv[k] - q[k])
        if eps < 0:
            if eps < -1e-5 * float(q[k]) - 1e-30:
                return None
            eps = 0.0
        pred = 1.0 / np.sqrt(q + eps)
        if not np.all(np.abs(pred - s) <= 1e-4 * pred):
            return None
        return eps


def _gains(weight: np.ndarray | None) -> list[tuple[str, np.ndarray]]:
    if weight is None:
        return [("none", np.ones(1))]
    return [("w", weight), ("1+w", 1.0 + weight), ("none", np.ones(1))]


def _divisors(n: int) -> list[int]:
    return sorted((d for d in range(1, n + 1) if n % d == 0), reverse=True)


def classify_module(
    module: Any, inner: tuple[int, ...], *, gate_kw: str | None = None, gate_pos: bool = False
) -> NormKind:
    """Run a copy of ``module`` on a probe whose trailing shape is ``inner`` (the real input's
    normalized axes) and name what it computes (see the module docstring).

    ``gate_pos``: the real call passes a gate as the second positional argument; ``gate_kw``:
    as this keyword argument.
    """
    import torch

    dup, _ = _probe_copy(module)
    width = int(np.prod(inner)) if inner else 1
    if width < 2:
        return NormKind("unknown", reason=f"normalized width {width} is too small to probe")
    rng = np.random.default_rng(20240611)
    rows = len(_SCALES)
    z = rng.standard_normal((rows, width)) + 0.75
    x64 = z * _SCALES[:, None]
    g64 = rng.standard_normal((rows, width)) * 2.0
    device = _device_of(dup)
    px = torch.tensor(x64.reshape((1, rows, *inner)), dtype=torch.float32, device=device)
    pg = torch.tensor(g64.reshape((1, rows, *inner)), dtype=torch.float32, device=device)
    gated = gate_pos or gate_kw is not None
    try:
        with torch.no_grad():
            if gate_kw is not None:
                out = dup.forward(px, **{gate_kw: pg})
            elif gate_pos:
                out = dup.forward(px, pg)
            else:
                out = dup.forward(px)
    except Exception as exc:  # any failure makes the kind unknown
        msg = " ".join(str(exc).split())[:120]
        return NormKind("unknown", reason=f"the probe call failed ({type(exc).__name__}: {msg})")
    if isinstance(out, tuple | list):
        out = out[0] if out else None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(px.shape):
        return NormKind("unknown", reason="its output does not have its input's shape")
    # What the probe really held (float32-rounded), in float64.
    x = px.detach().to("cpu", torch.float64).numpy().reshape(rows, width)
    g = pg.detach().to("cpu", torch.float64).numpy().reshape(rows, width)
    y = out.detach().to("cpu", torch.float64).numpy().reshape(rows, width)
    w = _param(dup, "weight", width)
    b = _param(dup, "bias", width)
    sizes = [width] + ([int(inner[-1])] if len(inner) > 1 and inner[-1] > 1 else [])
    found = _match(x, g, y, w, b, gated, sizes)
    if found is None:
        what = "gated " if gated else ""
        return NormKind(
            "unknown",
            reason=f"its output on a probe matches no {what}RMSNorm, LayerNorm or L2 norm formula",
        )
    norm, gain, bias, group, before, solved = found
    attr = eps_attribute(module)
    if attr is not None and abs(attr[1] - solved) <= _EPS_TOL * max(attr[1], 1e-30):
        eps, source = attr[1], f"attribute {attr[0]}"
    elif attr is not None and attr[1] == 0 and solved == 0:
        eps, source = 0.0, f"attribute {attr[0]}"
    else:
        eps, source = _snap(solved), "solved from the module's output on a probe"
    return NormKind(norm, gain, bias, group, before, eps, source)


def _device_of(module: Any) -> Any:
    import torch

    for p in module.parameters():
        if p.device.type != "meta":
            return p.device
    return torch.device("cpu")


def _param(module: Any, name: str, width: int) -> np.ndarray | None:
    import torch

    p = getattr(module, name, None)
    if not isinstance(p, torch.Tensor) or p.numel() != width:
        return None
    return p.detach().to("cpu", torch.float64).numpy().reshape(width)


def _match(
    x: np.ndarray,
    g: np.ndarray,
    y: np.ndarray,
    w: np.ndarray | None,
    b: np.ndarray | None,
    gated: bool,
    sizes: list[int],
) -> tuple[str, str, bool, int | None, bool | None, float] | None:
    rows, width = x.shape
    zero = np.zeros(1)
    if not gated:
        for size in sizes:
            groups = width // size
            group = None if groups == 1 else size
            xg = x.reshape(rows, groups, size)
            yg = y.reshape(rows, groups, size)
            q_rms = np.mean(xg * xg, axis=-1)
            xc = xg - xg.mean(axis=-1, keepdims=True)
            q_var = np.mean(xc * xc, axis=-1)
            for gain, G in _gains(w):
                Gg = np.broadcast_to(G, (width,)).reshape(groups, size)
                if (eps := _solve(yg, Gg * xg, q_rms, zero)) is not None:
                    return "rms", gain, False, group, None, eps
                for beta, has_bias in ((b, True), (None, False)):
                    if has_bias and beta is None:
                        continue
                    bg = zero if beta is None else beta.reshape(groups, size)
                    if (eps := _solve(yg, Gg * xc, q_var, bg)) is not None:
                        return "layer", gain, has_bias, group, None, eps
                q_sum = np.sum(xg * xg, axis=-1)
                if (eps := _solve(yg, Gg * xg, q_sum, zero)) is not None:
                    return "l2", gain, False, group, None, eps
        return None
    sg = _silu(g)
    for before in (True, False):
        a = x * sg if before else x
        post = np.ones_like(x) if before else sg
        for size in _divisors(width):
            groups = width // size
            ag = a.reshape(rows, groups, size)
            q = np.mean(ag * ag, axis=-1)
            for gain, G in _gains(w):
                num = (np.broadcast_to(G, (width,)) * a * post).reshape(rows, groups, size)
                if (eps := _solve(y.reshape(rows, groups, size), num, q, zero)) is not None:
                    return "gated-rms", gain, False, (size if groups > 1 else None), before, eps
    return None
