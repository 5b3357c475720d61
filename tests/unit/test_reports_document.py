"""reports/document.py: the gate and skipped-layer pieces of every document, and
:func:`document` finding the result's reporter (the document of a ratio report built from a
small array states the counts numpy gives)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rmsnorm_eps._version import __version__
from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.gate import GateResult
from rmsnorm_eps.jsonvalues import SCHEMA_VERSION, head, jnum
from rmsnorm_eps.reports.document import document, gate_document, skipped_document
from rmsnorm_eps.reports.options import UnsupportedResult


def test_gate_document_copies_every_field_in_order() -> None:
    assert gate_document(None) is None
    gate = GateResult(True, 3, 0.25, 5, 0.5, "3 violation(s) within the budget")
    doc = gate_document(gate)
    assert doc == {
        "passed": True,
        "violations": 3,
        "fraction": 0.25,
        "max_violations": 5,
        "max_fraction": 0.5,
        "reason": "3 violation(s) within the budget",
    }
    assert list(doc or {}) == [
        "passed",
        "violations",
        "fraction",
        "max_violations",
        "max_fraction",
        "reason",
    ]


def test_skipped_document_is_absent_without_skipped_layers() -> None:
    assert skipped_document(()) == {}
    skipped = (SimpleNamespace(name="a</x>", problem="bad CRC-32"),)
    assert skipped_document(skipped) == {"skipped": [{"name": "a</x>", "problem": "bad CRC-32"}]}


def test_head_and_numbers_as_json_allows_them() -> None:
    assert head("ratio") == {
        "schema_version": SCHEMA_VERSION,
        "tool": "rmsnorm-eps",
        "version": __version__,
        "command": "ratio",
    }
    assert [jnum(v) for v in (None, 1.5, float("nan"), float("inf"), -float("inf"))] == [
        None,
        1.5,
        "nan",
        "inf",
        "-inf",
    ]


def test_document_of_a_ratio_report_states_numpy_counts(
    write_npy: Callable[..., Path],
) -> None:
    eps = 1e-5
    q = np.array([[1e-4, 2e-3, 0.0], [np.nan, 5e-4, 1.0]], np.float64)
    rep = analyze_dump(write_npy(q), eps)
    gate = evaluate_gate(rep)
    doc = document(rep, gate)
    finite = q[np.isfinite(q)]
    ratio = finite / eps
    below = int(np.sum((finite > 0) & (ratio < rep.min_ratio)))
    assert doc["command"] == "ratio"
    summary = doc["summary"]
    assert isinstance(summary, dict)
    assert summary["count"] == q.size
    assert summary["below_bound"] == below == 1  # q/eps 10 (50, 200, 1e5 pass)
    assert summary["nonfinite"] == 1
    assert summary["zero"] == 1
    assert summary["violations"] == below + 1
    assert doc["gate"] == gate_document(gate)
    assert doc["min_ratio"] == rep.min_ratio
    layers = doc["layers"]
    assert isinstance(layers, list) and len(layers) == 1
    layer = layers[0]
    assert layer["min_ratio"] == pytest.approx(float(np.min(ratio[ratio > 0])), rel=1e-15)
    json.dumps(doc, allow_nan=False)  # plain values only: NaN is written as a string


def test_document_without_a_gate_has_a_null_gate(write_npy: Callable[..., Path]) -> None:
    rep = analyze_dump(write_npy(np.array([1.0], np.float64)), 1e-6)
    assert document(rep)["gate"] is None


def test_document_of_an_unknown_result_is_refused() -> None:
    with pytest.raises(UnsupportedResult, match="no reporter for object"):
        document(object())
