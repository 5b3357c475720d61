"""Every --format renders every supported result; formats agree on counts; schemas validate."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from rmsnorm_eps.analysis import RatioReport, analyze_dump, evaluate_gate
from rmsnorm_eps.bound import bound_for_delta, figures_for_ratios
from rmsnorm_eps.escape import github_data as escape_data
from rmsnorm_eps.escape import github_property as escape_property
from rmsnorm_eps.reports import (
    FORMATS,
    RenderOptions,
    UnsupportedResult,
    check_report,
    render,
    supported_formats,
)
from rmsnorm_eps.reports.checks import Check, CheckReport, Rule
from rmsnorm_eps.reports.commands.ratio import histogram_rows
from rmsnorm_eps.reports.document import document
from rmsnorm_eps.reports.registry import REPORTERS
from rmsnorm_eps.reports.schema import SCHEMA_COMMANDS, load_schema

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/ci/q_dump.npz"
SARIF_SCHEMA = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text("utf-8"))
CI_FORMATS = ("markdown", "github", "junit", "sarif")


@pytest.fixture(scope="module")
def example() -> RatioReport:
    """The shipped example: 8 below the bound in layers.0.attn_norm, 1 NaN in output_norm."""
    return dataclasses.replace(analyze_dump(ROOT / EXAMPLE, 1e-5, top_k=3), source=EXAMPLE)


def _sarif(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text)
    jsonschema.Draft4Validator(
        SARIF_SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER
    ).validate(doc)
    return doc


def _json_valid(text: str, command: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text)
    jsonschema.Draft202012Validator(load_schema(command)).validate(doc)
    return doc


# ----------------------------------------------------------------------------- the map
def test_formats_map_has_one_module_per_format() -> None:
    assert set(FORMATS) == {"text", "json", "markdown", "github", "junit", "sarif"}
    assert len(set(FORMATS.values())) == len(FORMATS)
    for name, module in FORMATS.items():
        assert module.startswith("rmsnorm_eps.reports.")
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), name


RESULTS: dict[str, Callable[[], object]] = {
    "ratio": lambda: analyze_dump(ROOT / EXAMPLE, 1e-5, top_k=3),
    "bound": lambda: bound_for_delta(0.01, 1e-5),
    "bound-no-eps": lambda: bound_for_delta(0.05),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("kind", sorted(RESULTS))
def test_every_format_renders_every_supported_result(fmt: str, kind: str) -> None:
    result = RESULTS[kind]()
    gate = evaluate_gate(result) if isinstance(result, RatioReport) else None
    text = render(result, fmt, RenderOptions(gate=gate))
    if fmt == "github" and not (isinstance(result, RatioReport) and result.violations):
        assert text == ""  # nothing failed: no annotation
    else:
        assert text.strip()
    assert text == render(result, fmt, RenderOptions(gate=gate))  # deterministic
    if fmt == "json":
        _json_valid(text, "ratio" if kind == "ratio" else "bound")
    if fmt == "sarif":
        _sarif(text)
    if fmt == "junit":
        assert ET.fromstring(text).tag == "testsuites"


def test_ratio_table_of_bound_renders_in_text_json_markdown_only() -> None:
    rows = figures_for_ratios([0.01, 1.0, 100.0])
    assert "0.707107" in render(rows, "text")
    _json_valid(render(rows, "json"), "bound")
    md = render(rows, "markdown")
    assert "| 1 | 0.707107 | 0.292893 |" in md
    for fmt in ("github", "junit", "sarif"):
        with pytest.raises(UnsupportedResult):
            render(rows, fmt)


def test_unknown_result_is_unsupported_in_every_ci_format() -> None:
    for fmt in CI_FORMATS:
        with pytest.raises(UnsupportedResult):
            render(object(), fmt)


def test_result_types_name_their_command() -> None:
    from rmsnorm_eps.capture.report import CaptureReport
    from rmsnorm_eps.compare.analysis import CompareReport
    from rmsnorm_eps.compare.precision import PrecisionReport
    from rmsnorm_eps.config.defaults import DefaultsResult
    from rmsnorm_eps.config.model import NormConfig
    from rmsnorm_eps.config.resolve import ConfigDiff
    from rmsnorm_eps.parity.api import ParityResult
    from rmsnorm_eps.parity.onnx_runtime import OnnxParityReport
    from rmsnorm_eps.parity.probes import ProbeSummary
    from rmsnorm_eps.sensitivity.result import SensitivityResult

    types = [
        RatioReport,
        CompareReport,
        PrecisionReport,
        DefaultsResult,
        NormConfig,
        ConfigDiff,
        ParityResult,
        OnnxParityReport,
        ProbeSummary,
        CaptureReport,
        SensitivityResult,
    ]
    names = {t.command for t in types} | {"bound", "merge"}
    assert names == set(REPORTERS)
    assert bound_for_delta(0.01).command == "bound"


def test_unsupported_format_is_refused_by_the_command() -> None:
    assert supported_formats("config show") == {"text", "json"}
    assert supported_formats("capture") == set(FORMATS)
    with pytest.raises(KeyError):
        supported_formats("nope")


# ----------------------------------------------------------------------------- counts
def test_every_format_reports_the_same_counts(example: RatioReport) -> None:
    gate = evaluate_gate(example)
    opts = RenderOptions(gate=gate)
    rep = check_report(example, gate)
    assert rep.counts == {
        "checks": 6,
        "passed": 4,
        "failed": 2,
        "error": 2,
        "warning": 0,
        "note": 4,
    }
    assert [(c.rule, c.name) for c in rep.failed] == [
        ("ratio/below-bound", "layers.0.attn_norm"),
        ("ratio/nonfinite", "output_norm"),
    ]
    # json: 9 violations = 8 below + 1 NaN
    doc = _json_valid(render(example, "json", opts), "ratio")
    assert (
        doc["summary"]["violations"],
        doc["summary"]["below_bound"],
        doc["summary"]["nonfinite"],
    ) == (9, 8, 1)
    assert doc["summary"]["layers_affected"] == ["layers.0.attn_norm", "output_norm"]
    # text
    text = render(example, "text", opts)
    assert "Total: 9 violation(s) in 2 of 3 layer(s) (8 below the bound, 1 nonfinite)" in text
    # markdown
    md = render(example, "markdown", opts)
    assert "6 check(s): 4 passed, 2 failed (2 error(s), 0 warning(s))." in md
    assert "| violations | 9 (8 below the bound, 1 nonfinite) in 2 layer(s) |" in md
    # github: one line per failed check
    gh = render(example, "github", opts).splitlines()
    assert len(gh) == 2 and all(line.startswith("::error ") for line in gh)
    # junit
    root = ET.fromstring(render(example, "junit", opts))
    suite = root.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == 6 == int(root.get("tests", "")) == int(suite.get("tests", ""))
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == 2 == int(root.get("failures", ""))
    fail = failed[0].find("failure")
    assert fail is not None and fail.text is not None
    assert "below_bound = 8\n" in fail.text and "bound_min_ratio = 49.25125628140703" in fail.text
    # sarif
    sarif = _sarif(render(example, "sarif", opts))
    results = sarif["runs"][0]["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [
        ("ratio/below-bound", "error"),
        ("ratio/nonfinite", "error"),
    ]
    assert results[0]["properties"]["below_bound"] == 8
    assert results[1]["properties"]["nan"] == 1


def test_budget_turns_errors_into_warnings(example: RatioReport) -> None:
    gate = evaluate_gate(example, max_violations=9)
    assert gate.passed
    opts = RenderOptions(gate=gate)
    gh = render(example, "github", opts).splitlines()
    assert len(gh) == 2 and all(line.startswith("::warning ") for line in gh)
    root = ET.fromstring(render(example, "junit", opts))
    assert root.get("failures") == "0" and root.get("tests") == "6"
    outs = root.findall(".//system-out")
    assert len(outs) == 2 and outs[0].text is not None
    assert outs[0].text.startswith("warning: layers.0.attn_norm: 8 of 64")
    sarif = _sarif(render(example, "sarif", opts))
    assert [r["level"] for r in sarif["runs"][0]["results"]] == ["warning", "warning"]
    assert render(example, "markdown", opts).startswith("### PASS: ")


def test_all_passing_report() -> None:
    clean = analyze_dump(ROOT / EXAMPLE, 1e-5, min_ratio=1e-3)  # NaN still fails
    rep = check_report(clean)
    assert rep.counts["failed"] == 1 and rep.failed[0].rule == "ratio/nonfinite"
    bound = check_report(bound_for_delta(0.01))
    root = ET.fromstring(render(bound_for_delta(0.01), "junit"))
    cases = root.findall(".//testcase")
    assert bound.checks == () and len(cases) == 1 and root.get("failures") == "0"
    assert cases[0].get("classname") == "rmsnorm_eps.bound"


def test_junit_single_passing_case_when_no_checks() -> None:
    rep = CheckReport("demo", "demo", None, "thing", (), (), True, "nothing to check")
    root = ET.fromstring(render(rep, "junit"))
    assert root.get("tests") == "1" and len(root.findall(".//testcase")) == 1


# ----------------------------------------------------------------------------- github
def test_github_escaping_follows_the_runner_rules() -> None:
    # CR and LF never reach the runner: rmsnorm_eps.escape shows them as \x0d, \x0a first
    assert escape_data("50% a\r\nb") == "50%25 a\\x0d\\x0ab"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25\\x0a"
    assert escape_data("x##[stop-commands]t ::e") == "x\\x23#[stop-commands]t \\x3a:e"
    assert escape_data("a:b,c") == "a:b,c"  # ':' and ',' only escaped in properties
    rule = Rule("x/y", "y", "desc")
    rep = CheckReport(
        "demo",
        "demo",
        "dir/a,b:c.npz",
        "layer",
        (rule,),
        (Check("x/y", "blk,1:norm", False, "error", "100% bad\nline 2"),),
        False,
        "1 failure",
    )
    line = render(rep, "github")
    assert line == (
        "::error title=rmsnorm-eps x/y%3A blk%2C1%3Anorm,"
        "file=dir/a%2Cb%3Ac.npz::100%25 bad\\x0aline 2\n"
    )


# ----------------------------------------------------------------------------- sarif
def test_sarif_locations_rules_and_uri(example: RatioReport) -> None:
    run = _sarif(render(example, "sarif"))["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == [
        "ratio/below-bound",
        "ratio/nonfinite",
    ]
    res = run["results"][0]
    loc = res["locations"][0]
    assert loc["physicalLocation"]["artifactLocation"]["uri"] == EXAMPLE
    assert loc["logicalLocations"][0]["name"] == "layers.0.attn_norm"
    assert res["ruleIndex"] == 0
    from rmsnorm_eps.reports.formats.sarif import artifact_uri

    assert artifact_uri("/tmp/a b.npz") == "file:///tmp/a%20b.npz"
    assert artifact_uri("dumps/x#1.npz") == "dumps/x%231.npz"


def test_sarif_schema_rejects_a_broken_log(example: RatioReport) -> None:
    doc = json.loads(render(example, "sarif"))
    doc["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        _sarif(json.dumps(doc))


# ----------------------------------------------------------------------------- json schema
#: Reported commands without a JSON Schema (the schema table is the files in rmsnorm_eps/data).
NO_SCHEMA = {"probe", "config show", "defaults", "capture"}


def test_json_schema_is_shipped_and_exact(example: RatioReport) -> None:
    # one schema per command whose JSON is a stable surface; the others' documents are not
    assert {c.replace("-", " ") for c in SCHEMA_COMMANDS} == set(REPORTERS) - NO_SCHEMA
    for command in SCHEMA_COMMANDS:
        jsonschema.Draft202012Validator.check_schema(load_schema(command))
        assert (ROOT / f"rmsnorm_eps/data/{command}.schema.json").is_file()
    doc = document(example, evaluate_gate(example))
    jsonschema.Draft202012Validator(load_schema("ratio")).validate(doc)
    doc["layers"][0]["surprise"] = 1  # an undocumented key fails validation
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(load_schema("ratio")).validate(doc)


def test_json_schema_accepts_nonfinite_and_missing_values(write_npz: Callable[..., Path]) -> None:
    path = write_npz(a=np.array([np.nan, np.inf], np.float32), b=np.array([0.0, 1.0]))
    rep = analyze_dump(path, 1e-6)
    doc = json.loads(render(rep, "json"))
    assert doc["layers"][0]["min_q"] is None
    assert [e["value"] for e in doc["layers"][0]["nonfinite_examples"]] == ["nan", "inf"]
    jsonschema.Draft202012Validator(load_schema("ratio")).validate(doc)
    _sarif(render(rep, "sarif"))


# ----------------------------------------------------------------------------- histogram
def test_histogram_rows_mark_the_bound(example: RatioReport) -> None:
    attn = example.layers[0]
    assert histogram_rows(attn, example.min_ratio) == [
        ("1e0 <= r < 1e1", 1, "below bound"),
        ("1e1 <= r < 1e2", 16, "<- bound"),
        ("1e2 <= r < 1e3", 37, ""),
        ("1e3 <= r < 1e4", 10, ""),
    ]
    out = example.layers[2]
    assert histogram_rows(out, example.min_ratio)[-1] == ("NaN/inf", 1, "violation")
    assert sum(c for _, c, _ in histogram_rows(out, example.min_ratio)) == out.count


def test_histogram_fills_empty_decades_and_counts_zeros(write_npy: Callable[..., Path]) -> None:
    rep = analyze_dump(write_npy(np.array([0.0, 1e-9, 1e-3], np.float64)), 1e-6)
    rows = histogram_rows(rep.layers[0], rep.min_ratio)
    assert rows == [
        ("q = 0", 1, "zero vectors"),
        ("1e-3 <= r < 1e-2", 1, "below bound"),
        ("1e-2 <= r < 1e-1", 0, "below bound"),
        ("1e-1 <= r < 1e0", 0, "below bound"),
        ("1e0 <= r < 1e1", 0, "below bound"),
        ("1e1 <= r < 1e2", 0, "<- bound"),
        ("1e2 <= r < 1e3", 0, ""),
        ("1e3 <= r < 1e4", 1, ""),
    ]


def test_histogram_bound_on_a_decade_edge(write_npy: Callable[..., Path]) -> None:
    rep = analyze_dump(write_npy(np.array([1e-5, 1e-4], np.float64)), 1e-6, min_ratio=10.0)
    rows = histogram_rows(rep.layers[0], rep.min_ratio)
    # r = 10 sits exactly on the bound and passes: its decade [1e1, 1e2) is not "below"
    assert rows == [("1e1 <= r < 1e2", 1, ""), ("1e2 <= r < 1e3", 1, "")]


def test_histogram_modes(example: RatioReport) -> None:
    title = "inputs per decade of r = q/eps"
    assert render(example, "text").count(title) == 3  # auto: <= 8 layers -> all
    viol = render(example, "text", RenderOptions(histogram="violating"))
    assert viol.count(title) == 2 and "layers.0.ffn_norm: inputs per decade" not in viol
    assert title not in render(example, "text", RenderOptions(histogram="none"))


def test_text_without_colour_has_no_escape_codes(example: RatioReport) -> None:
    plain = render(example, "text", RenderOptions(color=False))
    assert "\x1b[" not in plain and "below bound" in plain
    coloured = render(example, "text", RenderOptions(color=True))
    assert "\x1b[" in coloured


# ----------------------------------------------------------------------------- CLI
def test_cli_every_format(cli: Callable[..., Any], in_root: None) -> None:
    for fmt in sorted(FORMATS):
        res = cli("ratio", "--eps", "1e-5", "--q-file", EXAMPLE, "--format", fmt)
        assert res.exit_code == 1, (fmt, res)
        assert "FAIL: 9 violation(s)" in res.stderr


def test_cli_format_from_environment(cli: Callable[..., Any], in_root: None) -> None:
    res = cli("ratio", "--eps", "1e-5", "--q-file", EXAMPLE, env={"RMSNORM_EPS_FORMAT": "github"})
    assert res.exit_code == 1 and res.stdout.startswith("::error title=")
    res = cli(
        "ratio",
        "--eps",
        "1e-5",
        "--q-file",
        EXAMPLE,
        "-f",
        "sarif",
        env={"RMSNORM_EPS_FORMAT": "github"},
    )  # the option wins over the environment
    assert json.loads(res.stdout)["version"] == "2.1.0"
    res = cli("ratio", "--eps", "1e-5", "--q-file", EXAMPLE, env={"RMSNORM_EPS_FORMAT": "yaml"})
    assert res.exit_code == 2 and "'yaml' is not one of" in res.stderr


def test_cli_unsupported_combination_is_a_usage_error(cli: Callable[..., Any]) -> None:
    res = cli("bound", "--table", "--format", "junit")
    assert res.exit_code == 2
    assert "--format junit is not available for this output" in res.stderr
    assert "Traceback" not in res.stderr


def test_cli_bad_histogram_choice(cli: Callable[..., Any], in_root: None) -> None:
    res = cli("ratio", "--eps", "1e-5", "--q-file", EXAMPLE, "--histogram", "some")
    assert (
        res.exit_code == 2
        and "'some' is not one of 'auto', 'all', 'violating', 'none'" in res.stderr
    )


def test_cli_output_file_holds_the_report(
    cli: Callable[..., Any], in_root: None, tmp_path: Path
) -> None:
    out = tmp_path / "report.sarif"
    res = cli("ratio", "--eps", "1e-5", "--q-file", EXAMPLE, "-f", "sarif", "-o", str(out))
    assert res.exit_code == 1 and res.stdout == ""
    assert len(_sarif(out.read_text("utf-8"))["runs"][0]["results"]) == 2


# ----------------------------------------------------------------------------- job summary
def test_summary_appends_and_never_truncates(
    cli: Callable[..., Any], in_root: None, tmp_path: Path
) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("# earlier step\n", encoding="utf-8")
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    res = cli("ratio", "--eps", "1e-5", "--q-file", EXAMPLE, "-f", "github", "--summary", env=env)
    assert res.exit_code == 1
    first = summary.read_text("utf-8")
    assert first.startswith("# earlier step\n### FAIL: rmsnorm-eps ratio: examples/ci/q_dump.npz")
    res = cli("ratio", "--eps", "1e-5", "--q-file", EXAMPLE, "--summary", "--exit-zero", env=env)
    assert res.exit_code == 0
    second = summary.read_text("utf-8")
    assert second.startswith(first) and second.count("### FAIL: rmsnorm-eps ratio") == 2


def test_summary_without_variable_is_a_note(cli: Callable[..., Any], in_root: None) -> None:
    res = cli("ratio", "--eps", "1e-5", "--q-file", EXAMPLE, "--summary")
    assert res.exit_code == 1
    assert "GITHUB_STEP_SUMMARY is not set" in res.stderr


def test_summary_unwritable_is_exit_2(
    cli: Callable[..., Any], in_root: None, tmp_path: Path
) -> None:
    target = tmp_path / "missing-dir" / "summary.md"
    res = cli(
        "ratio",
        "--eps",
        "1e-5",
        "--q-file",
        EXAMPLE,
        "--summary",
        env={"GITHUB_STEP_SUMMARY": str(target)},
    )
    assert res.exit_code == 2 and "cannot append the job summary" in res.stderr
    assert not target.exists()


def test_no_color_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from rmsnorm_eps.reports import color_wanted

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert color_wanted(True) and not color_wanted(False)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not color_wanted(True)


def test_help_lists_formats_and_stays_light(cli: Callable[..., Any]) -> None:
    import subprocess
    import sys

    res = cli("ratio", "--help")
    for name in ("markdown", "github", "junit", "sarif", "--summary", "--plot"):
        assert name in res.stdout
    code = (
        "import sys; from typer.testing import CliRunner; from rmsnorm_eps.cli import app; "
        "CliRunner().invoke(app, ['ratio', '--help']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'matplotlib') "
        "or m.startswith(('rmsnorm_eps.reports.commands', 'rmsnorm_eps.reports.formats'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "[]"
