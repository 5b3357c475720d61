"""JUnit XML reporter: one ``<testcase>`` per (subject, rule) check, for CI test dashboards.

A failed check at level ``error`` is a ``<failure>`` whose text lists the unrounded numbers;
a violation the gate's budget allows (level ``warning``) passes, with the message and numbers
in ``<system-out>``. A report without checks still holds one passing testcase, because some CI
servers reject a report with no tests. No timestamps, no durations: output is deterministic.
Every text from the result goes through :func:`rmsnorm_eps.escape.xml`: well-formed XML 1.0
whatever a name holds.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping

from rmsnorm_eps.escape import no_ci_command, xml
from rmsnorm_eps.reports.checks import CheckReport, Number

__all__ = ["numbers_text", "render_checks"]


def numbers_text(numbers: Mapping[str, Number]) -> str:
    """``key = value`` lines, floats unrounded (repr: the shortest round-trip form)."""
    return "".join(f"{k} = {'-' if v is None else xml(repr(v))}\n" for k, v in numbers.items())


def render_checks(report: CheckReport) -> str:
    """The JUnit XML document (UTF-8 declaration, two-space indentation)."""
    failures = sum(1 for c in report.checks if c.level == "error" and not c.passed)
    tests = max(1, len(report.checks))
    counts = {"tests": str(tests), "failures": str(failures), "errors": "0", "skipped": "0"}
    root = ET.Element("testsuites", {"name": "rmsnorm-eps", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": f"rmsnorm-eps {report.command}", **counts})
    props = ET.SubElement(suite, "properties")
    if report.source is not None:
        ET.SubElement(props, "property", {"name": "source", "value": xml(report.source)})
    ET.SubElement(
        props,
        "property",
        {
            "name": "verdict",
            "value": xml(("PASS: " if report.passed else "FAIL: ") + report.verdict),
        },
    )
    for chk in report.checks:
        attrs = {"classname": f"rmsnorm_eps.{chk.rule.replace('/', '.')}", "name": xml(chk.name)}
        source = report.source_of(chk)
        if source is not None:
            attrs["file"] = xml(source)
        case = ET.SubElement(suite, "testcase", attrs)
        if chk.passed:
            continue
        if chk.level == "error":
            fail = ET.SubElement(case, "failure", {"type": chk.rule, "message": xml(chk.message)})
            fail.text = numbers_text(chk.numbers)
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"{chk.level}: {xml(chk.message)}\n{numbers_text(chk.numbers)}"
    if not report.checks:
        ET.SubElement(
            suite,
            "testcase",
            {"classname": f"rmsnorm_eps.{report.command}", "name": xml(report.verdict)},
        )
    ET.indent(root, space="  ")
    body = ET.tostring(root, encoding="unicode")
    return no_ci_command('<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n")
