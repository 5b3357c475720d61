"""sensitivity/plan.py: the passes of ``sensitivity`` on a tiny hand-built decoder. A variant
that reuses the base pass's output of the layers before its first changed norm gives the same
metrics as a full rerun of the changed model (the second formulation here), while fewer decoder
layers really run (counted); roles from names, the decoder stack, right padding and min q/eps
are checked against hand-written expectations."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.records import ModuleRecord  # noqa: E402
from rmsnorm_eps.sensitivity.metrics import Accumulator  # noqa: E402
from rmsnorm_eps.sensitivity.plan import (  # noqa: E402
    Norm,
    Plan,
    Variant,
    counting,
    decoder_layers,
    min_ratios,
    padded,
    reduced,
    role_of,
    run_variants,
)
from rmsnorm_eps.sensitivity.result import Change  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm = torch.nn.RMSNorm(8, eps=1e-6)
        self.mlp = torch.nn.Linear(8, 8)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + torch.tanh(self.mlp(self.input_layernorm(h)))


class Decoder(torch.nn.Module):
    def __init__(self, layers: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(11, 8)
        with torch.no_grad():
            self.embed.weight.mul_(1e-3)  # small activations: eps matters
        self.layers = torch.nn.ModuleList(Block() for _ in range(layers))
        self.norm = torch.nn.RMSNorm(8, eps=1e-6)
        self.head = torch.nn.Linear(8, 11)

    def forward(self, input_ids: Any, attention_mask: Any = None, use_cache: bool = False) -> Any:
        h = self.embed(input_ids)
        for layer in self.layers:
            h = layer(h)
        return SimpleNamespace(logits=self.head(self.norm(h)))


def _record(name: str, q: np.ndarray | None = None) -> ModuleRecord:
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
        count=0 if q is None else q.size,
        q=q,
        norm="rms",
    )


def _plan(model: Decoder, batches: list[tuple[Any, Any]]) -> Plan:
    norms = [
        Norm(b.input_layernorm, _record(f"layers.{i}.input_layernorm"), i)
        for i, b in enumerate(model.layers)
    ]
    norms.append(Norm(model.norm, _record("norm"), len(model.layers)))
    return Plan(model, list(model.layers), norms, batches, torch.device("cpu"))


def test_role_of() -> None:
    assert role_of("model.layers.3.self_attn.q_norm", 3, 8) == "q/k"
    assert role_of("model.layers.3.self_attn.K_LayerNorm", 3, 8) == "q/k"
    assert role_of("model.layers.0.input_layernorm", 0, 8) == "input"
    assert role_of("model.layers.0.post_attention_layernorm", 0, 8) == "post-attention"
    assert role_of("model.layers.0.pre_feedforward_layernorm", 0, 8) == "pre-feedforward"
    assert role_of("model.layers.0.post_feedforward_layernorm", 0, 8) == "post-feedforward"
    assert role_of("model.norm", 8, 8) == "final"
    assert role_of("model.norm", 7, 8) == "other"
    assert role_of("model.norm", 0, 0) == "other"  # no decoder stack found


def test_decoder_layers_and_padding() -> None:
    model = Decoder()
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.RMSNorm)]
    name, layers = decoder_layers(model, names)
    assert name == "layers" and layers == list(model.layers)
    assert decoder_layers(model, ["norm"]) == ("", [])
    ids, mask = padded([[1, 2, 3], [4], [5, 6]], [2, 0, 1], pad=0)
    assert ids.tolist() == [[5, 6, 0], [1, 2, 3], [4, 0, 0]]
    assert mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0]]
    assert ids.dtype == mask.dtype == torch.int64


def test_min_ratios_and_reduced() -> None:
    norms = [
        Norm(None, _record("a", np.array([2e-5, np.nan, 1e-5])), 0),
        Norm(None, _record("b", np.array([np.inf, np.nan])), 0),
        Norm(None, _record("c"), 0),
        Norm(None, _record("d", np.array([1.0])), 0),
    ]
    min_ratios(norms, lambda n: 0.0 if n.record.name == "d" else 1e-6, torch.device("cpu"))
    assert norms[0].min_ratio == pytest.approx(10.0)
    assert [n.min_ratio for n in norms[1:]] == [None, None, None]
    assert reduced([1.0, 2.0], torch.device("cpu")) == [1.0, 2.0]  # no process group


def _full_rerun(
    model: Decoder, ids: Any, mask: Any, norm: torch.nn.RMSNorm, eps: float
) -> Accumulator:
    acc = Accumulator(torch.device("cpu"))
    with torch.no_grad():
        base = model(ids, mask).logits
        old, norm.eps = norm.eps, eps
        try:
            new = model(ids, mask).logits
        finally:
            norm.eps = old
    acc.add(base, new, ids, mask)
    return acc


def test_reused_layers_give_the_full_rerun_and_count_less() -> None:
    model = Decoder().eval()
    ids, mask = padded([[1, 2, 3, 4], [5, 6]], [0, 1], pad=0)
    plan = _plan(model, [(ids, mask)])
    change = Change("eps=1e-2", None, "eps=1e-2", True)
    target = plan.norms[2]  # layers.2: layers 0 and 1 cannot change
    variant = Variant(
        (0, "norm", target.record.name), change, [(target.module, target.record)], skip=2
    )
    base_acc = [torch.zeros((), dtype=torch.float64), torch.zeros((), dtype=torch.float64)]
    with counting(plan):
        run_variants(plan, [variant], base_acc)
    got = variant.acc.metrics()
    want = _full_rerun(model, ids, mask, target.module, 1e-2).metrics()
    for field in (
        "kl",
        "kl_first",
        "top1_agreement",
        "nmse_last",
        "perplexity",
        "max_abs_logit_change",
    ):
        assert getattr(got, field) == getattr(want, field), field  # bit for bit
    assert got.kl is not None and got.kl > 0  # the change does something
    assert target.module.eps == 1e-6 and all("forward" not in b.__dict__ for b in model.layers)
    # base pass: 3 layers + 1; variant: layer 2 only + 1
    assert plan.count.forward == (3 + 1) + (1 + 1)
    # the base perplexity's sums: each next real token under the base
    with torch.no_grad():
        lp = torch.log_softmax(model(ids, mask).logits.double(), -1)
    nll = [-float(lp[b, t, ids[b, t + 1]]) for b in range(2) for t in range(3) if mask[b, t + 1]]
    assert float(base_acc[1]) == len(nll) == 4
    assert float(base_acc[0]) == pytest.approx(math.fsum(nll), rel=1e-12)


def test_spec_variants_share_one_base_pass() -> None:
    model = Decoder(layers=2).eval()
    ids, mask = padded([[1, 2, 3]], [0], pad=0)
    plan = _plan(model, [(ids, mask)])
    spec = Change("outside", "eps=1e-6", "eps=1e-6,placement=outside", False)
    variants = [
        Variant((0, "norm", n.record.name), spec, [(n.module, n.record)], skip=n.layer)
        for n in plan.norms
    ]
    with counting(plan):
        run_variants(plan, variants, None)
    # one base pass (2 + 1), then variants from layer 0 (2 + 1), layer 1 (1 + 1), final (0 + 1)
    assert plan.count.forward == 3 + 3 + 2 + 1
    assert all(v.acc.metrics().tokens == 2 for v in variants)
    assert all("forward" not in n.module.__dict__ for n in plan.norms)
