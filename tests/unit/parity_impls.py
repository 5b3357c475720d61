"""Small RMSNorm implementations for the parity unit tests: exact float64 math, then a cast."""

from __future__ import annotations

import numpy as np


def rms(eps: float, placement: str = "inside", out: type = np.float32):  # type: ignore[no-untyped-def]
    """``x / den(q)`` with the placement's denominator, computed in float64, cast to ``out``."""

    def fn(x: np.ndarray) -> np.ndarray:
        x64 = x.astype(np.float64)
        q = (x64 * x64).mean(axis=-1, keepdims=True)
        den = {
            "inside": np.sqrt(q + eps),
            "outside": np.sqrt(q) + eps,
            "clamp": np.maximum(np.sqrt(q), eps),
        }[placement]
        return (x64 / den).astype(out)

    return fn
