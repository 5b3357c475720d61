"""Markdown reporter: a pull-request comment or a GitHub job summary (GITHUB_STEP_SUMMARY).

Built from the :class:`~rmsnorm_eps.reports.checks.CheckReport`: the verdict as a heading,
the facts as a two-column table, the failed checks as a table, the passing checks folded in a
``<details>`` block (a model has many layers; reviewers need the failures first).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from rmsnorm_eps.escape import markdown, no_ci_command
from rmsnorm_eps.reports.checks import CheckReport, line_chunks

__all__ = ["cell", "code", "render_checks", "render_checks_chunks"]


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell or line (:func:`rmsnorm_eps.escape.markdown`:
    controls visible, backslashes and pipes escaped, no HTML tag or entity, no CI command)."""
    return markdown(text)


def code(text: str) -> str:
    """Inline code that survives any backticks in ``text``: fenced by one backtick more than
    its longest run of backticks (CommonMark code spans), padded when it has any."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if longest else ""
    return f"{ticks}{pad}{cell(text)}{pad}{ticks}"


def render_checks(report: CheckReport) -> str:
    """The Markdown document of a check report: the joined :func:`render_checks_chunks`."""
    return "".join(render_checks_chunks(report))


def render_checks_chunks(report: CheckReport) -> Iterator[str]:
    """The Markdown document as chunks of whole lines, written row by row: one pass over the
    checks for the counts, one for the failed checks' table, one for the passing ones."""
    return (no_ci_command(chunk) for chunk in line_chunks(_lines(report)))


def _lines(report: CheckReport) -> Iterator[str]:
    """Every line of the document, each ending with a newline: the heading, then each part
    (facts, counts, failed checks, passing checks, rules) after a blank line."""
    status = "PASS" if report.passed else "FAIL"
    yield f"### {status}: {cell(report.title)}\n"
    if report.facts:
        yield "\n| | |\n|---|---|\n"
        yield from (f"| {cell(k)} | {cell(v)} |\n" for k, v in report.facts)
    c = report.counts
    if c["checks"]:
        yield (
            f"\n{c['checks']} check(s): {c['passed']} passed, {c['failed']} failed "
            f"({c['error']} error(s), {c['warning']} warning(s)).\n"
        )
    names = {r.id: cell(r.name) for r in reversed(report.rules)}  # the first of an id
    if c["failed"]:
        yield f"\n| level | {report.subject} | check | details |\n|---|---|---|---|\n"
        for chk in report.checks:
            if not chk.passed:
                yield (
                    f"| {chk.level} | {code(chk.name)} | {names[chk.rule]} "
                    f"| {cell(chk.message)} |\n"
                )
    if c["passed"]:
        yield (
            f"\n<details>\n<summary>{c['passed']} passing check(s)</summary>\n\n"
            f"| {report.subject} | check | details |\n|---|---|---|\n"
        )
        for chk in report.checks:
            if chk.passed:
                yield f"| {code(chk.name)} | {names[chk.rule]} | {cell(chk.message)} |\n"
        yield "\n</details>\n"
    if report.rules:
        yield "\nRules:\n\n"
        yield from (
            f"- **{cell(r.name)}** ({code(r.id)}): {cell(r.description)}\n" for r in report.rules
        )
