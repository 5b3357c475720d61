"""capture/hooks.py, its host copy and records: the one host copy of the pending q (per
device, float64), what a call stores (real tokens only, positions = cumsum(mask) - 1, batch
offset, heads, call index, float32 rounding when asked), the summary-only fold, and the frozen
module record."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rmsnorm_eps.capture.hooks import NormState, PendingQ, copy_to_host, module_record, store  # noqa: E402
from rmsnorm_eps.capture.modules import NormModule  # noqa: E402

SPEC = NormModule("layers.0.q_norm", "RMSNorm", "torch.nn.RMSNorm", 1, "w")


def _state() -> NormState:
    return NormState(SPEC, torch.nn.RMSNorm(4, eps=1e-6))


def test_copy_to_host_keeps_shapes_and_values() -> None:
    st = _state()
    a = torch.arange(6, dtype=torch.float32).reshape(1, 2, 3)
    b = torch.tensor([[[0.1]]], dtype=torch.float64)
    host = copy_to_host([PendingQ(st, a, None, 0, 0), PendingQ(st, b, None, 0, 0)])
    assert [tuple(h.shape) for h in host] == [(1, 2, 3), (1, 1, 1)]
    assert all(h.dtype == torch.float64 for h in host)
    assert torch.equal(host[0], a.double()) and float(host[1]) == 0.1


def test_store_drops_padding_and_ranks_positions() -> None:
    st = _state()
    q = torch.tensor(
        [[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], [[7.0, 8.0], [9.0, 10.0], [11.0, 1.0 / 3.0]]],
        dtype=torch.float64,
    )
    mask = torch.tensor([[False, True, True], [True, True, True]])  # left padding in row 0
    store(
        PendingQ(st, q, mask, 4, 1),
        q,
        q_dtype="float64",
        summary_only=False,
        min_ratio=None,
        top_k=5,
    )
    assert st.count == 10
    np.testing.assert_array_equal(st.q[0], [3, 4, 5, 6, 7, 8, 9, 10, 11, 1 / 3])
    np.testing.assert_array_equal(st.batch[0], [4, 4, 4, 4, 5, 5, 5, 5, 5, 5])
    np.testing.assert_array_equal(st.position[0], [0, 0, 1, 1, 0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(st.head[0], [0, 1] * 5)
    np.testing.assert_array_equal(st.call[0], [1] * 10)
    # float32: the value as the dump stores it
    st32 = _state()
    store(
        PendingQ(st32, q, mask, 0, 0),
        q,
        q_dtype="float32",
        summary_only=False,
        min_ratio=None,
        top_k=5,
    )
    assert st32.q[0].dtype == np.float64
    assert st32.q[0][-1] == float(np.float32(1 / 3)) != 1 / 3


def test_store_summary_only_folds_like_the_dump() -> None:
    st = _state()
    st.eps = 1.0
    q = torch.tensor([[[10.0], [100.0], [0.5]]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    store(
        PendingQ(st, q, mask, 0, 0),
        q,
        q_dtype="float64",
        summary_only=True,
        min_ratio=49.0,
        top_k=2,
    )
    assert st.q == [] and st.count == 3
    assert st.summary is not None
    assert st.summary.count == 3 and st.summary.below == 2 and st.summary.min_q == 0.5
    rec = module_record(st, summary_only=True)
    assert rec.q is None and rec.summaries is not None
    assert set(rec.summaries) == {"all", "first", "other"}
    assert rec.summaries["first"].count == 1 and rec.summaries["first"].below == 1
    assert rec.summaries["other"].count == 2 and rec.summaries["other"].below == 1
    assert rec.summaries["all"] is not st.summary  # a copy: capturing may go on


def test_module_record_full_and_skipped() -> None:
    st = _state()
    with torch.no_grad():
        st.module.weight.copy_(torch.tensor([1.0, -2.0, 3.0, 0.0]))
    rec = module_record(st, summary_only=False)
    assert rec.name == "layers.0.q_norm" and rec.norm is None and rec.reason is None
    assert rec.q is not None and rec.q.dtype == np.float64 and rec.q.size == 0
    assert rec.weight == {"min": -2.0, "max": 3.0, "mean": 0.5, "mean_abs": 1.5}
    assert rec.weight_dtype == "float32" and rec.gain == "w"
    st.skipped = "layout unknown: x"
    rec = module_record(st, summary_only=False)
    assert rec.norm == "unknown" and rec.reason == "not analysed: layout unknown: x"
