"""reports/commands/parity_onnx.py: one line, one document entry and one check per measured
norm of an ONNX graph (stored, configured and effective eps, placement), a check failing
exactly for a norm with findings, the verdict, skipped norms, and hostile node names escaped
in the text while the document keeps them exact."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from rmsnorm_eps.parity.onnx_runtime import NormMeasurement, OnnxParityReport, SkippedNorm
from rmsnorm_eps.reports.commands.parity_onnx import (
    OnnxParityReporter,
    norm_line,
)
from rmsnorm_eps.reports.options import RenderOptions

HOSTILE = "n\x1b[2J\n::error::x ##[group]</testcase>"

GOOD = NormMeasurement(
    name="blocks.0.norm",
    op="SimplifiedLayerNormalization",
    stored=1e-6,
    stored_where="attribute epsilon",
    configured=None,
    configured_from=None,
    probe_eps=1e-6,
    effective=1.0000003e-6,
    effective_low=9.9e-7,
    effective_high=1.01e-6,
    placement_stored="inside",
    placement="inside",
    dtype="float32",
    rows_used=12,
    note="",
    findings=(),
)
BAD = replace(
    GOOD,
    name=HOSTILE,
    stored=None,
    configured=1e-5,
    configured_from="cfg.yaml",
    effective=None,
    effective_low=None,
    effective_high=None,
    note="no small probe",
    findings=("stores no eps", "configured 1e-05"),
)


def _report(*norms: NormMeasurement, skipped: tuple[SkippedNorm, ...] = ()) -> OnnxParityReport:
    return OnnxParityReport(
        path="model.onnx",
        config="cfg.yaml",
        optimized_out=None,
        rel_tol=0.01,
        optimization="ORT_ENABLE_ALL",
        norms=norms,
        skipped=skipped,
    )


def test_norm_line_by_hand() -> None:
    assert norm_line(GOOD) == (
        "blocks.0.norm: stored 1e-06; effective 1e-06 [9.9e-07, 1.01e-06]; placement inside "
        "(graph inside); float32: OK"
    )
    assert norm_line(BAD) == (
        f"{HOSTILE}: stored none; configured 1e-05; effective not measured (no small probe); "
        "placement inside (graph inside); float32: DIFFERENT: stores no eps; configured 1e-05"
    )


def test_one_check_per_norm_failing_exactly_with_findings() -> None:
    report = OnnxParityReporter().checks(_report(GOOD, BAD))
    assert [(c.name, c.passed, c.level) for c in report.checks] == [
        ("blocks.0.norm", True, "error"),
        (HOSTILE, False, "error"),
    ]
    assert report.counts["failed"] == 1 and not report.passed
    assert report.checks[0].numbers == {
        "stored_eps": 1e-6,
        "configured_eps": None,
        "effective_eps": 1.0000003e-6,  # unrounded
        "rel_tol": 0.01,
    }
    assert report.verdict == "1 of 2 norm(s) run a different eps than stored or configured"
    assert report.source == "model.onnx" and report.command == "parity-onnx"
    ok = OnnxParityReporter().checks(_report(GOOD))
    assert ok.passed and ok.verdict == "every norm's effective eps within 1% of the stored eps"
    empty = OnnxParityReporter().checks(_report(skipped=(SkippedNorm("x", "no probe input"),)))
    assert not empty.passed and empty.verdict == "no norm measured (1 skipped)"
    assert [(c.rule, c.name, c.passed, c.level) for c in empty.checks] == [
        ("parity-onnx/measured", "x", False, "error")
    ]
    allowed = OnnxParityReporter().checks(
        replace(_report(GOOD, skipped=(SkippedNorm("x", "why"),)), allow_skipped=True)
    )
    assert allowed.passed and allowed.checks[1].level == "warning"
    assert allowed.verdict.endswith("of the stored eps (1 skipped, allowed)")
    refused = OnnxParityReporter().checks(_report(GOOD, skipped=(SkippedNorm("x", "why"),)))
    assert not refused.passed
    assert refused.verdict == "1 norm(s) not measured (--allow-skipped accepts that)"
    assert ("measured", "0 norm(s), 1 skipped") in empty.facts


def test_document_keeps_names_and_numbers_exact() -> None:
    doc = OnnxParityReporter().document(_report(GOOD, BAD, skipped=(SkippedNorm("m", "why"),)))
    assert (doc["command"], doc["path"], doc["passed"], doc["rel_tol"]) == (
        "parity onnx",
        "model.onnx",
        False,
        0.01,
    )
    good, bad = doc["norms"]
    assert good["effective_eps"] == 1.0000003e-6 and good["agrees"] is True
    assert good["note"] is None and good["findings"] == []
    assert bad["name"] == HOSTILE and bad["findings"] == ["stores no eps", "configured 1e-05"]
    assert doc["skipped"] == [{"name": "m", "why": "why"}]


def test_text_one_line_per_norm_escaped_and_verdict() -> None:
    report = _report(GOOD, BAD, skipped=(SkippedNorm("m", "why"),))
    out = OnnxParityReporter(RenderOptions()).text(report)
    lines = out.splitlines()
    assert lines[0] == (
        "model.onnx: 2 norm(s) measured by ORT_ENABLE_ALL; eps relative tolerance 0.01"
    )
    assert lines[1] == "configured eps from cfg.yaml"
    assert lines[2] == norm_line(GOOD)
    assert lines[3].startswith("n\\x1b[2J\\x0a\\x3a:error\\x3a:x \\x23#[group]</testcase>: ")
    assert lines[4:] == [
        "skipped m: why",
        "FAIL: 1 of 2 norm(s) run a different eps than stored or configured; 1 norm(s) not "
        "measured (--allow-skipped accepts that)",
    ]
    assert "\x1b" not in out and "##[" not in out and len(lines) == 6


@pytest.mark.parametrize("rel_tol", [0.001, 0.004])
def test_verdict_states_the_tolerance_it_applied(rel_tol: float) -> None:
    report = OnnxParityReporter().checks(replace(_report(GOOD), rel_tol=rel_tol))
    match = re.search(r"within ([0-9.e+-]+)% of the stored eps", report.verdict)
    assert match is not None, report.verdict
    assert float(match.group(1)) / 100 == pytest.approx(rel_tol)
