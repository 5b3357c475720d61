"""Markdown reporter: a pull-request comment or a GitHub job summary (GITHUB_STEP_SUMMARY).

Built from the :class:`~rmsnorm_eps.reports.checks.CheckReport`: the verdict as a heading,
the facts as a two-column table, the failed checks as a table, the passing checks folded in a
``<details>`` block (a model has many layers; reviewers need the failures first).
"""

from __future__ import annotations

from rmsnorm_eps.bound import RatioFigures
from rmsnorm_eps.reports import RenderOptions
from rmsnorm_eps.reports.checks import CheckReport, check_report

__all__ = ["cell", "render", "render_checks"]


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell: pipes escaped, newlines as <br>."""
    return (
        text.replace("\\", "\\\\").replace("|", "\\|").replace("\r\n", "\n").replace("\n", "<br>")
    )


def _code(text: str) -> str:
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
                f"| {chk.level} | {_code(chk.name)} | {cell(report.rule(chk.rule).name)} "
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
                f"| {_code(chk.name)} | {cell(report.rule(chk.rule).name)} | {cell(chk.message)} |"
            )
        lines += ["", "</details>", ""]
    if report.rules:
        lines.append("Rules:")
        lines.append("")
        lines += [
            f"- **{cell(r.name)}** ({_code(r.id)}): {cell(r.description)}" for r in report.rules
        ]
        lines.append("")
    return "\n".join(lines)


def _ratio_figures(rows: tuple[RatioFigures, ...]) -> str:
    with_q = any(r.q is not None for r in rows)
    head = ["q/eps"] + (["q"] if with_q else []) + ["A", "1 - A"]
    lines = [
        "### Attenuation A = sqrt(r/(r+1)) at r = q/eps",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---:|" * len(head),
    ]
    for r in rows:
        cells = (
            [f"{r.ratio:.6g}"]
            + ([f"{r.q:.6g}" if r.q is not None else "-"] if with_q else [])
            + [f"{r.attenuation:.6f}", f"{r.loss:.6g}"]
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render(result: object, options: RenderOptions) -> str:
    """Render ``result`` (any result with a check-report adapter, or bound's ratio table)."""
    if isinstance(result, tuple) and result and all(isinstance(r, RatioFigures) for r in result):
        return _ratio_figures(result)
    return render_checks(check_report(result, options.gate))
