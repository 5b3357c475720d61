"""Check adapters for ``compare``, ``precision``, ``parity`` and ``config diff``.

Each turns its command's result into a :class:`~rmsnorm_eps.reports.checks.CheckReport`
(one :class:`~rmsnorm_eps.reports.checks.Check` per subject and rule, with the unrounded
numbers behind the verdict), so the markdown, github, junit and sarif reporters render it.
The checks decide nothing new: each mirrors a count the command's own gate already uses, so
every format reports the same counts as the text and JSON outputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rmsnorm_eps.reports.checks import Check, CheckReport, Level, Number, Rule, with_skipped

__all__ = [
    "COMPARE_RULES",
    "PARITY_RULES",
    "PRECISION_RULES",
    "compare_checks",
    "config_diff_checks",
    "parity_checks",
    "precision_checks",
]


def _g(value: float | None, digits: int = 6) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _idx(index: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"


def _verdict_fact(passed: bool, verdict: str) -> tuple[str, str]:
    return ("verdict", ("PASS: " if passed else "FAIL: ") + verdict)


# ----------------------------------------------------------------------------- compare
COMPARE_RULES = (
    Rule(
        "compare/moved",
        "moved",
        "Inputs whose output moves by more than the tolerance when the setting changes: "
        "|factor - 1| > tolerance with factor = y_to/y_from = den_from(q)/den_to(q) "
        "(|change| equal to the tolerance passes).",
    ),
    Rule(
        "compare/nonfinite",
        "nonfinite",
        "NaN or +inf q values and nonfinite factors (a denominator that overflowed or vanished); "
        "each one counts as a violation.",
    ),
)


def _spec_text(spec: Any) -> str:
    """``eps=1e-06 inside float64`` (or ``per layer from FILE`` for settings from a config)."""
    return str(spec.describe())


def compare_checks(report: Any, gate: Any = None) -> CheckReport:
    """Two checks per layer of a :class:`~rmsnorm_eps.compare.analysis.CompareReport`.

    ``compare/moved`` fails when some input has ``|change| > tolerance``; ``compare/nonfinite``
    when some q is NaN/+inf or some factor is nonfinite. A failed check is an ``error``, or a
    ``warning`` when the gate passed within its budget.
    """
    passed = report.violations == 0 if gate is None else bool(gate.passed)
    bad: Level = "warning" if passed else "error"
    tol = report.tolerance
    checks: list[Check] = []
    for layer in report.layers:
        nums: dict[str, Number] = {
            "count": layer.count,
            "moved": layer.moved,
            "fraction": layer.moved / layer.count if layer.count else 0.0,
            "max_abs_change": layer.max_abs_change,
            "min_factor": layer.min_factor,
            "max_factor": layer.max_factor,
            "tolerance": tol,
        }
        if layer.moved:
            w = layer.worst[0] if layer.worst else None
            where = (
                f"; largest at index {_idx(w.index)} (q {_g(w.q)}, q/eps_from {_g(w.ratio)}, "
                f"change {w.change:+.6g})"
                if w is not None
                else ""
            )
            msg = (
                f"{layer.name}: {layer.moved} of {layer.count} inputs "
                f"({_g(100.0 * layer.moved / layer.count, 3)}%) move by more than {_g(tol, 12)}; "
                f"max |change| {_g(layer.max_abs_change)}{where}"
            )
        elif layer.max_abs_change is not None:
            msg = (
                f"{layer.name}: no input moves by more than {_g(tol, 12)}; "
                f"max |change| {_g(layer.max_abs_change)}"
            )
        else:
            msg = f"{layer.name}: no finite factor to check"
        checks.append(
            Check(
                "compare/moved",
                layer.name,
                layer.moved == 0,
                "note" if layer.moved == 0 else bad,
                msg,
                nums,
            )
        )
        nf = layer.nonfinite_q + layer.nonfinite_factor
        nf_nums: dict[str, Number] = {
            "count": layer.count,
            "nonfinite": nf,
            "nan": layer.nan_count,
            "inf": layer.inf_count,
            "nonfinite_factor": layer.nonfinite_factor,
        }
        if nf:
            first = layer.nonfinite_examples[0] if layer.nonfinite_examples else None
            where = f", first at index {_idx(first.index)}" if first is not None else ""
            msg = (
                f"{layer.name}: {nf} nonfinite of {layer.count} inputs ({layer.nan_count} NaN q, "
                f"{layer.inf_count} inf q, {layer.nonfinite_factor} nonfinite factor){where}"
            )
        else:
            msg = f"{layer.name}: no NaN/inf q and no nonfinite factor among {layer.count} inputs"
        checks.append(
            Check(
                "compare/nonfinite", layer.name, nf == 0, "note" if nf == 0 else bad, msg, nf_nums
            )
        )
    verdict = (
        gate.reason
        if gate is not None
        else ("no violations" if passed else f"{report.violations} violation(s)")
    )
    kind = "activations (q = mean(x^2) over the last axis)" if report.raw else "q values"
    scale = "" if report.scale == 1.0 else f"; the --to side sees c*x with c = {_g(report.scale)}"
    facts = (
        ("source", f"{report.source} ({kind})"),
        ("from", _spec_text(report.spec_from)),
        ("to", _spec_text(report.spec_to) + scale),
        ("rule", f"moved when |y_to/y_from - 1| > {_g(tol, 12)}"),
        ("inputs", f"{report.count} in {len(report.layers)} layer(s)"),
        (
            "violations",
            f"{report.violations} ({report.moved} moved, {report.nonfinite} nonfinite) in "
            f"{len(report.layers_affected)} layer(s); max |change| {_g(report.max_abs_change)}",
        ),
        _verdict_fact(passed, verdict),
    )
    checked = CheckReport(
        command="compare",
        title=f"rmsnorm-eps compare: {report.source}",
        source=report.source,
        subject="layer",
        rules=COMPARE_RULES,
        checks=tuple(checks),
        passed=passed,
        verdict=verdict,
        facts=facts,
    )
    return with_skipped(checked, tuple(report.skipped))


# ----------------------------------------------------------------------------- precision
PRECISION_RULES = (
    Rule(
        "precision/eps-vanishes",
        "eps-vanishes",
        "eps stored in the dtype (round to nearest) must be nonzero and finite: an eps that "
        "rounds to 0 leaves 0/0 at x = 0 and no floor for tiny inputs.",
    ),
)


def precision_checks(report: Any, gate: Any = None) -> CheckReport:
    """One check per dtype of a :class:`~rmsnorm_eps.compare.precision.PrecisionReport`:
    fails when eps rounds to 0 or overflows in that dtype (the command's exit 1)."""
    checks: list[Check] = []
    for row in report.rows:
        nums: dict[str, Number] = {
            "eps": report.eps,
            "stored": row.stored,
            "relative_error": row.relative_error,
            "smallest_subnormal": row.smallest_subnormal,
            "max": row.max,
            "absorbed_from": row.absorbed_from,
        }
        if row.rounds_to_zero:
            msg = (
                f"{row.dtype}: eps {_g(report.eps, 12)} rounds to 0 (smallest subnormal "
                f"{_g(row.smallest_subnormal)})"
            )
        elif row.overflows:
            msg = f"{row.dtype}: eps {_g(report.eps, 12)} overflows (max {_g(row.max)})"
        else:
            sub = ", subnormal" if row.subnormal else ""
            msg = (
                f"{row.dtype}: eps {_g(report.eps, 12)} is stored as {row.stored!r} "
                f"(relative error {_g(row.relative_error, 4)}{sub}); q + eps == q from q >= "
                f"{_g(row.absorbed_from)}"
            )
        checks.append(
            Check(
                "precision/eps-vanishes",
                row.dtype,
                not row.vanishes,
                "error" if row.vanishes else "note",
                msg,
                nums,
            )
        )
    gone = tuple(report.vanishing)
    passed = not gone
    verdict = (
        f"eps {_g(report.eps, 12)} is nonzero and finite in {len(report.rows)} dtype(s)"
        if passed
        else f"eps {_g(report.eps, 12)} vanishes in {', '.join(gone)}"
    )
    return CheckReport(
        command="precision",
        title=f"rmsnorm-eps precision: eps {_g(report.eps, 12)}",
        source=None,
        subject="dtype",
        rules=PRECISION_RULES,
        checks=tuple(checks),
        passed=passed,
        verdict=verdict,
        facts=(
            ("eps", repr(report.eps)),
            ("dtypes", ", ".join(r.dtype for r in report.rows)),
            _verdict_fact(passed, verdict),
        ),
    )


# ----------------------------------------------------------------------------- parity
PARITY_RULES = (
    Rule(
        "parity/tolerance",
        "tolerance",
        "Every output element of the probe category must pass the error rule against the "
        "float64 reference (torch: |a - r| <= atol + rtol |r|; polygraphy: fails only where "
        "both atol and rtol are exceeded); nonfinite elements that fail count too.",
    ),
    Rule(
        "parity/nonfinite",
        "nonfinite",
        "No NaN output, and an infinite output only against the same infinity in the reference.",
    ),
)


def _source_file(source: str) -> str:
    """The file of a parity outputs source: the CLI writes ``FILE [KEY]`` for an array key."""
    if source.endswith("]") and " [" in source:
        return source.rsplit(" [", 1)[0]
    return source


def parity_checks(result: Any, gate: Any = None) -> CheckReport:
    """Two checks per probe category of a :class:`~rmsnorm_eps.parity.api.ParityResult`.

    ``parity/tolerance`` fails when some element of the category fails the rule (the
    command's verdict); ``parity/nonfinite`` when a NaN, or an inf the reference does not
    have, is among them (the category's minimum passing atol is then infinite).
    """
    tol = result.tolerance
    checks: list[Check] = []
    for c in result.categories:
        nums: dict[str, Number] = {
            "rows": c.rows,
            "elements": c.elements,
            "failing": c.failing,
            "failing_rows": c.failing_rows,
            "fraction_failing": c.fraction_failing,
            "max_abs_error": c.max_abs_error,
            "max_rel_error": c.max_rel_error,
            "atol": tol.atol,
            "rtol": tol.rtol,
            "min_atol": c.min_atol,
            "min_rtol": c.min_rtol,
        }
        errors = f"max abs error {_g(c.max_abs_error, 4)}, max rel error {_g(c.max_rel_error, 4)}"
        if c.failing:
            msg = (
                f"{c.name}: {c.failing} of {c.elements} elements ({c.failing_rows} of {c.rows} "
                f"rows) fail {tol.rule} (atol {_g(tol.atol)}, rtol {_g(tol.rtol)}); {errors}; "
                f"passing would need atol >= {_g(c.min_atol, 4)} or rtol >= {_g(c.min_rtol, 4)}"
            )
        else:
            msg = (
                f"{c.name}: all {c.elements} elements pass {tol.rule} (atol {_g(tol.atol)}, "
                f"rtol {_g(tol.rtol)}); {errors}"
            )
        checks.append(
            Check(
                "parity/tolerance",
                c.name,
                c.passed,
                "note" if c.passed else "error",
                msg,
                nums,
            )
        )
        bad_nonfinite = c.min_atol == float("inf")
        nf_msg = (
            f"{c.name}: nonfinite outputs fail ({c.nan} NaN, {c.inf} inf of {c.elements} elements)"
            if bad_nonfinite
            else f"{c.name}: no failing nonfinite output ({c.nan} NaN, {c.inf} inf)"
        )
        checks.append(
            Check(
                "parity/nonfinite",
                c.name,
                not bad_nonfinite,
                "error" if bad_nonfinite else "note",
                nf_msg,
                {"elements": c.elements, "nan": c.nan, "inf": c.inf},
            )
        )
    inf = result.inference
    p = result.probes
    passed = bool(result.passed)
    failing = tuple(result.failing_categories)
    verdict = (
        f"all {len(result.categories)} categories within tolerance"
        if passed
        else f"{len(failing)} of {len(result.categories)} categories fail: {', '.join(failing)}"
    )
    facts = (
        ("outputs", f"{result.actual_source} ({result.output_dtype})"),
        ("probes", f"{result.probe_source} ({p.dtype}, d={p.dim}, {p.count} rows)"),
        ("configured eps", _g(p.eps, 12)),
        (
            "error rule",
            f"{tol.rule}: {tol.formula()}; atol {_g(tol.atol)}, rtol {_g(tol.rtol)} ({tol.source})",
        ),
        ("inferred", f"eps {_g(inf.eps, 4)}, placement {inf.placement}, gain {inf.gain.kind}"),
        ("diagnosis", result.diagnosis),
        _verdict_fact(passed, verdict),
    )
    return CheckReport(
        command="parity",
        title=f"rmsnorm-eps parity: {result.actual_source}",
        source=_source_file(result.actual_source),
        subject="category",
        rules=PARITY_RULES,
        checks=tuple(checks),
        passed=passed,
        verdict=verdict,
        facts=facts,
    )


# ----------------------------------------------------------------------------- config diff
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


def config_diff_checks(diff: Any, gate: Any = None) -> CheckReport:
    """One check per norm pattern and setting of a :class:`~rmsnorm_eps.config.resolve.ConfigDiff`.

    A (pattern, setting) pair listed among the diff's differences fails: ``error`` for eps,
    placement, gain and norm type (they make ``config diff`` exit 1), ``warning`` for the
    others (notes). Every other pair passes. The source is config B, checked against A.
    """
    from rmsnorm_eps.config.model import FIELDS
    from rmsnorm_eps.reports.config_report import diff_line, show_value

    rules = _config_rules()
    differing: dict[tuple[str, str], Any] = {}
    for d in diff.differences:
        for pattern in d.patterns:
            differing[(pattern, d.field)] = d

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
        _verdict_fact(passed, verdict),
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
