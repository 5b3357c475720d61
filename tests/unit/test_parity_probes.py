"""rmsnorm_eps.parity.probes: same arguments, same bytes; the reference outputs are the
float64 RMSNorm of the inputs; the probes straddle the bound."""

from __future__ import annotations

import numpy as np

from rmsnorm_eps.numerics import rmsnorm_reference
from rmsnorm_eps.parity.probe_file import probe_bytes
from rmsnorm_eps.parity.probes import make_probes


def test_deterministic_and_reference_is_rmsnorm() -> None:
    a, b = make_probes(16, 1e-6, seed=3), make_probes(16, 1e-6, seed=3)
    assert probe_bytes(a) == probe_bytes(b)
    assert probe_bytes(make_probes(16, 1e-6, seed=4)) != probe_bytes(a)
    x = a.inputs.astype(np.float64)
    q = (x * x).mean(axis=-1)
    np.testing.assert_allclose(a.q, q, rtol=1e-15, atol=0)
    want = rmsnorm_reference(x, 1e-6, a.weight)
    np.testing.assert_allclose(a.reference, want, rtol=1e-14, atol=0)
    assert a.inputs.shape == a.reference.shape and a.inputs.shape[1] == 16
    assert len(a.category) == a.inputs.shape[0]


def test_probes_straddle_the_bound() -> None:
    p = make_probes(32, 1e-5)
    ratio = p.q / p.eps
    assert (ratio < p.bound_ratio).any() and (ratio >= p.bound_ratio).any()
