"""rmsnorm-eps: where RMSNorm's epsilon changes the output.

RMSNorm computes ``y = g * x / sqrt(q + eps)`` with ``q = mean(x**2)``. Epsilon attenuates every
input by ``A = sqrt(q / (q + eps)) = 1 / sqrt(1 + eps/q)``; this package finds the inputs where
that attenuation exceeds a tolerance.

The package import is deliberately light (no numpy); import the submodules you need, e.g.
``from rmsnorm_eps import numerics`` or ``from rmsnorm_eps.analysis import analyze_dump``.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
