"""The device-side reduction (reduce.py), the probe classification (classify.py) and layouts that
the capture refuses to guess."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.classify import classify_module  # noqa: E402
from rmsnorm_eps.capture.hooks import QCapture  # noqa: E402
from rmsnorm_eps.capture.reduce import reduce_rows  # noqa: E402


def _rows() -> np.ndarray:
    """Rows of |x| from 1e-20 to 1e4, with and without a mean, as float32 values."""
    rng = np.random.default_rng(3)
    scales = np.array([1e-20, 1e-12, 1e-6, 1e-3, 1.0, 7.0, 1e2, 1e4])
    x = (rng.standard_normal((8, 64)) + np.array([[0.0], [3.0]] * 4)) * scales[:, None]
    return x.astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("compute", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["rms", "layer", "l2"])
def test_reduce_rows_within_1e6_of_float64(kind: str, compute: str) -> None:
    x = _rows()
    if kind == "layer":
        want = ((x - x.mean(-1, keepdims=True)) ** 2).mean(-1)
    elif kind == "l2":
        want = (x * x).sum(-1)
    else:
        want = (x * x).mean(-1)
    for dtype in (torch.float32, torch.bfloat16):
        t = torch.from_numpy(x).to(dtype)
        exact = t.double().numpy()
        if kind == "layer":
            want = ((exact - exact.mean(-1, keepdims=True)) ** 2).mean(-1)
        elif kind == "l2":
            want = (exact * exact).sum(-1)
        else:
            want = (exact * exact).mean(-1)
        got = reduce_rows(t, kind, compute=compute)
        assert got.dtype == torch.float64 and tuple(got.shape) == (8, 1)
        np.testing.assert_allclose(got[:, 0].numpy(), want, rtol=1e-6, atol=0)
    # a naive float32 mean of squares underflows into subnormals at 1e-20 (the scaled path not)
    naive = float((torch.from_numpy(x[:1]).float() ** 2).mean())
    assert abs(naive / float((x[0] ** 2).mean()) - 1) > 1e-6  # beyond the 1e-6 asked


def test_reduce_rows_gated_groups_before_and_after() -> None:
    rng = np.random.default_rng(4)
    x = torch.from_numpy(rng.standard_normal((2, 3, 16)))
    g = torch.from_numpy(rng.standard_normal((2, 3, 16)))
    silu = g / (1 + torch.exp(-g))
    before = reduce_rows(x, "gated-rms", group_size=4, gate=g)
    after = reduce_rows(x, "gated-rms", group_size=4)  # gated after normalizing: no gate
    np.testing.assert_allclose(before, ((x * silu) ** 2).reshape(2, 3, 4, 4).mean(-1), rtol=1e-12)
    np.testing.assert_allclose(after, (x**2).reshape(2, 3, 4, 4).mean(-1), rtol=1e-12)
    with pytest.raises(ValueError, match="does not divide"):
        reduce_rows(x, "rms", group_size=5)
    with pytest.raises(ValueError, match="unknown norm kind"):
        reduce_rows(x, "batch")


def test_nonfinite_rows_stay_nonfinite() -> None:
    x = torch.tensor([[1.0, float("inf")], [float("nan"), 1.0], [0.0, 0.0]])
    got = reduce_rows(x, "rms", compute="float32")[:, 0]
    assert got[0] == float("inf") and torch.isnan(got[1]) and got[2] == 0.0


class _HardCoded(torch.nn.Module):
    """No eps attribute: F.layer_norm with a literal eps (OLMo-1 style)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, x.shape[-1:], None, None, eps=3e-6)


class _BatchLike(torch.nn.Module):
    """Divides by a fixed running variance: matches no formula (never analysed as RMSNorm)."""

    eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - 0.1) / torch.sqrt(torch.tensor(2.0) + self.eps)


def test_classify_hard_coded_eps_and_unknown() -> None:
    k = classify_module(_HardCoded(), (16,))
    assert (k.norm, k.gain, k.eps) == ("layer", "none", 3e-6)
    assert k.eps_source is not None and "solved" in k.eps_source
    u = classify_module(_BatchLike(), (16,))
    assert u.norm == "unknown" and u.eps is None and u.reason is not None
    ln = classify_module(torch.nn.LayerNorm(16, eps=2e-5), (16,))
    assert (ln.norm, ln.gain, ln.bias, ln.eps) == ("layer", "w", True, 2e-5)
    rms0 = classify_module(torch.nn.RMSNorm(16, eps=0.0), (16,))
    assert (rms0.norm, rms0.eps) == ("rms", 0.0)


class _Heads(torch.nn.Module):
    """A per-head norm fed [B, T, H, D] with an expanded (stride 0) head axis: T == H cannot be
    told from the sizes nor from the strides (``tied``: H is always T, so no probe tells)."""

    def __init__(self, tied: bool = False) -> None:
        super().__init__()
        self.tied = tied
        self.emb = torch.nn.Embedding(16, 8)
        self.q_norm = torch.nn.RMSNorm(8, eps=1e-6)

    def forward(self, input_ids: torch.Tensor, attention_mask: object = None) -> torch.Tensor:
        x = self.emb(input_ids)
        b, t, d = x.shape
        h = t if self.tied else 3
        return self.q_norm(x[:, :, None, :].expand(b, t, h, d))  # H = 3 heads (or T)


def test_undeterminable_layout_is_listed_naming_the_module() -> None:
    ids = torch.randint(0, 16, (2, 3))  # T == H == 3
    # H follows T: neither sizes, strides nor a probe one token shorter tell: listed, no q
    tied = _Heads(tied=True)
    with QCapture(tied) as cap, torch.no_grad():
        tied(input_ids=ids)
    m = cap.result().modules[0]
    assert m.norm == "unknown" and m.count == 0 and m.calls == 1
    assert m.reason is not None and "layout unknown" in m.reason and "T == H == 3" in m.reason
    assert "'q_norm' (RMSNorm)" in m.reason
    # a fixed H: the probe one token shorter (T = 2 != H) tells [B, T, H, D]
    model = _Heads()
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=ids)
    m = cap.result().modules[0]
    x = model.emb(ids).detach().double()
    assert m.layout == "heads [B, T, H, D]" and m.count == 2 * 3 * 3
    np.testing.assert_allclose(m.q, np.repeat((x**2).mean(-1).reshape(-1).numpy(), 3), rtol=1e-12)
    # with T != H the sizes decide; then a later T == H call keeps the module's layout
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=ids[:, :2].contiguous())  # T = 2, H = 3
        model(input_ids=ids)  # T == H: the layout found on the first call
    m = cap.result().modules[0]
    assert m.layout == "heads [B, T, H, D]" and m.count == 2 * 2 * 3 + 2 * 3 * 3
    x = model.emb(ids).detach().double()
    np.testing.assert_allclose(
        m.q[-18:], np.repeat((x**2).mean(-1).reshape(-1).numpy(), 3), rtol=1e-12
    )
