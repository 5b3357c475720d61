"""GitHub Actions reporter: one workflow-command line per failed check.

``::error title=T,file=F::MESSAGE`` (``::warning`` for violations the gate's budget allows).
GitHub turns each line printed by a step into an annotation on the run and the pull request.
Every text is first made inert (:func:`rmsnorm_eps.escape.visible`: controls, CR and LF
included, as ``\\xNN``; no ``::`` or ``##`` from data), then escaped as GitHub's runner
unescapes (actions/toolkit ``command.ts``): ``%`` -> ``%25``; in property values also
``:`` -> ``%3A`` and ``,`` -> ``%2C``. Passing checks print nothing; a run without failures
prints nothing.
"""

from __future__ import annotations

from rmsnorm_eps.escape import github_data, github_property
from rmsnorm_eps.reports.checks import CheckReport

__all__ = ["render_checks"]


def render_checks(report: CheckReport) -> str:
    """One ``::error``/``::warning`` line per failed check (properties: title, then file)."""
    lines = []
    for chk in report.failed:
        command = "error" if chk.level == "error" else "warning"
        rule = report.rule(chk.rule)
        props = [f"title={github_property(f'rmsnorm-eps {rule.id}: {chk.name}')}"]
        source = report.source_of(chk)
        if source:
            props.append(f"file={github_property(source)}")
        lines.append(f"::{command} {','.join(props)}::{github_data(chk.message)}")
    return "".join(line + "\n" for line in lines)
