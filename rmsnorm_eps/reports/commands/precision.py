"""``precision`` reports: how eps is stored in each dtype (rounding, subnormal, overflow) and
from which q it is absorbed (``q + eps == q``): the document, the table, one check per dtype."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmsnorm_eps.jsonvalues import head, jnum
from rmsnorm_eps.reports.blocks import Table, Text
from rmsnorm_eps.reports.checks import Check, CheckReport, Number, Rule, verdict_fact
from rmsnorm_eps.reports.checks import g as _g
from rmsnorm_eps.reports.formats.text import render_blocks
from rmsnorm_eps.reports.interface import ChecksRole, DocumentRole, Reporter, TextRole

if TYPE_CHECKING:
    from rmsnorm_eps.compare.precision import PrecisionReport, PrecisionRow

__all__ = ["PRECISION_RULES", "PrecisionReporter"]


def _flags(r: PrecisionRow) -> str:
    if r.rounds_to_zero:
        return "ROUNDS TO ZERO"
    if r.overflows:
        return "OVERFLOWS"
    return "subnormal" if r.subnormal else "normal"


def _notes(r: PrecisionRow, q: str = "q") -> list[str]:
    """What is notable about eps in one dtype: vanishing, overflow, subnormal, absorption."""
    notes = []
    if r.rounds_to_zero:
        notes.append(
            f"{r.dtype}: eps rounds to 0 (below half the smallest subnormal "
            f"{r.smallest_subnormal:.4g}): it vanishes; a zero input gives 0/0"
        )
    elif r.overflows:
        notes.append(f"{r.dtype}: eps overflows to inf: every output becomes 0")
    elif r.subnormal:
        notes.append(
            f"{r.dtype}: eps is subnormal (< {r.smallest_normal:.4g}): stored with "
            f"relative error {r.relative_error:+.3g}"
        )
    if r.absorbed_from and r.stored:
        notes.append(
            f"{r.dtype}: eps acts on {q} + eps only for {q} < {r.absorbed_from:.6g} "
            f"({q}/eps < {r.absorbed_from / r.stored:.6g})"
        )
    return notes


PRECISION_RULES = (
    Rule(
        "precision/eps-vanishes",
        "eps-vanishes",
        "eps stored in the dtype (round to nearest) must be nonzero and finite: an eps that "
        "rounds to 0 leaves 0/0 at x = 0 and no floor for tiny inputs.",
    ),
)


class PrecisionReporter(
    Reporter,
    TextRole["PrecisionReport"],
    DocumentRole["PrecisionReport"],
    ChecksRole["PrecisionReport"],
):
    """``precision``: every format."""

    def text(self, result: PrecisionReport) -> str:
        """The text table and its notes."""
        rows = result.rows
        t = Table()
        t.add_column(f"eps = {result.eps:g}", justify="left")
        for r in rows:
            t.add_column(f"{r.dtype} (p={r.precision_bits})", justify="right")

        def row(label: str, cells: list[str]) -> None:
            t.add_row(label, *cells)

        row("stored eps", [f"{r.stored:.9g}" for r in rows])
        row("relative error", [f"{r.relative_error:+.3g}" for r in rows])
        row("eps is", [_flags(r) for r in rows])
        q = result.quantity  # q = mean(x^2), or v (LayerNorm variance): same figures
        row(f"{q} + eps == {q} from {q} =", [_g(r.absorbed_from) for r in rows])
        row(f"... for every {q} >=", [_g(r.always_absorbed_from) for r in rows])
        row("1 - A there (exact)", [_g(r.loss_at_absorption, 3) for r in rows])
        row("checked by adding", ["yes" if r.verified else "MISMATCH" for r in rows])
        row(f"largest {q}", [_g(r.max) for r in rows])
        row(f"{q} flushes to 0 if <=", [_g(r.q_flush_to_zero_at_or_below, 4) for r in rows])
        row("x*x finite up to |x| =", [_g(r.square_finite_max) for r in rows])
        row("x*x overflows from", [_g(r.square_overflow_from) for r in rows])
        notes = [note for r in rows for note in _notes(r, q)]
        if q == "v":
            notes.append(
                "LayerNorm: v = mean((x - mean x)^2), to which eps is added exactly as to "
                "q = mean(x^2) in RMSNorm"
            )
        return render_blocks([t, Text("\n".join(notes))] if notes else [t], self.options)

    def document(self, result: PrecisionReport) -> dict[str, object]:
        """The precision document: per dtype, the stored eps and where it stops acting."""
        doc = head("precision")
        doc["eps"] = result.eps
        doc["quantity"] = result.quantity
        doc["vanishing"] = list(result.vanishing)
        doc["dtypes"] = [
            {
                "dtype": r.dtype,
                "precision_bits": r.precision_bits,
                "stored": jnum(r.stored),
                "relative_error": jnum(r.relative_error),
                "rounds_to_zero": r.rounds_to_zero,
                "subnormal": r.subnormal,
                "overflows": r.overflows,
                "absorbed_from": jnum(r.absorbed_from),
                "always_absorbed_from": jnum(r.always_absorbed_from),
                "loss_at_absorption": jnum(r.loss_at_absorption),
                "verified": r.verified,
                "max": r.max,
                "smallest_normal": r.smallest_normal,
                "smallest_subnormal": r.smallest_subnormal,
                "q_flush_to_zero_at_or_below": r.q_flush_to_zero_at_or_below,
                "square_finite_max": r.square_finite_max,
                "square_overflow_from": r.square_overflow_from,
            }
            for r in result.rows
        ]
        return doc

    def checks(self, result: PrecisionReport) -> CheckReport:
        """One check per dtype of a :class:`~rmsnorm_eps.compare.precision.PrecisionReport`:
        fails when eps rounds to 0 or overflows in that dtype (the command's exit 1)."""
        checks: list[Check] = []
        for row in result.rows:
            nums: dict[str, Number] = {
                "eps": result.eps,
                "stored": row.stored,
                "relative_error": row.relative_error,
                "smallest_subnormal": row.smallest_subnormal,
                "max": row.max,
                "absorbed_from": row.absorbed_from,
            }
            if row.rounds_to_zero:
                msg = (
                    f"{row.dtype}: eps {_g(result.eps, 12)} rounds to 0 (smallest subnormal "
                    f"{_g(row.smallest_subnormal)})"
                )
            elif row.overflows:
                msg = f"{row.dtype}: eps {_g(result.eps, 12)} overflows (max {_g(row.max)})"
            else:
                sub = ", subnormal" if row.subnormal else ""
                msg = (
                    f"{row.dtype}: eps {_g(result.eps, 12)} is stored as {row.stored!r} "
                    f"(relative error {_g(row.relative_error, 4)}{sub}); {result.quantity} + eps "
                    f"== {result.quantity} from {result.quantity} >= {_g(row.absorbed_from)}"
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
        gone = tuple(result.vanishing)
        passed = not gone
        verdict = (
            f"eps {_g(result.eps, 12)} is nonzero and finite in {len(result.rows)} dtype(s)"
            if passed
            else f"eps {_g(result.eps, 12)} vanishes in {', '.join(gone)}"
        )
        return CheckReport(
            command="precision",
            title=f"rmsnorm-eps precision: eps {_g(result.eps, 12)}",
            source=None,
            subject="dtype",
            rules=PRECISION_RULES,
            checks=tuple(checks),
            passed=passed,
            verdict=verdict,
            facts=(
                ("eps", repr(result.eps)),
                ("dtypes", ", ".join(r.dtype for r in result.rows)),
                verdict_fact(passed, verdict),
            ),
        )
