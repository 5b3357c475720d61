"""``parity`` reports: a norm implementation's outputs on the probe set against the float64
reference: the document (also the acceptance record, ``--record``), the text report, and two
checks per probe category (``tolerance`` and ``nonfinite``).

The document has plain values, fixed key order, unrounded numbers, no timestamp unless one is
given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmsnorm_eps.escape import visible as _e
from rmsnorm_eps.reports.blocks import Block, Table, Text
from rmsnorm_eps.reports.checks import Check, CheckReport, Number, Rule, verdict_fact
from rmsnorm_eps.reports.checks import g as _g
from rmsnorm_eps.reports.formats.text import render_blocks
from rmsnorm_eps.reports.interface import ChecksRole, DocumentRole, Reporter, TextRole

if TYPE_CHECKING:
    from rmsnorm_eps.parity.api import ParityResult
    from rmsnorm_eps.parity.infer import Inference

__all__ = ["PARITY_RULES", "ParityReporter", "eps_summary"]


# ----------------------------------------------------------------------------- text
def eps_summary(inf: Inference) -> str:
    """``1.19209e-07 +- 6.5e-07 relative (1 sigma), 0.1192x configured 1e-06``."""
    if inf.eps is None:
        return "none"
    text = f"{inf.eps:.6g}"
    if inf.rel_uncertainty is not None:
        text += f" +- {inf.rel_uncertainty:.2g} relative (1 sigma)"
    return text + f", {inf.eps / inf.configured_eps:.4g}x configured {inf.configured_eps!r}"


# ----------------------------------------------------------------------------- checks
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


class ParityReporter(
    Reporter, TextRole["ParityResult"], DocumentRole["ParityResult"], ChecksRole["ParityResult"]
):
    """``parity``: every format."""

    def text(self, result: ParityResult) -> str:
        """The text report."""
        p, inf, tol = result.probes, result.inference, result.tolerance
        parts: list[Block] = [
            Text(f"outputs {_e(result.actual_source)} ({result.output_dtype})"),
            Text(f"probes  {_e(result.probe_source)} ({p.dtype}, d={p.dim}, {p.count} rows)"),
            Text(
                f"configured eps {p.eps!r}, gain {_e(p.gain_kind)} (convention {p.gain_convention})"
                + (
                    f", LayerNorm with bias {_e(p.bias_kind or 'given')}"
                    if p.norm == "layer"
                    else ""
                )
            ),
            Text(f"rule {tol.rule}: {tol.formula()}; atol {tol.atol!r}, rtol {tol.rtol!r}"),
            Text(f"({tol.source}); nonfinite values checked separately"),
        ]
        table = Table()
        for name in (
            "category",
            "rows",
            "failing",
            "max abs err",
            "max rel err",
            "min atol",
            "min rtol",
            "nonfinite",
            "result",
        ):
            table.add_column(name, justify="left" if name in ("category", "result") else "right")
        for c in result.categories:
            table.add_row(
                _e(c.name),
                str(c.rows),
                f"{c.failing}/{c.elements}",
                _g(c.max_abs_error, 4),
                _g(c.max_rel_error, 4),
                _g(c.min_atol, 4),
                _g(c.min_rtol, 4),
                str(c.nan + c.inf),
                "pass" if c.passed else "FAIL",
                style=None if c.passed else "bold",
            )
        parts.append(table)
        eps_line = f"inferred eps {eps_summary(inf)}; "
        eps_line += f"placement {inf.placement}" + (f" ({inf.note})" if inf.note else "")
        eps_line += f"; gain {inf.gain.kind}"
        if inf.gain.factor is not None and inf.gain.kind != "match":
            eps_line += f" (median channel factor {inf.gain.factor:.4g})"
        parts.append(Text(eps_line))
        parts.append(Text(result.diagnosis))
        return render_blocks(parts, self.options)

    def document(self, result: ParityResult) -> dict[str, object]:
        """The parity document (the acceptance record without a timestamp)."""
        from rmsnorm_eps.parity.document import parity_document

        return parity_document(result)

    def checks(self, result: ParityResult) -> CheckReport:
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
            errors = (
                f"max abs error {_g(c.max_abs_error, 4)}, max rel error {_g(c.max_rel_error, 4)}"
            )
            if c.failing:
                msg = (
                    f"{c.name}: {c.failing} of {c.elements} elements ({c.failing_rows} of "
                    f"{c.rows} rows) fail {tol.rule} (atol {_g(tol.atol)}, rtol "
                    f"{_g(tol.rtol)}); {errors}; passing would need atol >= "
                    f"{_g(c.min_atol, 4)} or rtol >= {_g(c.min_rtol, 4)}"
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
                f"{c.name}: nonfinite outputs fail ({c.nan} NaN, {c.inf} inf of {c.elements} "
                "elements)"
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
                f"{tol.rule}: {tol.formula()}; atol {_g(tol.atol)}, rtol {_g(tol.rtol)} "
                f"({tol.source})",
            ),
            ("inferred", f"eps {_g(inf.eps, 4)}, placement {inf.placement}, gain {inf.gain.kind}"),
            ("diagnosis", result.diagnosis),
            verdict_fact(passed, verdict),
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
