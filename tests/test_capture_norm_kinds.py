"""Four more norm kinds, as hand-written torch modules (the formulas written here, independently
of the capture): a gated RMSNorm with sigmoid (and gelu, tanh) gates, an RMSNorm that scales its
input by (1 + w) before normalizing, a q/k norm normalizing q and k in one call with a clamp
instead of eps, and a channels-first [B, C, T] LayerNorm. Each is captured in a tiny model on a
batch with B == T == H, and compared with the test's own float64 computation per (batch,
position, head, call) within 1e-5 relative; the live eps (and the clamp as the eps rule) too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.classify import classify_module  # noqa: E402
from rmsnorm_eps.capture.hooks import QCapture  # noqa: E402

F = torch.nn.functional
D, H = 8, 3


class GatedNorm(torch.nn.Module):
    """y = w * x / sqrt(mean(x^2) + eps) * f(gate) (gate after, as Kimi Linear's)."""

    def __init__(self, fn: str) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(D) + 0.5)
        self.variance_epsilon = 1e-6
        self.fn = fn

    def forward(self, x: Any, gate: Any = None) -> Any:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        act = {"sigmoid": torch.sigmoid, "gelu": F.gelu, "tanh": torch.tanh}[self.fn]
        return (self.weight * y * act(gate.float())).to(x.dtype)


class InputScaledNorm(torch.nn.Module):
    """a = (1 + w) * x; y = a / sqrt(mean(a^2) + eps)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(D) * 0.5)
        self.eps = 1e-5

    def forward(self, x: Any) -> Any:
        a = x * (1.0 + self.weight)
        return a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + self.eps)


class QKClampNorm(torch.nn.Module):
    """q and k in one call: x * rsqrt(max(mean(x^2), eps)), gains w_q and w_k."""

    def __init__(self) -> None:
        super().__init__()
        self.q_weight = torch.nn.Parameter(torch.rand(D) + 0.5)
        self.k_weight = torch.nn.Parameter(torch.rand(D) + 0.5)
        self.clamp = 1e-6

    def forward(self, q: Any, k: Any) -> tuple[Any, Any]:
        def norm(x: Any) -> Any:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True).clamp(min=self.clamp))

        return norm(q) * self.q_weight, norm(k) * self.k_weight


class ChannelsFirstLayerNorm(torch.nn.Module):
    """A LayerNorm over the channels of a [B, C, T] input (a convolution's layout)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(D) + 0.5)
        self.bias = torch.nn.Parameter(torch.rand(D) - 0.5)
        self.eps = 1e-5

    def forward(self, x: Any) -> Any:
        mu = x.mean(1, keepdim=True)
        var = (x - mu).pow(2).mean(1, keepdim=True)
        return (x - mu) / torch.sqrt(var + self.eps) * self.weight[:, None] + self.bias[:, None]


class Tiny(torch.nn.Module):
    """Embeddings, then each norm kind as a model would call it."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(32, D * H)
        self.gate_proj = torch.nn.Linear(D * H, D * H)
        self.sig = GatedNorm("sigmoid")
        self.gelu = GatedNorm("gelu")
        self.tanh = GatedNorm("tanh")
        self.scaled = InputScaledNorm()
        self.qk = QKClampNorm()
        self.conv = torch.nn.Conv1d(D * H, D, 1)
        self.cf = ChannelsFirstLayerNorm()
        self.seen: list[dict[str, Any]] = []  # per forward pass (a layout probe reruns it)

    def forward(self, input_ids: Any, attention_mask: Any = None) -> Any:
        x = self.emb(input_ids)  # [B, T, H*D]
        b, t, _ = x.shape
        heads = x.view(b, t, H, D)
        gate = self.gate_proj(x).view(b, t, H, D)
        seen = {"x": heads, "gate": gate}
        self.seen.append(seen)
        for m in (self.sig, self.gelu, self.tanh):
            m(heads, gate)
        self.scaled(heads)
        q = heads.transpose(1, 2)  # [B, H, T, D]
        k = (heads[..., :1, :] * 2.0).transpose(1, 2)  # one key head: [B, 1, T, D]
        seen |= {"q": q, "k": k}
        self.qk(q, k)
        c = self.conv(x.transpose(1, 2))  # [B, D, T]
        seen["c"] = c
        return self.cf(c)


@pytest.fixture(scope="module")
def captured() -> tuple[Tiny, Any, Any, Any]:
    torch.manual_seed(5)
    model = Tiny().eval()
    ids = torch.randint(0, 32, (H, H))  # B == T == H
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]])
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
        seen = {k: v.detach().double() for k, v in model.seen[0].items()}
    return model, {m.name: m for m in cap.result().modules}, seen, mask.bool()


def _table(m: Any) -> dict[tuple[int, int, int, int], float]:
    keys = zip(m.batch, m.position, m.head, m.call, strict=True)
    return {(int(b), int(p), int(h), int(c)): float(q) for (b, p, h, c), q in zip(keys, m.q)}


def _expect(q_bth: Any, mask: Any, call: int = 0) -> dict[tuple[int, int, int, int], float]:
    """{(batch, position, head, call): q} from q [B, T, H] of real tokens (right-padded)."""
    out = {}
    for b in range(q_bth.shape[0]):
        for t in range(q_bth.shape[1]):
            if mask[b, t]:
                for h in range(q_bth.shape[2]):
                    out[(b, t, h, call)] = float(q_bth[b, t, h])
    return out


def _close(got: dict[Any, float], want: dict[Any, float]) -> None:
    assert got.keys() == want.keys()
    keys = sorted(want)
    np.testing.assert_allclose([got[k] for k in keys], [want[k] for k in keys], rtol=1e-5)


@pytest.mark.parametrize("name", ["sig", "gelu", "tanh"])
def test_gated_rms_with_other_gate_functions(captured: Any, name: str) -> None:
    _, mods, seen, mask = captured
    m = mods[name]
    fn = {"sig": "sigmoid", "gelu": "gelu", "tanh": "tanh"}[name]
    assert (m.norm, m.gain, m.gate_before, m.gate_fn) == ("gated-rms", "w", False, fn)
    assert m.eps == 1e-6 and m.layout == "heads [B, T, H, D]"
    _close(_table(m), _expect((seen["x"] ** 2).mean(-1), mask))


def test_rms_scaling_its_input_by_one_plus_w(captured: Any) -> None:
    model, mods, seen, mask = captured
    m = mods["scaled"]
    assert (m.norm, m.gain, m.input_scale, m.eps) == ("rms", "none", "1+w", 1e-5)
    a = seen["x"] * (1.0 + model.scaled.weight.detach().double())
    _close(_table(m), _expect((a * a).mean(-1), mask))


def test_qk_norm_in_one_call_with_a_clamp(captured: Any) -> None:
    _, mods, seen, mask = captured
    m = mods["qk"]
    assert (m.norm, m.inputs, m.eps_rule, m.max_calls) == ("rms", 2, "clamp", 2), m.reason
    assert m.eps == pytest.approx(1e-6, rel=1e-6) and "clamp" in str(m.eps_source)
    want = _expect((seen["q"] ** 2).mean(-1).transpose(1, 2), mask, call=0)
    want |= _expect((seen["k"] ** 2).mean(-1).transpose(1, 2), mask, call=1)
    _close(_table(m), want)


def test_channels_first_layer_norm(captured: Any) -> None:
    _, mods, seen, mask = captured
    m = mods["cf"]
    assert (m.norm, m.gain, m.bias, m.channels_first, m.eps) == ("layer", "w", True, True, 1e-5)
    assert m.dim == D and m.layout == "tokens [B, T, D]"
    v = seen["c"].var(1, unbiased=False)[..., None]  # [B, T, 1]
    _close(_table(m), _expect(v, mask))


def test_an_unidentifiable_formula_stays_unknown_with_the_reason() -> None:
    class Cubic(torch.nn.Module):
        eps = 1e-6

        def forward(self, x: Any) -> Any:
            return x / (x.abs().pow(3).mean(-1, keepdim=True) + self.eps).pow(1 / 3)

    nk = classify_module(Cubic(), (D,))
    assert nk.norm == "unknown" and "matches no" in str(nk.reason)


def test_kimi_linear_sigmoid_gated_norm_is_recognized() -> None:
    kimi = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")
    nk = classify_module(kimi.KimiLinearRMSNormGated(16, eps=1e-6), (16,), gate_kw="gate")
    assert (nk.norm, nk.gain, nk.gate_before, nk.gate_fn) == ("gated-rms", "w", False, "sigmoid")
    assert nk.eps == 1e-6 and nk.eps_source == "attribute variance_epsilon"
