"""rmsnorm_eps.capture.modules and classify: which modules are norms, what they compute (found
by running them), their eps and gain."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.classify import classify_module, eps_attribute  # noqa: E402
from rmsnorm_eps.capture.modules import (  # noqa: E402
    find_norm_modules,
    gain_convention,
    resolve_torch_default_eps,
    weight_stats,
)


def _model() -> object:
    torch.manual_seed(0)
    m = torch.nn.Sequential(
        torch.nn.RMSNorm(8, eps=1e-6), torch.nn.LayerNorm(8), torch.nn.Linear(8, 8)
    )
    with torch.no_grad():
        m[0].weight.copy_(torch.arange(8.0))
    return m


def test_find_and_classify() -> None:
    m = _model()
    found = find_norm_modules(m)
    assert [(s.name, s.kind) for s in found] == [
        ("0", "torch.nn.RMSNorm"),
        ("1", "torch.nn.LayerNorm"),
    ]
    rms, layer = (classify_module(m[i], (8,)) for i in (0, 1))  # type: ignore[index]
    assert (rms.norm, rms.eps, rms.bias) == ("rms", 1e-6, False)
    assert (layer.norm, layer.eps, layer.bias) == ("layer", 1e-5, True)
    assert eps_attribute(m[0]) == ("eps", 1e-6) and eps_attribute(m[2]) is None  # type: ignore[index]


def test_gain_and_weights() -> None:
    m = _model()
    assert gain_convention(m[0]) == "w"  # type: ignore[index]
    assert weight_stats(m[0]) == {"min": 0.0, "max": 7.0, "mean": 3.5, "mean_abs": 3.5}  # type: ignore[index]


@pytest.mark.parametrize(
    ("dtype", "eps"),
    [("float32", 2.0**-23), ("bfloat16", 2.0**-23), ("float16", 2.0**-23), ("float64", 2.0**-52)],
)
def test_torch_default_eps_is_the_opmath_machine_eps(dtype: str, eps: float) -> None:
    assert resolve_torch_default_eps(dtype) == eps
