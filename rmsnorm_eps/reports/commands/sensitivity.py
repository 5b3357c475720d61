"""``sensitivity`` reports: what an eps change does to a model's next-token predictions, in
every norm at once, per norm and per role: the document, the text tables, and one check per
change for each gate (``kl``, ``top1``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmsnorm_eps.escape import visible as _e
from rmsnorm_eps.jsonvalues import head, jnum
from rmsnorm_eps.reports.checks import Check, CheckReport, Level, Number, Rule, verdict_fact
from rmsnorm_eps.reports.checks import g as _g
from rmsnorm_eps.reports.interface import ChecksRole, DocumentRole, Reporter, TextRole

if TYPE_CHECKING:
    from rmsnorm_eps.sensitivity.result import (
        ChangeResult,
        Metrics,
        NormRow,
        PassCount,
        ScreenCheck,
        SensitivityResult,
    )

__all__ = ["SENSITIVITY_RULES", "SensitivityReporter"]


# ----------------------------------------------------------------------------- json
def _metrics(m: Metrics) -> dict[str, Any]:
    return {
        "kl": jnum(m.kl),
        "kl_first": jnum(m.kl_first),
        "top1_agreement": jnum(m.top1_agreement),
        "top1_agreement_first": jnum(m.top1_agreement_first),
        "max_abs_logit_change": jnum(m.max_abs_logit_change),
        "nmse_last": jnum(m.nmse_last),
        "perplexity": jnum(m.perplexity),
        "tokens": m.tokens,
        "tokens_first": m.tokens_first,
    }


_EMPTY = dict.fromkeys(
    (
        "kl_first",
        "top1_agreement",
        "top1_agreement_first",
        "max_abs_logit_change",
        "nmse_last",
        "perplexity",
        "tokens",
        "tokens_first",
    )
)


def _row(r: NormRow) -> dict[str, Any]:
    nums = _metrics(r.metrics) if r.metrics is not None else {"kl": jnum(r.kl), **_EMPTY}
    return {
        "name": r.name,
        "role": r.role,
        "estimated": r.estimated,
        "uncertain": r.uncertain,
        **nums,
        "share": jnum(r.share),
        "min_q_over_eps": jnum(r.min_q_over_eps),
    }


def _screen_doc(check: ScreenCheck | None) -> dict[str, Any] | None:
    from rmsnorm_eps.sensitivity.result import SCREEN_Z

    if check is None:
        return None
    return {
        "asked": check.asked,
        "exact": check.exact,
        "kth_kl": jnum(check.kth_kl),
        "ratio": jnum(check.ratio),
        "z": SCREEN_Z,
        "sure": check.sure,
        "limit": check.limit,
    }


# ----------------------------------------------------------------------------- text
def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100.0 * v:.2f}%"


#: the columns a narrow terminal drops first (then the names are shortened); -f json and a
#: file or pipe keep every column
DROP_ORDER = ("NMSE last", "top-1 pos 0", "max |dz|", "ppl", "KL (pos 0)", "share", "role")


def _table(heads: list[str], rows: list[list[str]], width: int | None = None) -> list[str]:
    """A plain aligned table: the first column left, the others right. With ``width`` (a
    terminal's columns) it fits: columns of :data:`DROP_ORDER` are dropped, in that order,
    then the first column's names shortened in the middle (to no less than 16 cells), until
    the lines fit; a line under the table names what was dropped."""
    from rmsnorm_eps.reports.table import MIN_NAME, ellipsize

    dropped: list[str] = []

    def widths_of(hs: list[str], rs: list[list[str]]) -> list[int]:
        return [max(len(h), *(len(r[i]) for r in rs)) if rs else len(h) for i, h in enumerate(hs)]

    def total(ws: list[int]) -> int:
        return sum(ws) + 2 * (len(ws) - 1)

    if width is not None:
        for name in DROP_ORDER:
            if total(widths_of(heads, rows)) <= width:
                break
            if name in heads[1:]:
                i = heads.index(name)
                heads = heads[:i] + heads[i + 1 :]
                rows = [r[:i] + r[i + 1 :] for r in rows]
                dropped.append(name)
        over = total(widths_of(heads, rows)) - width
        if over > 0 and rows:
            room = max(MIN_NAME, widths_of(heads, rows)[0] - over)
            rows = [[ellipsize(r[0], room), *r[1:]] if len(r[0]) > room else r for r in rows]
    widths = widths_of(heads, rows)

    def line(cells: list[str]) -> str:
        out = [cells[0].ljust(widths[0])]
        out += [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join(out).rstrip()

    table = [line(heads), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
    if dropped:
        table.append(f"(to fit {width} columns, not shown: {', '.join(dropped)}; -f json has all)")
    return table


_HEADS = ["KL (pos>=1)", "KL (pos 0)", "top-1", "top-1 pos 0", "max |dz|", "NMSE last", "ppl"]


def _cells(m: Metrics) -> list[str]:
    return [
        _g(m.kl, 4),
        _g(m.kl_first, 4),
        _pct(m.top1_agreement),
        _pct(m.top1_agreement_first),
        _g(m.max_abs_logit_change, 4),
        _g(m.nmse_last, 4),
        _g(m.perplexity, 6),
    ]


def _rows_table(label: str, rows: tuple[NormRow, ...], width: int | None) -> list[str]:
    body = []
    for r in rows:
        if r.metrics is not None:
            cells = _cells(r.metrics)
        else:
            mark = "?~" if r.uncertain else "~"
            cells = [f"{mark}{_g(r.kl, 4)}", *["-"] * (len(_HEADS) - 1)]
        role = [] if label == "role" else [r.role]
        body.append([_e(r.name), *role, *cells, _pct(r.share), _g(r.min_q_over_eps, 4)])
    heads = [label] if label == "role" else [label, "role"]
    return _table([*heads, *_HEADS, "share", "min q/eps"], body, width)


def _change_lines(c: ChangeResult, width: int | None) -> list[str]:
    """One change's tables: each norm alone (with how sure the screen is), each role alone."""
    lines: list[str] = []
    if c.per_norm:
        est = sum(1 for r in c.per_norm if r.estimated)
        note = f" ({est} estimated, marked ~)" if est else ""
        lines += ["", f"{_e(c.change.label)}: each norm alone{note}"]
        lines += _screen_lines(c.screen, sum(1 for r in c.per_norm if r.uncertain))
        lines += _rows_table("norm", c.per_norm, width)
    if c.per_role:
        lines += ["", f"{_e(c.change.label)}: each role alone"]
        lines += _rows_table("role", c.per_role, width)
    return lines


def _suggestion_lines(result: SensitivityResult, width: int | None) -> list[str]:
    """The --suggest table; a limit beyond the sweep is marked <= / >=, with a note."""
    if not result.suggestions:
        return []
    lines = ["", "suggested eps (KL of both position classes within --max-kl)"]
    srows = [
        [
            _e(s.group),
            _g(s.eps, 4),
            ("<=" if s.smallest_beyond else "") + _g(s.smallest, 4),
            (">=" if s.largest_beyond else "") + _g(s.largest, 4),
        ]
        for s in result.suggestions
    ]
    lines += _table(["group", "configured", "smallest", "largest"], srows, width)
    if any(s.largest_beyond or s.smallest_beyond for s in result.suggestions):
        lines.append(
            "<= / >=: no point failed up to the sweep's edge: the limit lies beyond "
            "the sweep (the value shown is the edge, not a limit found)"
        )
    return lines


def _wrapped(lines: list[str], width: int) -> list[str]:
    """Prose lines longer than ``width`` wrapped (continuations indented two spaces); the
    tables already fit."""
    import textwrap

    out: list[str] = []
    for ln in lines:
        if len(ln) <= width:
            out.append(ln)
            continue
        lead = ln[: len(ln) - len(ln.lstrip())]
        out += textwrap.wrap(
            ln, width, initial_indent="", subsequent_indent=lead + "  ", break_on_hyphens=False
        ) or [ln]
    return out


def _screen_lines(check: ScreenCheck | None, uncertain: int) -> list[str]:
    """How sure the screened ranking is (``--exact-top``)."""
    from rmsnorm_eps.sensitivity.result import SCREEN_Z

    if check is None:
        return []
    more = check.exact - check.asked
    head = f"exact: the {check.asked} largest estimates" + (f" + {more} more" if more else "")
    kth = _g(check.kth_kl, 4)
    margin = f"(estimate + {_g(SCREEN_Z)} s.e.) x {check.ratio:.3g}"
    if check.sure:
        return [f"{head}; every ~ row is below the #{check.asked} exact KL {kth}: {margin}"]
    return [
        f"{head}; {uncertain} row(s) marked ?~ are not shown below the #{check.asked} exact KL "
        f"{kth} by {margin} within {check.limit} exact rows: their ranking may be wrong"
    ]


def _cost_lines(p: PassCount) -> list[str]:
    """The cost: timed forward-pass times by part, the run's measured time, the counts."""
    counted = (
        f"{p.forward:.4g} forward + {p.backward:.4g} backward passes = "
        f"{p.equivalent:.4g} forward-equivalent (naive loop: {p.naive:.4g} passes)"
    )
    t = p.timing
    if t is None:
        return [f"cost: {counted}"]
    return [
        f"cost: {t.total:.3g} forward-pass times: layers {t.layers:.3g}, head {t.head:.3g}, "
        f"metric {t.metric:.3g}, screening {t.screen:.3g}",
        f"  measured: {t.measured:.3g} forward-pass times ({t.seconds:.3g} s; one forward pass "
        f"of the texts {t.pass_seconds:.3g} s)",
        f"  counted: {counted}",
    ]


# ----------------------------------------------------------------------------- checks
SENSITIVITY_RULES = (
    Rule(
        "sensitivity/kl",
        "kl",
        "Mean next-token KL(base || new), nats, of each position class (position 0 and "
        "positions >= 1) when the change is made in every norm must be <= --max-kl.",
    ),
    Rule(
        "sensitivity/top1",
        "top1",
        "Top-1 agreement of each position class when the change is made in every norm must "
        "be >= --min-top1.",
    ),
)


class SensitivityReporter(
    Reporter,
    TextRole["SensitivityResult"],
    DocumentRole["SensitivityResult"],
    ChecksRole["SensitivityResult"],
):
    """``sensitivity``: every format (the gate is the result's own, ``result.gate``)."""

    def text(self, result: SensitivityResult) -> str:
        """The text report: the model, each change in every norm, per norm and per role, the
        suggestions and the cost."""
        gate = result.gate
        p = result.passes
        lines = [
            f"{_e(result.model)}: {len(result.norms)} norm(s), {result.texts} text(s), "
            f"{result.tokens} tokens ({result.tokens_first} at position 0)",
            f"base perplexity {_g(result.perplexity_base, 6)}"
            + (
                ""
                if result.perplexity_base_from is None
                else f" (--from {_e(result.perplexity_base_from)})"
            ),
            "KL = mean next-token KL(base || new), nats; top-1 = argmax agreement",
            "",
        ]
        rows = [[_e(c.change.label), *_cells(c.all)] for c in result.changes]
        width = self.options.width
        lines += _table(["change in every norm", *_HEADS], rows, width)
        for c in result.changes:
            lines += _change_lines(c, width)
        lines += _suggestion_lines(result, width)
        lines += ["", *_cost_lines(p)]
        if gate is not None:
            lines.append(("PASS: " if gate.passed else "FAIL: ") + _e(gate.reason))
        from rmsnorm_eps.escape import no_ci_command

        # module names come from the model's files: no line may read as a CI runner's command
        if width is not None:
            lines = _wrapped(lines, width)
        return no_ci_command("\n".join(lines) + "\n")

    def document(self, result: SensitivityResult) -> dict[str, object]:
        """The sensitivity document (schema ``sensitivity.schema.json``)."""
        doc = head("sensitivity")
        p = result.passes
        gate = result.gate
        doc.update(
            {
                "model": result.model,
                "source": result.source,
                "texts": result.texts,
                "tokens": result.tokens,
                "tokens_first": result.tokens_first,
                "ranks": result.ranks,
                "perplexity_base": jnum(result.perplexity_base),
                "perplexity_base_from": result.perplexity_base_from,
                "passes": {
                    "forward": p.forward,
                    "backward": p.backward,
                    "equivalent": p.equivalent,
                    "naive": p.naive,
                    "layers": p.layers,
                    "batches": p.batches,
                    "screen_samples": result.screen_samples,
                    "timing": None
                    if p.timing is None
                    else {
                        "pass_seconds": p.timing.pass_seconds,
                        "seconds": p.timing.seconds,
                        "layers": p.timing.layers,
                        "head": p.timing.head,
                        "metric": p.timing.metric,
                        "screen": p.timing.screen,
                        "total": p.timing.total,
                        "measured": jnum(p.timing.measured),
                    },
                },
                "norms": [
                    {
                        "name": n.name,
                        "class": n.class_name,
                        "norm": n.norm,
                        "eps": n.eps,
                        "role": n.role,
                        "min_q_over_eps": jnum(n.min_q_over_eps),
                        "layer": n.layer,
                    }
                    for n in result.norms
                ],
                "gate": None
                if gate is None
                else {
                    "max_kl": gate.max_kl,
                    "min_top1": gate.min_top1,
                    "passed": gate.passed,
                    "failures": list(gate.failures),
                    "reason": gate.reason,
                },
                "changes": [
                    {
                        "name": c.change.label,
                        "from": c.change.base,
                        "to": c.change.to,
                        "attribute": c.change.attribute,
                        **_metrics(c.all),
                        "per_norm": [_row(r) for r in c.per_norm],
                        "screen": _screen_doc(c.screen),
                        "per_role": [_row(r) for r in c.per_role],
                    }
                    for c in result.changes
                ],
                "suggestions": [
                    {
                        "group": s.group,
                        "eps": s.eps,
                        "largest": jnum(s.largest),
                        "smallest": jnum(s.smallest),
                        "largest_beyond_sweep": s.largest_beyond,
                        "smallest_beyond_sweep": s.smallest_beyond,
                        "points": [
                            {"eps": e, "kl": jnum(kl), "kl_first": jnum(k0)}
                            for e, kl, k0 in s.points
                        ],
                    }
                    for s in result.suggestions
                ],
            }
        )
        return doc

    def checks(self, result: SensitivityResult) -> CheckReport:
        """One ``sensitivity/kl`` and one ``sensitivity/top1`` check per change (a gate not given
        passes as a note)."""
        from rmsnorm_eps.sensitivity.result import kl_fails, top1_fails

        gate = result.gate
        max_kl = gate.max_kl if gate is not None else None
        min_top1 = gate.min_top1 if gate is not None else None
        passed = True if gate is None else bool(gate.passed)
        out: list[Check] = []
        for c in result.changes:
            m = c.all
            name = c.change.label
            nums: dict[str, Number] = {
                "kl": m.kl,
                "kl_first": m.kl_first,
                "max_kl": max_kl,
                "tokens": m.tokens,
                "tokens_first": m.tokens_first,
            }
            bad = kl_fails(m, max_kl)
            level: Level = "error" if bad else "note"
            limit = "" if max_kl is None else f" (max {_g(max_kl)})"
            msg = (
                f"{name}: KL {_g(m.kl)} nats at positions >= 1, {_g(m.kl_first)} at position "
                f"0{limit}"
            )
            out.append(Check("sensitivity/kl", name, not bad, level, msg, nums))
            nums = {
                "top1_agreement": m.top1_agreement,
                "top1_agreement_first": m.top1_agreement_first,
                "min_top1": min_top1,
            }
            bad = top1_fails(m, min_top1)
            level = "error" if bad else "note"
            limit = "" if min_top1 is None else f" (min {_g(min_top1)})"
            msg = (
                f"{name}: top-1 agreement {_g(m.top1_agreement)} at positions >= 1, "
                f"{_g(m.top1_agreement_first)} at position 0{limit}"
            )
            out.append(Check("sensitivity/top1", name, not bad, level, msg, nums))
        verdict = gate.reason if gate is not None else "no gate"
        p = result.passes
        facts = (
            ("model", f"{result.model} ({len(result.norms)} norms)"),
            ("texts", f"{result.texts} text(s), {result.tokens} tokens"),
            ("cost", f"{_g(p.equivalent, 4)} passes (naive loop {_g(p.naive, 4)})"),
            verdict_fact(passed, verdict),
        )
        return CheckReport(
            command="sensitivity",
            title=f"rmsnorm-eps sensitivity: {result.model}",
            source=result.model,
            subject="change",
            rules=SENSITIVITY_RULES,
            checks=tuple(out),
            passed=passed,
            verdict=verdict,
            facts=facts,
        )
