"""``config diff`` reports: config A against config B, norm pattern by norm pattern and
setting by setting: the document, the text (one line per difference), and one check per
(pattern, setting) for the CI formats (eps, placement, gain and norm type are errors, the
others notes)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rmsnorm_eps.escape import text as _e
from rmsnorm_eps.reports.checks import Check, CheckReport, Level, Number, Rule, verdict_fact
from rmsnorm_eps.reports.checks import g as _g
from rmsnorm_eps.reports.commands.config_show import show_value, value_document
from rmsnorm_eps.reports.document import head as _head
from rmsnorm_eps.reports.interface import ChecksRole, DocumentRole, Reporter, TextRole
from rmsnorm_eps.reports.options import RenderOptions

if TYPE_CHECKING:
    from rmsnorm_eps.config.resolve import ConfigDiff, FieldDifference

__all__ = ["checks", "diff_line", "document", "text"]


def diff_line(d: FieldDifference, a_path: str | None = None, b_path: str | None = None) -> str:
    """One line explaining one difference (sources equal to A's or B's path are left out)."""
    label = "DIFF" if d.significant else "note"
    pats = ", ".join(d.patterns)
    if d.a.value is None or d.b.value is None:
        what = "cannot compare" if d.significant else "known on one side only"
    elif d.field == "eps":
        what = "differ beyond relative tolerance"
    else:
        what = "differ"
    a_from, b_from = d.a.provenance.describe(a_path), d.b.provenance.describe(b_path)
    return (
        f"{label} {d.field} [{pats}]: {what}: A {show_value(d.a)} ({a_from})"
        f" vs B {show_value(d.b)} ({b_from})"
    )


def document(d: ConfigDiff) -> dict[str, Any]:
    doc = _head("config diff")
    doc.update(
        {
            "a": {"path": d.a.path, "kind": d.a.kind, "model": d.a.model},
            "b": {"path": d.b.path, "kind": d.b.kind, "model": d.b.model},
            "rel_tol": d.rel_tol,
            "equivalent": d.equivalent,
            "patterns": list(d.patterns),
            "differences": [
                {
                    "field": x.field,
                    "significant": x.significant,
                    "patterns": list(x.patterns),
                    "a": value_document(x.a),
                    "b": value_document(x.b),
                    "message": diff_line(x, d.a.path, d.b.path),
                }
                for x in d.differences
            ],
        }
    )
    return doc


def text(d: ConfigDiff, options: RenderOptions) -> str:
    lines = [
        f"A: {d.a.path} ({d.a.kind}, {d.a.model or '-'})",
        f"B: {d.b.path} ({d.b.kind}, {d.b.model or '-'})",
        f"compared {len(d.patterns)} layer pattern(s); eps within relative tolerance {d.rel_tol:g}",
    ]
    lines += [diff_line(x, d.a.path, d.b.path) for x in d.differences]
    n = len(d.significant)
    lines.append(
        "EQUIVALENT: eps, placement, gain and norm type agree"
        if d.equivalent
        else f"DIFFERENT: {n} difference(s) in eps, placement, gain or norm type"
    )
    from rmsnorm_eps.reports.blocks import Text
    from rmsnorm_eps.reports.formats.text import render_blocks

    return render_blocks([Text(_e(line)) for line in lines], options)


def _config_rules() -> tuple[Rule, ...]:
    from rmsnorm_eps.config.model import FIELDS
    from rmsnorm_eps.config.resolve import SIGNIFICANT_FIELDS

    rules = []
    for field in FIELDS:
        if field == "eps":
            what = (
                "eps of A and B must agree within the relative tolerance "
                "(|a - b| <= rel_tol max(|a|, |b|))"
            )
        else:
            what = f"{field} of A and B must be equal"
        if field in SIGNIFICANT_FIELDS:
            what += "; a value missing on either side fails (equivalence cannot be shown)"
        else:
            what += " (a note: a difference does not fail the comparison)"
        level: Level = "error" if field in SIGNIFICANT_FIELDS else "warning"
        rules.append(Rule(f"config/{field}", field, what + ".", level))
    return tuple(rules)


def checks(diff: ConfigDiff) -> CheckReport:
    """One check per norm pattern and setting of a :class:`~rmsnorm_eps.config.resolve.ConfigDiff`.

    A (pattern, setting) pair listed among the diff's differences fails: ``error`` for eps,
    placement, gain and norm type (they make ``config diff`` exit 1), ``warning`` for the
    others (notes). Every other pair passes. The source is config B, checked against A.
    """
    from rmsnorm_eps.config.model import FIELDS

    rules = _config_rules()
    differing: dict[tuple[str, str], FieldDifference] = {
        (pattern, x.field): x for x in diff.differences for pattern in x.patterns
    }

    def settings(config: Any, pattern: str) -> Any:
        found = config.settings_for(pattern)
        return found if found is not None else config.defaults

    checks: list[Check] = []
    for pattern in diff.patterns:
        sa, sb = settings(diff.a, pattern), settings(diff.b, pattern)
        for field in FIELDS:
            ra, rb = sa.get(field), sb.get(field)
            nums: dict[str, Number] = {"a": _value(ra.value), "b": _value(rb.value)}
            if field == "eps":
                nums["rel_tol"] = diff.rel_tol
            d = differing.get((pattern, field))
            if d is not None:
                level: Level = "error" if d.significant else "warning"
                msg = diff_line(replace(d, patterns=(pattern,)), diff.a.path, diff.b.path)
            else:
                level = "note"
                msg = f"{pattern}: {field} A {show_value(ra)} B {show_value(rb)}" + (
                    "" if ra.value is not None or rb.value is not None else " (missing on both)"
                )
            checks.append(Check(f"config/{field}", pattern, d is None, level, msg, nums))
    passed = bool(diff.equivalent)
    n = len(diff.significant)
    notes = len(diff.differences) - n
    verdict = (
        f"equivalent ({notes} note(s))"
        if passed
        else f"{n} difference(s) in eps, placement, gain or norm type ({notes} note(s))"
    )
    facts = (
        ("A", f"{diff.a.path} ({diff.a.kind}, {diff.a.model or '-'})"),
        ("B", f"{diff.b.path} ({diff.b.kind}, {diff.b.model or '-'})"),
        ("compared", f"{len(diff.patterns)} layer pattern(s) x {len(FIELDS)} settings"),
        ("eps rule", f"equal within relative tolerance {_g(diff.rel_tol)}"),
        verdict_fact(passed, verdict),
    )
    return CheckReport(
        command="config-diff",
        title=f"rmsnorm-eps config diff: {diff.a.path} vs {diff.b.path}",
        source=diff.b.path,
        subject="norm pattern",
        rules=rules,
        checks=tuple(checks),
        passed=passed,
        verdict=verdict,
        facts=facts,
    )


def _value(value: Any) -> Number:
    """A config value as a check number (bools as text: JUnit and SARIF show them plainly)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None or isinstance(value, (int, float, str)):
        return value
    return str(value)


class ConfigDiffReporter(
    Reporter, TextRole["ConfigDiff"], DocumentRole["ConfigDiff"], ChecksRole["ConfigDiff"]
):
    """``config diff``: every format."""

    def text(self, result: ConfigDiff) -> str:
        return text(result, self.options)

    def document(self, result: ConfigDiff) -> dict[str, object]:
        return document(result)

    def checks(self, result: ConfigDiff) -> CheckReport:
        return checks(result)
