"""rmsnorm_eps.capture.classify: a module's computation is found by running it on a probe: an
RMSNorm with a hard-coded eps, an L2 norm, and modules that fit no formula (with the reason)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.classify import classify_module, eps_attribute  # noqa: E402


class HardRms(torch.nn.Module):  # type: ignore[misc]
    """RMSNorm with eps written into forward (no eps attribute)."""

    def forward(self, x):  # type: ignore[no-untyped-def]
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 3e-5)


class L2(torch.nn.Module):  # type: ignore[misc]
    def forward(self, x):  # type: ignore[no-untyped-def]
        return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


class Doubler(torch.nn.Module):  # type: ignore[misc]
    def forward(self, x):  # type: ignore[no-untyped-def]
        return 2 * x


class Shrinker(torch.nn.Module):  # type: ignore[misc]
    def forward(self, x):  # type: ignore[no-untyped-def]
        return x[..., :1]


def test_an_eps_in_forward_is_measured() -> None:
    kind = classify_module(HardRms(), (16,))
    assert kind.norm == "rms" and kind.eps == pytest.approx(3e-5, rel=1e-3, abs=0)
    assert eps_attribute(HardRms()) is None


def test_l2_norm() -> None:
    assert classify_module(L2(), (16,)).norm == "l2"


@pytest.mark.parametrize(("module", "reason"), [(Doubler(), "matches no"), (Shrinker(), "shape")])
def test_unknown_with_a_reason(module: object, reason: str) -> None:
    kind = classify_module(module, (16,))
    assert kind.norm == "unknown" and reason in (kind.reason or "")
