"""Hooks on tiny randomly initialised models (no download): q, eps, gain, layouts, padding."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rmsnorm_eps.capture.errors import CaptureError  # noqa: E402
from rmsnorm_eps.capture.hooks import QCapture  # noqa: E402
from rmsnorm_eps.capture.modules import find_norm_modules  # noqa: E402
from rmsnorm_eps.numerics import rmsnorm_reference  # noqa: E402
from tests.helpers import tiny_gemma3, tiny_llama, tiny_qwen3  # noqa: E402


def _inputs_and_outputs(model: object) -> dict[str, tuple[list, list]]:
    """Inputs and outputs of every norm module, captured by independent hooks."""
    seen: dict[str, tuple[list, list]] = {}
    for spec in find_norm_modules(model):
        mod = dict(model.named_modules())[spec.name]  # type: ignore[attr-defined]
        store: tuple[list, list] = ([], [])
        seen[spec.name] = store

        def hook(m, args, out, store=store):  # type: ignore[no-untyped-def]
            store[0].append(args[0].detach().clone())
            store[1].append(out.detach().clone())

        mod.register_forward_hook(hook)
    return seen


def test_llama_q_equals_mean_square_of_input_and_eps_reproduces_output() -> None:
    model = tiny_llama(1e-5)
    seen = _inputs_and_outputs(model)
    ids = torch.randint(0, 64, (2, 5))
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=ids)
    res = cap.result()
    assert len(res.modules) == 5  # 2 layers x 2 + final norm
    for m in res.modules:
        x, y = seen[m.name][0][0], seen[m.name][1][0]
        expect = (x.double() ** 2).mean(-1).reshape(-1).numpy()
        np.testing.assert_allclose(m.q, expect, rtol=1e-6)
        assert m.eps == 1e-5 and m.dim == 32 and m.gain == "w" and m.input_dtype == "float32"
        gain = dict(model.named_modules())[m.name].weight.detach().double().numpy()
        ref = rmsnorm_reference(x.double().numpy(), m.eps, gain)
        np.testing.assert_allclose(y.double().numpy(), ref, rtol=1e-5, atol=1e-6)
        # the class default 1e-6 would not reproduce the output: the captured eps is the live one
        wrong = rmsnorm_reference(x.double().numpy(), 1e-6, gain)
        assert not np.allclose(y.double().numpy(), wrong, rtol=1e-5, atol=1e-6)
    assert res.modules[0].position.tolist() == [0, 1, 2, 3, 4] * 2
    assert res.modules[0].batch.tolist() == [0] * 5 + [1] * 5


def test_gemma3_one_plus_w_detected_and_reproduces_output() -> None:
    model = tiny_gemma3()
    seen = _inputs_and_outputs(model)
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=torch.randint(0, 64, (1, 6)))
    res = cap.result()
    assert {m.gain for m in res.modules} == {"1+w"}
    for m in res.modules:
        x, y = seen[m.name][0][0], seen[m.name][1][0]
        w = dict(model.named_modules())[m.name].weight.detach().double().numpy()
        ref = rmsnorm_reference(x.double().numpy(), m.eps, 1.0 + w)
        np.testing.assert_allclose(y.double().numpy(), ref, rtol=1e-5, atol=1e-6)
        assert not np.allclose(y.double().numpy(), rmsnorm_reference(x.double().numpy(), m.eps, w))


def test_qwen3_per_head_norms_bthd() -> None:
    model = tiny_qwen3()
    seen = _inputs_and_outputs(model)
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=torch.randint(0, 64, (2, 3)))
    res = cap.result()
    by = {m.name: m for m in res.modules}
    qn = by["model.layers.0.self_attn.q_norm"]
    assert qn.heads == 4 and qn.dim == 8 and qn.layout == "heads [B, T, H, D]"
    x = seen[qn.name][0][0]  # [B, T, H, D]
    np.testing.assert_allclose(qn.q, (x.double() ** 2).mean(-1).reshape(-1).numpy(), rtol=1e-6)
    assert qn.position.tolist()[:8] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert qn.head.tolist()[:8] == [0, 1, 2, 3, 0, 1, 2, 3]
    kn = by["model.layers.0.self_attn.k_norm"]
    assert kn.heads == 2 and kn.count == 2 * 3 * 2


class HeadModel(torch.nn.Module):
    """Applies a per-head torch.nn.RMSNorm to [B, H, T, D] (transposed before the norm)."""

    def __init__(self, layout: str) -> None:
        super().__init__()
        self.layout = layout
        self.emb = torch.nn.Embedding(16, 12)
        self.norm = torch.nn.RMSNorm(4, eps=None)

    def forward(self, input_ids: object, attention_mask: object = None) -> object:
        x = self.emb(input_ids)  # [B, T, 12]
        b, t, _ = x.shape
        x = x.view(b, t, 3, 4)
        if self.layout == "bhtd":
            x = x.transpose(1, 2)
        return self.norm(x)


@pytest.mark.parametrize("layout", ["bthd", "bhtd"])
def test_per_head_layouts_both_ways_give_the_same_q(layout: str) -> None:
    torch.manual_seed(3)
    model = HeadModel(layout)
    ids = torch.randint(0, 16, (2, 5))
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=ids)
    m = cap.result().modules[0]
    x = model.emb(ids).view(2, 5, 3, 4).detach().double()
    np.testing.assert_allclose(m.q, (x**2).mean(-1).reshape(-1).numpy(), rtol=1e-6)
    assert m.layout == f"heads [B, {'T, H' if layout == 'bthd' else 'H, T'}, D]"
    assert m.eps == pytest.approx(1.1920928955078125e-07, rel=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_rmsnorm_eps_none_resolves_to_float32_machine_eps(dtype: object) -> None:
    norm = torch.nn.RMSNorm(8, eps=None).to(dtype)
    model = torch.nn.Sequential(norm)
    x = (torch.randn(2, 3, 8) * 1e-3).to(dtype)
    with QCapture(model) as cap, torch.no_grad():
        y = model(x)
    m = cap.result().modules[0]
    assert m.eps == 1.1920929e-07 or math.isclose(m.eps, 1.1920929e-07, rel_tol=1e-7)
    assert m.eps == torch.finfo(torch.float32).eps
    ref = rmsnorm_reference(x.double().numpy(), m.eps)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    np.testing.assert_allclose(y.double().numpy(), ref, rtol=tol, atol=1e-7)
    # q is computed in float64 from the stored activation, whatever its dtype
    np.testing.assert_allclose(m.q, (x.double() ** 2).mean(-1).reshape(-1).numpy(), rtol=1e-12)


def test_padding_excluded_and_positions_count_real_tokens() -> None:
    model = tiny_llama()
    ids = torch.randint(0, 64, (3, 4))
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    with QCapture(model) as cap, torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
        model(input_ids=ids[:1, :2])  # a second call: batch indices continue
    res = cap.result()
    m = res.modules[0]
    assert m.count == 7 + 2 and res.sequences == 4 and res.tokens == 9
    assert m.position.tolist() == [0, 1, 2, 3, 0, 1, 0, 0, 1]
    assert m.batch.tolist() == [0, 0, 0, 0, 1, 1, 2, 3, 3]


def test_listed_module_names_and_errors() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(CaptureError, match="has no norm module"):
        QCapture(model)
    with pytest.raises(CaptureError, match="no module named 'nope'"):
        QCapture(model, names=["nope"])
    # a listed module that is no norm: listed as unknown with the reason, never analysed
    with QCapture(model, names=["0"]) as cap, torch.no_grad():
        model(torch.randn(1, 3, 4))
    m = cap.result().modules[0]
    assert m.norm == "unknown" and m.count == 0 and m.calls == 1 and m.q is not None
    assert m.reason is not None and "matches no" in m.reason
    with pytest.raises(CaptureError, match="min_ratio"):
        QCapture(tiny_llama(), summary_only=True)


def test_t5_layer_norm_is_hooked() -> None:
    from transformers.models.t5.modeling_t5 import T5LayerNorm

    model = torch.nn.Sequential(T5LayerNorm(8, eps=1e-6))
    with QCapture(model) as cap, torch.no_grad():
        model(torch.randn(1, 2, 8))
    m = cap.result().modules[0]
    assert m.kind == "T5LayerNorm" and m.eps == 1e-6 and m.count == 2
