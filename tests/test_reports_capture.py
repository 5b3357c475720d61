"""`capture` reports in all six formats (it reports findings: one `capture/ran` check per
hooked module), on a tiny random Llama saved as a model directory (no download).

Before, `capture --format sarif` (and markdown, github, junit) printed the text table."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from tests import test_capture_options as _options

TEXTS = _options.TEXTS

ROOT = Path(__file__).resolve().parents[1]
SARIF_SCHEMA = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text("utf-8"))


def _run(cli: Callable[..., Any], d: Path, out: Path, fmt: str, *extra: str) -> Any:
    args = [a for t in TEXTS for a in ("--text", t)]
    r = cli("capture", "--model", str(d), *args, "--save-data", str(out), "--format", fmt, *extra)
    assert r.exit_code == 0, r.stderr
    return r


def test_capture_renders_every_format(
    cli: Callable[..., Any],
    model_dir: Path,
    tmp_path: Path,
) -> None:
    out = tmp_path / "q.npz"
    text = _run(cli, model_dir, out, "text").stdout
    assert "min q/eps" in text and "model.norm" in text
    doc = json.loads(_run(cli, model_dir, out, "json").stdout)
    assert doc["command"] == "capture" and len(doc["modules"]) == 5
    md = _run(cli, model_dir, out, "markdown").stdout
    assert md.startswith("### PASS: rmsnorm-eps capture: ") and "5 passing check(s)" in md
    assert _run(cli, model_dir, out, "github").stdout == ""  # every module ran
    junit = ET.fromstring(_run(cli, model_dir, out, "junit").stdout)
    assert junit.get("tests") == "5" and junit.get("failures") == "0"
    sarif = json.loads(_run(cli, model_dir, out, "sarif").stdout)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(sarif)
    assert sarif["runs"][0]["automationDetails"]["id"] == "rmsnorm-eps/capture/"
    assert [r["id"] for r in sarif["runs"][0]["tool"]["driver"]["rules"]] == [
        "capture/ran",
        "capture/kind",
    ]


def test_a_module_that_never_ran_is_a_warning() -> None:
    from rmsnorm_eps.capture.records import CaptureResult, ModuleRecord
    from rmsnorm_eps.capture.report import CaptureReport
    from rmsnorm_eps.reports import check_report, render

    idle = ModuleRecord(
        name="extra.norm",
        class_name="LlamaRMSNorm",
        kind="rmsnorm",
        eps=None,
        eps_source=None,
        dim=None,
        input_dtype=None,
        gain="w",
        weight=None,
        weight_dtype=None,
        layout=None,
        heads=1,
        calls=0,
        count=0,
    )
    result = CaptureResult(
        (idle,), sequences=1, tokens=0, summary_only=False, q_dtype="float32", min_ratio=None
    )
    report = CaptureReport(result, "m", {"dump": "q.npz", "config": None})
    checks = check_report(report)
    assert checks.passed and [c.level for c in checks.checks] == ["warning"]
    line = render(report, "github")
    assert line.startswith("::warning title=rmsnorm-eps capture/ran%3A extra.norm,file=q.npz::")


def test_a_module_of_unknown_kind_is_listed_and_warned() -> None:
    from rmsnorm_eps.capture.records import CaptureResult, ModuleRecord
    from rmsnorm_eps.capture.report import CaptureReport
    from rmsnorm_eps.reports import check_report, render

    odd = ModuleRecord(
        name="odd.norm",
        class_name="WeirdNorm",
        kind="module",
        eps=None,
        eps_source=None,
        dim=8,
        input_dtype="float32",
        gain="w",
        weight=None,
        weight_dtype=None,
        layout=None,
        heads=1,
        calls=1,
        count=4,
        norm="unknown",
        reason="output matches no norm formula",
    )
    result = CaptureResult(
        (odd,), sequences=1, tokens=4, summary_only=False, q_dtype="float32", min_ratio=None
    )
    report = CaptureReport(result, "m", {"dump": "q.npz", "config": None})
    checks = check_report(report)
    kinds = [c for c in checks.checks if c.rule == "capture/kind"]
    assert len(kinds) == 1 and not kinds[0].passed and kinds[0].level == "warning"
    assert "1 of unknown kind" in checks.verdict
    text = render(report, "text")
    assert "not analysed: odd.norm (WeirdNorm): unknown norm kind: output matches no" in text
    assert "::warning title=rmsnorm-eps capture/kind%3A odd.norm" in render(report, "github")
