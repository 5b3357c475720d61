"""JUnit XML reporter: one ``<testcase>`` per (subject, rule) check, for CI test dashboards.

A failed check at level ``error`` is a ``<failure>`` whose text lists the unrounded numbers;
a violation the gate's budget allows (level ``warning``) passes, with the message and numbers
in ``<system-out>``. A report without checks still holds one passing testcase, because some CI
servers reject a report with no tests. No timestamps, no durations: output is deterministic.
Every text from the result goes through :func:`rmsnorm_eps.escape.xml`: well-formed XML 1.0
whatever a name holds.

The document is written testcase by testcase (a report of 100,000 layers is never held
whole): a first pass over the checks counts them (the counts are attributes of the opening
tags), a second serializes one small ElementTree element per testcase, indented at its depth,
so the text is exactly what ``ET.indent`` and ``ET.tostring`` give for the whole tree.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping

from rmsnorm_eps.escape import no_ci_command, xml
from rmsnorm_eps.reports.checks import Check, CheckReport, Number, line_chunks

__all__ = ["numbers_text", "render_checks", "render_checks_chunks"]

INDENT = "  "
#: Depth of a ``<testcase>``: testsuites > testsuite > testcase.
CASE_LEVEL = 2


def numbers_text(numbers: Mapping[str, Number]) -> str:
    """``key = value`` lines, floats unrounded (repr: the shortest round-trip form)."""
    return "".join(f"{k} = {'-' if v is None else xml(repr(v))}\n" for k, v in numbers.items())


def render_checks(report: CheckReport) -> str:
    """The JUnit XML document (UTF-8 declaration, two-space indentation): the joined
    :func:`render_checks_chunks`."""
    return "".join(render_checks_chunks(report))


def render_checks_chunks(report: CheckReport) -> Iterator[str]:
    """The JUnit XML document as chunks of whole lines, written testcase by testcase."""
    return (no_ci_command(chunk) for chunk in line_chunks(_pieces(report)))


def _serialized(element: ET.Element, level: int) -> str:
    """``element`` as ``ET.tostring`` writes it at depth ``level`` of an indented tree
    (its children indented by ``ET.indent``; its own tail is the caller's)."""
    ET.indent(element, space=INDENT, level=level)
    return ET.tostring(element, encoding="unicode")


def _start_tag(tag: str, attrs: dict[str, str]) -> str:
    """``<tag a="...">`` with ElementTree's attribute escaping."""
    text = ET.tostring(ET.Element(tag, attrs), encoding="unicode", short_empty_elements=False)
    return text[: -len(f"</{tag}>")]


def _properties(report: CheckReport) -> ET.Element:
    props = ET.Element("properties")
    if report.source is not None:
        ET.SubElement(props, "property", {"name": "source", "value": xml(report.source)})
    verdict = ("PASS: " if report.passed else "FAIL: ") + report.verdict
    ET.SubElement(props, "property", {"name": "verdict", "value": xml(verdict)})
    return props


def _testcase(report: CheckReport, chk: Check) -> ET.Element:
    """One check's ``<testcase>``: a ``<failure>`` when it failed at level ``error``,
    ``<system-out>`` when it failed within the gate's budget, else empty."""
    attrs = {"classname": f"rmsnorm_eps.{chk.rule.replace('/', '.')}", "name": xml(chk.name)}
    source = report.source_of(chk)
    if source is not None:
        attrs["file"] = xml(source)
    case = ET.Element("testcase", attrs)
    if chk.passed:
        return case
    if chk.level == "error":
        fail = ET.SubElement(case, "failure", {"type": chk.rule, "message": xml(chk.message)})
        fail.text = numbers_text(chk.numbers)
    else:
        out = ET.SubElement(case, "system-out")
        out.text = f"{chk.level}: {xml(chk.message)}\n{numbers_text(chk.numbers)}"
    return case


def _pieces(report: CheckReport) -> Iterator[str]:
    """The document's text in order: declaration and opening tags (after a counting pass),
    the properties, each testcase, the closing tags."""
    failures = sum(1 for c in report.checks if c.level == "error" and not c.passed)
    counts = {
        "tests": str(max(1, len(report.checks))),
        "failures": str(failures),
        "errors": "0",
        "skipped": "0",
    }
    case_pad = "\n" + INDENT * CASE_LEVEL
    yield '<?xml version="1.0" encoding="UTF-8"?>\n'
    yield _start_tag("testsuites", {"name": "rmsnorm-eps", **counts})
    yield "\n" + INDENT
    yield _start_tag("testsuite", {"name": f"rmsnorm-eps {report.command}", **counts})
    yield case_pad + _serialized(_properties(report), CASE_LEVEL)
    empty = True
    for chk in report.checks:
        empty = False
        yield case_pad + _serialized(_testcase(report, chk), CASE_LEVEL)
    if empty:  # some CI servers reject a report without tests
        attrs = {"classname": f"rmsnorm_eps.{report.command}", "name": xml(report.verdict)}
        yield case_pad + _serialized(ET.Element("testcase", attrs), CASE_LEVEL)
    yield f"\n{INDENT}</testsuite>\n</testsuites>\n"
