"""GitHub Actions reporter: one workflow-command line per failed check.

``::error title=T,file=F::MESSAGE`` (``::warning`` for violations the gate's budget allows).
GitHub turns each line printed by a step into an annotation on the run and the pull request.
Escaping follows GitHub's runner (actions/toolkit ``command.ts``): in the message ``%``, ``\\r``
and ``\\n`` become ``%25``, ``%0D``, ``%0A``; in property values also ``:`` -> ``%3A`` and
``,`` -> ``%2C``. Passing checks print nothing; a run without failures prints nothing.
"""

from __future__ import annotations

from rmsnorm_eps.reports.checks import CheckReport

__all__ = ["escape_data", "escape_property", "render_checks"]


def escape_data(text: str) -> str:
    """Escape a workflow-command message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow-command property value (``title=``, ``file=``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_checks(report: CheckReport) -> str:
    """One ``::error``/``::warning`` line per failed check (properties: title, then file)."""
    lines = []
    for chk in report.failed:
        command = "error" if chk.level == "error" else "warning"
        rule = report.rule(chk.rule)
        props = [f"title={escape_property(f'rmsnorm-eps {rule.id}: {chk.name}')}"]
        source = report.source_of(chk)
        if source:
            props.append(f"file={escape_property(source)}")
        lines.append(f"::{command} {','.join(props)}::{escape_data(chk.message)}")
    return "".join(line + "\n" for line in lines)
