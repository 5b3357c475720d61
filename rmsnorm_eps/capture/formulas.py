"""The formulas a norm module's probe output is matched against (see
:mod:`rmsnorm_eps.capture.classify`): per vector, s = 1/sqrt(q + eps) (or 1/sqrt(max(q, eps))
for a clamp) is solved by least squares from y = num * s + beta and checked on every row.

* ``rms``: num = G * x, q = mean(x**2); with the gain scaling the input: num = a = G * x,
  q = mean(a**2)
* ``layer``: num = G * (x - mean(x)), q = mean((x - mean(x))**2), beta the bias
* ``l2``: num = G * x, q = sum(x**2)
* ``gated-rms``: a = x * f(g) (gate before) or x (gate after, num = G * x * f(g)), q =
  mean(a**2) per group, f one of :data:`GATES`
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["GATES", "Fit", "group_sizes", "match", "solve"]

_FIT_TOL = 1e-3


def _silu(g: np.ndarray) -> np.ndarray:
    return g / (1.0 + np.exp(-g))


def _gelu(g: np.ndarray) -> np.ndarray:
    from math import erf

    return 0.5 * g * (1.0 + np.vectorize(erf)(g / np.sqrt(2.0)))


def _gelu_tanh(g: np.ndarray) -> np.ndarray:
    return 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g**3)))


#: gate functions tried, in order (reduce.GATE_FNS computes the same on the device)
GATES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "silu": _silu,
    "sigmoid": lambda g: 1.0 / (1.0 + np.exp(-g)),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "relu": lambda g: np.maximum(g, 0.0),
    "tanh": np.tanh,
}


def solve(
    y: np.ndarray, num: np.ndarray, q: np.ndarray, beta: np.ndarray, rule: str = "add"
) -> float | None:
    """eps for y = num * s + beta with s = 1/sqrt(q + eps) per vector (``rule`` 'clamp':
    s = 1/sqrt(max(q, eps))) (rows, then groups, then the vector's elements on the last axis),
    or None when the rows do not fit. A clamp must be seen acting (on the row of smallest q).

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
        if rule == "clamp":
            eps = float(inv[k])
            if not eps > 2.0 * float(q[k]):
                return None
            pred = 1.0 / np.sqrt(np.maximum(q, eps))
            return eps if np.all(np.abs(pred - s) <= 1e-4 * pred) else None
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


def group_sizes(width: int) -> list[int]:
    """The group sizes a plain norm of ``width`` elements is matched with: the whole width,
    then every other divisor of it of at least 2, largest first."""
    return [d for d in _divisors(width) if d >= 2] or [width]


@dataclass(frozen=True)
class Fit:
    norm: str
    gain: str
    bias: bool
    group: int | None
    before: bool | None
    eps: float
    rule: str = "add"
    gate_fn: str = "silu"
    input_scale: str | None = None

    def same_rule(self, other: Fit) -> bool:
        """Two tensors normalized alike (q and k of one call; their gains may differ)."""
        close = abs(self.eps - other.eps) <= 1e-4 * max(self.eps, other.eps, 1e-30)
        same = (self.norm, self.rule, self.group, self.input_scale)
        return same == (other.norm, other.rule, other.group, other.input_scale) and close


def match(
    x: np.ndarray,
    g: np.ndarray,
    y: np.ndarray,
    w: np.ndarray | None,
    b: np.ndarray | None,
    gated: bool,
    sizes: list[int],
) -> Fit | None:
    for rule in ("add", "clamp"):
        found = _match_gated(x, g, y, w, rule) if gated else _match_plain(x, y, w, b, sizes, rule)
        if found is not None:
            return found
    return None


def _match_plain(
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray | None,
    b: np.ndarray | None,
    sizes: list[int],
    rule: str,
) -> Fit | None:
    rows, width = x.shape
    zero = np.zeros(1)
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
            if (eps := solve(yg, Gg * xg, q_rms, zero, rule)) is not None:
                return Fit("rms", gain, False, group, None, eps, rule)
            for bg in ([] if b is None else [b.reshape(groups, size)]) + [zero]:  # bias first
                if (eps := solve(yg, Gg * xc, q_var, bg, rule)) is not None:
                    return Fit("layer", gain, bg is not zero, group, None, eps, rule)
            q_sum = np.sum(xg * xg, axis=-1)
            if (eps := solve(yg, Gg * xg, q_sum, zero, rule)) is not None:
                return Fit("l2", gain, False, group, None, eps, rule)
        for scale, P in _gains(w)[:2] if w is not None else []:  # the gain scales the input
            ag = np.broadcast_to(P, (width,)).reshape(groups, size) * xg
            q_in = np.mean(ag * ag, axis=-1)
            if (eps := solve(yg, ag, q_in, zero, rule)) is not None:
                return Fit("rms", "none", False, group, None, eps, rule, input_scale=scale)
    return None


def _match_gated(
    x: np.ndarray, g: np.ndarray, y: np.ndarray, w: np.ndarray | None, rule: str
) -> Fit | None:
    rows, width = x.shape
    zero = np.zeros(1)
    for name, fn in GATES.items():
        sg = fn(g)
        for before in (True, False):
            a = x * sg if before else x
            post = np.ones_like(x) if before else sg
            for size in _divisors(width):
                groups = width // size
                ag = a.reshape(rows, groups, size)
                q = np.mean(ag * ag, axis=-1)
                for gain, G in _gains(w):
                    num = (np.broadcast_to(G, (width,)) * a * post).reshape(rows, groups, size)
                    if (eps := solve(y.reshape(rows, groups, size), num, q, zero, rule)) is None:
                        continue
                    group = size if groups > 1 else None
                    return Fit("gated-rms", gain, False, group, before, eps, rule, name)
    return None
