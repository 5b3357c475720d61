"""capture/hooks.py: ``QCapture`` on a tiny hand-built model records, per real token, the q its
norms divide by. The expected q comes from an independent forward pre-hook that keeps each
norm's input and reduces it in float64 here; positions, batch indices over several forward
passes, padding, the summary-only mode and the constructor's refusals are checked too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.errors import CaptureError  # noqa: E402
from rmsnorm_eps.capture.hooks import QCapture  # noqa: E402


class Tiny(torch.nn.Module):
    """ids -> embedding -> RMSNorm -> linear -> LayerNorm; one per-head RMSNorm on [B, T, H, D]."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(16, 8)
        self.norm = torch.nn.RMSNorm(8, eps=1e-5)
        self.proj = torch.nn.Linear(8, 8)
        self.head_norm = torch.nn.RMSNorm(4, eps=1e-6)
        self.final = torch.nn.LayerNorm(8, eps=1e-5)

    def forward(self, input_ids: Any, attention_mask: Any = None) -> Any:
        h = self.norm(self.embed(input_ids))
        p = self.proj(h)
        b, t, _ = p.shape
        k = self.head_norm(p.view(b, t, 2, 4)).reshape(b, t, 8)
        return self.final(p + k)


def _inputs(model: torch.nn.Module) -> dict[str, list[torch.Tensor]]:
    seen: dict[str, list[torch.Tensor]] = {}
    for name, mod in model.named_modules():
        if name in ("norm", "head_norm", "final"):
            mod.register_forward_pre_hook(
                lambda _m, args, n=name: seen.setdefault(n, []).append(args[0].detach().double())
            )
    return seen


def test_q_equals_an_independent_float64_reduction() -> None:
    model = Tiny().eval()
    seen = _inputs(model)
    ids = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=ids)
    res = cap.result()
    by = {m.name: m for m in res.modules}
    assert set(by) == {"norm", "head_norm", "final"}
    assert res.sequences == 2 and res.tokens == 10 and not res.summary_only
    x = seen["norm"][0]
    np.testing.assert_allclose(by["norm"].q, (x**2).mean(-1).reshape(-1).numpy(), rtol=1e-13)
    hx = seen["head_norm"][0]  # [B, T, H, D]
    np.testing.assert_allclose(by["head_norm"].q, (hx**2).mean(-1).reshape(-1).numpy(), rtol=1e-13)
    fx = seen["final"][0]
    v = ((fx - fx.mean(-1, keepdim=True)) ** 2).mean(-1).reshape(-1).numpy()
    np.testing.assert_allclose(by["final"].q, v, rtol=1e-12)
    n, h, f = by["norm"], by["head_norm"], by["final"]
    assert (n.norm, n.eps, n.dim, n.heads, n.layout) == ("rms", 1e-5, 8, 1, "tokens [B, T, D]")
    assert (h.norm, h.eps, h.dim, h.heads, h.layout) == ("rms", 1e-6, 4, 2, "heads [B, T, H, D]")
    assert (f.norm, f.bias, f.eps) == ("layer", True, pytest.approx(1e-5))
    np.testing.assert_array_equal(h.position, np.repeat(np.tile(np.arange(5), 2), 2))
    np.testing.assert_array_equal(h.batch, np.repeat([0, 1], 10))
    np.testing.assert_array_equal(h.head, np.tile([0, 1], 10))


def test_padding_dropped_and_batches_count_over_passes() -> None:
    model = Tiny().eval()
    seen = _inputs(model)
    with QCapture(model) as cap, torch.no_grad():
        model(torch.tensor([[1, 2, 3]]))
        mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
        model(torch.tensor([[0, 4, 5], [6, 7, 8]]), attention_mask=mask)
    rec = next(m for m in cap.result().modules if m.name == "norm")
    assert rec.count == 3 + 5 and rec.calls == 2
    np.testing.assert_array_equal(rec.batch, [0, 0, 0, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(rec.position, [0, 1, 2, 0, 1, 0, 1, 2])
    x1 = (seen["norm"][0] ** 2).mean(-1).reshape(-1)
    x2 = (seen["norm"][1] ** 2).mean(-1)[mask.bool()]
    np.testing.assert_allclose(rec.q, torch.cat([x1, x2]).numpy(), rtol=1e-13)
    assert cap.result().tokens == 8


def test_summary_only_counts_against_the_bound() -> None:
    model = Tiny().eval()
    seen = _inputs(model)
    ids = torch.tensor([[1, 2, 3, 4]])
    with QCapture(model, summary_only=True, min_ratio=49.25, top_k=2) as cap, torch.no_grad():
        model(ids)
    rec = next(m for m in cap.result().modules if m.name == "norm")
    assert rec.q is None and rec.summaries is not None
    q = (seen["norm"][0] ** 2).mean(-1).reshape(-1).numpy().astype(np.float32).astype(np.float64)
    acc = rec.summaries["all"]
    assert acc.count == 4 and acc.min_q == pytest.approx(q.min(), rel=1e-7)
    assert acc.below == int(np.sum(q / 1e-5 < 49.25))


def test_hooks_removed_on_exit() -> None:
    model = Tiny().eval()
    with QCapture(model) as cap, torch.no_grad():
        model(torch.tensor([[1, 2]]))
    with torch.no_grad():
        model(torch.tensor([[1, 2]]))
    assert cap.result().tokens == 2
    assert not model.norm._forward_pre_hooks and not model._forward_pre_hooks


def test_constructor_refusals() -> None:
    model = Tiny()
    with pytest.raises(CaptureError, match="q_dtype must be float32 or float64, got 'float16'"):
        QCapture(model, q_dtype="float16")
    with pytest.raises(CaptureError, match="head_layout must be bthd or bhtd, got 'tbhd'"):
        QCapture(model, head_layout="tbhd")
    for ratio in (None, 0.0, float("inf")):
        with pytest.raises(CaptureError, match="summary_only needs a finite min_ratio > 0"):
            QCapture(model, summary_only=True, min_ratio=ratio)
    with pytest.raises(CaptureError, match="the model has no norm module"):
        QCapture(torch.nn.Sequential(torch.nn.Linear(2, 2)))
