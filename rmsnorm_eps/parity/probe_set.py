"""A probe set: inputs, float64 reference outputs, weights and metadata (the data, shared by
:mod:`rmsnorm_eps.parity.probes`, which makes them, and :mod:`rmsnorm_eps.parity.probe_file`,
which writes and reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rmsnorm_eps._version import __version__

__all__ = [
    "CATEGORIES",
    "GAIN_CONVENTIONS",
    "LAYERNORM_REFERENCE_NAME",
    "MAX_PROBE_VALUES",
    "NORMS",
    "PROBE_FORMAT",
    "REFERENCE_NAME",
    "SMALL_CATEGORIES",
    "ProbeSet",
]

PROBE_FORMAT = "rmsnorm-eps-probes/1"
REFERENCE_NAME = (
    "rmsnorm_eps.numerics.rmsnorm_reference: float64, y = g * x / sqrt(mean(x^2) + eps) "
    "over the last axis, scaled by max|x| so no intermediate overflows"
)
LAYERNORM_REFERENCE_NAME = (
    "rmsnorm_eps.numerics.layernorm_reference: float64, y = g * (x - mu) / sqrt(v + eps) + b "
    "with mu = mean(x), v = mean((x - mu)^2) over the last axis (two-pass, scaled by max|x|)"
)
#: The norms a probe set can be made for: RMSNorm (q = mean(x^2)) or LayerNorm (v, with bias).
NORMS = ("rms", "layer")
CATEGORIES = (
    "zero",
    "tiny",
    "near-eps",
    "at-bound",
    "ordinary",
    "constant",
    "mixed-scale",
    "large",
    "gain-extreme",
)
#: Categories whose q/eps is small enough for eps to matter.
SMALL_CATEGORIES = ("tiny", "near-eps", "at-bound")
GAIN_CONVENTIONS = ("w", "1+w")
#: Largest probe set read: n * d values per float array (make_probes writes about 35 rows, so
#: this allows d up to about 479,000). Members are checked against it, and against the shapes
#: the metadata declares, from the zip directory, before anything is decompressed.
MAX_PROBE_VALUES = 1 << 24


@dataclass(frozen=True)
class ProbeSet:
    """Probe inputs (n, d), their float64 reference outputs, weights and metadata.

    ``weight`` is what the implementation is given; ``gain`` the multiplier the reference applies:
    ``gain = weight`` (convention ``w``) or ``1 + weight`` (convention ``1+w``).
    ``category[i]`` indexes :data:`CATEGORIES`; ``q[i] = mean(inputs[i]**2)`` (+inf where it
    exceeds float64).

    ``norm`` is ``"rms"`` or ``"layer"``: for a LayerNorm probe set ``q[i]`` holds the variance
    ``v = mean((x - mean x)**2)`` the categories are defined by, ``bias`` the beta (d,) the
    implementation is given and the reference adds (``None`` for RMSNorm).
    """

    inputs: np.ndarray
    reference: np.ndarray
    weight: np.ndarray
    gain: np.ndarray
    category: np.ndarray
    q: np.ndarray
    eps: float
    dtype: str
    seed: int
    gain_kind: str
    gain_convention: str
    delta: float
    bound_ratio: float
    version: str = __version__
    norm: str = "rms"
    bias: np.ndarray | None = None
    bias_kind: str | None = None  # LayerNorm: zeros, random, given or file:NAME

    @property
    def dim(self) -> int:
        return int(self.inputs.shape[1])

    @property
    def count(self) -> int:
        return int(self.inputs.shape[0])

    def rows(self, name: str) -> np.ndarray:
        """Row indices of category ``name``."""
        return np.flatnonzero(self.category == CATEGORIES.index(name))

    def metadata(self) -> dict[str, Any]:
        """The metadata stored with the probes (JSON-serializable, fixed key order; ``norm``
        only for a LayerNorm set, so RMSNorm probe files keep their bytes)."""
        meta: dict[str, Any] = {
            "format": PROBE_FORMAT,
            "tool": "rmsnorm-eps",
            "version": self.version,
            "eps": self.eps,
            "dim": self.dim,
            "dtype": self.dtype,
            "seed": self.seed,
            "gain": self.gain_kind,
            "gain_convention": self.gain_convention,
            "delta": self.delta,
            "bound_ratio": self.bound_ratio,
            "axis": -1,
            "reference": REFERENCE_NAME if self.norm == "rms" else LAYERNORM_REFERENCE_NAME,
        }
        if self.norm != "rms":
            meta["norm"] = self.norm
            meta["bias"] = self.bias_kind or "given"
        return meta
