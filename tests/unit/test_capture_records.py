"""capture/records.py: ``ModuleRecord`` and ``CaptureResult`` are frozen, and their defaults
are the ones a module that ran as a plain RMSNorm needs (add rule, one input, no gate)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rmsnorm_eps.capture.records import CaptureResult, ModuleRecord


def _record(**over: object) -> ModuleRecord:
    base: dict[str, object] = {
        "name": "model.norm",
        "class_name": "LlamaRMSNorm",
        "kind": "RMSNorm-like",
        "eps": 1e-6,
        "eps_source": "attribute variance_epsilon",
        "dim": 32,
        "input_dtype": "float32",
        "gain": "w",
        "weight": None,
        "weight_dtype": "float32",
        "layout": "tokens [B, T, D]",
        "heads": 1,
        "calls": 1,
        "count": 3,
    }
    base.update(over)
    return ModuleRecord(**base)  # type: ignore[arg-type]


def test_defaults() -> None:
    m = _record()
    assert (m.q, m.position, m.batch, m.head, m.call, m.summaries) == (None,) * 6
    assert m.norm is None and m.reason is None and m.gate_fn is None and m.input_scale is None
    assert (m.bias, m.group_size, m.gate_before, m.channels_first) == (False, None, None, False)
    assert (m.eps_rule, m.inputs, m.max_calls) == ("add", 1, 0)


def test_frozen_and_replace() -> None:
    m = _record(q=np.array([1.0, 2.0, 3.0]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.eps = 1.0  # type: ignore[misc]
    n = dataclasses.replace(m, eps=1e-5)
    assert n.eps == 1e-5 and m.eps == 1e-6 and n.q is m.q


def test_capture_result() -> None:
    m = _record()
    res = CaptureResult(
        modules=(m,), sequences=2, tokens=3, summary_only=False, q_dtype="float64", min_ratio=None
    )
    assert res.top_k == 5 and res.modules[0] is m
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.tokens = 4  # type: ignore[misc]
    fields = {f.name for f in dataclasses.fields(CaptureResult)}
    assert fields == {
        "modules",
        "sequences",
        "tokens",
        "summary_only",
        "q_dtype",
        "min_ratio",
        "top_k",
    }
