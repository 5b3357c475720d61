"""What the implementation actually does: its gain factor per channel, its eps and placement.

Let ``n_i = g * x_i / rms_i`` be the eps-free normalized output of probe row i
(``rms = sqrt(q)``, ``q = mean(x**2)``) and ``a_i`` the implementation's output.

1. Channel factors ``f_c = median_i(a_ic / ref_ic)`` over the ``ordinary`` and ``constant``
   rows (reference outputs ``ref``), where eps barely acts. A correct gain gives ``f = 1``
   (within ``max(16 u, 1e-4)``); gain applied as ``1 + w`` where ``w``
   was meant gives ``f = (1 + w) / w``; the reverse ``w / (1 + w)``; an ignored gain ``1 / g``;
   any other constant is a uniform factor.
2. Observed attenuation of row i: ``t_i = sum(a_i u_i) / sum(u_i u_i)`` with ``u_i = f * n_i``
   (least squares over the row's channels; ``f = 1`` when the gain matches).
3. ``t`` is fitted on the ``tiny``, ``near-eps`` and ``at-bound`` rows with each placement:

   * inside:  ``t = sqrt(q / (q + e))``   (``y = g x / sqrt(q + e)``)
   * outside: ``t = rms / (rms + e)``     (``y = g x / (sqrt(q) + e)``)
   * clamp:   ``t = rms / max(rms, e)``   (``y = g x / max(sqrt(q), e)``)

   minimising ``chi2(e) = sum(((t_i - t(e)) / s_i)**2)`` over log e, with
   ``s_i = 4 u t_i + u`` where u is the unit roundoff of the coarser of the probe and output
   dtypes (output rounding plus a few internal roundings). The placement with the smallest chi2
   wins when it fits (chi2 per row <= 100) and the next one is at least 4 times worse. The 1-sigma
   interval of e is where ``chi2 <= chi2_min + max(1, chi2_min / dof)``.

LayerNorm probe sets (``probes.norm == "layer"``): the same with ``x`` centred
(``x - mean x``), ``q`` the variance v, ``rms = sqrt(v)`` the standard deviation, and the bias b
removed from both the outputs and the reference first (``a - b``, ``ref - b``), since eps only
scales the normalized part: ``y - b = g (x - mu) / sqrt(v + eps)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rmsnorm_eps.dtypes import FORMATS
from rmsnorm_eps.parity.probe_set import CATEGORIES, SMALL_CATEGORIES, ProbeSet

__all__ = ["GainFinding", "Inference", "PlacementFit", "infer"]

PLACEMENTS = ("inside", "outside", "clamp")
_FIT_LIMIT = 100.0  # chi2 per row above which a placement does not fit
_SEPARATION = 4.0  # the best placement's chi2 must be this many times smaller than the next
# Channel factors come from rows where eps is small but not zero (q/eps ~ 1e5 or more): a
# wrong eps moves them by about (eps' - eps) / (2 q). Gain errors are factors, not 1e-4.
_GAIN_TOL = 1e-4


@dataclass(frozen=True)
class GainFinding:
    """How the implementation's per-channel factor compares with the configured gain.

    ``kind``: ``match``, ``1+w`` (1 + w applied where w was meant), ``w`` (w applied where 1 + w
    was meant), ``ignored`` (no gain applied), ``uniform`` (one factor for every channel),
    ``per-channel`` (particular channels differ) or ``undetermined`` (no usable output).
    """

    kind: str
    factor: float | None  # median channel factor f
    deviation: float | None  # max relative deviation of f from the matched candidate
    channels: tuple[int, ...]  # channels that deviate most from f = 1 (up to 5)

    @property
    def ok(self) -> bool:
        return self.kind == "match"


@dataclass(frozen=True)
class PlacementFit:
    """The best eps for one placement and how well it explains the observed attenuation."""

    placement: str
    eps: float
    eps_low: float
    eps_high: float
    chi2_per_row: float


@dataclass(frozen=True)
class Inference:
    """Effective eps and placement, with the gain finding. ``eps`` is None when no probe row
    shows measurable attenuation (then ``eps_upper`` bounds it) or nothing fits."""

    configured_eps: float
    placement: str  # inside / outside / clamp / undetermined
    eps: float | None
    eps_low: float | None
    eps_high: float | None
    rows_used: int
    attenuated_rows: int
    fits: tuple[PlacementFit, ...]
    gain: GainFinding
    uncertainty_dtype: str
    note: str

    @property
    def rel_uncertainty(self) -> float | None:
        """Half the 1-sigma interval, relative to eps."""
        if self.eps is None or self.eps_low is None or self.eps_high is None:
            return None
        return (self.eps_high - self.eps_low) / (2.0 * self.eps)

    @property
    def eps_ratio(self) -> float | None:
        return None if self.eps is None else self.eps / self.configured_eps

    @property
    def eps_matches(self) -> bool | None:
        """Configured eps inside the 2-sigma interval (or within 1e-9 relative)."""
        if self.eps is None or self.eps_low is None or self.eps_high is None:
            return None
        lo = self.eps - 2.0 * (self.eps - self.eps_low)
        hi = self.eps + 2.0 * (self.eps_high - self.eps)
        c = self.configured_eps
        return lo <= c <= hi or abs(self.eps - c) <= 1e-9 * c


def _normalized(probes: ProbeSet) -> tuple[np.ndarray, np.ndarray]:
    """(n, rms): eps-free outputs ``g x / rms`` and the row RMS, without overflow (LayerNorm:
    ``g (x - mu) / std`` and the standard deviation)."""
    x = probes.inputs
    if probes.norm == "layer":
        m0 = np.max(np.abs(x), axis=1, keepdims=True)
        s0 = x / np.where(m0 > 0.0, m0, 1.0)
        mu = np.mean(s0, axis=1, keepdims=True)
        mu = mu + np.mean(s0 - mu, axis=1, keepdims=True)
        x = (s0 - mu) * m0
    m = np.max(np.abs(x), axis=1, keepdims=True)
    safe = np.where(m > 0.0, m, 1.0)
    s = x / safe
    rel_rms = np.sqrt(np.mean(s * s, axis=1, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        n = np.where(m > 0.0, probes.gain * s / np.where(rel_rms > 0, rel_rms, 1.0), 0.0)
    return n, (m * rel_rms)[:, 0]


#: Rows whose q and RMS both exceed eps by this factor are attenuated by less than a tenth of
#: the gain tolerance under every placement (inside, outside the sqrt, clamp).
_CLEAN = 10.0 / _GAIN_TOL


def _channel_factors(probes: ProbeSet, actual: np.ndarray) -> np.ndarray:
    """``f_c = median(a / reference)`` per channel, over the ordinary, constant and large rows
    that no placement of eps attenuates measurably (q and sqrt(q) above ``_CLEAN * eps``), or
    the ordinary and constant rows when none is (the reference puts eps inside the sqrt, so an
    eps of 1e-3 outside it would still move an ordinary row by 5e-4)."""
    rows = np.concatenate([probes.rows("ordinary"), probes.rows("constant")])
    candidates = np.concatenate([rows, probes.rows("large")])
    q = probes.q[candidates]
    clean = candidates[(q >= _CLEAN * probes.eps) & (np.sqrt(q) >= _CLEAN * probes.eps)]
    if clean.size:
        rows = clean
    a, ref = _unbiased(probes, actual[rows]), _unbiased(probes, probes.reference[rows])
    big = np.abs(ref) >= 1e-3 * np.max(np.abs(ref), axis=1, keepdims=True)
    usable = big & np.isfinite(a) & (ref != 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(usable, a / np.where(ref != 0.0, ref, 1.0), np.nan)
    out = np.full(probes.dim, np.nan)
    has = np.any(usable, axis=0)
    if has.any():
        out[has] = np.nanmedian(ratio[:, has], axis=0)
    return out


def _unbiased(probes: ProbeSet, y: np.ndarray) -> np.ndarray:
    """Outputs with the LayerNorm bias removed (unchanged for RMSNorm)."""
    return y if probes.bias is None else y - probes.bias


def _gain_finding(probes: ProbeSet, f: np.ndarray, u: float) -> GainFinding:
    valid = np.isfinite(f)
    if not valid.any():
        return GainFinding("undetermined", None, None, ())
    tol = max(16.0 * u, _GAIN_TOL)
    g, w = probes.gain, probes.weight
    with np.errstate(invalid="ignore", divide="ignore"):
        swapped = ("1+w", (1.0 + w) / g) if probes.gain_convention == "w" else ("w", w / g)
        candidates = [("match", np.ones_like(g)), swapped, ("ignored", 1.0 / g)]
    median = float(np.median(f[valid]))
    candidates.append(("uniform", np.full_like(g, median)))
    for kind, expected in candidates:
        e = expected[valid]
        if not bool(np.all(np.isfinite(e))):
            continue
        dev = float(np.max(np.abs(f[valid] - e) / np.maximum(np.abs(e), 1e-6)))
        if dev <= tol:
            if kind == "uniform" and abs(median - 1.0) <= tol:
                kind = "match"
            worst = () if kind == "match" else _worst_channels(f, valid)
            return GainFinding(kind, median, dev, worst)
    dev = float(np.max(np.abs(f[valid] - 1.0)))
    return GainFinding("per-channel", median, dev, _worst_channels(f, valid))


def _worst_channels(f: np.ndarray, valid: np.ndarray) -> tuple[int, ...]:
    dev = np.where(valid, np.abs(f - 1.0), -1.0)
    order = np.argsort(-dev, kind="stable")[:5]
    return tuple(int(c) for c in order if dev[c] > 0)


def _model(placement: str, q: np.ndarray, rms: np.ndarray, e: np.ndarray) -> np.ndarray:
    """t for each (e, row): e has shape (k, 1), q and rms (rows,)."""
    if placement == "inside":
        return np.sqrt(q / (q + e))
    if placement == "outside":
        return rms / (rms + e)
    return rms / np.maximum(rms, e)


def _fit(
    placement: str, t: np.ndarray, s: np.ndarray, q: np.ndarray, rms: np.ndarray, e0: float
) -> PlacementFit:
    def chi2(log_e: np.ndarray) -> np.ndarray:
        e = np.exp(log_e)[:, None]
        resid: np.ndarray = (t - _model(placement, q, rms, e)) / s
        return np.sum(resid * resid, axis=1)

    ln10 = math.log(10.0)
    coarse = np.log(e0) + np.linspace(-12.0, 12.0, 2401) * ln10
    c = chi2(coarse)
    centre, half = float(coarse[int(np.argmin(c))]), 0.02 * ln10
    dof = max(1, t.size - 1)
    while True:  # zoom in until the 1-sigma interval spans many grid steps
        fine = centre + np.linspace(-half, half, 2001)
        cf = chi2(fine)
        k = int(np.argmin(cf))
        cmin = float(cf[k])
        within = np.flatnonzero(cf <= cmin + max(1.0, cmin / dof))
        centre = float(fine[k])
        if within.size >= 40 or half < 1e-12:
            break
        half /= 20.0
    lo, hi = float(fine[within[0]]), float(fine[within[-1]])
    if within[0] == 0 or within[-1] == fine.size - 1:  # wider than the zoomed grid: use coarse
        wide = np.flatnonzero(c <= cmin + max(1.0, cmin / dof))
        lo, hi = min(lo, float(coarse[wide[0]])), max(hi, float(coarse[wide[-1]]))
    return PlacementFit(placement, math.exp(centre), math.exp(lo), math.exp(hi), cmin / t.size)


def infer(probes: ProbeSet, actual: np.ndarray, output_dtype: str) -> Inference:
    """Infer the gain convention, effective eps and placement from the outputs on the probes."""
    u = FORMATS[output_dtype].unit_roundoff
    n, rms = _normalized(probes)
    f = _channel_factors(probes, actual)
    gain = _gain_finding(probes, f, u)
    if gain.ok or gain.kind == "undetermined":
        factor = np.ones(probes.dim)
    else:
        factor = np.where(np.isfinite(f), f, gain.factor if gain.factor is not None else 1.0)
    small = np.isin(probes.category, [CATEGORIES.index(c) for c in SMALL_CATEGORIES])
    rows = np.flatnonzero(small & (rms > 0.0) & np.all(np.isfinite(actual), axis=1))
    uu = n[rows] * factor
    den = np.sum(uu * uu, axis=1)
    keep = den > 0.0
    rows, uu, den = rows[keep], uu[keep], den[keep]
    t = np.sum(_unbiased(probes, actual[rows]) * uu, axis=1) / den
    s = 4.0 * u * np.abs(t) + u
    q, r = probes.q[rows], rms[rows]
    attenuated = int(np.count_nonzero(t < 1.0 - 3.0 * s))

    def result(
        placement: str, fit: PlacementFit | None, fits: tuple[PlacementFit, ...], note: str
    ) -> Inference:
        return Inference(
            configured_eps=probes.eps,
            placement=placement,
            eps=None if fit is None else fit.eps,
            eps_low=None if fit is None else fit.eps_low,
            eps_high=None if fit is None else fit.eps_high,
            rows_used=int(rows.size),
            attenuated_rows=attenuated,
            fits=fits,
            gain=gain,
            uncertainty_dtype=output_dtype,
            note=note,
        )

    if rows.size == 0:
        return result("undetermined", None, (), "no finite output on the small probes")
    if attenuated == 0:
        return result(
            "undetermined",
            None,
            (),
            "no small probe shows attenuation: eps is "
            f"below {float(np.min(q)):.3g} (the smallest probe q) or absent",
        )
    fits = tuple(_fit(p, t, s, q, r, probes.eps) for p in PLACEMENTS)
    ranked = sorted(fits, key=lambda fit: fit.chi2_per_row)
    best, second = ranked[0], ranked[1]
    if best.chi2_per_row > _FIT_LIMIT:
        note = (
            f"no placement fits (best {best.placement}, chi2/row {best.chi2_per_row:.3g}): "
            "the small-input outputs are not an eps attenuation"
        )
        return result("undetermined", None, fits, note)
    if second.chi2_per_row < _SEPARATION * max(best.chi2_per_row, 1e-300):
        note = f"{best.placement} and {second.placement} fit about equally well"
        return result("undetermined", best, fits, note)
    return result(best.placement, best, fits, "")
