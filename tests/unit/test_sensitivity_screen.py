"""sensitivity/screen.py: the second-order screening estimate of each norm's summed KL
(positions >= 1), on a tiny hand-built decoder. For a small eps change the estimate must agree
with the exact summed KL of a full rerun with only that norm changed (the independent
computation) to within the Monte Carlo error of the draws (seeded: deterministic), rank the
norms the same way, and count one forward and ``samples`` backward passes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.records import ModuleRecord  # noqa: E402
from rmsnorm_eps.sensitivity.metrics import Accumulator  # noqa: E402
from rmsnorm_eps.sensitivity.plan import Norm, Plan, padded  # noqa: E402
from rmsnorm_eps.sensitivity.result import Change  # noqa: E402
from rmsnorm_eps.sensitivity.screen import screen  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm = torch.nn.RMSNorm(8, eps=1e-6)
        self.mlp = torch.nn.Linear(8, 8)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.mlp(self.input_layernorm(h))


class Decoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.embed = torch.nn.Embedding(11, 8)
        with torch.no_grad():
            self.embed.weight.mul_(3e-3)  # q ~ 1e-5: an eps of 1e-6 matters a little
        self.layers = torch.nn.ModuleList(Block() for _ in range(2))
        self.norm = torch.nn.RMSNorm(8, eps=1e-6)
        self.head = torch.nn.Linear(8, 11)
        with torch.no_grad():
            self.head.weight.mul_(2.0)

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.embed

    def forward(self, input_ids: Any, attention_mask: Any = None, use_cache: bool = False) -> Any:
        h = self.embed(input_ids)
        for layer in self.layers:
            h = layer(h)
        return SimpleNamespace(logits=self.head(self.norm(h)))


def _record(name: str) -> ModuleRecord:
    return ModuleRecord(
        name=name,
        class_name="RMSNorm",
        kind="torch.nn.RMSNorm",
        eps=1e-6,
        eps_source="attribute eps",
        dim=8,
        input_dtype="float32",
        gain="w",
        weight=None,
        weight_dtype="float32",
        layout="tokens [B, T, D]",
        heads=1,
        calls=1,
        count=0,
        norm="rms",
    )


def _setup() -> tuple[Decoder, Plan]:
    model = Decoder().double().eval()
    ids, mask = padded([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10]], [0, 1], pad=0)
    norms = [
        Norm(b.input_layernorm, _record(f"layers.{i}.input_layernorm"), i)
        for i, b in enumerate(model.layers)
    ]
    norms.append(Norm(model.norm, _record("norm"), 2))
    return model, Plan(model, list(model.layers), norms, [(ids, mask)], torch.device("cpu"))


def _exact_summed_kl(model: Decoder, plan: Plan, norm: torch.nn.RMSNorm, eps: float) -> float:
    ids, mask = plan.batches[0]
    with torch.no_grad():
        base = model(ids, mask).logits
        old, norm.eps = norm.eps, eps
        try:
            new = model(ids, mask).logits
        finally:
            norm.eps = old
    acc = Accumulator(torch.device("cpu"))
    acc.add(base, new, ids, mask)
    m = acc.metrics()
    assert m.kl is not None
    return m.kl * m.tokens


def test_estimate_matches_the_exact_kl_of_a_small_change() -> None:
    model, plan = _setup()
    change = Change("eps=1.2e-6", None, "eps=1.2e-6", True)  # q + eps moves ~2% at layers.0
    found = screen(plan, [change], samples=500, seed=7)
    est, tokens = found.sums, found.tokens
    assert tokens == 5 + 3  # real tokens at positions >= 1
    exact = [_exact_summed_kl(model, plan, n.module, 1.2e-6) for n in plan.norms]
    assert all(e > 0 for e in exact)
    for k, (got, want) in enumerate(zip(est[0], exact, strict=True)):
        # 500 draws: within 15% for every seed 1..12 (Monte Carlo error, second order)
        assert got == pytest.approx(want, rel=0.2), k
        # the stated standard error covers the draws' error (4 of them; 2% for the second
        # order): a wrong spread (0, or the sum's instead of the mean's) misses
        err = found.errors[0][k]
        assert abs(got - want) <= 4 * err + 0.02 * want and 0 < err < 0.1 * got, k
    assert exact[0] > 1e6 * max(exact[1:])  # layers.0 sees the small embeddings: it ranks first
    assert est[0][0] > 1e6 * max(est[0][1:])
    assert plan.count.forward == 1 and plan.count.backward == 500 * (2 + 1)
    assert all(n.module.eps == 1e-6 and "forward" not in n.module.__dict__ for n in plan.norms)


def test_seeded_and_no_change_is_zero() -> None:
    _, plan = _setup()
    same = Change("eps=1e-6", None, "eps=1e-6", True)
    bigger = Change("eps=1e-5", None, "eps=1e-5", True)
    est = screen(plan, [same, bigger], samples=4, seed=1).sums
    assert est[0] == [0.0, 0.0, 0.0]
    again = screen(plan, [same, bigger], samples=4, seed=1).sums
    assert again == est
    other = screen(plan, [same, bigger], samples=4, seed=2).sums
    assert other[1] != est[1]
