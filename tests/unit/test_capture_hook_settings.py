"""capture/hooks.py, the settings of a call: on a module's first call its kind is classified,
every call reads the live eps and refuses one that changed; torch.nn.RMSNorm(eps=None) gets
torch's default for the input dtype; a probe rerun's shape can tell a layout. Checked on tiny
torch modules."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.errors import CaptureError  # noqa: E402
from rmsnorm_eps.capture.hooks import CallContext, NormState, call_settings, probe_layout  # noqa: E402
from rmsnorm_eps.capture.modules import find_norm_modules, iter_named  # noqa: E402


class Scaled(torch.nn.Module):
    """Not a norm: y = 2x (has an eps attribute, so it is a candidate)."""

    def __init__(self) -> None:
        super().__init__()
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * x


def _state(module: torch.nn.Module) -> NormState:
    holder = torch.nn.Sequential(module)
    ((spec, mod),) = iter_named(holder, find_norm_modules(holder))
    return NormState(spec, mod)


def test_rmsnorm_kind_and_live_eps() -> None:
    norm = torch.nn.RMSNorm(8, eps=1e-5)
    st = _state(norm)
    x = torch.randn(2, 3, 8)
    nk = call_settings(st, x, None, None)
    assert nk is not None and nk.norm == "rms" and nk.gain == "w"
    assert st.eps == pytest.approx(1e-5) and st.input_dtype == "float32" and st.inner_ndim == 1
    assert st.eps_source is not None and st.eps_source.startswith("attribute eps")
    assert call_settings(st, x, None, None) is nk  # classified once
    norm.eps = 1e-3
    with pytest.raises(CaptureError, match=r"epsilon changed between calls \(1e-05 -> 0.001\)"):
        call_settings(st, x, None, None)


def test_eps_attribute_that_is_not_a_number() -> None:
    norm = torch.nn.RMSNorm(8, eps=1e-5)
    st = _state(norm)
    call_settings(st, torch.randn(2, 8), None, None)
    norm.eps = "tiny"  # type: ignore[assignment]
    with pytest.raises(CaptureError, match="eps = 'tiny' is not a number"):
        call_settings(st, torch.randn(2, 8), None, None)
    norm.eps = -1.0
    with pytest.raises(CaptureError, match=r"eps = -1\.0 is not >= 0"):
        call_settings(st, torch.randn(2, 8), None, None)


def test_torch_default_eps_for_none() -> None:
    st = _state(torch.nn.RMSNorm(8, eps=None))
    nk = call_settings(st, torch.randn(2, 8, dtype=torch.float64), None, None)
    assert nk is not None and nk.norm == "rms"
    assert st.eps == torch.finfo(torch.float64).eps
    assert st.eps_source == "torch.nn.RMSNorm eps=None: torch's default for float64 input"


def test_unknown_module_and_gate_shape() -> None:
    st = _state(Scaled())
    assert call_settings(st, torch.randn(2, 3, 8), None, None) is None
    assert st.kind is not None and st.kind.norm == "unknown" and st.eps is None
    st = _state(torch.nn.RMSNorm(8, eps=1e-5))
    # a second positional tensor on the first call: the one-input RMSNorm's probe fails
    assert call_settings(st, torch.randn(2, 8), torch.randn(2, 8), None) is None
    assert st.kind is not None and "the probe call failed (TypeError" in str(st.kind.reason)
    st = _state(torch.nn.RMSNorm(8, eps=1e-5))
    assert call_settings(st, torch.randn(2, 8), None, None) is not None
    with pytest.raises(CaptureError, match="gate shape differs from the input's"):
        call_settings(st, torch.randn(2, 8), torch.randn(2, 4), None)


def test_probe_layout_sets_layout_only_on_evidence() -> None:
    st = _state(torch.nn.RMSNorm(8, eps=1e-5))
    x = torch.randn(2, 2, 8)
    probe_layout(st, x, CallContext((2, 2), None))  # no kind yet: nothing
    assert st.layout is None
    call_settings(st, x, None, None)
    probe_layout(st, torch.randn(1, 1, 8), CallContext((1, 1), None))  # size-1: no evidence
    assert st.layout is None
    probe_layout(st, torch.randn(2, 5, 8), CallContext((3, 4), None))  # does not fit: unknown
    assert st.layout is None
    probe_layout(st, torch.randn(5, 2, 8), CallContext((2, 5), None))
    assert st.layout == "tokens [T, B, D]"
