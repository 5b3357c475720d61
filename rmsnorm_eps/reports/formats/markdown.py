"""Markdown reporter: a pull-request comment or a GitHub job summary (GITHUB_STEP_SUMMARY).

Built from the :class:`~rmsnorm_eps.reports.checks.CheckReport`: the verdict as a heading,
the facts as a two-column table, the failed checks as a table, the passing checks folded in a
``<details>`` block (a model has many layers; reviewers need the failures first).
"""

from __future__ import annotations

from rmsnorm_eps.reports.checks import CheckReport

__all__ = ["cell", "code", "render_checks"]


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell: pipes escaped, newlines as <br>."""
    return (
        text.replace("\\", "\\\\").replace("|", "\\|").replace("\r\n", "\n").replace("\n", "<br>")
    )


def code(text: str) -> str:
    """Inline code that survives any backticks in ``text``."""
    ticks = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{ticks}{pad}{cell(text)}{pad}{ticks}"


def render_checks(report: CheckReport) -> str:
    """The Markdown document of a check report."""
    lines: list[str] = []
    status = "PASS" if report.passed else "FAIL"
    lines.append(f"### {status}: {cell(report.title)}")
    lines.append("")
    if report.facts:
        lines += ["| | |", "|---|---|"]
        lines += [f"| {cell(k)} | {cell(v)} |" for k, v in report.facts]
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
                f"| {chk.level} | {code(chk.name)} | {cell(report.rule(chk.rule).name)} "
                f"| {cell(chk.message)} |"
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
                f"| {code(chk.name)} | {cell(report.rule(chk.rule).name)} | {cell(chk.message)} |"
            )
        lines += ["", "</details>", ""]
    if report.rules:
        lines.append("Rules:")
        lines.append("")
        lines += [
            f"- **{cell(r.name)}** ({code(r.id)}): {cell(r.description)}" for r in report.rules
        ]
        lines.append("")
    return "\n".join(lines)
