"""capture/hooks.py, its shared state: the per-module state starts empty with its own lists
(no state shared between modules), and the call context and pending record are frozen."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.hooks import CallContext, NormState, PendingQ  # noqa: E402
from rmsnorm_eps.capture.modules import NormModule  # noqa: E402

SPEC = NormModule("n", "RMSNorm", "torch.nn.RMSNorm", 1, "w")


def test_norm_state_defaults_are_not_shared() -> None:
    a, b = NormState(SPEC, object()), NormState(SPEC, object())
    a.q.append(torch.zeros(1).numpy())
    a.position.append(torch.zeros(1).numpy())
    assert b.q == [] and b.position == [] and b.batch == [] and b.head == [] and b.call == []
    assert (b.eps, b.layout, b.kind, b.summary, b.split, b.skipped) == (None,) * 6
    assert (b.heads, b.calls, b.count, b.inner_ndim, b.max_calls) == (1, 0, 0, 1, 0)


def test_call_context_and_pending_are_frozen() -> None:
    c1, c2 = CallContext((2, 3), None), CallContext((2, 3), None)
    c1.evidence["padded"] = 8  # the dict is the call's own: filled by the embeddings hook
    assert c2.evidence == {} and c1.ids is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        c1.bt = None  # type: ignore[misc]
    p = PendingQ(NormState(SPEC, object()), torch.zeros(2, 3, 1), None, 0, 0)
    assert p.probe is None and p.ctx is None and p.strides == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.call = 1  # type: ignore[misc]
