"""Markdown reporter: a pull-request comment or a GitHub job summary (GITHUB_STEP_SUMMARY).

Built from the :class:`~rmsnorm_eps.reports.checks.CheckReport`: the verdict as a heading,
the facts as a two-column table, the failed checks as a table, the passing checks folded in a
``<details>`` block (a model has many layers; reviewers need the failures first).
"""

from __future__ import annotations

import re

from rmsnorm_eps.escape import markdown, no_ci_command
from rmsnorm_eps.reports.checks import CheckReport

__all__ = ["code", "render_checks"]


def code(text: str) -> str:
    """Inline code that survives any backticks in ``text``: fenced by one backtick more than
    its longest run of backticks (CommonMark code spans), padded when it has any."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if longest else ""
    return f"{ticks}{pad}{markdown(text)}{pad}{ticks}"


def render_checks(report: CheckReport) -> str:
    """The Markdown document of a check report."""
    lines: list[str] = []
    status = "PASS" if report.passed else "FAIL"
    lines.append(f"### {status}: {markdown(report.title)}")
    lines.append("")
    if report.facts:
        lines += ["| | |", "|---|---|"]
        lines += [f"| {markdown(k)} | {markdown(v)} |" for k, v in report.facts]
        lines.append("")
    if report.checks:
        c = report.counts
        lines.append(
            f"{c['checks']} check(s): {c['passed']} passed, {c['failed']} failed "
            f"({c['error']} error(s), {c['warning']} warning(s))."
        )
        lines.append("")
    failed = report.failed
    if failed:
        lines += [f"| level | {report.subject} | check | details |", "|---|---|---|---|"]
        for chk in failed:
            lines.append(
                f"| {chk.level} | {code(chk.name)} | {markdown(report.rule(chk.rule).name)} "
                f"| {markdown(chk.message)} |"
            )
        lines.append("")
    ok = [chk for chk in report.checks if chk.passed]
    if ok:
        lines += [
            "<details>",
            f"<summary>{len(ok)} passing check(s)</summary>",
            "",
            f"| {report.subject} | check | details |",
            "|---|---|---|",
        ]
        for chk in ok:
            lines.append(
                f"| {code(chk.name)} | {markdown(report.rule(chk.rule).name)} "
                f"| {markdown(chk.message)} |"
            )
        lines += ["", "</details>", ""]
    if report.rules:
        lines.append("Rules:")
        lines.append("")
        lines += [
            f"- **{markdown(r.name)}** ({code(r.id)}): {markdown(r.description)}"
            for r in report.rules
        ]
        lines.append("")
    return no_ci_command("\n".join(lines))
