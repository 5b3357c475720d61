"""sensitivity/swap.py: changing a norm's eps for a ``with`` block, on tiny hand-built torch
modules. ``set_eps`` sets (and restores) the eps attribute the capture found; ``replace_forward``
swaps in the formula of the module docstring, checked against the same formula written out
here in float64 for every placement, for LayerNorm with bias, gated norms and groups, and a
SPEC precision; refusals name the module and why."""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.errors import CaptureError  # noqa: E402
from rmsnorm_eps.capture.records import ModuleRecord  # noqa: E402
from rmsnorm_eps.errors import InvalidParameterError  # noqa: E402
from rmsnorm_eps.sensitivity.result import Change  # noqa: E402
from rmsnorm_eps.sensitivity.swap import (  # noqa: E402
    applied,
    eps_attr_of,
    replace_forward,
    set_eps,
    spec_of,
)


def _record(**over: object) -> ModuleRecord:
    base: dict[str, object] = {
        "name": "model.norm",
        "class_name": "RMSNorm",
        "kind": "torch.nn.RMSNorm",
        "eps": 1e-6,
        "eps_source": "attribute eps",
        "dim": 4,
        "input_dtype": "float32",
        "gain": "w",
        "weight": None,
        "weight_dtype": "float32",
        "layout": "tokens [B, T, D]",
        "heads": 1,
        "calls": 1,
        "count": 2,
        "norm": "rms",
    }
    base.update(over)
    return ModuleRecord(**base)  # type: ignore[arg-type]


def _rms_norm(w: list[float]) -> torch.nn.RMSNorm:
    m = torch.nn.RMSNorm(len(w), eps=1e-6)
    with torch.no_grad():
        m.weight.copy_(torch.tensor(w))
    return m


X = torch.tensor([[0.5, -1.0, 2.0, 0.25], [1e-3, 2e-3, -1e-3, 0.0]], dtype=torch.float64)
W = [1.0, 0.5, 2.0, -1.0]


def _den(q: float, eps: float, placement: str, d: int) -> float:
    if placement == "inside":
        return math.sqrt(q + eps)
    if placement == "outside":
        return math.sqrt(q) + eps
    if placement == "clamp":
        return max(math.sqrt(q), eps)
    return math.sqrt((q * d + eps) / d)  # eps added to the sum of squares


def test_eps_attr_of() -> None:
    m = _rms_norm(W)
    assert eps_attr_of(m, _record()) == "eps"
    assert eps_attr_of(m, _record(eps_source="attribute variance_epsilon")) == "variance_epsilon"
    assert eps_attr_of(m, _record(eps_source=None)) == "eps"  # torch.nn.RMSNorm(eps=None)
    assert eps_attr_of(m, _record(eps_source="solved from the output", kind="RMSNorm-like")) is None


def test_set_eps_sets_and_restores() -> None:
    m = _rms_norm(W)
    x = X.float()
    before = m(x)
    with set_eps(m, _record(), 1e-3):
        assert m.eps == 1e-3
        changed = m(x)
    assert m.eps == 1e-6 and torch.equal(m(x), before)
    # row 1: q = 1.5e-6, so eps 1e-3 changes the output a lot; the check is the formula
    q = sum(v * v for v in X[1].tolist()) / 4
    want = [v / math.sqrt(q + 1e-3) * w for v, w in zip(X[1].tolist(), W, strict=True)]
    assert changed[1].tolist() == pytest.approx(want, rel=1e-5)
    with pytest.raises(RuntimeError), set_eps(m, _record(), 1e-2):
        raise RuntimeError("inside")
    assert m.eps == 1e-6  # restored after an error too


def test_set_eps_without_attribute_replaces_forward() -> None:
    m = _rms_norm(W)
    rec = _record(eps_source="solved", kind="RMSNorm-like")
    with set_eps(m, rec, 1e-2):
        assert "forward" in m.__dict__ and m.eps == 1e-6
        y = m(X.float())
    assert "forward" not in m.__dict__
    q = sum(v * v for v in X[1].tolist()) / 4
    want = [v / math.sqrt(q + 1e-2) * w for v, w in zip(X[1].tolist(), W, strict=True)]
    assert y[1].tolist() == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("placement", ["inside", "outside", "clamp", "sum"])
def test_replace_forward_placements_float64(placement: str) -> None:
    m = _rms_norm(W).double()
    eps = 1e-3
    text = f"eps={eps},placement={placement}" + (",dim=4" if placement == "sum" else "")
    with replace_forward(m, _record(), spec_of(text, "--to")):
        y = m(X)
    for r in range(2):
        xs = X[r].tolist()
        q = math.fsum(v * v for v in xs) / 4
        want = [v / _den(q, eps, placement, 4) * w for v, w in zip(xs, W, strict=True)]
        assert y[r].tolist() == pytest.approx(want, rel=1e-12, abs=1e-300), (placement, r)
    assert y.dtype == torch.float64


def test_replace_forward_gain_conventions_layer_and_l2() -> None:
    m = _rms_norm(W).double()
    spec = spec_of("eps=1e-4,dtype=float64", "--to")
    with replace_forward(m, _record(gain="1+w"), spec):
        y = m(X)
    xs = X[0].tolist()
    q = math.fsum(v * v for v in xs) / 4
    assert y[0].tolist() == pytest.approx(
        [v / math.sqrt(q + 1e-4) * (1 + w) for v, w in zip(xs, W, strict=True)], rel=1e-12
    )
    ln = torch.nn.LayerNorm(4, eps=1e-5).double()
    with torch.no_grad():
        ln.weight.copy_(torch.tensor(W))
        ln.bias.copy_(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64))
    with replace_forward(ln, _record(norm="layer", bias=True, kind="torch.nn.LayerNorm"), spec):
        y = ln(X)
    mu = math.fsum(xs) / 4
    v = math.fsum((a - mu) ** 2 for a in xs) / 4
    want = [
        (a - mu) / math.sqrt(v + 1e-4) * w + b
        for a, w, b in zip(xs, W, [0.1, 0.2, 0.3, 0.4], strict=True)
    ]
    assert y[0].tolist() == pytest.approx(want, rel=1e-12)
    with replace_forward(m, _record(norm="l2", gain="none"), spec):
        y = m(X)
    s = math.fsum(a * a for a in xs)
    assert y[0].tolist() == pytest.approx([a / math.sqrt(s + 1e-4) for a in xs], rel=1e-12)


@pytest.mark.parametrize("before", [True, False])
def test_replace_forward_gated_groups(before: bool) -> None:
    class Gated(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4, dtype=torch.float64))
            self.eps = 1e-6

        def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
            raise AssertionError("replaced")

    m = Gated()
    g = torch.tensor([[1.0, -2.0, 0.5, 3.0]], dtype=torch.float64)
    rec = _record(
        norm="gated-rms", gate_before=before, group_size=2, gate_fn="silu", kind="named *Norm*"
    )
    with replace_forward(m, rec, spec_of("eps=1e-3", "--to")):
        y = m(X[:1], g)
    silu = [v / (1 + math.exp(-v)) for v in g[0].tolist()]
    xs = X[0].tolist()
    a = [x * s for x, s in zip(xs, silu, strict=True)] if before else xs
    want = []
    for k in (0, 2):
        q = (a[k] ** 2 + a[k + 1] ** 2) / 2
        want += [a[k] / math.sqrt(q + 1e-3), a[k + 1] / math.sqrt(q + 1e-3)]
    if not before:
        want = [v * s for v, s in zip(want, silu, strict=True)]
    assert y[0].tolist() == pytest.approx(want, rel=1e-12)


def test_spec_precision_rounds_eps_and_q_plus_eps() -> None:
    m = _rms_norm([1.0, 1.0, 1.0, 1.0])
    x = torch.full((1, 4), 2.0**-12, dtype=torch.float32)  # q = 2**-24, exact everywhere
    with replace_forward(m, _record(), spec_of("eps=1e-7,dtype=bfloat16", "--to")):
        y = m(x)
    e = float(torch.tensor(1e-7).bfloat16())
    s = float(torch.tensor(2.0**-24).bfloat16() + torch.tensor(e).bfloat16())  # q + eps in bf16
    assert y.dtype == torch.float32
    assert float(y.detach()[0, 0]) == pytest.approx(2.0**-12 / math.sqrt(s), rel=1e-6)
    assert s != pytest.approx(2.0**-24 + 1e-7, rel=1e-3)  # bf16 rounding is visible


def test_forward_restored_and_instance_forward_kept() -> None:
    m = _rms_norm(W)
    own = m.forward
    m.forward = own  # an instance attribute of its own
    with replace_forward(m, _record(), spec_of("eps=1e-3", "--to")):
        assert m.forward is not own
    assert m.__dict__["forward"] is own


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"norm": "unknown"}, "a unknown norm has no formula"),
        ({"norm": None}, "a never run norm has no formula"),
        ({"gate_fn": "sigmoid", "norm": "gated-rms"}, "its gate is sigmoid, not silu"),
        ({"input_scale": "w"}, "it scales its input by w before normalizing"),
        ({"eps_rule": "clamp"}, "its eps rule is clamp, not an added eps"),
        ({"inputs": 2}, "it normalizes 2 inputs in one call"),
        ({"channels_first": True}, r"it normalizes the channels of \[B, C, T\]"),
    ],
)
def test_replace_forward_refusals(over: dict[str, object], why: str) -> None:
    m = _rms_norm(W)
    with (
        pytest.raises(CaptureError, match=f"module 'model.norm': {why}"),
        replace_forward(m, dataclasses.replace(_record(), **over), spec_of("eps=1e-3", "--to")),
    ):
        pass
    assert "forward" not in m.__dict__


def test_spec_of_refuses_framework() -> None:
    with pytest.raises(
        InvalidParameterError,
        match="--to 'framework=torch,dtype=float32': give eps=, not framework=",
    ):
        spec_of("framework=torch,dtype=float32", "--to")
    assert spec_of("eps=1e-5", "--from").eps == 1e-5


def test_applied_both_sides() -> None:
    m = _rms_norm(W)
    targets = [(m, _record())]
    eps_change = Change("eps=1e-3", None, "eps=1e-3", True)
    with applied(eps_change, "base", targets):
        assert m.eps == 1e-6 and "forward" not in m.__dict__
    with applied(eps_change, "to", targets):
        assert m.eps == 1e-3
    assert m.eps == 1e-6
    spec_change = Change("outside", "eps=1e-6", "eps=1e-6,placement=outside", False)
    x = X.float()
    with applied(spec_change, "base", targets):
        base = m(x)
    with applied(spec_change, "to", targets):
        to = m(x)
    assert "forward" not in m.__dict__
    q = math.fsum(v * v for v in X[1].tolist()) / 4
    assert float(base.detach()[1, 0]) == pytest.approx(
        X[1, 0].item() / math.sqrt(q + 1e-6), rel=1e-5
    )
    assert float(to.detach()[1, 0]) == pytest.approx(
        X[1, 0].item() / (math.sqrt(q) + 1e-6), rel=1e-5
    )
