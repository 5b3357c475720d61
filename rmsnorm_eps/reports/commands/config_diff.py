"""``config diff`` reports: config A against config B, norm pattern by norm pattern and
setting by setting: the document, the text (one line per difference), and one check per
(pattern, setting) for the CI formats (eps, placement, gain and norm type are errors, the
others notes)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rmsnorm_eps.escape import visible as _e
from rmsnorm_eps.jsonvalues import head as _head
from rmsnorm_eps.reports.checks import Check, CheckReport, Level, Number, Rule, verdict_fact
from rmsnorm_eps.reports.checks import g as _g
from rmsnorm_eps.reports.commands.config_show import show_value, value_document
from rmsnorm_eps.reports.interface import ChecksRole, DocumentRole, Reporter, TextRole

if TYPE_CHECKING:
    from rmsnorm_eps.config.resolve import ConfigDiff, FieldDifference

__all__ = ["ConfigDiffReporter", "diff_line"]


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
        lines = [
            f"A: {result.a.path} ({result.a.kind}, {result.a.model or '-'})",
            f"B: {result.b.path} ({result.b.kind}, {result.b.model or '-'})",
            f"compared {len(result.patterns)} layer pattern(s); eps within relative tolerance "
            f"{result.rel_tol:g}",
        ]
        lines += [diff_line(x, result.a.path, result.b.path) for x in result.differences]
        n = len(result.significant)
        lines.append(
            "EQUIVALENT: eps, placement, gain and norm type agree"
            if result.equivalent
            else f"DIFFERENT: {n} difference(s) in eps, placement, gain or norm type"
        )
        from rmsnorm_eps.reports.blocks import Text
        from rmsnorm_eps.reports.formats.text import render_blocks

        return render_blocks([Text(_e(line)) for line in lines], self.options)

    def document(self, result: ConfigDiff) -> dict[str, object]:
        doc = _head("config diff")
        doc.update(
            {
                "a": {"path": result.a.path, "kind": result.a.kind, "model": result.a.model},
                "b": {"path": result.b.path, "kind": result.b.kind, "model": result.b.model},
                "rel_tol": result.rel_tol,
                "equivalent": result.equivalent,
                "patterns": list(result.patterns),
                "differences": [
                    {
                        "field": x.field,
                        "significant": x.significant,
                        "patterns": list(x.patterns),
                        "a": value_document(x.a),
                        "b": value_document(x.b),
                        "message": diff_line(x, result.a.path, result.b.path),
                    }
                    for x in result.differences
                ],
            }
        )
        return doc

    def checks(self, result: ConfigDiff) -> CheckReport:
        """One check per norm pattern and setting of a
        :class:`~rmsnorm_eps.config.resolve.ConfigDiff`.

        A (pattern, setting) pair listed among the diff's differences fails: ``error`` for eps,
        placement, gain and norm type (they make ``config diff`` exit 1), ``warning`` for the
        others (notes). Every other pair passes. The source is config B, checked against A.
        """
        from rmsnorm_eps.config.model import FIELDS

        rules = _config_rules()
        differing: dict[tuple[str, str], FieldDifference] = {
            (pattern, x.field): x for x in result.differences for pattern in x.patterns
        }

        def settings(config: Any, pattern: str) -> Any:
            found = config.settings_for(pattern)
            return found if found is not None else config.defaults

        checks: list[Check] = []
        for pattern in result.patterns:
            sa, sb = settings(result.a, pattern), settings(result.b, pattern)
            for field in FIELDS:
                ra, rb = sa.get(field), sb.get(field)
                nums: dict[str, Number] = {"a": _value(ra.value), "b": _value(rb.value)}
                if field == "eps":
                    nums["rel_tol"] = result.rel_tol
                d = differing.get((pattern, field))
                if d is not None:
                    level: Level = "error" if d.significant else "warning"
                    msg = diff_line(replace(d, patterns=(pattern,)), result.a.path, result.b.path)
                else:
                    level = "note"
                    msg = f"{pattern}: {field} A {show_value(ra)} B {show_value(rb)}" + (
                        "" if ra.value is not None or rb.value is not None else " (missing on both)"
                    )
                checks.append(Check(f"config/{field}", pattern, d is None, level, msg, nums))
        passed = bool(result.equivalent)
        n = len(result.significant)
        notes = len(result.differences) - n
        verdict = (
            f"equivalent ({notes} note(s))"
            if passed
            else f"{n} difference(s) in eps, placement, gain or norm type ({notes} note(s))"
        )
        facts = (
            ("A", f"{result.a.path} ({result.a.kind}, {result.a.model or '-'})"),
            ("B", f"{result.b.path} ({result.b.kind}, {result.b.model or '-'})"),
            ("compared", f"{len(result.patterns)} layer pattern(s) x {len(FIELDS)} settings"),
            ("eps rule", f"equal within relative tolerance {_g(result.rel_tol)}"),
            verdict_fact(passed, verdict),
        )
        return CheckReport(
            command="config-diff",
            title=f"rmsnorm-eps config diff: {result.a.path} vs {result.b.path}",
            source=result.b.path,
            subject="norm pattern",
            rules=rules,
            checks=tuple(checks),
            passed=passed,
            verdict=verdict,
            facts=facts,
        )
