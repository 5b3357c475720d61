"""rmsnorm_eps.parity.infer: the effective eps and placement of an implementation are found
from its float32 outputs on the probes, within the interval their rounding allows."""

from __future__ import annotations

import pytest

from rmsnorm_eps.parity.infer import infer
from rmsnorm_eps.parity.probes import make_probes
from tests.unit.parity_impls import rms


@pytest.mark.parametrize("eps", [1e-6, 1e-5, 3e-5])
def test_inferred_eps_brackets_the_true_one(eps: float) -> None:
    probes = make_probes(16, 1e-6)
    found = infer(probes, rms(eps)(probes.inputs).astype(float), "float32")
    assert found.placement == "inside"
    assert found.eps_low <= eps <= found.eps_high
    assert found.eps == pytest.approx(eps, rel=1e-3, abs=0)
    assert found.configured_eps == 1e-6


def test_outside_placement_is_told_apart() -> None:
    probes = make_probes(16, 1e-5)
    found = infer(probes, rms(1e-5, "outside")(probes.inputs).astype(float), "float32")
    assert found.placement == "outside"
