"""rmsnorm-eps: where RMSNorm's epsilon changes the output.

RMSNorm computes ``y = g * x / sqrt(q + eps)`` with ``q = mean(x**2)``. Epsilon attenuates every
input by ``A = sqrt(q / (q + eps)) = 1 / sqrt(1 + eps/q)``; this package finds the inputs where
that attenuation exceeds a tolerance.

The package import is deliberately light (no numpy); import the submodules you need, e.g.
``from rmsnorm_eps import numerics`` or ``from rmsnorm_eps.analysis import analyze_dump``.
In a notebook or a test: ``rmsnorm_eps.check(q, eps=1e-5)`` (arrays, tensors, dicts of them)
and ``rmsnorm_eps.testing.assert_eps_safe``.
"""

from __future__ import annotations

from rmsnorm_eps._version import __version__

__all__ = ["InvalidInput", "__version__", "check"]


def __getattr__(name: str) -> object:
    """``rmsnorm_eps.check`` (:func:`rmsnorm_eps.api.check`) and the one exception it raises
    for bad arguments, ``rmsnorm_eps.InvalidInput`` (a ValueError naming the argument),
    imported on first use so that ``import rmsnorm_eps`` stays light."""
    if name == "check":
        from rmsnorm_eps.api import check

        return check
    if name == "InvalidInput":
        from rmsnorm_eps.errors import InvalidInput

        return InvalidInput
    raise AttributeError(f"module 'rmsnorm_eps' has no attribute {name!r}")
