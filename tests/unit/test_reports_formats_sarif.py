"""reports/formats/sarif.py: a SARIF 2.1.0 log (valid against the OASIS schema) with the rules
of the report, one result per failed check (its level, rule index, location and unrounded
numbers), artifact URIs percent-encoded, and names exact in the parsed document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from rmsnorm_eps._version import __version__
from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.reports import check_report
from rmsnorm_eps.reports.checks import CheckReport
from rmsnorm_eps.reports.formats.sarif import (
    SARIF_SCHEMA,
    SARIF_VERSION,
    artifact_uri,
    render_checks,
    sarif_document,
)
from tests.unit.report_cases import HOSTILE, RATIO_EPS, hostile_report, write_ratio_dump

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text("utf-8"))


def _valid(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text)
    jsonschema.Draft4Validator(SCHEMA).validate(doc)
    return doc


def test_artifact_uri_by_hand() -> None:
    assert artifact_uri("dumps/a b#1.npz") == "dumps/a%20b%231.npz"
    assert artifact_uri("/tmp/x.npz") == "file:///tmp/x.npz"
    assert artifact_uri("C:\\data\\x y.npz") == "file:///C%3A/data/x%20y.npz"
    assert artifact_uri("d\udcff.npz") == "d%FF.npz"  # a byte that was not UTF-8
    assert artifact_uri("é.npz") == "%C3%A9.npz"


def test_hostile_report_results_rules_and_locations() -> None:
    report = hostile_report()
    out = render_checks(report)
    doc = _valid(out)
    assert (doc["$schema"], doc["version"]) == (SARIF_SCHEMA, SARIF_VERSION)
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("rmsnorm-eps", __version__)
    assert [(r["id"], r["defaultConfiguration"]["level"]) for r in driver["rules"]] == [
        ("demo/bound", "error"),
        ("demo/nan", "warning"),
    ]
    results = run["results"]
    assert len(results) == len(report.failed) == 2
    error, warning = results
    assert (error["ruleId"], error["ruleIndex"], error["level"]) == ("demo/bound", 0, "error")
    assert (warning["ruleId"], warning["ruleIndex"], warning["level"]) == ("demo/nan", 1, "warning")
    assert error["message"]["text"] == f"{HOSTILE}: 2 below"  # exact: JSON escapes itself
    logical = error["locations"][0]["logicalLocations"][0]
    assert logical["name"] == HOSTILE
    assert logical["fullyQualifiedName"] == f"dir/{HOSTILE}.npz/{HOSTILE}"
    uri = error["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == artifact_uri(f"dir/{HOSTILE}.npz") and "%0A" in uri and " " not in uri
    shard = warning["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert shard == artifact_uri(f"shard-{HOSTILE}.npz")  # the check's own source
    assert warning["properties"] == {"nan": 1, "x": "nan", "none": None}
    assert error["partialFingerprints"] == {"rmsnormEps/v1": f"demo/bound:{HOSTILE}"}
    assert [a["location"]["uri"] for a in run["artifacts"]] == [
        artifact_uri(s) for s in report.sources
    ]
    invocation = run["invocations"][0]["properties"]
    assert invocation["counts"] == report.counts and invocation["passed"] is False
    assert "##" not in out and "\x1b" not in out and out.isascii()


def test_no_failures_no_results_and_no_source_no_location() -> None:
    report = CheckReport("demo", "t", None, "layer", (), (), True, "ok")
    doc = _valid(render_checks(report))
    run = doc["runs"][0]
    assert run["results"] == [] and "artifacts" not in run
    assert run["automationDetails"] == {"id": "rmsnorm-eps/demo/"}
    assert sarif_document(report) == json.loads(render_checks(report))


def test_ratio_dump_one_result_per_failed_check(tmp_path: Path) -> None:
    rep = analyze_dump(write_ratio_dump(tmp_path), RATIO_EPS)
    doc = _valid(render_checks(check_report(rep, evaluate_gate(rep))))
    results = doc["runs"][0]["results"]
    assert [(r["ruleId"], r["locations"][0]["logicalLocations"][0]["name"]) for r in results] == [
        ("ratio/below-bound", "bad"),
        ("ratio/nonfinite", "nan"),
        ("ratio/below-bound", rep.layers[3].name),
    ]
    bad = results[0]["properties"]
    assert (bad["below_bound"], bad["count"], bad["min_ratio"]) == (2, 3, 1e-9 / RATIO_EPS)
    assert bad["bound_min_ratio"] == rep.min_ratio  # unrounded
