"""Deterministic probe inputs for a parity check, with float64 reference outputs.

Ordinary random inputs never reach the region where eps matters, so a probe set covers it on
purpose. Rows are grouped in named categories, each defined by ``r = q/eps`` (``q = mean(x**2)``)
for the configured eps or by its shape:

* ``zero``: the zero vector (output must be exactly zero).
* ``tiny``: ``r`` = 1e-4, 1e-3, 1e-2, plus rows with ``sqrt(q)`` = 0.3, 1, 3 times eps (where an
  eps compared with the RMS, outside the square root or in a clamp, acts) when those are tiny.
* ``near-eps``: ``r`` = 0.1, 0.3, 1, 3, 10.
* ``at-bound``: ``r = min_ratio(delta) = (1-delta)**2 / (delta (2-delta))`` (49.25 for 1%).
* ``ordinary``: standard normal vectors (q near 1).
* ``constant``: ``c * ones`` for c = 1, -0.375, 7.5.
* ``mixed-scale``: a few huge components among many tiny ones.
* ``large``: x**2 near or beyond the dtype's overflow (see :func:`_large_scales`): float16
  squares overflow float16 but not float32; other dtypes come within a factor 4 d of overflow.
* ``gain-extreme``: vectors concentrated on the channels with the largest, smallest and
  negative gain (and the first and last channel: broadcasting errors show there).

Inputs and weights are rounded to the probe dtype first, so the implementation sees exactly the
values the float64 reference :func:`rmsnorm_eps.numerics.rmsnorm_reference` used.

**LayerNorm** (``norm="layer"``): y = g (x - mu) / sqrt(v + eps) + b with v = mean((x - mu)**2),
reference :func:`rmsnorm_eps.numerics.layernorm_reference` with the bias b. The same categories
are defined by ``r = v/eps``: their rows are centred vectors scaled to the target v plus an
offset of 3 standard deviations (an implementation must remove the mean, not just divide by the
RMS); ``zero`` and ``constant`` rows have v = 0 exactly, so the output is b exactly whatever eps;
``mixed-scale`` gains a row 30 + N(0, 1): a one-pass ``mean(x**2) - mean(x)**2`` in float32
loses about 30**2 u = 5e-5 of its variance (fails the float32 tolerances), a two-pass or
Welford float32 LayerNorm about 30 u = 2e-6 (passes). Needs d >= 2 (a 1-vector has v = 0).

This module makes probe sets; the data type is :mod:`rmsnorm_eps.parity.probe_set` and the file
format :mod:`rmsnorm_eps.parity.probe_file`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypedDict

import numpy as np

from rmsnorm_eps import numerics
from rmsnorm_eps.dtypes import get_format, round_to
from rmsnorm_eps.errors import InvalidParameterError
from rmsnorm_eps.kernels import mean_square_rows, variance_rows
from rmsnorm_eps.parity.probe_set import (
    CATEGORIES,
    GAIN_CONVENTIONS,
    NORMS,
    SMALL_CATEGORIES,
    ProbeSet,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ProbeFields", "ProbeOptions", "ProbeSummary", "make_probes"]


def _with_q(v: np.ndarray, q: float) -> np.ndarray:
    """``v`` rescaled so that mean(v**2) = q (before rounding to the dtype)."""
    return v * math.sqrt(q / float(np.mean(v * v)))


def _random_gain(rng: np.random.Generator, d: int) -> np.ndarray:
    """Effective gain 1 + 0.1 N(0, 1) with extreme channels: 30, 0.01 and -2 (as d allows)."""
    g = 1.0 + 0.1 * rng.standard_normal(d)
    picks = rng.permutation(d)[:3]
    for channel, value in zip(picks, (30.0, 0.01, -2.0), strict=False):
        g[channel] = value
    return g


def _resolve_gain(
    gain: str | np.ndarray, d: int, dtype: str, convention: str, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, str]:
    """Return (weight, effective gain, description); weight is rounded to the dtype."""
    offset = 1.0 if convention == "1+w" else 0.0
    if isinstance(gain, str) and gain == "ones":
        g_eff, kind = np.ones(d), "ones"
    elif isinstance(gain, str) and gain == "random":
        g_eff, kind = _random_gain(rng, d), "random"
    elif isinstance(gain, str):
        raise InvalidParameterError(f"gain must be 'ones', 'random' or an array, got {gain!r}")
    else:
        w = np.asarray(gain, dtype=np.float64)
        if w.shape != (d,):
            raise InvalidParameterError(f"gain must have shape ({d},), got {w.shape}")
        if not bool(np.all(np.isfinite(w))):
            raise InvalidParameterError("gain holds NaN or inf")
        g_eff, kind = w + offset, "given"
    weight = round_to(g_eff - offset, dtype)
    if not bool(np.all(np.isfinite(weight))):
        raise InvalidParameterError(f"gain does not fit in {dtype}")
    return weight, weight + offset, kind


def _large_scales(dtype: str, d: int) -> tuple[float, ...]:
    """Magnitudes of the ``large`` rows (each component is this times U(0.5, 1)).

    float16: 0.5, 2 and 8 times sqrt(65504) (128, 512, 2048): x**2 overflows float16 but not
    float32, where common implementations (torch, Hugging Face, llama.cpp) reduce. Other
    dtypes: 1/16, 1/4 and 1/2 of sqrt(max / d), so x**2 nears the dtype's overflow while the
    sum of squares still fits in it.
    """
    info = get_format(dtype)
    if dtype == "float16":
        root = math.sqrt(info.max)
        return (0.5 * root, 2.0 * root, 8.0 * root)
    top = math.sqrt(info.max / d)
    return (top / 16.0, top / 4.0, top / 2.0)


def _category_rows(
    rng: np.random.Generator, d: int, eps: float, dtype: str, bound: float, gain: np.ndarray
) -> list[tuple[str, np.ndarray]]:
    info = get_format(dtype)
    rows: list[tuple[str, np.ndarray]] = [("zero", np.zeros(d))]
    tiny_q = [r * eps for r in (1e-4, 1e-3, 1e-2)]
    tiny_q += [k * k * eps * eps for k in (0.3, 1.0, 3.0) if k * k * eps < 0.05]
    rows += [("tiny", _with_q(rng.standard_normal(d), q)) for q in sorted(tiny_q)]
    rows += [
        ("near-eps", _with_q(rng.standard_normal(d), r * eps)) for r in (0.1, 0.3, 1.0, 3.0, 10.0)
    ]
    rows += [("at-bound", _with_q(rng.standard_normal(d), bound * eps)) for _ in range(2)]
    rows += [("ordinary", rng.standard_normal(d)) for _ in range(8)]
    rows += [("constant", np.full(d, c)) for c in (1.0, -0.375, 7.5)]
    huge = min(100.0, math.sqrt(info.max / d) / 4.0)
    for tiny_scale in (1e-3, 1e-4):
        v = tiny_scale * rng.standard_normal(d)
        k = max(1, d // 32)
        picks = rng.permutation(d)[:k]
        v[picks] = huge * np.where(rng.random(k) < 0.5, -1.0, 1.0)
        rows.append(("mixed-scale", v))
    for scale in _large_scales(dtype, d):
        mags = scale * rng.uniform(0.5, 1.0, d)
        signs = np.where(rng.random(d) < 0.5, -1.0, 1.0)
        rows.append(("large", np.minimum(mags, info.max / 2.0) * signs))
    channels = [int(np.argmax(gain)), int(np.argmin(np.abs(gain))), int(np.argmin(gain)), 0, d - 1]
    for channel in dict.fromkeys(channels):
        v = 0.01 * rng.standard_normal(d)
        v[channel] = 1.0
        rows.append(("gain-extreme", v))
    return rows


#: Mean of the large-mean LayerNorm probe row (its standard deviation is about 1).
_LARGE_MEAN = 30.0


def _with_v(v: np.ndarray, target: float, rng: np.random.Generator) -> np.ndarray:
    """A LayerNorm probe row: ``v`` centred and rescaled so that mean((x - mean x)**2) =
    ``target``, plus a random-sign offset of 3 standard deviations (before rounding)."""
    c = v - float(np.mean(v))
    std = math.sqrt(target)
    sign = 1.0 if rng.random() < 0.5 else -1.0
    return c * (std / math.sqrt(float(np.mean(c * c)))) + sign * 3.0 * std


def _layer_rows(
    rows: list[tuple[str, np.ndarray]], rng: np.random.Generator
) -> list[tuple[str, np.ndarray]]:
    """The RMSNorm rows turned into LayerNorm probes: the small categories get v = their q
    (:func:`_with_v`), ordinary rows an offset of 0.5, and mixed-scale one large-mean row."""
    out: list[tuple[str, np.ndarray]] = []
    for name, row in rows:
        if name in SMALL_CATEGORIES:
            row = _with_v(row, float(np.mean(row * row)), rng)
        elif name == "ordinary":
            row = row + 0.5
        out.append((name, row))
        if name == "constant" and row[0] == 7.5:
            out.append(("mixed-scale", _LARGE_MEAN + rng.standard_normal(row.size)))
    return out


def _resolve_bias(
    bias: str | np.ndarray, d: int, dtype: str, rng: np.random.Generator
) -> tuple[np.ndarray, str]:
    """LayerNorm's beta: zeros, random (0.1 N(0, 1), seeded) or an array; rounded to the dtype."""
    if isinstance(bias, str) and bias == "zeros":
        return np.zeros(d), "zeros"
    if isinstance(bias, str) and bias == "random":
        return round_to(0.1 * rng.standard_normal(d), dtype), "random"
    if isinstance(bias, str):
        raise InvalidParameterError(f"bias must be 'zeros', 'random' or an array, got {bias!r}")
    b = np.asarray(bias, dtype=np.float64)
    if b.shape != (d,):
        raise InvalidParameterError(f"bias must have shape ({d},), got {b.shape}")
    rounded = round_to(b, dtype)
    if not bool(np.all(np.isfinite(rounded))):
        raise InvalidParameterError(f"bias holds NaN or inf, or does not fit in {dtype}")
    return rounded, "given"


@dataclass(frozen=True, eq=False)
class ProbeOptions:
    """How a probe set is built beyond its ``dim`` and ``eps`` (:func:`make_probes`): the
    ``gain`` the implementation holds ('ones', 'random' or an array of shape (dim,)) and its
    ``gain_convention`` ('w', or '1+w': the reference multiplies by 1 + weight), the probe
    ``dtype``, the ``seed`` of numpy's PCG64, the attenuation bound ``delta`` the boundary
    rows sit on, the ``norm`` ('rms' or 'layer') and a LayerNorm's ``bias`` (beta: 'zeros',
    'random' or an array; ignored for RMSNorm)."""

    gain: str | np.ndarray = "ones"
    dtype: str = "float32"
    seed: int = 0
    gain_convention: str = "w"
    delta: float = 0.01
    norm: str = "rms"
    bias: str | np.ndarray = "zeros"


class ProbeFields(TypedDict, total=False):
    """:class:`ProbeOptions`' fields as keyword arguments (``make_probes(64, 1e-6,
    dtype="bfloat16")``), for :func:`make_probes` and the parity checks built on it."""

    gain: str | np.ndarray
    dtype: str
    seed: int
    gain_convention: str
    delta: float
    norm: str
    bias: str | np.ndarray


def make_probes(dim: int, eps: float, **fields: Unpack[ProbeFields]) -> ProbeSet:
    """Build the probe set: same arguments, same bytes (numpy's PCG64 seeded with ``seed``).
    The keywords are :class:`ProbeOptions`' fields; ``norm="layer"`` makes LayerNorm probes
    (see the module docstring)."""
    o = ProbeOptions(**fields)
    gain, dtype, seed, gain_convention = o.gain, o.dtype, o.seed, o.gain_convention
    delta, norm, bias = o.delta, o.norm, o.bias
    if norm not in NORMS:
        raise InvalidParameterError(f"norm must be 'rms' or 'layer', got {norm!r}")
    if norm == "layer" and dim == 1:
        raise InvalidParameterError("LayerNorm probes need dim >= 2 (a 1-vector has v = 0)")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise InvalidParameterError(f"dim must be an integer >= 1, got {dim!r}")
    e = numerics.validate_eps(eps)
    get_format(dtype)
    if gain_convention not in GAIN_CONVENTIONS:
        raise InvalidParameterError(
            f"gain convention must be 'w' or '1+w', got {gain_convention!r}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidParameterError(f"seed must be an integer >= 0, got {seed!r}")
    dl = numerics.validate_delta(delta)
    bound = float(numerics.min_ratio(dl))
    rng = np.random.default_rng(seed)
    weight, g_eff, kind = _resolve_gain(gain, dim, dtype, gain_convention, rng)
    rows = _category_rows(rng, dim, e, dtype, bound, g_eff)
    beta: np.ndarray | None = None
    bias_kind: str | None = None
    if norm == "layer":
        rows = _layer_rows(rows, rng)
        beta, bias_kind = _resolve_bias(bias, dim, dtype, np.random.default_rng([seed, 1]))
    kept: list[tuple[str, np.ndarray]] = []
    for name, row in rows:
        rounded = round_to(row, dtype)
        if name != "zero" and not bool(np.any(rounded)):
            continue  # underflowed to zero in this dtype: the zero row already covers it
        kept.append((name, rounded))
    inputs = np.stack([r for _, r in kept]).astype(np.float64)
    category = np.array([CATEGORIES.index(n) for n, _ in kept], dtype=np.int16)
    if beta is None:
        reference = numerics.rmsnorm_reference(inputs, e, g_eff)
        q = mean_square_rows(inputs)
    else:
        reference = numerics.layernorm_reference(inputs, e, g_eff, beta)
        q = variance_rows(inputs)
    return ProbeSet(
        inputs=inputs,
        reference=reference,
        weight=weight,
        gain=g_eff,
        category=category,
        q=q,
        eps=e,
        dtype=dtype,
        seed=seed,
        gain_kind=kind,
        gain_convention=gain_convention,
        delta=dl,
        bound_ratio=bound,
        norm=norm,
        bias=beta,
        bias_kind=bias_kind,
    )


@dataclass(frozen=True)
class ProbeSummary:
    """What ``rmsnorm-eps probe`` reports: the probe set and where it was written."""

    command: ClassVar[str] = "probe"  # names its reporter (rmsnorm_eps.reports)

    probes: ProbeSet
    path: str | None
