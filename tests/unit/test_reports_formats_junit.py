"""reports/formats/junit.py: one ``<testcase>`` per check, one ``<failure>`` per failed
``error`` check (a warning passes, with ``<system-out>``), the unrounded numbers in the
failure text, well-formed XML whatever a name holds, and one passing case for no checks."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from rmsnorm_eps.analysis import analyze_dump, evaluate_gate
from rmsnorm_eps.escape import visible
from rmsnorm_eps.reports import check_report
from rmsnorm_eps.reports.checks import CheckReport
from rmsnorm_eps.reports.formats.junit import numbers_text, render_checks
from tests.unit.report_cases import HOSTILE, RATIO_EPS, hostile_report, write_ratio_dump


def test_numbers_text_is_unrounded() -> None:
    assert numbers_text({"a": 0.1 + 0.2, "n": 3, "none": None, "s": "x\n"}) == (
        "a = 0.30000000000000004\nn = 3\nnone = -\ns = 'x\\n'\n"
    )


def test_hostile_report_parses_with_one_case_per_check() -> None:
    report = hostile_report()
    out = render_checks(report)
    assert out.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    root = ET.fromstring(out)  # well-formed despite `</testcase>`, controls, `&amp;`
    assert (root.tag, root.get("tests"), root.get("failures")) == ("testsuites", "4", "1")
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "rmsnorm-eps demo"
    cases = suite.findall("testcase")
    assert len(cases) == 4
    assert [c.get("name") for c in cases] == [visible(HOSTILE)] * 2 + ["plain"] * 2
    assert [c.get("classname") for c in cases] == [
        "rmsnorm_eps.demo.bound",
        "rmsnorm_eps.demo.nan",
    ] * 2
    (failure,) = root.iter("failure")
    assert failure.get("type") == "demo/bound"
    assert failure.get("message") == visible(f"{HOSTILE}: 2 below")
    assert failure.text == "below = 2\n"
    (out_el,) = root.iter("system-out")  # the warning: passes, says why
    assert out_el.text == "warning: plain: 1 NaN\nnan = 1\nx = nan\nnone = -\n"
    assert cases[3].get("file") == visible(f"shard-{HOSTILE}.npz")  # its own source
    assert cases[0].get("file") == visible(f"dir/{HOSTILE}.npz")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props == {
        "source": visible(f"dir/{HOSTILE}.npz"),
        "verdict": visible(f"FAIL: 1 violation(s) in {HOSTILE}"),
    }
    assert "\x1b" not in out and "##" not in out
    assert all(not line.lstrip().startswith("::") for line in out.splitlines())


def test_no_checks_is_one_passing_case() -> None:
    root = ET.fromstring(render_checks(CheckReport("demo", "t", None, "x", (), (), True, "empty")))
    assert (root.get("tests"), root.get("failures")) == ("1", "0")
    (case,) = root.iter("testcase")
    assert (case.get("classname"), case.get("name")) == ("rmsnorm_eps.demo", "empty")
    assert not list(case)
    assert [p.get("name") for p in root.iter("property")] == ["verdict"]  # no source


def test_output_is_deterministic() -> None:
    assert render_checks(hostile_report()) == render_checks(hostile_report())
    assert "time" not in render_checks(hostile_report()).split("?>", 1)[1]


def test_ratio_dump_one_failure_per_violating_layer(tmp_path: Path) -> None:
    rep = analyze_dump(write_ratio_dump(tmp_path), RATIO_EPS)
    root = ET.fromstring(render_checks(check_report(rep, evaluate_gate(rep))))
    assert root.get("tests") == str(2 * len(rep.layers))  # two rules per layer
    failures = [(case.get("name"), case.find("failure")) for case in root.iter("testcase")]
    failed = [(name, f.get("type")) for name, f in failures if f is not None]
    assert failed == [
        ("bad", "ratio/below-bound"),
        ("nan", "ratio/nonfinite"),
        (visible(rep.layers[3].name), "ratio/below-bound"),
    ]
    assert root.get("failures") == "3" == str(rep.violations - 1)  # bad counts 2 inputs
    bad = next(f for n, f in failures if n == "bad" and f is not None)
    assert "below_bound = 2\n" in (bad.text or "")
    assert "min_ratio = 0.001\n" in (bad.text or "")  # 1e-9 / 1e-6, unrounded repr


def test_budget_turns_failures_into_passing_cases(tmp_path: Path) -> None:
    rep = analyze_dump(write_ratio_dump(tmp_path), RATIO_EPS)
    gate = evaluate_gate(rep, max_violations=rep.violations)
    root = ET.fromstring(render_checks(check_report(rep, gate)))
    assert root.get("failures") == "0" and len(list(root.iter("system-out"))) == 3
