"""rmsnorm_eps.parity.api: a correct implementation passes, a wrong eps or placement fails
and is named; compare_outputs on the probes' own reference passes exactly."""

from __future__ import annotations

import pytest

from rmsnorm_eps.errors import InputFileError
from rmsnorm_eps.parity.api import check_parity, compare_outputs
from rmsnorm_eps.parity.probes import make_probes
from tests.unit.parity_impls import rms


def test_the_reference_itself_passes() -> None:
    result = check_parity(rms(1e-6), dim=16, eps=1e-6)
    assert result.diagnosis.startswith("PASS")
    assert all(c.passed for c in result.categories)
    assert result.inference.eps == pytest.approx(1e-6, rel=1e-3, abs=0)


@pytest.mark.parametrize(("impl", "named"), [(rms(1e-5), "eps"), (rms(1e-6, "outside"), "outside")])
def test_a_wrong_eps_or_placement_fails(impl, named: str) -> None:  # type: ignore[no-untyped-def]
    result = check_parity(impl, dim=16, eps=1e-6)
    assert result.diagnosis.startswith("FAIL") and named in result.diagnosis
    assert not all(c.passed for c in result.categories)


def test_compare_outputs_of_the_reference() -> None:
    probes = make_probes(16, 1e-6, dtype="float64")
    result = compare_outputs(probes, probes.reference.copy(), output_dtype="float64")
    assert all(c.passed for c in result.categories)
    with pytest.raises(InputFileError, match=r"shape \(32, 8\), the probes need \(32, 16\)"):
        compare_outputs(probes, probes.reference[:, :8], output_dtype="float64")
