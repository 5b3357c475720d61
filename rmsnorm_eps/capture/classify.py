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
  gate after: y = G * x * s * silu(g), q = mean(x**2) per group.

Each formula may hold per group of consecutive elements rather than over the whole width
(Qwen4-Exp's hyper-connection ``hc_norm``: an RMSNorm over groups of ``hidden_size``); the
whole width is tried first, then every other divisor of it, largest first (at least 2
elements per group for the plain norms).

Besides: the gate may go through silu, sigmoid, gelu (erf or tanh), relu or tanh (``gate_fn``);
an RMSNorm may scale its input by the gain before normalizing, y = a * s with a = G * x and
q = mean(a**2) (``input_scale``); each formula may clamp instead of adding,
s = 1/sqrt(max(q, eps)) (``eps_rule`` 'clamp'); a module called with two tensors (q and k) that
returns two is matched on each (``inputs`` 2); a ``[B, C, T]`` input whose normalized axis is
the channel axis 1 is probed as such (``channels_first``).

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

from rmsnorm_eps.capture.formulas import Fit, group_sizes, match

__all__ = ["EPS_ATTRS", "NormKind", "classify_module", "eps_attribute"]

#: Attributes a norm keeps its epsilon in.
EPS_ATTRS = ("eps", "variance_epsilon", "epsilon")

_SCALES = np.array(
    [1e-12, 1e-10, 1e-8, 1e-6, 1e-5, 1e-3, 1e-2, 0.1, 1.0, 3.0, 10.0], dtype=np.float64
)
_EPS_TOL = 1e-5


@dataclass(frozen=True)
class NormKind:
    """A module's computation: ``norm`` is 'rms', 'layer', 'gated-rms', 'l2' or 'unknown'.

    ``gain``: 'w', '1+w' or 'none'; ``bias``: LayerNorm adds beta; ``group_size``: elements per
    q (None: the whole normalized width); ``gate_before``: a gated norm multiplies by silu(gate)
    before normalizing (else after); ``eps`` with ``eps_source``; ``reason`` why unknown.
    ``gate_fn``: the gate's function ('silu', 'sigmoid', 'gelu', 'gelu_tanh', 'relu', 'tanh');
    ``input_scale``: 'w' or '1+w' when the gain scales the input before it is normalized (q
    is then mean((G*x)**2)); ``eps_rule``: 'add' (sqrt(q + eps)) or 'clamp' (sqrt(max(q, eps)));
    ``inputs``: tensors normalized per call (2: q and k in one call); ``channels_first``: the
    normalized axis is axis 1 of a [B, C, T] input.
    """

    norm: str
    gain: str = "none"
    bias: bool = False
    group_size: int | None = None
    gate_before: bool | None = None
    eps: float | None = None
    eps_source: str | None = None
    reason: str | None = None
    gate_fn: str = "silu"
    input_scale: str | None = None
    eps_rule: str = "add"
    inputs: int = 1
    channels_first: bool = False


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
    """A copy of ``module`` with seeded random weights and biases (see the module docstring)."""
    import torch

    try:
        dup = copy.deepcopy(module)
    except Exception:  # an uncopyable module is probed as it is
        return module
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in dup.named_parameters(recurse=False):
            if not p.is_floating_point() or p.device.type == "meta":
                continue
            low, high = (-0.5, 0.5) if "bias" in name else (0.5, 1.5)
            vals = torch.rand(p.shape, generator=gen, dtype=torch.float64) * (high - low) + low
            p.data = vals.to(device=p.device, dtype=torch.float32)
    return dup


def _snap(eps: float) -> float:
    if eps <= 0:
        return 0.0
    for digits in (1, 2, 3):
        nice = float(f"{eps:.{digits - 1}e}")
        for cand in (nice, float(np.float32(nice))):
            if abs(cand - eps) <= 2e-6 * eps:
                return cand
    return eps


def classify_module(
    module: Any,
    inner: tuple[int, ...],
    *,
    gate_kw: str | None = None,
    gate_pos: bool = False,
    channels_first: bool = False,
) -> NormKind:
    """Run a copy of ``module`` on a probe whose trailing shape is ``inner`` (the real input's
    normalized axes) and name what it computes (see the module docstring).

    ``gate_pos``: the real call passes a second tensor positionally (a gate, or k beside q);
    ``gate_kw``: a gate as this keyword argument; ``channels_first``: probe a [1, C, n] input
    normalized over axis 1 (``inner`` is (C,)).
    """
    dup = _probe_copy(module)
    width = int(np.prod(inner)) if inner else 1
    if width < 2:
        return NormKind("unknown", reason=f"normalized width {width} is too small to probe")
    rng = np.random.default_rng(20240611)
    rows = len(_SCALES)
    x64 = (rng.standard_normal((rows, width)) + 0.75) * _SCALES[:, None]
    g64 = rng.standard_normal((rows, width)) * 2.0
    probe = _Probe(dup, inner, rows, channels_first)
    px, pg = probe.tensor(x64), probe.tensor(g64)
    gated = gate_pos or gate_kw is not None
    try:
        outs = probe.run(px, pg if gated else None, gate_kw)
    except Exception as exc:  # any failure makes the kind unknown
        msg = " ".join(str(exc).split())[:120]
        return NormKind("unknown", reason=f"the probe call failed ({type(exc).__name__}: {msg})")
    if not outs or not _same_rows(outs[0], px):
        return NormKind("unknown", reason="its output does not have its input's shape")
    x, g, y = probe.host(px), probe.host(pg), probe.host(outs[0])
    w = _param(dup, "weight", width)
    b = _param(dup, "bias", width)
    sizes = group_sizes(width)
    found, inputs = None, 1
    if gate_pos and len(outs) > 1 and _same_rows(outs[1], px):
        # two tensors in, two out: q and k? probed again with a second input of the same scales
        pk = probe.tensor((rng.standard_normal((rows, width)) + 0.75) * _SCALES[:, None])
        found = _pair_fit(probe, px, pk, w, b, sizes)
        inputs = 2 if found is not None else 1
    if found is None:
        found = match(x, g, y, w, b, gated, sizes)
    if found is None:
        what = "gated " if gated else ""
        return NormKind(
            "unknown",
            reason=f"its output on a probe matches no {what}RMSNorm, LayerNorm or L2 norm formula",
        )
    eps, source = _eps_of(module, found)
    return NormKind(
        found.norm,
        found.gain,
        found.bias,
        found.group,
        found.before,
        eps,
        source,
        gate_fn=found.gate_fn,
        input_scale=found.input_scale,
        eps_rule=found.rule,
        inputs=inputs,
        channels_first=channels_first,
    )


def _same_rows(out: Any, px: Any) -> bool:
    """The output holds the input's rows, each of the same number of elements (its own shape,
    or the normalized axes flattened: xLSTM's multi-head LayerNorm returns [B, T, NH * DH])."""
    shape = tuple(getattr(out, "shape", ()))
    if shape == tuple(px.shape):
        return True
    return shape[:2] == tuple(px.shape[:2]) and int(out.numel()) == int(px.numel())


class _Probe:
    """Runs the probe copy on [1, rows, *inner] tensors (``channels_first``: fed as
    [1, C, rows] and read back) and reads outputs back as (rows, width) float64 arrays."""

    def __init__(self, dup: Any, inner: tuple[int, ...], rows: int, channels_first: bool) -> None:
        self.dup, self.inner, self.rows, self.cf = dup, inner, rows, channels_first
        self.device = _device_of(dup)

    def tensor(self, values: np.ndarray) -> Any:
        import torch

        shape = (1, self.rows, *self.inner)
        return torch.tensor(values.reshape(shape), dtype=torch.float32, device=self.device)

    def _feed(self, t: Any) -> Any:
        return t.transpose(1, 2).contiguous() if self.cf else t

    def run(self, px: Any, second: Any = None, keyword: str | None = None) -> list[Any]:
        """The module's outputs (a tuple's tensors), in the probe's own layout."""
        import torch

        with torch.no_grad():
            if second is None:
                out = self.dup.forward(self._feed(px))
            elif keyword is not None:
                out = self.dup.forward(self._feed(px), **{keyword: self._feed(second)})
            else:
                out = self.dup.forward(self._feed(px), self._feed(second))
        outs = list(out) if isinstance(out, tuple | list) else [out]
        return [
            self._feed(o) if isinstance(o, torch.Tensor) and o.ndim == px.ndim else o for o in outs
        ]

    def host(self, t: Any) -> np.ndarray:
        """What the probe really held (float32-rounded), in float64, as (rows, width)."""
        import torch

        return np.asarray(t.detach().to("cpu", torch.float64).numpy().reshape(self.rows, -1))


def _pair_fit(
    probe: _Probe, px: Any, pk: Any, w: np.ndarray | None, b: np.ndarray | None, sizes: list[int]
) -> Fit | None:
    """q and k normalized alike in one call (each with a gain of its own), or None."""
    try:
        y1, y2 = (probe.host(o) for o in probe.run(px, pk)[:2])
    except Exception:  # not a pair after all: matched as a gated norm
        return None
    x, k = probe.host(px), probe.host(pk)
    width = x.shape[1]
    gains = ([] if w is None else [w]) + _width_params(probe.dup, width)

    def fit(a: np.ndarray, other: np.ndarray, y: np.ndarray) -> Fit | None:
        return next(
            (f for c in gains or [None] if (f := match(a, other, y, c, b, False, sizes))), None
        )

    first, second = fit(x, k, y1), fit(k, x, y2)
    if first is not None and second is not None and first.same_rule(second):
        return first
    return None


def _eps_of(module: Any, found: Fit) -> tuple[float, str]:
    """The live eps: the module's attribute when it agrees with the solved value."""
    solved = found.eps
    attr = eps_attribute(module)
    if attr is not None and abs(attr[1] - solved) <= _EPS_TOL * max(attr[1], 1e-30):
        eps, source = attr[1], f"attribute {attr[0]}"
    elif attr is not None and attr[1] == 0 and solved == 0:
        eps, source = 0.0, f"attribute {attr[0]}"
    else:
        eps, source = _snap(solved), "solved from the module's output on a probe"
    if found.rule == "clamp":
        source += " (a clamp: it divides by sqrt(max(q, eps)))"
    return eps, source


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


def _width_params(module: Any, width: int) -> list[np.ndarray | None]:
    """Every floating parameter of ``width`` elements other than ``weight`` and ``bias`` (a q/k
    norm's separate gains: ``q_weight``, ``k_weight``)."""
    return [
        _param(module, name, width)
        for name, p in module.named_parameters(recurse=False)
        if name not in ("weight", "bias") and p.is_floating_point() and p.numel() == width
    ]
