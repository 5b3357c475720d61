"""reports/commands/capture.py: a capture's modules in each role: the min q/eps of each module
as numpy gives it from its q values (zero vectors left out), one ``capture/ran`` check per
module (a warning for a module that never ran, never a failure of the run), the unknown
kinds listed, a prebuilt (torchrun-reduced) document used as it is, names escaped in text."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.capture.records import CaptureResult, ModuleRecord
from rmsnorm_eps.capture.report import CaptureReport
from rmsnorm_eps.reports.commands.capture import (
    CAPTURE_RULES,
    CaptureReporter,
)
from rmsnorm_eps.reports.options import RenderOptions

EPS = 1e-5
Q0 = np.array([0.0, 3e-4, 2e-3], np.float32).astype(np.float64)
HOSTILE = "m\x1b[2J\n::error::x ##[group]"


def _module(name: str, q: np.ndarray | None, **extra: Any) -> ModuleRecord:
    n = 0 if q is None else int(q.size)
    fields: dict[str, Any] = {
        "class_name": "LlamaRMSNorm",
        "kind": "rms",
        "eps": EPS,
        "eps_source": "module.variance_epsilon",
        "dim": 64,
        "input_dtype": "float32",
        "gain": "w",
        "weight": None,
        "weight_dtype": "float32",
        "layout": "last-axis (b, t, d)",
        "heads": 1,
        "calls": 1 if n else 0,
        "count": n,
        "q": q,
        "norm": "rms",
    }
    fields.update(extra)
    return ModuleRecord(name=name, **fields)


@pytest.fixture
def report() -> CaptureReport:
    modules = (
        _module("model.layers.0.input_layernorm", Q0),
        _module("model.norm", None),
        _module(HOSTILE, np.array([1.0]), norm="unknown", reason="no rule for this class"),
    )
    result = CaptureResult(modules, 2, 3, False, "float32", 49.25)
    return CaptureReport(result, "tiny-llama", {"dump": "out/q.npz", "config": None})


def test_document_min_ratio_is_the_smallest_positive_q_over_eps(report: CaptureReport) -> None:
    doc = CaptureReporter().document(report)
    assert (doc["command"], doc["model"], doc["tokens"]) == ("capture", "tiny-llama", 3)
    first, idle, unknown = doc["modules"]
    assert first["min_ratio"] == pytest.approx(Q0[Q0 > 0].min() / EPS, rel=1e-15)
    assert first["count"] == 3
    assert idle["min_ratio"] is None and idle["count"] == 0
    assert unknown["name"] == HOSTILE  # exact in the document
    assert unknown["min_ratio"] == pytest.approx(1.0 / EPS)


def test_a_prebuilt_document_is_used_and_its_infinity_is_a_string(report: CaptureReport) -> None:
    doc = CaptureReporter().document(report)
    doc["modules"][0] = {**doc["modules"][0], "min_ratio": float("inf")}
    reduced = CaptureReport(report.result, report.model, report.outputs, document=doc)
    assert CaptureReporter().document(reduced)["modules"][0]["min_ratio"] == "inf"
    assert doc["modules"][0]["min_ratio"] == float("inf")  # the given document is not changed
    shown = CaptureReporter(RenderOptions()).text(reduced).splitlines()
    row = next(line.split() for line in shown if line.startswith(" model.layers.0"))
    assert row[-1] == "inf"


def test_checks_warn_for_idle_and_unknown_modules_and_pass(report: CaptureReport) -> None:
    rep = CaptureReporter().checks(report)
    assert rep.rules == CAPTURE_RULES
    assert [(c.rule, c.name, c.passed, c.level) for c in rep.checks] == [
        ("capture/ran", "model.layers.0.input_layernorm", True, "note"),
        ("capture/ran", "model.norm", False, "warning"),
        ("capture/ran", HOSTILE, True, "note"),
        ("capture/kind", HOSTILE, False, "warning"),
    ]
    assert rep.passed  # capture never fails on them
    assert rep.verdict == (
        "2 of 3 norm module(s) ran; 1 never ran; 1 of unknown kind (not analysed)"
    )
    assert rep.source == "out/q.npz"
    first = rep.checks[0]
    assert first.numbers["min_ratio"] == pytest.approx(Q0[Q0 > 0].min() / EPS, rel=1e-15)
    assert first.message == "model.layers.0.input_layernorm: 3 inputs, live eps 1e-05, min q/eps 30"
    assert rep.checks[3].message.endswith("unknown norm kind: no rule for this class")


def test_text_table_notes_and_escapes(report: CaptureReport) -> None:
    out = CaptureReporter(RenderOptions()).text(report)
    lines = out.splitlines()
    assert lines[0] == "tiny-llama: 3 norm modules, 2 text(s), 3 tokens; live eps: 1e-05"
    row = next(line.split() for line in lines if line.startswith(" model.layers.0"))
    ratio = Q0[Q0 > 0].min() / EPS
    assert row == [
        "model.layers.0.input_layernorm",
        "rms",
        "1e-05",
        "64",
        "float32",
        "w",
        "last-axis",
        "3",
        f"{ratio:.6g}",
    ]
    assert "not analysed: m\\x1b[2J\\x0a\\x3a:error\\x3a:x \\x23#[group] (LlamaRMSNorm): " in out
    assert lines[-1] == "wrote dump: out/q.npz"
    assert "\x1b" not in out and "##[" not in out
