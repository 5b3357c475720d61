"""capture/reduce.py: ``reduce_rows`` returns, per vector, the quantity a norm divides by.

Each expected value is computed independently in plain Python (``math.fsum`` over the
elements of one vector), so the float64 path must agree to ~1 ulp and the scaled float32 path
(the accelerator's) to float32 rounding; the errors name what is wrong.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.reduce import GATE_FNS, NORM_KINDS, reduce_rows  # noqa: E402


def _rms(v: list[float]) -> float:
    return math.fsum(a * a for a in v) / len(v)


def _layer(v: list[float]) -> float:
    mu = math.fsum(v) / len(v)
    return math.fsum((a - mu) ** 2 for a in v) / len(v)


def _l2(v: list[float]) -> float:
    return math.fsum(a * a for a in v)


def _silu(g: float) -> float:
    return g / (1.0 + math.exp(-g))


_GATES = {
    "silu": _silu,
    "sigmoid": lambda g: 1.0 / (1.0 + math.exp(-g)),
    "gelu": lambda g: 0.5 * g * (1.0 + math.erf(g / math.sqrt(2.0))),
    "gelu_tanh": lambda g: (
        0.5 * g * (1.0 + math.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)))
    ),
    "relu": lambda g: max(g, 0.0),
    "tanh": math.tanh,
}


def _rows(seed: int, shape: tuple[int, ...], offset: float = 0.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64) + offset


def test_kinds_and_gates_listed() -> None:
    assert NORM_KINDS == ("rms", "layer", "gated-rms", "l2")
    assert set(GATE_FNS) == set(_GATES)


@pytest.mark.parametrize(("kind", "ref"), [("rms", _rms), ("layer", _layer), ("l2", _l2)])
def test_float64_path_matches_fsum(kind: str, ref: object) -> None:
    x = _rows(0, (2, 3, 8), offset=5.0)
    got = reduce_rows(x, kind)
    assert got.dtype == torch.float64 and tuple(got.shape) == (2, 3, 1)
    for b in range(2):
        for t in range(3):
            want = ref(x[b, t].tolist())  # type: ignore[operator]
            assert float(got[b, t, 0]) == pytest.approx(want, rel=1e-14)


def test_layer_variance_has_no_cancellation() -> None:
    # mean 1e8, spread 1: a one-pass E[x^2] - E[x]^2 in float64 loses every digit
    x = torch.tensor([[1e8 + d for d in (-1.5, -0.5, 0.5, 1.5)]], dtype=torch.float64)
    got = float(reduce_rows(x, "layer")[0, 0])
    assert got == pytest.approx(1.25, rel=1e-12)
    assert got == pytest.approx(_layer(x[0].tolist()), rel=1e-12)


def test_ndim_normalizes_trailing_axes_together() -> None:
    x = _rows(1, (2, 3, 4))
    got = reduce_rows(x, "rms", ndim=2)
    assert tuple(got.shape) == (2, 1)
    for b in range(2):
        assert float(got[b, 0]) == pytest.approx(_rms(x[b].reshape(-1).tolist()), rel=1e-14)


def test_groups_are_consecutive_slices() -> None:
    x = _rows(2, (3, 12))
    got = reduce_rows(x, "rms", group_size=4)
    assert tuple(got.shape) == (3, 3)
    for r in range(3):
        for k in range(3):
            want = _rms(x[r, 4 * k : 4 * k + 4].tolist())
            assert float(got[r, k]) == pytest.approx(want, rel=1e-14)


@pytest.mark.parametrize("size", [5, -4])
def test_group_size_must_divide_width(size: int) -> None:
    with pytest.raises(
        ValueError, match=f"group size {size} does not divide the normalized width 12"
    ):
        reduce_rows(torch.ones(2, 12), "rms", group_size=size)


def test_unknown_kind_and_gate_function_and_compute() -> None:
    x = torch.ones(2, 4)
    with pytest.raises(ValueError, match="unknown norm kind 'batch'"):
        reduce_rows(x, "batch")
    with pytest.raises(ValueError, match="unknown gate function 'swish'"):
        reduce_rows(x, "gated-rms", gate_fn="swish")
    with pytest.raises(ValueError, match="compute must be float32 or float64, got 'float16'"):
        reduce_rows(x, "rms", compute="float16")


@pytest.mark.parametrize("name", sorted(_GATES))
def test_gate_applied_before_normalizing(name: str) -> None:
    x = _rows(3, (2, 8))
    g = _rows(4, (2, 8))
    got = reduce_rows(x, "gated-rms", group_size=4, gate=g, gate_fn=name)
    f = _GATES[name]
    for r in range(2):
        for k in range(2):
            a = [
                xi * f(gi)
                for xi, gi in zip(
                    x[r, 4 * k : 4 * k + 4].tolist(), g[r, 4 * k : 4 * k + 4].tolist(), strict=True
                )
            ]
            assert float(got[r, k]) == pytest.approx(_rms(a), rel=1e-12), name


def test_gated_without_gate_is_q_of_x() -> None:
    # a norm that gates after normalizing divides by the q of x itself: no gate is passed
    x = _rows(5, (2, 8))
    got = reduce_rows(x, "gated-rms", group_size=8)
    assert float(got[1, 0]) == pytest.approx(_rms(x[1].tolist()), rel=1e-14)


def test_scale_multiplies_input_first() -> None:
    x = _rows(6, (3, 4))
    w = torch.tensor([0.5, 2.0, -1.0, 3.0], dtype=torch.float64)
    got = reduce_rows(x, "rms", scale=w)
    for r in range(3):
        a = [xi * wi for xi, wi in zip(x[r].tolist(), w.tolist(), strict=True)]
        assert float(got[r, 0]) == pytest.approx(_rms(a), rel=1e-14)


@pytest.mark.parametrize("kind", ["rms", "layer", "l2"])
@pytest.mark.parametrize("magnitude", [1e-30, 1e-3, 1.0, 1e19])
def test_float32_scaled_path_matches_float64(kind: str, magnitude: float) -> None:
    # float32 values exactly; squares of 1e19 overflow float32 and of 1e-30 underflow it
    x = (_rows(7, (4, 16), offset=2.0) * magnitude).float()
    ref = {"rms": _rms, "layer": _layer, "l2": _l2}[kind]
    got = reduce_rows(x, kind, compute="float32")
    assert got.dtype == torch.float64
    for r in range(4):
        want = ref(x[r].double().tolist())
        assert math.isfinite(float(got[r, 0]))
        assert float(got[r, 0]) == pytest.approx(want, rel=1e-5)
    naive = (x.float() ** 2).mean(-1)
    if magnitude in (1e-30, 1e19):  # the unscaled float32 reduction would be wrong
        assert not torch.allclose(naive.double(), got[:, 0], rtol=1e-3, atol=0.0)


def test_float32_path_keeps_zero_and_nonfinite_rows() -> None:
    x = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],
            [1.0, float("inf"), 0.0, 1.0],
            [1.0, float("nan"), 2.0, 0.0],
            [3.0, 4.0, 0.0, 0.0],
        ]
    )
    for compute in ("float32", "float64"):
        got = reduce_rows(x, "rms", compute=compute)[:, 0]
        assert float(got[0]) == 0.0, compute
        assert math.isinf(float(got[1])), compute
        assert math.isnan(float(got[2])), compute
        assert float(got[3]) == pytest.approx(25.0 / 4.0, rel=1e-7), compute


def test_input_is_not_modified_and_grad_free() -> None:
    x = _rows(8, (2, 4)).requires_grad_(True)
    before = x.detach().clone()
    got = reduce_rows(x, "rms", scale=torch.full((4,), 2.0))
    assert not got.requires_grad
    assert torch.equal(x.detach(), before)


def test_bfloat16_input_reduced_in_float64_on_cpu() -> None:
    x = _rows(9, (2, 32)).bfloat16()
    got = reduce_rows(x, "rms")
    for r in range(2):
        assert float(got[r, 0]) == pytest.approx(_rms(x[r].double().tolist()), rel=1e-14)
