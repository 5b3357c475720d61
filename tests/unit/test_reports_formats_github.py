"""reports/formats/github.py: one workflow-command line per failed check (``::error`` or
``::warning`` by level), properties and message escaped as the runner unescapes them, so a
hostile name can neither end the command nor start another."""

from __future__ import annotations

import re
from pathlib import Path

from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.escape import github_data as escape_data
from rmsnorm_eps.escape import github_property as escape_property
from rmsnorm_eps.escape import visible
from rmsnorm_eps.reports import check_report
from rmsnorm_eps.reports.checks import CheckReport
from rmsnorm_eps.reports.formats.github import render_checks
from tests.unit.report_cases import HOSTILE, RATIO_EPS, hostile_report, write_ratio_dump

LINE = re.compile(r"^::(error|warning) title=([^,:]*)(?:,file=([^,:]*))?::(.*)$")


def _unescape(value: str) -> str:
    """What GitHub's runner makes of an escaped property (actions/toolkit's command.ts)."""
    return value.replace("%2C", ",").replace("%3A", ":").replace("%0A", "\n").replace("%25", "%")


def test_escapes_by_hand() -> None:
    assert escape_data("a::b 50%\r\n") == "a\\x3a:b 50%25\\x0d\\x0a"
    assert escape_property("x:y,z%") == "x%3Ay%2Cz%25"
    assert escape_data("##[group]t") == "\\x23#[group]t"
    assert escape_data("a:b,c") == "a:b,c"


def test_one_line_per_failed_check_with_its_level() -> None:
    report = hostile_report()
    lines = render_checks(report).splitlines()
    assert len(lines) == len(report.failed) == 2
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert [m.group(1) for m in parsed if m] == ["error", "warning"]


def test_hostile_names_cannot_end_or_start_a_command() -> None:
    report = hostile_report()
    out = render_checks(report)
    assert out.endswith("\n") and out.count("\n") == 2  # a newline in a name stays escaped
    assert "\x1b" not in out and "\u202e" not in out and "##" not in out
    error, warning = (LINE.match(line) for line in out.splitlines())
    assert error is not None and warning is not None
    # the runner's unescaping gives back the visible form of the title, file and message
    assert _unescape(error.group(2)) == visible(f"rmsnorm-eps demo/bound: {HOSTILE}")
    assert _unescape(error.group(3)) == visible(f"dir/{HOSTILE}.npz")
    assert _unescape(error.group(4)) == visible(f"{HOSTILE}: 2 below")
    assert "::" not in error.group(4)
    # a check's own source (a shard) is its file, not the report's
    assert _unescape(warning.group(3)) == visible(f"shard-{HOSTILE}.npz")


def test_no_file_property_without_a_source_and_nothing_when_all_pass() -> None:
    from dataclasses import replace

    report = replace(hostile_report(), source=None)
    first = render_checks(report).splitlines()[0]
    assert ",file=" not in first
    clean = CheckReport("demo", "t", "d", "layer", (), report.checks[1:3], True, "ok")
    assert render_checks(clean) == ""


def test_ratio_dump_one_annotation_per_violating_layer(tmp_path: Path) -> None:
    rep = analyze_dump(write_ratio_dump(tmp_path), RATIO_EPS)
    lines = render_checks(check_report(rep, evaluate_gate(rep))).splitlines()
    titles = [_unescape(m.group(2)) for m in map(LINE.match, lines) if m]
    assert titles == [
        "rmsnorm-eps ratio/below-bound: bad",
        "rmsnorm-eps ratio/nonfinite: nan",
        f"rmsnorm-eps ratio/below-bound: {visible(rep.layers[3].name)}",
    ]
    assert all(line.startswith("::error ") for line in lines)
    # q/eps = 1e-9/1e-6: 2 of 3 below; "%" escaped for the runner
    assert "bad: 2 of 3 inputs (66.7%25) have q/eps below 49.2512562814" in lines[0]
    assert "min q/eps 0.001 " in lines[0]
